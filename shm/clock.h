/* shm/clock.h — nanosecond clocks. */
#ifndef WSYNC_SHM_CLOCK_H
#define WSYNC_SHM_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t wsync_clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
static inline int64_t wsync_mono_ns(void) { return wsync_clock_ns(CLOCK_MONOTONIC); }
static inline int64_t wsync_real_ns(void) { return wsync_clock_ns(CLOCK_REALTIME); }

/* Absolute CLOCK_MONOTONIC deadline for a relative timeout; -1 = forever. */
static inline int64_t wsync_deadline(int64_t timeout_ns)
{
	if (timeout_ns < 0)
		return -1;
	int64_t now = wsync_mono_ns();
	return timeout_ns > INT64_MAX - now ? -1 : now + timeout_ns;
}

#endif
