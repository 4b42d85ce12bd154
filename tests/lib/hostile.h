/*
 * tests/lib/hostile.h — what a hostile client must not take from the others
 * (DESIGN invariants 6 and 10): the broker stays up, another client's
 * commit round trip stays near what it was, and the broker's descriptors
 * and memory come back once the hostile session is gone.
 *
 * A test takes a baseline with an honest publisher of its own before the
 * attack, then checks against it during and after.
 */
#ifndef WSYNC_TESTS_HOSTILE_H
#define WSYNC_TESTS_HOSTILE_H

#include <stdint.h>

#include "tests/lib/harness.h"

struct hostile_base {
	int     fds;                     /* the broker's open descriptors */
	long    rss_kb;                  /* its resident memory */
	int64_t rtt_ns;                  /* p50 of an honest commit round trip */
};

/* The median of n begin+commit round trips of p (nothing written). */
int64_t hostile_commit_p50(wsync_pub *p, int n);
/* Takes the baseline: p is an honest publisher of a model of its own. */
void    hostile_base_take(const struct broker *b, wsync_pub *p, struct hostile_base *base);
/*
 * Fails the test unless the broker is alive and p's commit round trip is
 * within a loose bound of the baseline (a starved broker is 100x slower;
 * the bound is wide enough for a loaded 2-core machine under ASan).
 */
void    hostile_check_rtt(const struct broker *b, wsync_pub *p, const struct hostile_base *base,
                          const char *during);
/* Fails the test unless, within 10 s, the broker's fds are back to the
 * baseline and its memory did not grow by more than slack_kb. */
void    hostile_check_settled(const struct broker *b, const struct hostile_base *base,
                              long slack_kb, const char *after);

#endif
