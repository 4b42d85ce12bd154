/*
 * libclient/client_internal.h — what the files of libwsync share.
 *
 * Ownership: a wsync_client owns its socket, the control and session page
 * mappings, and the lists of publishers and subscriptions opened through it.
 * Everything that touches the socket, the lists, or a publisher's stored
 * commit acknowledgement runs under client->lock. The subscriber fast path
 * (acquire, release, the wait loop) never takes it.
 *
 * A client is not usable in both parent and child after fork(): they would
 * share one session socket and one set of hazard records.
 */
#ifndef WSYNC_CLIENT_INTERNAL_H
#define WSYNC_CLIENT_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "shm/errmsg.h"
#include "shm/layout.h"
#include "shm/proto.h"
#include "shm/tensor_layout.h"
#include "wsync.h"

#define WSYNC_REPLY_TIMEOUT_MS_DEFAULT 30000
#define WSYNC_DEAD_WHY_MAX 160

/* Hazard records are one bit each in a 64-bit word; the top bit never is. */
/* Who holds hazard record i of a client: NULL = free. Claimed by CAS. */
struct hz_claim {
	_Alignas(WSYNC_CACHELINE) _Atomic(struct wsync_sub *) owner;
};


/* Something opened through a client (a publisher, a subscription) that
 * wsync_close must close first: linked in at open, out at close, and
 * closed through its own close hook, so the client knows no kind of it. */
struct client_handle {
	struct client_handle *next;      /* in c->handles, under c->lock */
	void (*close)(struct client_handle *h);
};

struct wsync_client {
	int sock;
	pthread_mutex_t lock;            /* socket, seq, lists, pub acks */
	uint32_t next_seq;
	int64_t reply_timeout_ns;
	_Atomic int dead;                /* 0 alive, 2 being marked, 1 dead */
	char dead_why[WSYNC_DEAD_WHY_MAX];

	const struct wsync_ctl_header *ctl;
	size_t ctl_bytes;
	struct wsync_session_page *session;
	uint32_t session_id, max_slots, broker_pid;
	uint64_t generation;
	uid_t broker_uid;                /* SO_PEERCRED of the broker */
	/* Our entry in the ctl session table (memory only the broker writes):
	 * its id equals session_id while the broker honours our hazards. */
	const struct wsync_ctl_session *self;

	/* Claims of the session page's hazard records, one cache line each so
	 * that threads holding different records share nothing. */
	struct hz_claim hz[WSYNC_MAX_VIEWS];
	_Atomic uint32_t hz_next_hint;   /* hands each thread a starting record */
	_Atomic int64_t hangup_checked_ns;  /* last poll of the socket by a wait */
	uint32_t client_id;              /* tells a thread's hint for this client
	                                    from one for an earlier client */

	struct client_handle *handles;   /* under lock: open pubs and subs */
	struct conn_await *awaits;       /* under lock: replies collected later */
	char endpoint[108];
};

/* One received message and the fds that came with it. */
struct conn_reply {
	union wsync_msg_any msg;
	int fds[WSYNC_MSG_MAX_FDS];
	int n_fds;
};

/*
 * A reply its owner collects later: the answer to a request whose caller
 * stopped waiting for it (a BEGIN past its deadline) or never waited (an
 * async COMMIT). While seq is registered, a receive that meets this reply on
 * the way to another one parks it here instead of dropping it.
 */
struct conn_await {
	struct conn_await *next;         /* in c->awaits while seq != 0 */
	uint32_t seq;                    /* the request; 0 = nothing awaited */
	uint32_t req_type;               /* its type, for the error message */
	uint32_t want;                   /* the reply it expects (or ERROR) */
	bool     ready;                  /* rep holds the reply */
	struct conn_reply rep;           /* with its fds */
};

/* A grant {slot, version}: held by a begun slab, or prefetched from a
 * COMMIT_OK with the slab's fd when the broker sent one. */
