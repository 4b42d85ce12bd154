/*
 * shm/futex.c — shared futexes with absolute CLOCK_MONOTONIC deadlines.
 *
 * FUTEX_WAIT_BITSET takes an absolute timeout, so a wait that is interrupted
 * and restarted never stretches past its deadline.
 */
#include "futex.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long futex(_Atomic uint32_t *word, int op, uint32_t val,
                  const struct timespec *ts, uint32_t val3)
{
	return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, val3);
}

int wsync_futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t deadline_ns)
{
	struct timespec ts, *tsp = NULL;

	if (deadline_ns >= 0) {
		ts.tv_sec = deadline_ns / 1000000000;
		ts.tv_nsec = deadline_ns % 1000000000;
		tsp = &ts;
	}
	if (futex(word, FUTEX_WAIT_BITSET, expected, tsp, FUTEX_BITSET_MATCH_ANY) == 0)
		return 0;
	switch (errno) {
	case EAGAIN:            /* the word already differed */
		return 0;
	case ETIMEDOUT:
		return -ETIMEDOUT;
	case EINTR:
		return -EINTR;
	default:
		return -errno;
	}
}

int wsync_futex_wake(_Atomic uint32_t *word, int n)
{
	long r = futex(word, FUTEX_WAKE, (uint32_t)(n < 0 ? INT_MAX : n), NULL, 0);

	return r < 0 ? -errno : (int)r;
}
