/*
 * libclient/sub.c — subscriptions: open, acquire, release, close.
 *
 * The invariant: the bytes of a view never change while it is held. A view
 * is a pinned slot; the broker never grants a pinned slot for writing.
 *
 * Who writes which word:
 *   page->latest    the model's publisher (its granted pair, at commit) and
 *                   the broker (restores); collectors only read it, and take
 *                   it only while it equals entry->latest or entry->grant.
 *   entry->latest   the broker only (ctl model entry, mapped read-only): the
 *   entry->grant    last booked latest and the grant outstanding. A forged
 *                   page word is never served: a collector falls back to
 *                   entry->latest, so it sees only versions the broker
 *                   granted, and never one below what it saw before.
 *   page->slots[k]  the publisher holding the grant of slot k, before latest
 *                   names k; read here only while k is pinned.
 *   hazard[i].pin   this client only (its session page); the broker reads it.
 *   self->id        the broker: our session id while it counts our pins;
 *                   checked (seq_cst) after the pin, so a view handed out was
 *                   protected when it was taken; wsync_view_check() tells
 *                   later whether it still is.
 *
 * Why a pinned slot is safe: acquire stores the pin and then loads latest
 * again (seq_cst), retrying if latest moved. The broker, before it grants a
 * slot, has booked the store that moved latest away from it (seq_cst, at the
 * commit that replaced it) and then loads the pins (seq_cst); it never
 * grants a slot latest or the grant names. Either the broker's pin load sees
 * our pin and skips the slot; or our re-load sees the newer latest, and we
 * retry without touching the slot. Versions only grow, so latest never
 * returns to an old word (no ABA). What orders our pin store before our
 * re-load against the broker's booking before its scan is one of two:
 *  - seq_cst on both sides (an xchg here): all four accesses are in one
 *    total order, and whichever of our pin store and its pin load comes
 *    first decides;
 *  - the pin barrier (client->pin_barrier, one predicted branch): the
 *    broker runs membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) between its
 *    booking and its scan (WSYNC_CTL_PIN_BARRIER), which puts a full
 *    barrier in each of our threads that runs meanwhile (a thread not
 *    running passed one when it was switched out); our pin store then
 *    needs only a compiler barrier before the re-load. Wherever the
 *    barrier falls in the acquiring thread, it falls either after the pin
 *    store, which the scan that follows then sees, or before the re-load,
 *    which then sees the booking (the broker saw the publisher's latest
 *    before it booked it, and full barriers are cumulative) and retries.
 *    Used only where our registration for it succeeded (client.c) and the
 *    broker says it runs it; never under TSan, which cannot see it.
 * The session check after the pin (seq_cst load of self->id) pairs the same
 * way with the broker clearing the id before a later grant stops counting
 * our pins: a view handed out was protected when it was taken. Cost: a
 * plain store and two loads; no lock, no system call, no fence.
 * (broker/slots.h states the broker's side.)
 *
 * Hazard records (WSYNC_MAX_VIEWS per client, one cache line each): a
 * thread takes its home record with a load and a plain store, others by a
 * compare-and-swap on a claim word of their own line (below, hz_take), each
 * thread starting at its own record, so threads acquiring at once through
 * one client neither share a record nor a cache line. A record's pin is cleared with a release
 * store when the view is released: every read of the slab by the holder
 * happens before the broker can see the slot unpinned.
 *
 * Memory guards: the page and maps a subscription reads are replaced when
 * its model moves to new memory (sub_attach.c), and unmapped once no record
 * guards them. A record's guard (client.h, hz_claim) names the maps (or,
 * before READY, the page) its holder reads, by address, never read through
 * before it is guarded: stored (a release) before the subscription's page
 * and maps are loaded again (wsync_sub_guard; the fence between is the
 * reclaimer's membarrier, so the common path pays none), kept while a view
 * is held, cleared with a release store when the record is put. acquire,
 * wait (one record for the whole wait, which becomes the view's) and latest
 * read only under a guard.
 *
 * Waiting (sub_wait.c) sleeps on page->seq, read before latest is checked.
 *
 * Files of the subscriber, lowest first: sub_attach.c (the maps of the
 * layout and slabs), sub.c (open, acquire, release, close), sub_wait.c
 * (waits and the notify eventfd); gpu_sub.c (device views) on those. A
 * subscription's device mappings are gpu_sub.c's: it sets s->gpu_release
 * with the first, and sub_free calls it.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conn.h"
#include "maps.h"
#include "shm/clock.h"
#include "shm/errmsg.h"
#include "sub.h"
#include "sub_attach.h"

/*
 * Records: a thread's home record in the client it uses, claimed once by
 * CAS (then HZ_HOME_LIVE) and from then on taken by that thread alone with
 * a load and a plain store (HZ_IDLE -> the subscription); any thread that
 * releases its view stores HZ_IDLE back. A thread whose home is busy (it
 * holds a view already), or that has none (HZ_HOMES_MAX homes exist),
 * claims another record by CAS, starting at a record of its own so that
 * threads acquiring at once neither share a record nor a cache line. A
 * home is given back when its thread exits (a key destructor) or moves on
 * to another client, so pools of short-lived threads never use up the
 * records (client.c, client_home_drop); a thread takes a home in a client
 * at its second claim there in a row, so one that goes back and forth
 * between clients claims by CAS instead of giving homes back each time.
 *
 * Initial-exec: the default model for a shared library costs a call to
 * __tls_get_addr on every acquire; these 12 bytes fit the static TLS glibc
 * keeps for libraries loaded later (ctypes) too.
 */
