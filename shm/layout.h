/*
 * shm/layout.h — every structure that lives in shared memory, in one place.
 *
 * Segments of one broker instance <name> of user <uid>, generation <gen>
 * (bumped at every broker start). Named ones are files in the generation's
 * private directory /dev/shm/wsync.<uid>.<name>.<16 random hex digits>/
 * (mode 0700, made by the broker; its name is in <rundir>/<name>.state):
 *
 *   ctl            control: header, model table, session table (broker
 *                  writes, clients map read-only)
 *   m<id>.layout   tensor layout (broker writes)
 *   m<id>.s<k>     slab k: raw tensor bytes, no header (with --group: a
 *                  sealed memfd instead, no name)
 *   (memfd)        model page of each model: `latest` and the futex word
 *                  (publisher of the model and broker write, collectors
 *                  read, and trust latest only while the ctl entry's
 *                  latest or grant equals it); sealed against shrinking
 *                  and growing, mode 0600
 *   (memfd)        session page: one per connection, only that client
 *                  writes it
 *
 * Clients never open segments by name: the broker passes file descriptors over
 * the session socket (SCM_RIGHTS), read-only except the session page, the
 * model page of a model the client publishes, and slabs granted to it.
 *
 * A new broker generation never writes an object of an older one but for its
 * control segment's state word (SUPERSEDED): on restart it copies the latest
 * version of each model into a fresh directory and removes the old one (see
 * broker/adopt.c), so views held across a crash stay intact, and clients of
 * the old generation learn that they must reconnect to go on.
 *
 * All integers are little-endian fixed width; offsets, never pointers.
 */
#ifndef WSYNC_SHM_LAYOUT_H
#define WSYNC_SHM_LAYOUT_H

#include <assert.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "../libclient/wsync.h"

#define WSYNC_CACHELINE        64
#define WSYNC_PAGE             4096

#define WSYNC_LAYOUT_VERSION   2u
#define WSYNC_MAGIC_CTL        0x4c544353594e5357ull   /* "WSYNSCTL" */
#define WSYNC_MAGIC_PAGE       0x4547505359534e57ull
#define WSYNC_MAGIC_LAYOUT     0x54594c5359534e57ull
#define WSYNC_MAGIC_SESSION    0x5353455359534e57ull

#define WSYNC_MAX_MODELS       64
#define WSYNC_MAX_SESSIONS     1024
#define WSYNC_MAX_SLOTS        32     /* hard cap; --max-slots lowers it */
#define WSYNC_MODEL_GPUS       WSYNC_MAX_DEVICES   /* GPUs of one device model */
#define WSYNC_DEFAULT_SLOTS    4
#define WSYNC_MIN_SLOTS        2
#define WSYNC_MAX_TENSORS      65536
#define WSYNC_INSTANCE_MAX     64     /* broker instance and client names */
#define WSYNC_SLOT_NONE        0xffu

/* ---- latest: one atomic word, version in the high 56 bits, slot below ---- */

static inline uint64_t wsync_latest_pack(uint64_t version, uint32_t slot)
{
	return (version << 8) | (slot & 0xffu);
}
static inline uint64_t wsync_latest_version(uint64_t latest) { return latest >> 8; }
static inline uint32_t wsync_latest_slot(uint64_t latest) { return (uint32_t)(latest & 0xffu); }

/* ---- control segment ---------------------------------------------------- */

enum wsync_broker_state {
	WSYNC_BROKER_STARTING = 0,
	WSYNC_BROKER_RUNNING  = 1,
	WSYNC_BROKER_STOPPED  = 2,   /* clean shutdown; waiters were woken */
	/* A broker that started after this generation's broker died adopted
	 * it: nothing here moves any more, the models go on in the new
	 * generation. The one word a new generation writes into an old one
	 * (broker/adopt.c), so that its clients learn it instead of serving
	 * a version that is no longer the latest. */
	WSYNC_BROKER_SUPERSEDED = 3,
};

enum wsync_model_state {
	WSYNC_MODEL_FREE     = 0,    /* table entry unused */
	WSYNC_MODEL_DECLARED = 1,    /* subscribed to, no layout yet */
	WSYNC_MODEL_READY    = 2,    /* layout and slabs exist */
};

