/* broker/service.c — sd_notify(3) for the service manager; see service.h. */
#include "service.h"

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-daemon.h>

#include "log.h"

static bool watchdog_checked, watchdog_on;

void service_ready(const char *status)
{
	uint64_t usec = 0;

	if (sd_notifyf(0, "READY=1\nSTATUS=%s", status) > 0)
		log_debug("told the service manager: ready");
	if (!watchdog_checked) {
		watchdog_on = sd_watchdog_enabled(0, &usec) > 0;
		watchdog_checked = true;
		if (watchdog_on && usec < 2000000)
			log_warn("WatchdogSec is %llu ms: the broker pings every 1 s, so give it "
			         "at least 2 s", (unsigned long long)(usec / 1000));
	}
}

void service_watchdog(void)
{
	if (watchdog_on)
		sd_notify(0, "WATCHDOG=1");
}

void service_reloading(void)
{
	sd_notify(0, "RELOADING=1");
}

void service_stopping(void)
{
	sd_notify(0, "STOPPING=1");
}