#define HZ_NO_HOME   UINT32_MAX          /* none: the next claim becomes it */
#define HZ_HOME_LATER (UINT32_MAX - 1)   /* none, and the next claim does not
                                            become it: a thread going back and
                                            forth between clients keeps none */
static _Thread_local __attribute__((tls_model("initial-exec"))) struct {
	uint32_t client_id;             /* the client of home and hint, 0 = none */
	uint32_t home;                  /* this thread's home record, or HZ_NO_HOME */
	uint32_t hint;                  /* where its CAS claims start */
} hz_tls;

static pthread_once_t hz_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t hz_key;
static bool hz_homes_ok;          /* the key exists: homes can be given back */

static_assert(sizeof(void *) >= 8, "a key value holds a client id and a record");

/* At a thread's exit: its home goes back to its client, if still open. */
static void hz_thread_exit(void *value)
{
	uintptr_t w = (uintptr_t)value;

	wsync_client_home_give_back((uint32_t)(w >> 32), (uint32_t)w - 1);
}

static void hz_key_init(void)
{
	hz_homes_ok = pthread_key_create(&hz_key, hz_thread_exit) == 0;
}

/* Makes record i (just claimed by CAS) this thread's home in c, unless c
 * has enough homes. */
static void hz_home_adopt(struct wsync_client *c, uint32_t i)
{
	(void)pthread_once(&hz_key_once, hz_key_init);
	if (!hz_homes_ok)
		return;
	if (atomic_fetch_add_explicit(&c->n_homes, 1, memory_order_relaxed) >= HZ_HOMES_MAX) {
		atomic_fetch_sub_explicit(&c->n_homes, 1, memory_order_relaxed);
		return;
	}
	if (pthread_setspecific(hz_key, (void *)(((uintptr_t)c->client_id << 32) | (i + 1)))) {
		atomic_fetch_sub_explicit(&c->n_homes, 1, memory_order_relaxed);
		return;
	}
	/* busy with our view: whoever releases it sees this (it was handed
	 * the view after we return) */
	atomic_store_explicit(&c->hz[i].home, HZ_HOME_LIVE, memory_order_relaxed);
	hz_tls.home = i;
}

/* This thread moves to client c: its home in the previous one goes back. */
static void hz_switch(struct wsync_client *c)
{
	if (hz_tls.client_id && hz_tls.home < WSYNC_MAX_VIEWS) {
		wsync_client_home_give_back(hz_tls.client_id, hz_tls.home);
		(void)pthread_setspecific(hz_key, NULL);
	}
	hz_tls.client_id = c->client_id;
	hz_tls.home = HZ_HOME_LATER;
	hz_tls.hint = atomic_fetch_add_explicit(&c->hz_next_hint, 1,
	                                        memory_order_relaxed) % WSYNC_MAX_VIEWS;
}

/* Claims a free record by CAS, and makes it this thread's home if it has
 * none. */
static __attribute__((noinline))
int hz_take_slow(struct wsync_client *c, struct wsync_sub *s, uint32_t *idx)
{
	uint32_t start;

	if (hz_tls.client_id != c->client_id)
		hz_switch(c);
	start = hz_tls.hint;
	for (uint32_t k = 0; k < WSYNC_MAX_VIEWS; k++) {
		uint32_t i = (start + k) % WSYNC_MAX_VIEWS;
		struct wsync_sub *none = NULL;

		if (atomic_load_explicit(&c->hz[i].owner, memory_order_relaxed))
			continue;
		if (atomic_compare_exchange_strong_explicit(&c->hz[i].owner, &none, s,
		                                            memory_order_acquire,
		                                            memory_order_relaxed)) {
			hz_tls.hint = i;
			if (hz_tls.home == HZ_NO_HOME)
				hz_home_adopt(c, i);
			else if (hz_tls.home == HZ_HOME_LATER)
				hz_tls.home = HZ_NO_HOME;
			*idx = i;
			return 0;
		}
	}
	return -EAGAIN;
}

/* Takes this thread's home record if it is idle (no locked instruction),
 * else claims one. The acquire pairs with the release that put it back:
 * the releaser's clearing of pin and guard come before ours. */
static inline __attribute__((always_inline))
int hz_take(struct wsync_client *c, struct wsync_sub *s, uint32_t *idx)
{
	uint32_t i = hz_tls.home;

	if (__builtin_expect(hz_tls.client_id == c->client_id && i < WSYNC_MAX_VIEWS &&
	                     atomic_load_explicit(&c->hz[i].owner, memory_order_acquire) ==
	                     HZ_IDLE, 1)) {
		atomic_store_explicit(&c->hz[i].owner, s, memory_order_relaxed);
		*idx = i;
		return 0;
	}
	return hz_take_slow(c, s, idx);
}

/* Stores a pin, ordered before the loads that follow it: by the broker's
 * pin barrier where it runs one (a compiler barrier here, one predicted
 * branch), else by a seq_cst store. */
