/*
 * broker/stats.h — per-session reading figures for monitors.
 *
 * Hazard records live in session pages, which only the broker maps; once per
 * housekeeping tick the broker copies what wsync-top and wsyncctl show of
 * each session (acquires, waits, timeouts, the version it reads and since
 * when) into its control-segment entry (struct wsync_session_stats).
 */
#ifndef WSYNC_BROKER_STATS_H
#define WSYNC_BROKER_STATS_H

#include <stdint.h>

#include "shm/layout.h"

/* Computes one session's figures from its page. `models` is the bitmask of
 * models it opened (pins of other models are ignored); mono_ns is
 * CLOCK_MONOTONIC_COARSE now and real_ns CLOCK_REALTIME now. */
void stats_mirror(struct wsync_session_stats *out, const struct wsync_session_page *page,
                  uint64_t models, int64_t mono_ns, int64_t real_ns);
/* Clears an entry's figures (a new session in a reused table entry). */
void stats_clear(struct wsync_session_stats *st);

#endif