struct wsync_ctl_header {
	uint64_t magic;                  /* WSYNC_MAGIC_CTL */
	uint32_t layout_version;         /* WSYNC_LAYOUT_VERSION */
	uint32_t header_bytes;           /* sizeof(struct wsync_ctl_header) */
	uint64_t total_bytes;            /* size of the whole segment */
	uint64_t generation;             /* this broker start; 1, 2, ... */
	_Atomic uint32_t state;          /* enum wsync_broker_state */
	uint32_t broker_pid;
	uint32_t uid;
	uint32_t max_slots;              /* --max-slots */
	uint32_t max_models;             /* entries in the model table */
	uint32_t max_sessions;           /* entries in the session table */
	uint32_t models_offset;          /* from the segment start */
	uint32_t sessions_offset;
	int64_t  started_ns;             /* CLOCK_REALTIME */
	_Atomic int64_t heartbeat_ns;    /* CLOCK_REALTIME, every housekeeping tick */
	uint64_t shm_limit;              /* bytes of slabs allowed */
	_Atomic uint64_t shm_used;
	_Atomic uint64_t sessions_total; /* accepted since start */
	_Atomic uint64_t messages;       /* handled since start */
	_Atomic uint64_t bad_messages;   /* answered with an error or a close */
	char     name[WSYNC_INSTANCE_MAX];
	/* When the broker last mirrored the session stats and the models'
	 * monitor words (broker/stats.c), CLOCK_REALTIME, stored after them
	 * (release); 0 = not yet. Every figure of wsync_session_stats is "at
	 * this instant", so a monitor compares them with each other, never
	 * with what it reads live. */
	_Atomic int64_t stats_ns;
	/* A robust, process-shared pthread mutex the broker locks at start
	 * and holds for its life (broker/ctl.c). Its first 32 bits are the
	 * futex word: the broker's thread id while it lives, with
	 * WSYNC_BROKER_DIED (the kernel's FUTEX_OWNER_DIED) set by the kernel
	 * when the broker dies, before its sockets close; 0 when no broker
	 * holds it (one that does not keep it, or a clean stop). A client
	 * learns of the death with a load instead of a poll() of its socket
	 * (libclient/pub_commit.c). Only the broker and the kernel write it. */
	_Alignas(8) uint8_t broker_alive[64];
	/* Pacing of other uids' work (broker/uids.h), for monitors: sessions
	 * paused since start because their uid asked for more than its share,
	 * and those not being read now (0 from brokers before pacing). */
	_Atomic uint64_t work_mutes;
	_Atomic uint32_t sessions_muted;
	/* Where the session bounds table lies (struct wsync_session_bound,
	 * max_sessions entries, after the session table); 0 from brokers
	 * before it, whose segments end with the session table. */
	uint32_t bounds_offset;
	/* enum wsync_ctl_features: what this broker does that a client may
	 * count on. Set before the first client connects, constant after. */
	_Atomic uint32_t features;
	uint32_t pad;
	/* CLOCK_MONOTONIC_COARSE at the broker's last housekeeping tick (once
	 * a second): what a collector stamps its hazard's since_ns with, a
	 * load where a clock read costs more than the rest of an acquire. */
	_Atomic int64_t tick_ns;
	/* Moves of models to new memory (broker/model.h), for monitors:
	 * applied since start; departures' moves that waited for the mover's
	 * thread behind another move; and moves copied in the event loop
	 * instead (only at a stop: while it runs every other client waits).
	 * 0 from brokers before them. */
	_Atomic uint64_t moves;
	_Atomic uint64_t moves_queued;
	_Atomic uint64_t moves_on_loop;
	uint8_t  reserved[WSYNC_PAGE - 312];
};
#define WSYNC_BROKER_DIED 0x40000000u
enum wsync_ctl_features {
	/* Every grant runs membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) between
	 * its booking of latest and its scan of the pins (broker/slots.h): a
	 * client whose own MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED succeeded
	 * may store its pins without a fence (libclient/sub.c). A broker that
	 * found the call failing at start does not set it. */
	WSYNC_CTL_PIN_BARRIER = 1u << 0,
};
static_assert(sizeof(struct wsync_ctl_header) == WSYNC_PAGE, "ctl header is one page");
static_assert(offsetof(struct wsync_ctl_header, state) == 32, "ctl state offset");
static_assert(offsetof(struct wsync_ctl_header, name) == 120, "ctl name offset");
static_assert(offsetof(struct wsync_ctl_header, stats_ns) == 184, "ctl stats_ns offset");
static_assert(offsetof(struct wsync_ctl_header, broker_alive) == 192, "ctl broker_alive offset");
static_assert(offsetof(struct wsync_ctl_header, work_mutes) == 256, "ctl work_mutes offset");
static_assert(offsetof(struct wsync_ctl_header, bounds_offset) == 268, "ctl bounds_offset offset");
static_assert(offsetof(struct wsync_ctl_header, features) == 272, "ctl features offset");
static_assert(offsetof(struct wsync_ctl_header, tick_ns) == 280, "ctl tick_ns offset");
static_assert(offsetof(struct wsync_ctl_header, moves) == 288, "ctl moves offset");