static inline __attribute__((always_inline))
void hz_pin(const struct wsync_client *c, struct wsync_hazard *hz, uint64_t pin)
{
	if (__builtin_expect(c->pin_barrier, 1)) {
		atomic_store_explicit(&hz->pin, pin, memory_order_relaxed);
		atomic_signal_fence(memory_order_seq_cst);
	} else {
		atomic_store(&hz->pin, pin);
	}
}

/* Clears the record's pin; the claim and its guard stay. */
static void hz_unpin(struct wsync_client *c, uint32_t idx)
{
	atomic_store_explicit(&client_hazard(c, idx)->pin, 0, memory_order_release);
}

/* Frees record idx: the pin, then the guard (every read of the memory it
 * guarded happens before a reclaimer sees it gone), then the claim (back
 * to HZ_IDLE for a home). Then frees what s retired if nothing else guards
 * it, unless another thread holds the lock (that one, or a later put, does
 * it). */
static __attribute__((noinline)) void hz_reclaim(struct wsync_client *c, struct wsync_sub *s)
{
	if (pthread_mutex_trylock(&c->lock) == 0) {
		wsync_sub_reclaim(s);
		client_unlock(c);
	}
}

static inline __attribute__((always_inline))
void hz_put(struct wsync_client *c, uint32_t idx)
{
	struct hz_claim *h = &c->hz[idx];
	struct wsync_sub *s = atomic_load_explicit(&h->owner, memory_order_relaxed);

	hz_unpin(c, idx);
	atomic_store_explicit(&h->maps, NULL, memory_order_relaxed);
	/* release is enough: a scan that reads NULL here (seq_cst, so at least
	 * acquire) sees every read of the guarded memory before it; only the
	 * store that sets a guard needs the full fence */
	atomic_store_explicit(&h->guard, NULL, memory_order_release);
	if (__builtin_expect(atomic_load_explicit(&h->home, memory_order_relaxed) !=
	                     HZ_HOME_NONE, 1)) {
		atomic_store_explicit(&h->owner, HZ_IDLE, memory_order_release);
		/* its thread may be giving it back meanwhile: with its barrier,
		 * one of us sees the other (client.c, client_home_drop) */
		atomic_signal_fence(memory_order_seq_cst);
		if (__builtin_expect(atomic_load_explicit(&h->home, memory_order_relaxed) ==
		                     HZ_HOME_LEAVING, 0))
			client_home_finish(c, idx);
	} else {
		atomic_store_explicit(&h->owner, NULL, memory_order_release);
	}
	if (__builtin_expect(s && atomic_load_explicit(&s->n_retired, memory_order_relaxed), 0))
		hz_reclaim(c, s);
}

static __attribute__((noinline, cold)) int hz_fail_full(const struct wsync_sub *s)
{
	uint32_t homes = atomic_load_explicit(&s->c->n_homes, memory_order_relaxed);

	if (homes > 1)
		return wsync_fail(-EAGAIN, "model '%s': every hazard record of this client is "
		                  "taken: views held, or home records of %u of its threads "
		                  "(%d records)", s->model, homes, WSYNC_MAX_VIEWS);
	return wsync_fail(-EAGAIN, "model '%s': %d views already held by this client",
	                  s->model, WSYNC_MAX_VIEWS);
}

int wsync_sub_hz_take(struct wsync_sub *s, uint32_t *idx)
{
	return hz_take(s->c, s, idx) ? hz_fail_full(s) : 0;
}

void wsync_sub_hz_put(struct wsync_sub *s, uint32_t idx)
{
	hz_put(s->c, idx);
}

/*
 * Guards the memory the subscription reads now with record idx, and returns
 * its maps (NULL before READY) and page. A hazard pointer with an
 * asymmetric fence: the guard is stored, then the subscription's maps and
 * page are loaded again, with only a compiler barrier between; a follow
 * publishes new ones (seq_cst), runs a membarrier (a full barrier on every
 * CPU running one of our threads, sub_attach.c reclaim_barrier) and then
 * scans the guards. Wherever the barrier falls in this thread, either it
 * falls after the guard store, which the scan then sees, and the old
 * memory stays; or before the re-load, which then sees the new memory, and
 * we guard that instead. Moves are rare, so the barrier's microseconds go
 * to the follow and the common path pays no fence for the guard (nor for
 * the pin after it, where the broker runs the pin barrier).
 */
static inline __attribute__((always_inline))
struct sub_maps *sub_guard(struct wsync_sub *s, uint32_t idx,
                           const struct wsync_model_page **page)
{
	struct hz_claim *h = &s->c->hz[idx];

	for (;;) {
		/* the guard names the maps (or, before READY, the page) by its
		 * address alone: m is read only once guarded, since a follow may
		 * free a maps nobody guards */
		struct sub_maps *m = atomic_load_explicit(&s->maps, memory_order_acquire);
		const void *g = m ? (const void *)m : (const void *)sub_page(s);

		/* release: the reads through what this record guarded before
		 * happen before a scan that sees it guard something else */
		atomic_store_explicit(&h->guard, g, memory_order_release);
		atomic_signal_fence(memory_order_seq_cst);
		if (atomic_load_explicit(&s->maps, memory_order_acquire) == m &&
		    (m || sub_page(s) == g)) {
			*page = sub_maps_page(s, m);
			return m;
		}
	}
}

