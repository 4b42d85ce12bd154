/*
 * tools/common/health.h — is the broker of a mapped control segment alive,
 * and answering?
 *
 * Judged from what the broker leaves behind, never by asking it (a stopped
 * broker would not answer): the segment's state word (STOPPED after a clean
 * shutdown), its heartbeat (stored every housekeeping tick, once a second),
 * and the broker's process in /proc: gone, a zombie, a pid now used by a
 * process that started after the broker did, or stopped (state T).
 */
#ifndef WSYNC_TOOLS_COMMON_HEALTH_H
#define WSYNC_TOOLS_COMMON_HEALTH_H

#include <stdbool.h>
#include <stdint.h>

#include "seg.h"

/* A heartbeat older than this is a broker that is not responding. */
#define HEALTH_STALE_NS (INT64_C(3) * 1000000000)

enum health_state {
	HEALTH_OK,                       /* running, heartbeat fresh */
	HEALTH_STARTING,                 /* not serving yet */
	HEALTH_STALLED,                  /* its process is there, its heartbeat old */
	HEALTH_STOPPED,                  /* shut down cleanly (segment kept) */
	HEALTH_DEAD,                     /* its process is gone: crashed or killed */
	HEALTH_GONE,                     /* no broker at all (no segment) */
};

struct health {
	enum health_state state;
	int64_t  heartbeat_age_ns;       /* -1 unknown */
	char     proc_state;             /* /proc/<pid>/stat state, 0 unknown */
	char     text[256];              /* "running", "not responding: heartbeat 12 s old ..." */
};

/* Judges the broker of s (s->ctl NULL: GONE with why as text). */
void health_judge(const struct seg *s, const char *why, struct health *out);
/* Like health_judge, but a broker whose heartbeat is not fresh gets until
 * timeout_ns to show a new one (for ping and the commands that need the
 * broker); never longer. */
void health_wait(const struct seg *s, int64_t timeout_ns, struct health *out);
/* "ok", "starting", "not_responding", "stopped", "dead", "no_broker". */
const char *health_reason(enum health_state st);
/* Exit code of wsyncctl ping: 0 healthy, 1 not responding, 2 no broker. */
int health_exit(enum health_state st);

/* From /proc/<pid>/stat: the state letter, utime + stime in clock ticks and
 * the start time in clock ticks since boot. False if pid is not there or
 * the file did not parse. */
bool proc_stat(uint32_t pid, char *state, uint64_t *cpu_ticks, uint64_t *start_ticks);

#endif