struct pub_grant {
	bool     valid;
	uint32_t slot;
	uint64_t version;
	int      fd;                     /* -1 = map the cached slot */
};

/* Closes a grant's fd (if it came with one) and forgets the grant. */
static inline void pub_grant_drop(struct pub_grant *g)
{
	if (g->fd >= 0)
		close(g->fd);
	g->fd = -1;
	g->valid = false;
}

struct wsync_pub {
	struct wsync_client *c;
	struct client_handle handle;     /* in c->handles */
	char model[WSYNC_NAME_MAX];
	uint32_t model_id, n_slots;
	uint64_t bytes;
	uint64_t map_bytes;              /* of each slab mapping (wsync_map_slab) */
	size_t n_tensors;
	wsync_tensor_desc *tensors;      /* canonical, with offsets */
	struct wsync_name_index index;
	struct wsync_model_page *page;   /* rw */
	const struct wsync_ctl_model *entry;  /* ro: says whether we still publish */
	uint64_t incarnation;
	void *slabs[WSYNC_MAX_SLOTS];    /* cached rw mappings, NULL = none */
	bool guarded;                    /* slabs read-only outside a grant */
	bool unguarded;                  /* WSYNC_PUB_UNGUARDED: never guarded */
	/* one rank of a group (group_size > 1): the broker books a version when
	 * every rank committed it, so commit neither writes the page nor
	 * returns before then; no grant is prefetched */
	uint32_t group_size, rank;
	wsync_shard *parts;              /* this rank's declaration */
	size_t n_parts;
	bool checksum;                   /* WSYNC_PUB_CHECKSUM: hash at commit */

	/* a device model (entry->n_devices): begin/commit through the _gpu
	 * calls; device_only: no host mirror, the host slabs are never
	 * touched. gpu[d]: the model's slots on its GPU d, mapped writable
	 * at the first wsync_pub_begin_gpu (gpu_pub.c), which sets
	 * gpu_release to unmap them when the publisher closes. */
	bool device_model, device_only;
	bool gpu_begun;                  /* the begun slab came from begin_gpu */
	uint32_t gpu_src;                /* the GPU it was begun on */
	struct gpu_pub *gpu;
	void (*gpu_release)(struct wsync_pub *p);  /* NULL = nothing mapped */
	uint32_t req_devices, req_dev_flags;     /* what the open asked for */
	uint8_t  req_uuid[WSYNC_MAX_DEVICES][16];

	uint64_t last_committed;         /* grants must carry a newer version */
	bool     begun;
	struct pub_grant cur;            /* the begun slab's grant */

	/* under c->lock: the outstanding async commit (COMMIT_OK or ERROR) */
	struct conn_await ack;           /* ack.seq 0 = none outstanding */
	uint64_t ack_version;            /* version the async commit carries */
	struct pub_grant next;           /* prefetched grant */
	/* under c->lock: a BEGIN whose answer (GRANT or ERROR) did not come by
	 * the caller's deadline; the next begin collects it instead of asking
	 * again */
	struct conn_await begin_wait;    /* begin_wait.seq 0 = none outstanding */
};

/* Immutable once published in sub->maps: layout copy and slab mappings. */
struct sub_maps {
	uint32_t n_slots;
	uint64_t bytes;
	uint64_t map_bytes;              /* of each slab mapping (wsync_map_slab) */
	size_t n_tensors;
	wsync_tensor_desc *tensors;      /* private, validated copy */
	struct wsync_name_index index;
	const void *slabs[WSYNC_MAX_SLOTS];
	bool device_only;                /* a device model without host mirror:
	                                    host views are refused */
};

struct gpu_map;