/* Slot states kept by the broker in the model table (books, for monitors). */
enum wsync_slot_state {
	WSYNC_SLOT_FREE    = 0,      /* holds no version (never written, or aborted) */
	WSYNC_SLOT_OLD     = 1,      /* holds an older version; reusable when unpinned */
	WSYNC_SLOT_LATEST  = 2,
	WSYNC_SLOT_GRANTED = 3,      /* being written by the publisher */
};

/* What backs the slabs of a model (ctl entry slab_pages; shm/segment.h makes
 * them); 0 is what brokers before huge pages always used. */
enum wsync_slab_pages {
	WSYNC_PAGES_4K      = 0,     /* named tmpfs file (or --group memfd) */
	WSYNC_PAGES_THP     = 1,     /* memfd, transparent huge pages (shmem_enabled) */
	WSYNC_PAGES_HUGETLB = 2,     /* memfd, MFD_HUGETLB: reserved 2 MiB pages */
};

struct wsync_ctl_model {
	_Atomic uint32_t state;          /* enum wsync_model_state */
	uint32_t id;                     /* index in the table */
	char     name[WSYNC_NAME_MAX];
	uint64_t bytes;                  /* slab size (page multiple) */
	uint32_t n_tensors;
	uint32_t n_slots;
	uint64_t layout_hash;            /* xxh64 of the descriptor array */
	_Atomic uint64_t hwm_version;    /* highest version ever granted; a new
	                                    generation starts above it */
	_Atomic uint64_t latest;         /* the broker's last validated latest */
	_Atomic uint64_t commits;
	_Atomic uint64_t aborts;
	_Atomic uint64_t busy;           /* begins refused with -EBUSY */
	_Atomic uint64_t last_step;
	_Atomic int64_t  last_commit_ns; /* CLOCK_REALTIME */
	_Atomic uint32_t publisher;      /* session id, 0 = none */
	_Atomic uint32_t subscribers;
	_Atomic uint8_t  slot_state[WSYNC_MAX_SLOTS];  /* enum wsync_slot_state */
	/* The grant outstanding, wsync_latest_pack(version, slot), 0 = none.
	 * Stored before the grant leaves the broker, cleared after `latest`
	 * took its booked value. With `latest` it is all a collector trusts:
	 * the model page's latest counts only while it equals one of the two
	 * (libclient/sub.c). */
	_Atomic uint64_t grant;
	/* Which model this entry holds: a broker-wide number given at every
	 * declare, 0 once the model is deleted. A subscription remembers the
	 * one it opened; any other value means its model is gone (-EIDRM). */
	_Atomic uint64_t incarnation;
	/* A publisher group (broker/group.c), for monitors: its size (0 = one
	 * publisher), the ranks whose COMMIT of the version in progress came
	 * (bit r = rank r), when the first came (CLOCK_REALTIME, 0 = none), and
	 * how long the last complete version took from its first COMMIT to its
	 * last (ns). */
	_Atomic uint32_t group_size;
	_Atomic uint32_t group_committed;
	_Atomic int64_t  group_first_ns;
	_Atomic int64_t  group_last_ns;
	/* Device slabs (docs/GPU.md): the GPUs the model lives on, by UUID, in
	 * the order its first publisher named them; n_devices 0 = a host
	 * model. dev_bytes is one slot's allocation on each of them (the slab
	 * rounded up to the GPUs' allocation granularity), dev_flags the
	 * model's enum wsync_dev_flags. Written before state turns READY. */
	uint32_t n_devices;
	uint32_t dev_flags;
	uint64_t dev_bytes;
	uint8_t  dev_uuid[WSYNC_MODEL_GPUS][16];
	/* What backs the slabs (enum wsync_slab_pages, shm/segment.h), for
	 * monitors and for the next generation's adoption; 0 = 4 KiB pages */
	uint32_t slab_pages;
	/* For monitors, mirrored by broker/stats.c every tick (informational,
	 * never trusted by anyone): the pid of the model's publisher (of rank
	 * 0 of a group), 0 = none; the XXH3-64 its publisher stored with the
	 * latest version (WSYNC_PUB_CHECKSUM; 0 = none) and that version, so a
	 * monitor shows it only while it is still the latest. */
	_Atomic uint32_t publisher_pid;
	_Atomic uint64_t checksum;
	_Atomic uint64_t checksum_version;
	/* The uid that first published the model (its PUB_OPEN made it
	 * READY): with the broker's uid and root, the only one that may
	 * delete or replace it. WSYNC_OWNER_NONE while it has no layout. Kept
	 * across adoption. */
	uint32_t owner_uid;
	/* Nonzero while a WAIT_READERS on the model pends (broker/readers.c):
	 * a collector that acknowledges a version explicitly (wsync_sub_ack)
	 * then tells the broker (ACKED), so the wait settles at once rather
	 * than at the broker's next look. Only a hint: a missed one costs that
	 * look's delay, never an answer. */
	_Atomic uint32_t reader_waits;
	/* The incarnation the model was declared with. `incarnation` moves on
	 * also when the model gets new memory for a publisher of another uid
	 * (broker/model.c model_rotate): a subscription whose base still
	 * matches follows it (maps the new memory); one whose base does not
	 * has lost its model (-EIDRM). 0 once the model is deleted. */
	_Atomic uint64_t base_incarnation;
	/* For monitors (informational, never trusted): checksum mismatches
	 * its collectors found (wsync_view_verify), summed by the broker from
	 * their session pages once a tick (broker/session.c). */
	_Atomic uint64_t checksum_failures;
	/* For monitors: the commits counter the session lags of the last
	 * tick were counted against, with WSYNC_STATS_COMMITS_SET (0 = none,
	 * or a broker before this word). Mirrored before the header's
	 * stats_ns, so a monitor reads it with the session figures; with the
	 * live `commits` it brings a lag up to the instant it reads
	 * (tools/common/snap.c). */
	_Atomic uint64_t stats_commits;
	/* A publisher's staleness bound (wsync_pub_set_max_lead, docs/LIVE.md),
	 * for monitors: the bound of its last lead wait (0 = none asked), how
	 * many begins timed out waiting for a collector behind it, and how many
	 * had to wait. Written by the broker (broker/readers.c). */
	_Atomic uint32_t max_lead;
	_Atomic uint32_t lead_timeouts;
	_Atomic uint64_t lead_waits;
};
#define WSYNC_STATS_COMMITS_SET (UINT64_C(1) << 63)
#define WSYNC_OWNER_NONE UINT32_MAX
static_assert(sizeof(struct wsync_ctl_model) == 512, "ctl model entry size");
static_assert(offsetof(struct wsync_ctl_model, grant) == 256, "ctl model grant offset");
static_assert(offsetof(struct wsync_ctl_model, incarnation) == 264, "ctl model incarnation");
static_assert(offsetof(struct wsync_ctl_model, group_first_ns) == 280, "ctl model group");
static_assert(offsetof(struct wsync_ctl_model, n_devices) == 296, "ctl model devices");
static_assert(offsetof(struct wsync_ctl_model, dev_uuid) == 312, "ctl model device uuids");
static_assert(offsetof(struct wsync_ctl_model, slab_pages) == 440, "ctl model slab pages");
static_assert(offsetof(struct wsync_ctl_model, publisher_pid) == 444, "ctl model publisher pid");
static_assert(offsetof(struct wsync_ctl_model, checksum) == 448, "ctl model checksum");
static_assert(offsetof(struct wsync_ctl_model, owner_uid) == 464, "ctl model owner");
static_assert(offsetof(struct wsync_ctl_model, base_incarnation) == 472, "ctl model base");
static_assert(offsetof(struct wsync_ctl_model, checksum_failures) == 480,
              "ctl model checksum failures");