struct sub_maps *wsync_sub_guard(struct wsync_sub *s, uint32_t idx,
                                 const struct wsync_model_page **page)
{
	return sub_guard(s, idx, page);
}

#define ACQUIRE_MAX_TRIES 4096   /* an honest latest moves once per commit */

static inline __attribute__((always_inline))
uint64_t sub_trusted_latest(const struct wsync_sub *s, const struct wsync_model_page *page,
                            const _Atomic uint64_t **src)
{
	uint64_t l = atomic_load_explicit(&page->latest, memory_order_acquire);
	/* grant before latest: the broker stores them in the other order, so a
	 * grant we see that is newer than l comes with a latest >= l */
	uint64_t g = atomic_load_explicit(&s->entry->grant, memory_order_acquire);
	uint64_t v = atomic_load_explicit(&s->entry->latest, memory_order_acquire);

	if (__builtin_expect(l == v || (g && l == g), 1)) {
		*src = &page->latest;
		return l;
	}
	*src = &s->entry->latest;
	return v;
}

uint64_t wsync_sub_trusted_latest(const struct wsync_sub *s,
                                  const struct wsync_model_page *page,
                                  const _Atomic uint64_t **src)
{
	return sub_trusted_latest(s, page, src);
}

static __attribute__((noinline)) int sub_session_ended(struct wsync_sub *s)
{
	struct wsync_client *c = s->c;

	wsync_conn_mark_dead(c, "the broker ended this client's session");
	return wsync_fail(-ECONNRESET, "model '%s': the broker ended this client's session "
	                  "(its log says why); connect again", s->model);
}

/* -ECONNRESET once the broker no longer counts this client's hazards. */
static inline __attribute__((always_inline)) int sub_check_session(struct wsync_sub *s)
{
	if (__builtin_expect(client_session_live(s->c), 1))
		return 0;
	return sub_session_ended(s);
}

/* Empties the notification eventfd before latest is read: a commit after
 * this point writes it again, so no notification of a newer version is
 * lost to the drain. */
static __attribute__((noinline)) void sub_drain_efd(int efd)
{
	uint64_t n;

	while (read(efd, &n, sizeof(n)) < 0 && errno == EINTR)
		;
}

static inline __attribute__((always_inline)) void sub_drain_fd(struct wsync_sub *s)
{
	int efd = atomic_load_explicit(&s->efd, memory_order_acquire);

	if (__builtin_expect(efd >= 0, 0))
		sub_drain_efd(efd);
}

/* Pins the slot the trusted latest names; returns 0 with *latest and
 * *maps, or an error with the record still claimed (the caller frees it).
 * Bounded: a latest that keeps moving (a publisher gone wrong) or goes
 * below what this subscription saw before gives -EAGAIN, never a loop. */
static __attribute__((noinline))
int sub_pin_latest_loop(struct wsync_sub *s, uint32_t idx, int64_t deadline,
                        uint64_t *latest, struct sub_maps **maps)
{
	struct wsync_hazard *hz = client_hazard(s->c, idx);
	uint64_t floor = 0, l = 0;

	for (unsigned tries = 0; tries < ACQUIRE_MAX_TRIES; tries++) {
		const _Atomic uint64_t *src;
		const struct wsync_model_page *page;
		/* guarded: a follow by another thread cannot unmap it under us */
		struct sub_maps *m = sub_guard(s, idx, &page);
		uint64_t inc = m ? m->incarnation
		                 : atomic_load_explicit(&s->incarnation, memory_order_acquire);
		uint32_t n_slots = m ? m->n_slots : WSYNC_MAX_SLOTS, slot;
		int err;

		/* The memory read below must be the model's current memory:
		 * checked by the maps' own incarnation, so a maps another thread
		 * replaced meanwhile is never read with the new memory's latest. */
		err = wsync_sub_check_model_in(s, inc);
		if (__builtin_expect(err == WSYNC_SUB_MOVED, 0)) {
			if (inc != atomic_load_explicit(&s->incarnation, memory_order_acquire))
				continue;        /* another thread followed it already */
			err = wsync_sub_attach(s, deadline);
			if (err && err != -EAGAIN)
				return err;
			continue;
		}
		if (err)
			return err;
		l = sub_trusted_latest(s, page, &src);
		slot = wsync_latest_slot(l);
		if (slot == WSYNC_SLOT_NONE)
			return wsync_fail(-ENODATA, "model '%s': nothing published yet", s->model);
		if (slot >= n_slots || wsync_latest_version(l) == 0)
			return wsync_fail(-EPROTO, "model '%s': latest names slot %u v%llu of %u "
			                  "slots", s->model, slot,
			                  (unsigned long long)wsync_latest_version(l), n_slots);
		floor = atomic_load_explicit(&s->last_version, memory_order_relaxed);
		if (wsync_latest_version(l) < floor)
			continue;                /* another thread took a newer one */
		hz_pin(s->c, hz, wsync_pin_pack(s->model_id, slot));
		if (atomic_load(src) != l)
			continue;
		/* The pair is this model's, in this memory, only if the entry
		 * still names the incarnation read with: a delete and a reuse of
		 * the id, or new memory, between the check above and the pin
		 * would otherwise label bytes with a version they are not. The
		 * broker stores an incarnation before any latest of it, and the
		 * load of src was seq_cst: seeing its latest means seeing its
		 * incarnation. */
		err = wsync_sub_check_model_in(s, inc);
		if (err == WSYNC_SUB_MOVED)
			continue;
		if (err)
			return err;
		err = sub_check_session(s);
		if (err)
			return err;
		if (m) {
			*latest = l;
			*maps = m;
			return 0;
		}
		/* The model became READY after sub_open. The pin is already set,
		 * so the slot stays ours while we map; then start over to check
		 * the slot against the real slot count. */
		err = wsync_sub_attach(s, deadline);
		if (err && err != -EAGAIN)
			return err;
	}
	/* -ESTALE here, -EAGAIN to the caller of wsync_sub_acquire; a wait
	 * goes on waiting */
	if (wsync_latest_version(l) < floor)
		return wsync_fail(-ESTALE, "model '%s': its latest went back from v%llu to v%llu "
		                  "(its publisher misbehaved; the broker restores it)", s->model,
		                  (unsigned long long)floor,
		                  (unsigned long long)wsync_latest_version(l));
	return wsync_fail(-ESTALE, "model '%s': latest moved %d times while it was pinned",
	                  s->model, ACQUIRE_MAX_TRIES);
}

