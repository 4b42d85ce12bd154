/*
 * tools/common/snap.h — a consistent copy of a broker's control segment, for
 * wsyncctl, wsync-top and the metrics exporter.
 *
 * The control segment (shm/layout.h) is mapped read-only without a session
 * (seg.h); only the broker writes it, so a snapshot copies each word once
 * (relaxed) and derives what the tools show. The session figures of reading
 * (version read, slot pinned, lag in commits and milliseconds, waits) are
 * computed by the broker once a tick, all at one instant (stats_ns): a
 * snapshot copies them between two reads of stats_ns that agree, so they
 * belong to one tick. Lags are then brought to the instant of the
 * snapshot (now_ns): the commits counter each model's lags were counted
 * against at the tick is mirrored with them, so the commits since add to
 * each lag and the tick's age to each lag_ms (snap.c lag_to_now). A lag
 * never reads lower than the truth for the version read at the tick.
 * Taking a snapshot asks nothing of the broker.
 */
#ifndef WSYNC_TOOLS_COMMON_SNAP_H
#define WSYNC_TOOLS_COMMON_SNAP_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "health.h"
#include "shm/layout.h"
#include "wsync.h"

struct snap_model {
	uint32_t id, state, n_tensors, n_slots;
	uint32_t slots_used;             /* slots holding a version or being written */
	uint32_t slots_pinned;           /* slots a collector's view pins, at the tick */
	char     name[WSYNC_NAME_MAX];
	uint64_t bytes, version, hwm, commits, aborts, busy, step;
	int64_t  commit_ns;
	uint32_t publisher;              /* session id, 0 = none */
	uint32_t publisher_pid;
	uint32_t collectors;             /* sessions subscribed */
	bool     worst_known;            /* a collector's lag is known */
	uint64_t worst_lag;              /* commits, over its collectors, now */
	double   worst_lag_ms;           /* ms, over its collectors, now */
	bool     worst_estimated;        /* one of those is an estimate */
	uint8_t  slot_state[WSYNC_MAX_SLOTS];
	uint32_t group_size;             /* ranks of a publisher group, 0 = none */
	uint32_t group_committed;        /* bit r: rank r committed the version in progress */
	int64_t  group_first_ns;         /* its first COMMIT (CLOCK_REALTIME), 0 = none */
	int64_t  group_last_ns;          /* first to last COMMIT of the last version */
	uint32_t n_devices;              /* GPUs of a device model, 0 = host */
	uint32_t dev_flags;              /* enum wsync_dev_flags */
	uint8_t  dev_uuid[WSYNC_MAX_DEVICES][16];
	uint64_t checksum;               /* of the latest version, 0 = none */
	uint64_t checksum_failures;      /* mismatches its collectors found */
	uint32_t slab_pages;             /* enum wsync_slab_pages (shm/segment.h) */
	uint32_t max_lead;               /* its publisher's bound, 0 = none (docs/LIVE.md) */
	uint64_t lead_waits, lead_timeouts;  /* begins held back by it, timed out */
	uint32_t bounded;                /* collectors that declared a max_lag */
	uint32_t over_bound;             /* ...and are past it now */
};

struct snap_session {
	uint32_t id, pid, uid, roles;
	int64_t  connected_ns;
	uint64_t models;
	char     name[WSYNC_INSTANCE_MAX];
	uint32_t acquires;               /* low 32 bits */
	uint32_t waits, timeouts;        /* low 32 bits */
	uint64_t view_version;           /* 0 = never acquired */
	uint32_t view_model;             /* model id, WSYNC_STATS_MODEL_UNKNOWN */
	bool     held;                   /* view_version is pinned now */
	int      slot;                   /* the slot it pins, -1 none */
	double   view_ms;                /* since the view was taken, now */
	bool     lag_known, lag_estimated;
	uint64_t lag;                    /* commits it did not take, now */
	double   lag_ms;                 /* since its version was superseded, now */
	/* The staleness bound it declared for the model it reads (docs/LIVE.md),
	 * 0 = none of that kind (or a broker before bounds); age_ms: how old its
	 * version is, now (exact while it is the latest, else at least lag_ms),
	 * the figure max_lag_ns bounds; over_bound: its lag or age is past it. */
	uint32_t bound_model;            /* model id, WSYNC_STATS_MODEL_UNKNOWN */
	uint32_t max_lag_versions;
	uint64_t max_lag_ns;
	bool     age_known;
	double   age_ms;
	bool     over_bound;
};

struct snap {
	char     instance[WSYNC_INSTANCE_MAX];
	uint32_t broker_pid, state, max_slots, uid;
	uint64_t generation;
	int64_t  started_ns, heartbeat_ns;  /* CLOCK_REALTIME */
	int64_t  now_ns;                 /* the instant the lags are brought to */
	int64_t  uptime_ns;              /* up to now; a stopped or dead broker's up to its
	                                  * last heartbeat (a clean stop beats last) */
	int64_t  stats_ns;               /* the tick the session figures are from, 0 none */
	struct health health;
	uint64_t shm_limit, shm_used, sessions_total, messages, bad_messages;
	uint64_t work_mutes;             /* sessions paused past their uid's work share */
	uint32_t sessions_muted;         /* ...and paused now */
	uint64_t moves, moves_queued, moves_on_loop;  /* models moved to new memory;
	                                  * departures' moves that waited for the
	                                  * mover; moves copied in the event loop */
	uint32_t n_models, n_sessions;
	struct snap_model models[WSYNC_MAX_MODELS];
	struct snap_session sessions[WSYNC_MAX_SESSIONS];
};

/* Copies the attached segment of s into *out (large: heap allocate it) and
 * judges the broker's health. */
void snap_take(const struct seg *s, struct snap *out);
/* The model of a snapshot by name, or NULL. */
const struct snap_model *snap_model_find(const struct snap *s, const char *name);

const char *snap_state_name(uint32_t broker_state);
const char *snap_model_state_name(uint32_t model_state);
/* "pub", "sub", "pub+sub", "-" (static storage). */
const char *snap_roles_name(uint32_t roles);

/* JSON documents (new references). */
json_t *snap_json_status(const struct snap *s);
json_t *snap_json_model(const struct snap *s, const struct snap_model *m);
json_t *snap_json_models(const struct snap *s);
json_t *snap_json_session(const struct snap *s, const struct snap_session *e);
json_t *snap_json_sessions(const struct snap *s);

/* The lag of a session: "3", "~3", "-" into buf; and in time. */
const char *fmt_lag(char *buf, size_t len, const struct snap_session *e);
const char *fmt_lag_ms(char *buf, size_t len, const struct snap_session *e);
/* Its declared bound: "3v/0.5s", "3v", "0.5s", "-" none; with mark, "!"
 * before it when it is past it (one word). */
const char *fmt_bound(char *buf, size_t len, const struct snap_session *e, bool mark);
/* Human figures: "12.5 MiB", "3m04s", "0x0123456789abcdef" into buf. */
const char *fmt_bytes(char *buf, size_t len, uint64_t bytes);
const char *fmt_age(char *buf, size_t len, int64_t ns);
const char *fmt_checksum(char *buf, size_t len, const struct snap_model *m);
/* The names of the models a session opened, comma-separated, "-" if none. */
const char *fmt_session_models(char *buf, size_t len, const struct snap *s,
                               const struct snap_session *e);

#endif