static_assert(offsetof(struct wsync_ctl_model, stats_commits) == 488, "ctl model stats commits");
static_assert(offsetof(struct wsync_ctl_model, max_lead) == 496, "ctl model max_lead");
static_assert(offsetof(struct wsync_ctl_model, lead_waits) == 504, "ctl model lead stats");
static_assert(offsetof(struct wsync_ctl_model, name) == 8, "ctl model name offset");
static_assert(offsetof(struct wsync_ctl_model, hwm_version) == 160, "ctl model hwm offset");
static_assert(offsetof(struct wsync_ctl_model, slot_state) == 224, "ctl model slots offset");

enum wsync_session_role {
	WSYNC_ROLE_PUB = 1u << 0,
	WSYNC_ROLE_SUB = 1u << 1,
	WSYNC_ROLE_MONITOR = 1u << 2,
};

/*
 * What monitors show of a session's reading, computed by the broker from the
 * session page once per housekeeping tick (broker/stats.c): only the broker
 * maps session pages. Informational, from what the client wrote: never
 * trusted. All of it holds at the instant the ctl header's stats_ns names.
 *
 * `view` packs the version the session reads: version << 8, bit 7 set while
 * it holds that version pinned (the lowest pinned version), bits 0..6 the
 * model id (WSYNC_STATS_MODEL_UNKNOWN when nothing is pinned and the session
 * opened several models); when nothing is pinned it is the newest version
 * taken. 0 = never acquired.
 *
 * `lag` packs how far that version is behind the model's latest, counted in
 * commits (versions the session did not take; version numbers themselves
 * jump when a publisher reopens or aborts, so their difference is not a
 * count): bits 0..23 the count (saturating), bits 24..29 the slot pinned
 * plus one (0 = none), bit 30 set when the count and lag_ms are estimates
 * (the broker saw too few commits to know them; broker/stats.c says how it
 * bounds them), bit 31 set when they are known at all. `lag_ms` is how long
 * before stats_ns the first newer version was committed (0: the version was
 * the latest), `view_ms` how long before stats_ns the view was taken (how
 * long it has been held, for a pinned one); both in milliseconds,
 * saturating.
 *
 * view, waits and timeouts keep the offsets they had before lag, lag_ms and
 * view_ms took the place of a 64-bit acquires and an absolute time.
 */