/*
 * The common case of sub_pin_latest_loop's first round, straight through:
 * the model READY, in the memory the maps belong to, no move under way,
 * the page's latest trusted, not below what was taken before and unchanged
 * after the pin; the same steps and the same order as the loop, with the
 * subscription's words loaded once. false for anything else, and the loop
 * starts over (its first guard and pin replace these).
 */
static inline __attribute__((always_inline))
bool sub_pin_fast(struct wsync_sub *s, struct wsync_client *c, uint32_t idx,
                  uint64_t *latest, struct sub_maps **maps)
{
	const struct wsync_ctl_model *e = s->entry;
	struct sub_maps *m = atomic_load_explicit(&s->maps, memory_order_acquire);
	const _Atomic uint64_t *lw;
	uint64_t l, g, v, inc;
	uint32_t slot;

	if (__builtin_expect(!m, 0))
		return false;
	/* sub_guard's store, fence and re-load */
	atomic_store_explicit(&c->hz[idx].guard, m, memory_order_release);
	atomic_signal_fence(memory_order_seq_cst);
	if (__builtin_expect(atomic_load_explicit(&s->maps, memory_order_acquire) != m, 0))
		return false;
	inc = m->incarnation;
	if (__builtin_expect(atomic_load_explicit(&e->incarnation, memory_order_acquire) != inc,
	                     0))
		return false;
	lw = &m->page->latest;
	l = atomic_load_explicit(lw, memory_order_acquire);
	g = atomic_load_explicit(&e->grant, memory_order_acquire);
	v = atomic_load_explicit(&e->latest, memory_order_acquire);
	slot = wsync_latest_slot(l);
	/* slot < n_slots also rules out WSYNC_SLOT_NONE */
	if (__builtin_expect((l != v && (!g || l != g)) || slot >= m->n_slots ||
	                     wsync_latest_version(l) == 0 ||
	                     wsync_latest_version(l) <
	                     atomic_load_explicit(&s->last_version, memory_order_relaxed), 0))
		return false;
	hz_pin(c, client_hazard(c, idx), wsync_pin_pack(s->model_id, slot));
	if (__builtin_expect(atomic_load(lw) != l ||
	                     atomic_load_explicit(&e->incarnation, memory_order_acquire) != inc ||
	                     !client_session_live(c), 0))
		return false;
	*latest = l;
	*maps = m;
	return true;
}

static inline __attribute__((always_inline))
int sub_pin_latest(struct wsync_sub *s, struct wsync_client *c, uint32_t idx,
                   int64_t deadline, uint64_t *latest, struct sub_maps **maps)
{
	if (__builtin_expect(sub_pin_fast(s, c, idx, latest, maps), 1))
		return 0;
	return sub_pin_latest_loop(s, idx, deadline, latest, maps);
}

