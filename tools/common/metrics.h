/*
 * tools/common/metrics.h — the broker's figures in the Prometheus text
 * exposition format (version 0.0.4), from a snapshot of its control segment.
 *
 * Families are prefixed wsync_; every series carries broker="<instance>".
 * Broker: up (1 healthy, 0 not responding, stopped, dead or absent),
 * heartbeat and figures age, uptime, sessions, accepted sessions, messages,
 * shared memory, CPU seconds. Per model (model="name"): version, step,
 * commits (rate() of it is the commit rate), aborts, refused begins, slab
 * bytes, slots, slots holding a version, slots pinned by readers,
 * collectors, the latest version's age, the worst collector lag in commits
 * and seconds. Per collector (model, session, name, pid): lag in commits
 * and seconds, how long it has held its view, acquires, waits, timeouts.
 * Counters the broker keeps in 32 bits wrap, which Prometheus reads as a
 * reset.
 */
#ifndef WSYNC_TOOLS_COMMON_METRICS_H
#define WSYNC_TOOLS_COMMON_METRICS_H

#include <stdio.h>

#include "snap.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Writes the exposition of s (NULL: no broker; instance names it, why says
 * why) to f. cpu_seconds < 0: unknown. 0 or -1 on a write error. */
int metrics_write(FILE *f, const struct snap *s, const char *instance, double cpu_seconds);

#endif