#define WSYNC_STATS_HELD           0x80u
#define WSYNC_STATS_MODEL_UNKNOWN  0x7fu
#define WSYNC_STATS_LAG_MAX        0xffffffu
#define WSYNC_STATS_LAG_SLOT_SHIFT 24
#define WSYNC_STATS_LAG_SLOT_MASK  0x3fu
#define WSYNC_STATS_LAG_ESTIMATE   (1u << 30)
#define WSYNC_STATS_LAG_KNOWN      (1u << 31)
struct wsync_session_stats {
	_Atomic uint32_t acquires;       /* views taken, summed over hazard records,
	                                    low 32 bits */
	_Atomic uint32_t lag;            /* see above */
	_Atomic uint64_t view;           /* see above */
	_Atomic uint32_t view_ms;        /* see above */
	_Atomic uint32_t lag_ms;         /* see above */
	_Atomic uint32_t waits;          /* wsync_sub_wait calls, low 32 bits */
	_Atomic uint32_t timeouts;       /* of which timed out, low 32 bits */
};
static_assert(offsetof(struct wsync_session_stats, view) == 8, "session stats view offset");
static_assert(offsetof(struct wsync_session_stats, waits) == 24, "session stats waits offset");
static_assert(sizeof(struct wsync_session_stats) == 32, "session stats size");

struct wsync_ctl_session {
	_Atomic uint32_t id;             /* 0 = entry unused */
	uint32_t pid;
	uint32_t uid;
	_Atomic uint32_t roles;          /* enum wsync_session_role */
	int64_t  connected_ns;           /* CLOCK_REALTIME */
	_Atomic uint64_t models;         /* bit i = model i opened */
	char     name[WSYNC_INSTANCE_MAX];
	struct wsync_session_stats stats;  /* mirrored every tick (broker/stats.c) */
};
static_assert(sizeof(struct wsync_ctl_session) == 128, "ctl session entry size");
static_assert(offsetof(struct wsync_ctl_session, stats) == 96, "ctl session stats offset");