/* acquire with record idx claimed; the caller checked the broker is there */
static inline __attribute__((always_inline))
int sub_acquire_in(struct wsync_sub *s, uint32_t idx, int64_t deadline, bool device,
                   wsync_view *out)
{
	const struct wsync_slot_meta *meta;
	struct wsync_client *c = s->c;
	struct wsync_hazard *hz = client_hazard(c, idx);
	struct sub_maps *m = NULL;
	uint64_t l = 0, version;
	int64_t since;
	uint32_t slot;
	int err;

	sub_drain_fd(s);
	err = sub_pin_latest(s, c, idx, deadline, &l, &m);
	if (__builtin_expect(!err && m->device_only && !device, 0))
		err = wsync_fail(-ENODEV, "model '%s' lives on GPUs only (no host mirror): take "
		                 "device views with wsync_sub_acquire_gpu", s->model);
	if (__builtin_expect(err != 0, 0)) {
		hz_unpin(c, idx);
		return err;
	}
	/* the view's own maps, guarded (by its page) while it is held */
	atomic_store_explicit(&c->hz[idx].maps, m, memory_order_relaxed);
	slot = wsync_latest_slot(l);
	version = wsync_latest_version(l);
	meta = &m->page->slots[slot];
	out->version = version;
	out->step = atomic_load_explicit(&meta->step, memory_order_relaxed);
	out->published_ns = atomic_load_explicit(&meta->published_ns, memory_order_relaxed);
	out->base = m->slabs[slot];
	out->bytes = m->bytes;
	out->n_tensors = m->n_tensors;
	out->tensors = m->tensors;
	out->priv_sub = s;
	out->priv_slot = slot;
	out->priv_hazard = idx;

	/* Informational bookkeeping, on the record's own line (monitors show
	 * long holders). The time is the broker's last tick, a load: a clock
	 * read would cost more than the rest of the acquire, and the tools
	 * say how long a view was held to within a tick, never less than
	 * the truth. The shared last_version is written only when it grows,
	 * so threads taking the same version share its line read-only. */
	since = atomic_load_explicit(&c->ctl->tick_ns, memory_order_relaxed);
	if (__builtin_expect(since == 0, 0))
		since = wsync_clock_ns(CLOCK_MONOTONIC_COARSE);   /* an older broker */
	atomic_store_explicit(&hz->version, version, memory_order_relaxed);
	atomic_store_explicit(&hz->since_ns, since, memory_order_relaxed);
	atomic_store_explicit(&hz->acquires,
	                      atomic_load_explicit(&hz->acquires, memory_order_relaxed) + 1,
	                      memory_order_relaxed);
	if (version > atomic_load_explicit(&s->last_version, memory_order_relaxed))
		atomic_store_explicit(&s->last_version, version, memory_order_relaxed);
	/* for a publisher waiting on its readers (broker/readers.c), unless
	 * this subscription says itself when a version counts (wsync_sub_ack) */
	if (!atomic_load_explicit(&s->explicit_ack, memory_order_relaxed) &&
	    version > atomic_load_explicit(&c->session->acquired[s->model_id],
	                                   memory_order_relaxed))
		atomic_store_explicit(&c->session->acquired[s->model_id], version,
		                      memory_order_relaxed);
	return 0;
}

int wsync_sub_acquire_by(wsync_sub *s, int64_t deadline, bool device, wsync_view *out)
{
	uint32_t idx;
	int err;

	if (__builtin_expect(client_broker_gone(s->c), 0))
		return client_fail_gone(s->c, s->model);
	if (__builtin_expect(hz_take(s->c, s, &idx) != 0, 0))
		return hz_fail_full(s);
	err = sub_acquire_in(s, idx, deadline, device, out);
	if (__builtin_expect(err != 0, 0))
		hz_put(s->c, idx);
	return err;
}

int wsync_sub_acquire_in(struct wsync_sub *s, uint32_t idx, int64_t deadline, bool device,
                         wsync_view *out)
{
	if (client_broker_gone(s->c))
		return client_fail_gone(s->c, s->model);
	return sub_acquire_in(s, idx, deadline, device, out);
}

int wsync_sub_set_ack(wsync_sub *s, int explicit_ack)
{
	if (!s)
		return wsync_fail(-EINVAL, "wsync_sub_set_ack: subscription is NULL");
	atomic_store_explicit(&s->explicit_ack, explicit_ack != 0, memory_order_relaxed);
	return 0;
}

/* Tells the broker this session acknowledged (ACKED), one-way: nothing
 * comes back, so the collector is not woken once more per version for an
 * answer it has no use for. Best effort: the ack is in the session page
 * already, and the broker finds it there at its next look if this does not
 * reach it (the client busy in another call, a broker restarting, a full
 * socket). */
static void sub_acked(wsync_sub *s)
{
	union wsync_msg_any m;

	wsync_msg_init(&m.hdr, WSYNC_MSG_ACKED, 0);
	m.acked.model_id = s->model_id;
	m.acked.flags = WSYNC_ACKED_ONEWAY;
	/* never behind another call of this client: that may be this very
	 * session's own wait for its readers, which the ack would then wait
	 * out (the broker's look finds the ack meanwhile) */
	if (pthread_mutex_trylock(&s->c->lock))
		return;
	(void)wsync_conn_post(s->c, &m);
	client_unlock(s->c);
	wsync_errmsg_clear();
}

int wsync_sub_ack(wsync_sub *s, uint64_t version)
{
	_Atomic uint64_t *word;
	uint64_t had;
	int err;

	if (!s)
		return wsync_fail(-EINVAL, "wsync_sub_ack: subscription is NULL");
	had = atomic_load_explicit(&s->last_version, memory_order_relaxed);
	if (version == 0 || version > had)
		return wsync_fail(-EINVAL, "model '%s': v%llu was not acquired through this "
		                  "subscription (the newest it acquired is v%llu)", s->model,
		                  (unsigned long long)version, (unsigned long long)had);
	/* the word is the model id's: after a delete it may count for another
	 * model under that id */
	err = wsync_sub_check_model(s);
	if (err)
		return err;
	/* a maximum, also against acquires of other subscriptions of this
	 * session and acks from other threads */
	word = &s->c->session->acquired[s->model_id];
	had = atomic_load_explicit(word, memory_order_relaxed);
	while (version > had &&
	       !atomic_compare_exchange_weak_explicit(word, &had, version, memory_order_relaxed,
	                                              memory_order_relaxed))
		;
	/* A publisher waiting for its readers hears of it now, not at the
	 * broker's next look (broker/readers.h): the word stored, then the
	 * hint read, seq_cst against the broker's store of the hint and read
	 * of the words. */
	atomic_thread_fence(memory_order_seq_cst);
	if (version > had && atomic_load_explicit(&s->entry->reader_waits, memory_order_relaxed))
		sub_acked(s);
	return 0;
}