struct wsync_sub {
	struct wsync_client *c;
	struct client_handle handle;     /* in c->handles */
	char model[WSYNC_NAME_MAX];
	uint32_t model_id;
	const struct wsync_model_page *page;  /* ro */
	const struct wsync_ctl_model *entry;  /* ro, written by the broker only */
	uint64_t incarnation;                 /* entry->incarnation at open */
	_Atomic(struct sub_maps *) maps;      /* NULL until the model is READY */
	_Atomic int efd;                      /* wsync_sub_fd eventfd, -1 = none */
	_Atomic uint64_t last_version;        /* newest version acquired */
	_Atomic int64_t spin_ns;              /* wsync_sub_set_spin, 0 = none */
	/* a device model's slots on its GPU d, mapped read-only by the first
	 * acquire on that GPU (under c->lock), then read without a lock;
	 * gpu_sub.c sets gpu_release with the first, to unmap them at close */
	_Atomic(struct gpu_map *) gpu[WSYNC_MAX_DEVICES];
	void (*gpu_release)(struct wsync_sub *s);  /* NULL = nothing mapped */
};

/* -EIDRM once the model of a subscription was deleted or replaced. */
static inline int wsync_sub_check_model(const struct wsync_sub *s)
{
	if (atomic_load_explicit(&s->entry->incarnation, memory_order_acquire) == s->incarnation)
		return 0;
	return wsync_fail(-EIDRM, "model '%s' was deleted or replaced since this "
	                  "subscription opened it; subscribe again", s->model);
}

/* ---- conn.c: the session socket ---------------------------------------- */

static inline void client_lock(struct wsync_client *c) { pthread_mutex_lock(&c->lock); }
static inline void client_unlock(struct wsync_client *c) { pthread_mutex_unlock(&c->lock); }

static inline bool client_is_dead(struct wsync_client *c)
{
	return atomic_load_explicit(&c->dead, memory_order_acquire) != 0;
}

/* The broker shut down cleanly (ctl state, which only the broker writes). */
static inline bool client_broker_stopped(const struct wsync_client *c)
{
	return atomic_load_explicit(&c->ctl->state, memory_order_acquire) == WSYNC_BROKER_STOPPED;
}

/* Whether the broker still counts this session's hazards: seq_cst, so that
 * a pin stored before it is ordered against the broker clearing the entry
 * (docs/INVARIANTS.md, "a client cut off"). A broker that died leaves the
 * entry as it was, which is right: nobody rewrites its slabs any more. */
static inline bool client_session_live(const struct wsync_client *c)
{
	return atomic_load(&c->self->id) == c->session_id;
}

static inline const struct wsync_ctl_model *client_ctl_model(const struct wsync_client *c,
                                                             uint32_t id)
{
	return (const struct wsync_ctl_model *)((const char *)c->ctl +
	                                        c->ctl->models_offset) + id;
}

/* Marks the connection unusable; later requests fail with -ENOTCONN. */
void wsync_conn_mark_dead(struct wsync_client *c, const char *why);
/* -ENOTCONN with the reason the client died. Caller holds the lock. */
int wsync_conn_fail_dead(struct wsync_client *c);
/* Polls the socket without waiting: true (and the client marked dead) if
 * the broker hung up. */
bool wsync_conn_hung_up(struct wsync_client *c);
/* Next request number (never 0). Caller holds the lock. */
uint32_t wsync_conn_next_seq(struct wsync_client *c);
/* Sends a request whose header is filled (wsync_msg_init), with fds. */
int wsync_conn_send(struct wsync_client *c, const union wsync_msg_any *req,
                    const int *fds, int n_fds);
/*
 * Receives until the reply of seq arrives or deadline_ns (CLOCK_MONOTONIC;
 * -1 = the client's reply limit; see wsync_conn_deadline) passes. Replies
 * that others collect later (registered with wsync_conn_await) are parked
 * in their registrations; replies to requests nobody waits for any more are
 * dropped or undone (conn.c). An ERROR reply becomes its error code and
 * message, with its fds closed. A reply of another type than want, or one
 * to a request not yet sent, is -EPROTO and the connection is given up. A
 * timeout leaves the connection usable. Caller holds the lock.
 */