/*
 * The staleness bound a collector declared for the model it reads
 * (wsync_sub_set_max_lag, wsync_sub_declare_max_lag; docs/LIVE.md), for
 * monitors: mirrored by the broker from the session page with the stats,
 * one entry per session table entry (same index). `model` is the model of
 * the stats' view (or the only model the session subscribes to),
 * WSYNC_STATS_MODEL_UNKNOWN when none; max_age_ns and max_versions 0 = no
 * bound of that kind. Informational, never trusted.
 */
struct wsync_session_bound {
	_Atomic uint64_t max_age_ns;
	_Atomic uint32_t max_versions;
	_Atomic uint32_t model;
};
static_assert(sizeof(struct wsync_session_bound) == 16, "session bound entry size");

/* ---- model page: what collectors poll and sleep on ----------------------- */

struct wsync_slot_meta {
	_Atomic uint64_t version;        /* version this slot holds, 0 = none */
	_Atomic uint64_t step;
	_Atomic int64_t  published_ns;   /* CLOCK_REALTIME of the commit */
	_Atomic uint64_t checksum;       /* XXH3-64 of the slab, 0 = none or not
	                                    formed yet (sum_pending; libclient/checksum.c) */
};
static_assert(offsetof(struct wsync_slot_meta, checksum) == 24, "slot checksum offset");
static_assert(sizeof(struct wsync_slot_meta) == 32, "slot meta size");

enum wsync_page_flags {
	/* Set by a broker shutting down, for clients of older versions. The
	 * page is the publisher's to write too, so no client trusts it: the
	 * ctl header's state says whether the broker stopped. */
	WSYNC_PAGE_CLOSED = 1u << 0,
};

struct wsync_model_page {
	uint64_t magic;                  /* WSYNC_MAGIC_PAGE */
	uint32_t layout_version;
	uint32_t model_id;
	uint64_t generation;
	uint8_t  pad0[WSYNC_CACHELINE - 24];
	/* line 1: the hot words, alone on their line */
	_Atomic uint64_t latest;         /* wsync_latest_pack(version, slot) */
	_Atomic uint32_t seq;            /* futex word: +1 per commit and at close */
	_Atomic uint32_t flags;          /* enum wsync_page_flags */
	uint8_t  pad1[WSYNC_CACHELINE - 16];
	struct wsync_slot_meta slots[WSYNC_MAX_SLOTS];
	/* Nonzero while slot k's checksum is still being formed after its
	 * version became visible: the session id of the publisher hashing it,
	 * which stores slots[k].checksum and then this word 0 (release) and
	 * wakes its waiters (a futex word). Stored with the rest of the slot's
	 * metadata before `latest` names the slot. A collector that reads 0
	 * (acquire) reads the final checksum; one that reads an id waits, and
	 * an id no live session has names a publisher that died hashing
	 * (libclient/checksum.c). Was reserved (zero): 0 = not pending. */
	_Atomic uint32_t sum_pending[WSYNC_MAX_SLOTS];
	uint8_t  reserved[WSYNC_PAGE - 2 * WSYNC_CACHELINE - WSYNC_MAX_SLOTS * 36];
};
static_assert(sizeof(struct wsync_model_page) == WSYNC_PAGE, "model page is one page");
static_assert(offsetof(struct wsync_model_page, latest) == 64, "latest on its own line");
static_assert(offsetof(struct wsync_model_page, seq) == 72, "futex word offset");
static_assert(offsetof(struct wsync_model_page, slots) == 128, "slot meta offset");
static_assert(offsetof(struct wsync_model_page, sum_pending) == 128 + WSYNC_MAX_SLOTS * 32,
              "pending checksum words offset");

/* ---- layout segment: header then n_tensors descriptors --------------------- */

struct wsync_layout_header {
	uint64_t magic;                  /* WSYNC_MAGIC_LAYOUT */
	uint32_t layout_version;
	uint32_t n_tensors;
	uint64_t bytes;                  /* slab size */
	uint64_t hash;                   /* xxh64 of the descriptor array */
	uint32_t n_devices;              /* GPUs of a device model, 0 = host model:
	                                    a restarted broker cannot adopt device
	                                    memory and reads this to say so */
	uint32_t dev_flags;              /* enum wsync_dev_flags */
	uint8_t  reserved[24];
	/* wsync_tensor_desc tensors[n_tensors]; */
};
static_assert(sizeof(struct wsync_layout_header) == 64, "layout header size");
static_assert(sizeof(wsync_tensor_desc) == 208, "tensor descriptor size");
static_assert(offsetof(wsync_tensor_desc, offset) == 200, "descriptor offset field");