int wsync_sub_latest(wsync_sub *s, uint64_t *version, uint64_t *step, int64_t *published_ns)
{
	const struct wsync_slot_meta *meta;
	const _Atomic uint64_t *src;
	uint64_t l, st;
	uint32_t idx;
	int64_t ns;
	int err;

	if (!s)
		return wsync_fail(-EINVAL, "wsync_sub_latest: subscription is NULL");
	if (client_broker_gone(s->c))
		return client_fail_gone(s->c, s->model);
	/* a record guards the page read (a follow by another thread may retire
	 * it); pinned nothing, so the broker sees no view */
	err = wsync_sub_hz_take(s, &idx);
	if (err)
		return err;
	/* a seqlock on latest: the slot latest names is not rewritten before
	 * latest moves away from it */
	for (unsigned tries = 0;; tries++) {
		const struct wsync_model_page *page;
		struct sub_maps *m = wsync_sub_guard(s, idx, &page);
		uint64_t inc = m ? m->incarnation : atomic_load(&s->incarnation);

		err = wsync_sub_check_model_in(s, inc);
		if (err == WSYNC_SUB_MOVED) {
			/* new memory: follow it (unless another thread did) */
			err = inc != atomic_load(&s->incarnation) ? 0 : wsync_sub_attach(s, -1);
			if (err == 0 || err == -EAGAIN)
				err = tries >= ACQUIRE_MAX_TRIES ?
				      wsync_fail(-EAGAIN, "model '%s': keeps moving", s->model) :
				      WSYNC_SUB_MOVED;
		}
		if (err == WSYNC_SUB_MOVED)
			continue;
		if (err)
			goto out_put;
		l = wsync_sub_trusted_latest(s, page, &src);
		if (wsync_latest_slot(l) == WSYNC_SLOT_NONE) {
			err = wsync_fail(-ENODATA, "model '%s': nothing published yet", s->model);
			goto out_put;
		}
		if (wsync_latest_slot(l) >= WSYNC_MAX_SLOTS) {
			err = wsync_fail(-EPROTO, "model '%s': latest names slot %u", s->model,
			                 wsync_latest_slot(l));
			goto out_put;
		}
		meta = &page->slots[wsync_latest_slot(l)];
		st = atomic_load_explicit(&meta->step, memory_order_relaxed);
		ns = atomic_load_explicit(&meta->published_ns, memory_order_relaxed);
		/* seq_cst, like the pin's re-load: seeing the latest means seeing
		 * the incarnation the broker stored before it */
		if (atomic_load(src) == l) {
			/* the words are this model's, in this memory, only if the
			 * entry still names the incarnation read with: a delete and a
			 * reuse of the id meanwhile would label them with a version of
			 * another model */
			err = wsync_sub_check_model_in(s, inc);
			if (err == 0)
				break;
			if (err < 0)
				goto out_put;
		}
		if (tries >= ACQUIRE_MAX_TRIES) {
			err = wsync_fail(-EAGAIN, "model '%s': latest keeps moving", s->model);
			goto out_put;
		}
	}
	hz_put(s->c, idx);
	if (version)
		*version = wsync_latest_version(l);
	if (step)
		*step = st;
	if (published_ns)
		*published_ns = ns;
	return 0;

out_put:
	hz_put(s->c, idx);
	return err;
}

void wsync_sub_release(wsync_sub *s, wsync_view *v)
{
	uint32_t idx;

	if (!s || !v) {
		wsync_fail(-EINVAL, "wsync_sub_release: subscription or view is NULL");
		return;
	}
	if (!v->priv_sub)
		return;                          /* already released */
	idx = v->priv_hazard;
	if (v->priv_sub != s || idx >= WSYNC_MAX_VIEWS ||
	    atomic_load_explicit(&s->c->hz[idx].owner, memory_order_relaxed) != s) {
		wsync_fail(-EINVAL, "model '%s': view released through another subscription, "
		           "or not a live view", s->model);
		return;
	}
	hz_put(s->c, idx);
	memset(v, 0, sizeof(*v));
}

int wsync_view_check(const wsync_view *v)
{
	struct wsync_client *c;

	if (!v || !v->priv_sub)
		return wsync_fail(-EINVAL, "wsync_view_check: not a held view");
	c = v->priv_sub->c;
	/* the reads of the view's bytes come before the check of the entry */
	atomic_thread_fence(memory_order_acquire);
	if (client_session_live(c) || client_broker_gone(c))
		return 0;
	return wsync_fail(-ECONNRESET, "model '%s': the broker ended this client's session; "
	                  "v%llu may have been rewritten since it was taken",
	                  v->priv_sub->model, (unsigned long long)v->version);
}

static void sub_free(struct wsync_sub *s)
{
	int efd = atomic_load(&s->efd);

	if (s->gpu_release)
		s->gpu_release(s);
	wsync_sub_maps_free(atomic_load(&s->maps));
	if (sub_page(s))
		munmap((void *)sub_page(s), sizeof(struct wsync_model_page));
	wsync_sub_retired_free(s);
	if (efd >= 0)
		close(efd);
	free(s);
}

