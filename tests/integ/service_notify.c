/*
 * service_notify — wsyncd as a service: under a service manager's
 * NOTIFY_SOCKET it says READY=1 once it serves, pings the watchdog every
 * second when WATCHDOG_USEC asks for it, says RELOADING=1 then READY=1 around
 * a SIGHUP, and STOPPING=1 at SIGTERM. SIGHUP never stops it (a closed
 * terminal sends one): it reopens its --log-file, which logrotate moved
 * away, and goes on serving. The log file it creates is 0600 at start and
 * after the reopen alike (whatever the umask it was started with).
 */
#include "tests/lib/harness.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static struct broker B;

static unsigned file_mode(const char *path)
{
	struct stat st;

	TEST_ASSERT_MSG(stat(path, &st) == 0, "stat %s: %s", path, strerror(errno));
	return (unsigned)(st.st_mode & 07777);
}

/* The next notification containing want, within ms; fails the test
 * otherwise. Others are logged and skipped. */
static void expect_notify(int fd, const char *want, int ms)
{
	int64_t end = harness_mono_ns() + ms * HARNESS_MS;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left = (end - harness_mono_ns()) / HARNESS_MS;
		char buf[512];
		ssize_t n;

		TEST_ASSERT_MSG(left > 0 && poll(&p, 1, (int)left) == 1,
		                "no %s from the broker within %d ms", want, ms);
		n = recv(fd, buf, sizeof buf - 1, 0);
		TEST_ASSERT(n > 0);
		buf[n] = '\0';
		harness_log("notify: %s", buf);
		if (strstr(buf, want))
			return;
	}
}

int main(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char dir[] = "/tmp/wsync-notify-XXXXXX", logf[128], moved[140], text[8192];
	wsync_client *c;
	int fd;

	TEST_ASSERT(mkdtemp(dir) != NULL);
	snprintf(a.sun_path, sizeof a.sun_path, "%s/notify", dir);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	TEST_ASSERT(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
	setenv("NOTIFY_SOCKET", a.sun_path, 1);
	setenv("WATCHDOG_USEC", "3000000", 1);
	snprintf(logf, sizeof logf, "%s/wsyncd.log", dir);
	snprintf(moved, sizeof moved, "%s/wsyncd.log.1", dir);

	umask(022);              /* a usual shell's: the start must not widen the file */
	if (harness_broker_start(&B, "--log-file", logf, NULL))
		return 1;
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	expect_notify(fd, "READY=1", 5000);
	expect_notify(fd, "WATCHDOG=1", 3000);
	TEST_CONTAINS(harness_read_file(logf, text, sizeof text), "started");
	TEST_ASSERT_MSG(file_mode(logf) == 0600, "the log file is %04o at start, want 0600",
	                file_mode(logf));

	/* logrotate moves the file, then HUP */
	TEST_ASSERT(rename(logf, moved) == 0);
	TEST_ASSERT(kill(B.pid, SIGHUP) == 0);
	expect_notify(fd, "RELOADING=1", 3000);
	expect_notify(fd, "READY=1", 3000);
	TEST_OK(harness_connect(&B, "after-hup", &c));
	wsync_close(c);
	TEST_CONTAINS(harness_read_file(logf, text, sizeof text), "log file reopened");
	TEST_ASSERT_MSG(file_mode(logf) == 0600, "the reopened log file is %04o, want 0600",
	                file_mode(logf));
	TEST_ASSERT(strstr(harness_read_file(moved, text, sizeof text), "reopened") == NULL);
	/* a second HUP, as a closing terminal sends: still serving */
	TEST_ASSERT(kill(B.pid, SIGHUP) == 0);
	expect_notify(fd, "READY=1", 3000);
	harness_publish_and_read(&B, "service.model", 3);

	TEST_ASSERT(kill(B.pid, SIGTERM) == 0);
	expect_notify(fd, "STOPPING=1", 5000);
	harness_broker_finish(&B);
	close(fd);
	unlink(a.sun_path);
	unlink(logf);
	unlink(moved);
	rmdir(dir);
	return 0;
}
