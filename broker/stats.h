/*
 * broker/stats.h — what monitors read of sessions and models.
 *
 * Hazard records live in session pages, which only the broker maps; once per
 * housekeeping tick the broker computes what wsync-top, wsyncctl and the
 * metrics exporter show of each session (acquires, waits, timeouts, the
 * version it reads, since when, which slot it pins, and how far behind the
 * latest that version is, in commits and in milliseconds) into its
 * control-segment entry (struct wsync_session_stats), mirrors the models'
 * monitor words (publisher pid, checksum of the latest version) and stamps
 * the ctl header's stats_ns.
 *
 * Lag in commits needs to know which commit each version was: version
 * numbers skip the versions of grants that were never committed. A history
 * per model (version, commits counted after it, commit time) answers that;
 * monitor.c keeps it (every commit recorded exactly) and mirrors the models'
 * words. This file holds the pure part: the history, the lag of a version,
 * and a session's figures from its page.
 */
#ifndef WSYNC_BROKER_STATS_H
#define WSYNC_BROKER_STATS_H

#include <stdbool.h>
#include <stdint.h>

#include "shm/layout.h"

#define STATS_HISTORY 256                /* commits remembered per model */

struct stats_point {
	uint64_t version;
	uint64_t count;                  /* the model's commits counter after it */
	int64_t  ns;                     /* commit time (CLOCK_REALTIME), 0 = unknown */
	bool     exact;                  /* count is exact (else: bounded) */
};

/* Broker-private, one in each model; points in version order, oldest
 * first. */
struct stats_history {
	uint32_t first, n;                   /* ring of STATS_HISTORY points */
	struct stats_point p[STATS_HISTORY];
	/* the model at the last tick */
	uint64_t latest, commits;
	int64_t  latest_ns;
};

/* Appends a point to h (dropping the oldest when full); points at or below
 * the newest one are ignored, so versions stay in order. */
void stats_history_add(struct stats_history *h, const struct stats_point *pt);
/* Empties h. */
void stats_history_reset(struct stats_history *h);
/* Point i of h (0 = oldest). */
const struct stats_point *stats_point_at(const struct stats_history *h, uint32_t i);
/*
 * The lag word and lag_ms of a session reading version `version` of a model
 * whose history is h (h->latest, h->commits at the tick), at real_ns:
 * returns the packed WSYNC_STATS_LAG_* word without the slot bits.
 */
uint32_t stats_lag(const struct stats_history *h, uint64_t version, int64_t real_ns,
                   uint32_t *lag_ms);

/*
 * Computes one session's figures from its page. `models` is the bitmask of
 * models it opened (pins of other models are ignored); hist[id] (NULL
 * entries: no history) gives the lag of the version it reads; mono_ns is
 * CLOCK_MONOTONIC_COARSE now and real_ns CLOCK_REALTIME now.
 */
void stats_mirror(struct wsync_session_stats *out, const struct wsync_session_page *page,
                  uint64_t models, const struct stats_history *const *hist,
                  int64_t mono_ns, int64_t real_ns);
/* The staleness bound the session declared for the model of st's view
 * (mirrored just before; else the only model it subscribes to), shown only
 * while `subscribed` (bit per model: a subscription open) has it. */
void stats_mirror_bound(struct wsync_session_bound *out, const struct wsync_session_stats *st,
                        const struct wsync_session_page *page, uint64_t subscribed);
/* Clears an entry's figures (a new session in a reused table entry). */
void stats_clear(struct wsync_session_stats *st);
void stats_clear_bound(struct wsync_session_bound *bd);

#endif