/* CLOSE without waiting for its answer: a close must not wait for a
 * broker that may be stopped, and the broker also drops everything of ours
 * when the socket closes. */
static void sub_close_remote(struct wsync_sub *s)
{
	union wsync_msg_any m;

	wsync_msg_init(&m.hdr, WSYNC_MSG_CLOSE, 0);
	m.close.m.model_id = s->model_id;
	m.close.what = WSYNC_CLOSE_SUB;
	(void)wsync_conn_post(s->c, &m);
}

/* Maps what SUB_OPEN_OK brought: the page, and if READY the layout and slabs. */
static int sub_map_open(struct wsync_sub *s, struct conn_reply *rep)
{
	const struct wsync_msg_sub_open_ok *ok = &rep->msg.sub_open_ok;
	bool ready = ok->state == WSYNC_MODEL_READY;
	int want = ready ? 2 + (int)ok->n_slots : 1, err;
	void *page;

	if (rep->n_fds < want) {
		err = wsync_fail(-EPROTO, "model '%s': SUB_OPEN_OK (%s) with %d fds, expected %d",
		                 s->model, ready ? "ready" : "declared", rep->n_fds, want);
		goto out_close;
	}
	wsync_reply_close_fds(rep, want);
	s->model_id = ok->model_id;
	s->entry = client_ctl_model(s->c, s->model_id);
	atomic_store_explicit(&s->incarnation, ok->incarnation, memory_order_relaxed);
	s->base_incarnation = ok->base_incarnation;
	err = wsync_map_fd(rep->fds[0], sizeof(struct wsync_model_page), 0, 0, "model page",
	                   &page);
	if (err)
		goto out_close;
	atomic_store_explicit(&s->page, (const struct wsync_model_page *)page,
	                      memory_order_relaxed);
	err = wsync_page_check(page, s->model_id, s->model);
	if (err)
		goto out_close;
	close(rep->fds[0]);
	rep->fds[0] = -1;
	if (!ready)
		return 0;
	return wsync_sub_attach_fds(s, ok->n_slots, ok->n_tensors, ok->bytes,
	                            ok->layout_bytes, rep->fds + 1, want - 1);

out_close:
	wsync_reply_close_fds(rep, 0);
	return err;
}

/* wsync_close of the client closes what is still open through this. */
static void sub_handle_close(struct client_handle *h)
{
	wsync_sub_close((struct wsync_sub *)((char *)h - offsetof(struct wsync_sub, handle)));
}

static pthread_once_t sub_barrier_once = PTHREAD_ONCE_INIT;

int wsync_sub_open(wsync_client *c, const char *model, wsync_sub **out)
{
	union wsync_msg_any m;
	struct conn_reply rep;
	struct wsync_sub *s;
	int err;

	if (!c || !model || !out)
		return wsync_fail(-EINVAL, "wsync_sub_open: client, model and out must not be NULL");
	if (!wsync_name_valid(model, WSYNC_NAME_MAX))
		return wsync_fail(-EINVAL, "model name '%.128s' is invalid (1..%d of "
		                  "[A-Za-z0-9._:/-], not starting with '.' or '/')",
		                  model, WSYNC_NAME_MAX - 1);
	(void)pthread_once(&sub_barrier_once, wsync_sub_register_barrier);
	s = calloc(1, sizeof(*s));
	if (!s)
		return wsync_fail(-ENOMEM, "model '%s': out of memory", model);
	s->c = c;
	atomic_init(&s->efd, -1);
	snprintf(s->model, sizeof(s->model), "%s", model);

	wsync_msg_init(&m.hdr, WSYNC_MSG_SUB_OPEN, 0);
	memcpy(m.sub_open.model, s->model, sizeof(m.sub_open.model));
	client_lock(c);
	err = wsync_conn_call(c, &m, NULL, 0, WSYNC_MSG_SUB_OPEN_OK, &rep);
	if (err)
		goto out_unlock;
	err = sub_map_open(s, &rep);
	if (err)
		goto out_close_remote;
	wsync_client_handle_add(c, &s->handle, sub_handle_close);
	client_unlock(c);
	*out = s;
	return 0;

out_close_remote:
	sub_close_remote(s);
out_unlock:
	client_unlock(c);
	sub_free(s);
	return err;
}

void wsync_sub_close(wsync_sub *s)
{
	struct wsync_client *c;

	if (!s)
		return;
	c = s->c;
	client_lock(c);
	/* not deleted (in whatever memory it is now): the broker counts it */
	if (s->base_incarnation &&
	    atomic_load(&s->entry->base_incarnation) == s->base_incarnation)
		sub_close_remote(s);
	wsync_client_handle_remove(c, &s->handle);
	client_unlock(c);
	/* Views still held are a caller bug; unpin them so the broker can
	 * reuse their slots, since their memory goes away with the mappings. */
	for (uint32_t i = 0; i < WSYNC_MAX_VIEWS; i++)
		if (atomic_load_explicit(&c->hz[i].owner, memory_order_relaxed) == s)
			hz_put(c, i);
	sub_free(s);
}