/* ---- session page: the only memory a collector writes ------------------------ */

/* A hazard says "this session reads slot <slot> of model <model>": the broker
 * never rewrites a pinned slot. pin = 0 is empty. */
static inline uint64_t wsync_pin_pack(uint32_t model_id, uint32_t slot)
{
	return ((uint64_t)(model_id + 1) << 32) | slot;
}
static inline uint32_t wsync_pin_model(uint64_t pin) { return (uint32_t)(pin >> 32) - 1; }
static inline uint32_t wsync_pin_slot(uint64_t pin) { return (uint32_t)pin; }

struct wsync_hazard {
	_Atomic uint64_t pin;            /* wsync_pin_pack(), 0 = free */
	_Atomic uint64_t version;        /* informational: version held */
	_Atomic int64_t  since_ns;       /* informational: CLOCK_MONOTONIC_COARSE,
	                                    the ctl header's tick_ns at acquire
	                                    (at most a tick before it) */
	_Atomic uint64_t acquires;       /* informational: views taken through this
	                                    record (a session's total is the sum;
	                                    kept here so threads share no line) */
	uint8_t  pad[WSYNC_CACHELINE - 32];
};
static_assert(sizeof(struct wsync_hazard) == WSYNC_CACHELINE, "one hazard per line");

struct wsync_session_page {
	uint64_t magic;                  /* WSYNC_MAGIC_SESSION */
	uint32_t layout_version;
	uint32_t session_id;
	/* counters the client keeps for monitors; never trusted by the broker.
	 * Acquires are counted per hazard record, not here. */
	_Atomic uint64_t waits;
	_Atomic uint64_t timeouts;
	uint8_t  pad[WSYNC_CACHELINE - 32];
	struct wsync_hazard hazards[WSYNC_MAX_VIEWS];
	/* Second page: the highest version this client acquired of model i
	 * (by model id), raised at acquire when it grows. Read by the broker
	 * for wsync_pub_wait_readers; a lie here only fools the publisher
	 * that waits on it. */
	_Atomic uint64_t acquired[WSYNC_MAX_MODELS];
	/* Checksum mismatches this client found in model i's versions
	 * (wsync_view_verify), for monitors; the broker sums them per model. */
	_Atomic uint32_t verify_failed[WSYNC_MAX_MODELS];
	/* The staleness bound this client declared for model i, for monitors
	 * (the broker mirrors it into struct wsync_session_bound): the age of
	 * a version in ns (wsync_sub_set_max_lag, wsync_sub_declare_max_lag)
	 * and versions behind the newest (wsync_sub_declare_max_lag); 0 = none.
	 * The broker zeroes both when a subscription opens the model and shows
	 * them only while one is open; it never acts on them. Zero in the
	 * pages of clients before them (the page is zero-filled). */
	_Atomic uint64_t lag_bound_ns[WSYNC_MAX_MODELS];
	_Atomic uint32_t lag_bound_versions[WSYNC_MAX_MODELS];
	uint8_t  reserved2[WSYNC_PAGE - WSYNC_MAX_MODELS * 24];
};
#define WSYNC_SESSION_PAGE_BYTES (2 * WSYNC_PAGE)
static_assert(sizeof(struct wsync_session_page) == WSYNC_SESSION_PAGE_BYTES,
              "session page is two pages");
static_assert(offsetof(struct wsync_session_page, hazards) == WSYNC_CACHELINE, "hazards offset");
static_assert(offsetof(struct wsync_session_page, acquired) == WSYNC_PAGE, "acquired offset");
static_assert(offsetof(struct wsync_session_page, verify_failed) ==
              WSYNC_PAGE + WSYNC_MAX_MODELS * 8, "verify_failed offset");
static_assert(offsetof(struct wsync_session_page, lag_bound_ns) ==
              WSYNC_PAGE + WSYNC_MAX_MODELS * 12, "lag_bound_ns offset");
static_assert(offsetof(struct wsync_session_page, lag_bound_versions) ==
              WSYNC_PAGE + WSYNC_MAX_MODELS * 20, "lag_bound_versions offset");
static_assert(offsetof(struct wsync_session_page, reserved2) ==
              WSYNC_PAGE + WSYNC_MAX_MODELS * 24, "session page reserve offset");

#endif /* WSYNC_SHM_LAYOUT_H */
