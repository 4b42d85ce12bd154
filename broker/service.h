/*
 * broker/service.h — telling a service manager how the broker is doing.
 *
 * Under systemd with Type=notify (wsyncd.service), the broker says READY=1
 * once its socket accepts and its loop runs, pings the watchdog from its 1 s
 * tick when WatchdogSec is set (so a wedged loop is restarted), says
 * RELOADING=1/READY=1 around a SIGHUP and STOPPING=1 when it stops. Outside
 * systemd ($NOTIFY_SOCKET unset) every call does nothing.
 */
#ifndef WSYNC_BROKER_SERVICE_H
#define WSYNC_BROKER_SERVICE_H

void service_ready(const char *status);
/* WATCHDOG=1, when the service manager asked for it. */
void service_watchdog(void);
void service_reloading(void);
void service_stopping(void);

#endif