int wsync_conn_recv(struct wsync_client *c, uint32_t seq, uint32_t want,
                    int64_t deadline_ns, struct conn_reply *rep);
/* send + recv of the reply by the client's reply limit, under the lock
 * the caller holds. */
int wsync_conn_call(struct wsync_client *c, union wsync_msg_any *req,
                    const int *fds, int n_fds, uint32_t want,
                    struct conn_reply *rep);
/* The same by deadline_ns (see wsync_conn_deadline). On -ETIMEDOUT the
 * request stays sent: its reply is dropped when it comes (conn_stale), and
 * *seq_out (may be NULL) says which it was. */
int wsync_conn_call_by(struct wsync_client *c, union wsync_msg_any *req,
                       const int *fds, int n_fds, uint32_t want, int64_t deadline_ns,
                       uint32_t *seq_out, struct conn_reply *rep);
/* Sends a request whose reply nobody waits for: it is dropped when it
 * comes. For CLOSE and ABORT on the way out, which must not wait for a
 * broker that may be stopped. Caller holds the lock. */
int wsync_conn_post(struct wsync_client *c, union wsync_msg_any *req);
/* The deadline for a round trip of a call given deadline_ns
 * (CLOCK_MONOTONIC, -1 = none): never past the reply limit, never sooner
 * than WSYNC_RTT_GRACE_NS from now, so that a call with timeout 0 can still
 * make one round trip to a broker that answers. */
int64_t wsync_conn_deadline(const struct wsync_client *c, int64_t deadline_ns);
#define WSYNC_RTT_GRACE_NS 5000000       /* 5 ms */
/* Registers a for the reply of request seq, sent already as a req_type
 * that expects want. A registration ends when the reply is collected or
 * cancelled. Caller holds the lock. */
void wsync_conn_await(struct wsync_client *c, struct conn_await *a, uint32_t seq,
                      uint32_t req_type, uint32_t want);
/* The awaited reply by deadline_ns (-1: the reply limit): 0 and the reply,
 * its error code for an ERROR (fds closed), -ETIMEDOUT with the reply
 * still awaited, or another error that ends the registration. Caller holds
 * the lock. */
int wsync_conn_await_collect(struct wsync_client *c, struct conn_await *a,
                             int64_t deadline_ns, struct conn_reply *rep);
/* Ends a registration without collecting it (nothing if none), closing the
 * fds of a reply that came meanwhile. Caller holds the lock. */
void wsync_conn_await_cancel(struct wsync_client *c, struct conn_await *a);
/* Closes rep->fds[from..]. */
void wsync_reply_close_fds(struct conn_reply *rep, int from);
/* Converts an ERROR message into its error code and detail message. */
int wsync_conn_error(const struct wsync_msg_error *e, uint32_t req_type);

/* ---- maps.c: mapping fds the broker sent ----------------------------------- */

/*
 * Maps bytes of fd after checking the object is at least that large (so a
 * short object is an -EPROTO now, not a SIGBUS later). Does not close fd.
 */
int wsync_map_fd(int fd, uint64_t bytes, int writable, int populate,
                 const char *what, void **out);
/*
 * Maps a slab of bytes (what views see), populated unless told not to (the
 * empty host slabs of device-only models). On huge pages the mapping is
 * longer: munmap and mprotect take *map_bytes, the length every slab of
 * the model must share: 0 before the model's first slab (then it is set),
 * checked against each later one (-EPROTO if it differs).
 */
int wsync_map_slab(int fd, uint64_t bytes, int writable, int populate, uint64_t *map_bytes,
                   void **out);
/* Checks a model page's magic, layout version and model id. */
int wsync_page_check(const struct wsync_model_page *pg, uint32_t model_id,
                     const char *model);

