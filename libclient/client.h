/*
 * libclient/client.h — a connection to a broker (struct wsync_client) and
 * the state every other file of the library reaches through it.
 *
 * A client owns its socket, the control segment and session page mappings
 * (HELLO, client.c), the hazard claims of its session page (taken and
 * given back by sub.c), and the list of handles opened through it. Who
 * writes which part:
 *   sock, next_seq, dead, awaits   conn.c, under lock (dead: a CAS, read
 *                                  without the lock)
 *   ctl, session, ids, endpoint    client.c, at connect; constant after
 *   hz[], hz_next_hint, n_homes    sub.c, lock-free (claims by CAS, homes
 *                                  by their thread; client.c gives homes
 *                                  back)
 *   handles                        client.c, for pub.c and sub.c, under lock
 * Everything that touches the socket, the handle list or a reply parked for
 * later runs under lock. The subscriber fast path (acquire, release, the
 * wait loop) never takes it.
 *
 * A client is not usable in both parent and child after fork(): they would
 * share one session socket and one set of hazard records.
 */
#ifndef WSYNC_CLIENT_H
#define WSYNC_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shm/layout.h"
#include "wsync.h"

#define WSYNC_DEAD_WHY_MAX 160

/* ThreadSanitizer cannot see a membarrier: its builds keep every fence. */
#if defined(__SANITIZE_THREAD__)
#define WSYNC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WSYNC_TSAN 1
#endif
#endif

struct conn_await;
struct sub_maps;
struct wsync_sub;

/* Who holds hazard record i of a client: NULL = free, claimed by CAS;
 * HZ_IDLE = a thread's home record, holding nothing (below); else the
 * subscription whose view or wait holds it.
 * guard: the maps (before the model is READY, the model page) whose memory
 * (page, layout, slabs) the holder reads or holds a view into; a page and
 * maps a subscription retired are unmapped and freed only once no record
 * guards either (sub_attach.c). maps: the view's, for
 * wsync_view_tensor and checksums. Both written by the holder only.
 * home: whether the record is a thread's home (enum hz_home; sub.c). */
struct hz_claim {
	_Alignas(WSYNC_CACHELINE) _Atomic(struct wsync_sub *) owner;
	_Atomic(const void *) guard;
	_Atomic(struct sub_maps *) maps;
	_Atomic uint32_t home;
};

/* A home record is claimed once by CAS and then taken by its thread alone,
 * IDLE -> busy with a plain store; whoever releases its view puts it back
 * to IDLE. Given back (its thread exits, or moves to another client) it is
 * NONE again: at once when idle; when busy, LEAVING until the release. */
#define HZ_IDLE ((struct wsync_sub *)1)
enum hz_home {
	HZ_HOME_NONE = 0,
	HZ_HOME_LIVE = 1,
	HZ_HOME_LEAVING = 2,
};
/* At most this many records of a client are homes, so threads without
 * one always find records to claim. */
#define HZ_HOMES_MAX (WSYNC_MAX_VIEWS / 2)

/* Something opened through a client (a publisher, a subscription) that
 * wsync_close must close first: linked in at open, out at close, and
 * closed through its own close hook, so the client knows no kind of it. */
struct client_handle {
	struct client_handle *next;      /* in c->handles, under c->lock */
	void (*close)(struct client_handle *h);
};

struct wsync_client {
	int sock;
	pthread_mutex_t lock;            /* socket, seq, handles, awaits */
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
	/* Pins may be stored without a fence: this process registered for the
	 * broker's pin barrier and the broker runs it (WSYNC_CTL_PIN_BARRIER;
	 * sub.c says why that is enough). Constant after connect. */
	bool pin_barrier;

	/* Claims of the session page's hazard records, one cache line each so
	 * that threads holding different records share nothing. */
	struct hz_claim hz[WSYNC_MAX_VIEWS];
	_Atomic uint32_t hz_next_hint;   /* hands each thread a starting record */
	_Atomic uint32_t n_homes;        /* records that are HZ_HOME_LIVE or LEAVING */
	struct wsync_client *live_next;  /* in the list of live clients (client.c) */
	_Atomic int64_t hangup_checked_ns;  /* last poll of the socket by a wait */
	uint32_t client_id;              /* tells a thread's hint for this client
	                                    from one for an earlier client */

	struct client_handle *handles;   /* under lock: open pubs and subs */
	struct conn_await *awaits;       /* under lock: replies collected later */
	char endpoint[108];
};

static inline void client_lock(struct wsync_client *c) { pthread_mutex_lock(&c->lock); }
static inline void client_unlock(struct wsync_client *c) { pthread_mutex_unlock(&c->lock); }

static inline bool client_is_dead(struct wsync_client *c)
{
	return atomic_load_explicit(&c->dead, memory_order_acquire) != 0;
}

/* This generation has no broker any more: it shut down cleanly (STOPPED),
 * or a broker that started after it died took its models over
 * (SUPERSEDED). One load of a word only brokers write (shm/layout.h). */
static inline bool client_broker_gone(const struct wsync_client *c)
{
	return atomic_load_explicit(&c->ctl->state, memory_order_acquire) != WSYNC_BROKER_RUNNING;
}

/* -ENOTCONN saying which (client_broker_gone), naming model (NULL: none). */
int client_fail_gone(const struct wsync_client *c, const char *model);

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

/* Hazard record of index i in the client's session page. */
static inline struct wsync_hazard *client_hazard(struct wsync_client *c, uint32_t i)
{
	return &c->session->hazards[i];
}

/* A full barrier on every CPU running a thread of this process (a thread
 * not running passed one when it was switched out): the other side of
 * fences the fast paths leave out. false when none could be had. */
bool wsync_process_barrier(void);

/* Record idx stops being a home: NONE once it holds no view (finishes a
 * LEAVING one whose view was just released). */
static inline void client_home_finish(struct wsync_client *c, uint32_t idx)
{
	uint32_t leaving = HZ_HOME_LEAVING;

	/* whoever wins frees it: the release, or the thread giving it back */
	if (!atomic_compare_exchange_strong_explicit(&c->hz[idx].home, &leaving, HZ_HOME_NONE,
	                                             memory_order_relaxed,
	                                             memory_order_relaxed))
		return;
	atomic_fetch_sub_explicit(&c->n_homes, 1, memory_order_relaxed);
	atomic_store_explicit(&c->hz[idx].owner, NULL, memory_order_release);
}

/* Gives home record idx of the client numbered client_id back, if that
 * client is still open; by the thread whose home it is (at its exit, or
 * when it moves to another client). */
void wsync_client_home_give_back(uint32_t client_id, uint32_t idx);

/* Links h, whose close hook is close, into the client's open handles, and
 * out again. Caller holds the lock. */
void wsync_client_handle_add(struct wsync_client *c, struct client_handle *h,
                             void (*close)(struct client_handle *h));
void wsync_client_handle_remove(struct wsync_client *c, struct client_handle *h);

#endif /* WSYNC_CLIENT_H */
