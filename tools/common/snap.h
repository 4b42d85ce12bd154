/*
 * tools/common/snap.h — a consistent-enough copy of a broker's control segment,
 * for wsyncctl and wsync-top.
 *
 * The control segment (shm/layout.h) is mapped read-only at wsync_connect;
 * only the broker writes it, so a snapshot copies each word once (relaxed)
 * and derives what the tools show: per model the collectors and their worst
 * lag, per session the lag of the version it reads (the broker mirrors the
 * hazard records into the session entries once per second, broker/stats.c).
 * Taking a snapshot asks nothing of the broker.
 */
#ifndef WSYNC_TOOLS_CTL_SNAP_H
#define WSYNC_TOOLS_CTL_SNAP_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "shm/layout.h"
#include "wsync.h"

struct snap_model {
	uint32_t id, state, n_tensors, n_slots, slots_used;
	char     name[WSYNC_NAME_MAX];
	uint64_t bytes, version, hwm, commits, aborts, busy, step;
	int64_t  commit_ns;
	uint32_t publisher;              /* session id, 0 = none */
	uint32_t publisher_pid;
	uint32_t collectors;             /* sessions subscribed, this tool left out */
	uint64_t worst_lag;              /* versions, over its collectors */
	uint8_t  slot_state[WSYNC_MAX_SLOTS];
	uint32_t group_size;             /* ranks of a publisher group, 0 = none */
	uint32_t group_committed;        /* bit r: rank r committed the version in progress */
	int64_t  group_first_ns;         /* its first COMMIT (CLOCK_REALTIME), 0 = none */
	int64_t  group_last_ns;          /* first to last COMMIT of the last version */
	uint32_t n_devices;              /* GPUs of a device model, 0 = host */
	uint32_t dev_flags;              /* enum wsync_dev_flags */
	uint8_t  dev_uuid[WSYNC_MAX_DEVICES][16];
	bool     checksum_known;         /* checksum below was read */
	uint64_t checksum;               /* of the latest version, 0 = none */
	uint32_t slab_pages;             /* enum wsync_slab_pages (shm/segment.h) */
};

struct snap_session {
	uint32_t id, pid, uid, roles;
	int64_t  connected_ns;
	uint64_t models;
	char     name[WSYNC_INSTANCE_MAX];
	uint64_t acquires;
	uint32_t waits, timeouts;
	uint64_t view_version;           /* 0 = never acquired */
	uint32_t view_model;             /* model id, WSYNC_STATS_MODEL_UNKNOWN */
	bool     held;                   /* view_version is pinned now */
	int64_t  view_since_ns;
	bool     lag_known;
	uint64_t lag;                    /* latest - view_version of view_model */
	bool     self;                   /* the tool's own session */
};

struct snap {
	char     instance[WSYNC_INSTANCE_MAX];
	uint32_t broker_pid, state, max_slots;
	uint64_t generation;
	int64_t  started_ns, heartbeat_ns, now_ns;  /* CLOCK_REALTIME */
	uint64_t shm_limit, shm_used, sessions_total, messages, bad_messages;
	uint32_t n_models, n_sessions;
	struct snap_model models[WSYNC_MAX_MODELS];
	struct snap_session sessions[WSYNC_MAX_SESSIONS];
};

/* Copies the control segment of a connected client into *out (large: heap
 * allocate it). -EPROTO with a message in why if the segment is not one. */
int  snap_take(const wsync_client *c, struct snap *out, char *why, size_t whylen);
/* Reads the latest version's checksum of every ready model through
 * subscriptions kept in subs[WSYNC_MAX_MODELS] (opened on first use, one
 * broker round trip each; afterwards acquire/release only). */
void snap_checksums(wsync_client *c, wsync_sub **subs, struct snap *s);
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

/* Human figures: "12.5 MiB", "3m04s", "0x0123456789abcdef" into buf. */
const char *fmt_bytes(char *buf, size_t len, uint64_t bytes);
const char *fmt_age(char *buf, size_t len, int64_t ns);
const char *fmt_checksum(char *buf, size_t len, const struct snap_model *m);
/* The names of the models a session opened, comma-separated, "-" if none. */
const char *fmt_session_models(char *buf, size_t len, const struct snap *s,
                               const struct snap_session *e);

#endif