/* ---- client.c ---------------------------------------------------------------- */

/* Links h into the client's open handles, and out. Caller holds the lock. */
void wsync_client_handle_add(struct wsync_client *c, struct client_handle *h,
                             void (*close)(struct client_handle *h));
void wsync_client_handle_remove(struct wsync_client *c, struct client_handle *h);

/* ---- endpoint.c ------------------------------------------------------------ */

/* Resolves endpoint (see wsync_connect) to a socket path. */
int wsync_endpoint_resolve(const char *endpoint, char *buf, size_t len);
/* Checks where a socket lives before connecting: its directory must be a
 * real directory owned by a trusted uid (ours, root, $WSYNC_BROKER_UID)
 * and writable by nobody else, or sticky like /tmp with the socket owned
 * by a trusted uid. 0 or -EPERM with a reason. */
int wsync_endpoint_check(const char *path);
/* A uid from a number or a user name: the uid, or -errno. */
int64_t wsync_uid_parse(const char *s);

/* ---- pub.c / sub.c: hooks the connection and the client call ------------------ */

/* -ENOTCONN if the broker shut down (ctl header STOPPED) or the client is dead,
 * -EPROTO if the broker cut this publisher off:
 * nothing may be published into a generation that no longer has a broker. */
int wsync_pub_gone(struct wsync_pub *p);
/* Makes a guarded publisher's slab read-only again (commit, abort). */
void wsync_pub_guard(struct wsync_pub *p, uint32_t slot);
/* Collects the outstanding async commit's acknowledgement by deadline_ns
 * (-1: the reply limit); its version into *version (may be NULL). An
 * -ETIMEDOUT on deadline_ns leaves it outstanding. Caller holds the lock. */
int wsync_pub_ack_collect(struct wsync_pub *p, int64_t deadline_ns, uint64_t *version);

/* sub_attach.c: maps the layout and slabs; fds[0] = layout, then n_slots
 * slabs. Consumes (closes) every fd in fds on every path. */
int wsync_sub_attach_fds(struct wsync_sub *s, uint32_t n_slots, uint32_t n_tensors,
                         uint64_t bytes, uint64_t layout_bytes,
                         int *fds, int n_fds);
/* ATTACH round trip by deadline_ns (-1: the reply limit); takes the lock. */
int wsync_sub_attach(struct wsync_sub *s, int64_t deadline_ns);
/* wsync_sub_acquire with the deadline of a wait for what needs the broker;
 * -ESTALE (not -EAGAIN) while the model's latest is being restored. A
 * device model without host mirror is refused (-ENODEV) unless device. */
int wsync_sub_acquire_by(struct wsync_sub *s, int64_t deadline_ns, bool device,
                         wsync_view *out);
/* wsync_sub_wait, for host or (device) device views. */
int wsync_sub_wait_any(struct wsync_sub *s, uint64_t after_version, int64_t timeout_ns,
                       bool device, wsync_view *out);
/* Begin and commit of any slab (pub_grant.c, pub.c): the public host forms
 * refuse device models, whose slabs go through gpu_pub.c. */
int wsync_pub_begin_slab(struct wsync_pub *p, int64_t timeout_ns, wsync_slab *out);
int wsync_pub_commit_slab(struct wsync_pub *p, uint64_t step, uint64_t *version_out);
/* The newest version a collector may take, and the word it came from: the
 * model page's latest while it equals the ctl entry's latest or grant, else
 * the ctl entry's latest (sub.c explains). */
uint64_t wsync_sub_trusted_latest(const struct wsync_sub *s, const _Atomic uint64_t **src);
void wsync_sub_maps_free(struct sub_maps *m);

/* Hazard record of index i in the client's session page. */
static inline struct wsync_hazard *client_hazard(struct wsync_client *c, uint32_t i)
{
	return &c->session->hazards[i];
}

#endif /* WSYNC_CLIENT_INTERNAL_H */
