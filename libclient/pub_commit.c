/*
 * libclient/pub_commit.c — publishing the begun slab: commit (waiting for
 * the broker's acknowledgement or not), abort, and collecting an
 * acknowledgement later; it brings the next grant (pub_grant.c takes it).
 *
 * Order of a commit, and why (only what collectors read comes before the
 * wake; the books after it):
 *   1. slot metadata (version, step, time; the checksum when library copies
 *      hashed every block, else the pending mark), relaxed: published by
 *      step 2.
 *   2. latest, seq_cst store: it is also a release, so a collector whose
 *      acquire load sees the new latest sees the slab bytes and the metadata.
 *      Being seq_cst it takes part in the single order that the hazard
 *      argument uses (see sub.c and broker/slots.h).
 *   3. seq += 1, then FUTEX_WAKE all: a waiter reads seq before it checks
 *      latest (sub_wait.c), so it either sees the new latest or sleeps on a
 *      seq value that no longer matches and returns at once; the wake cannot
 *      be lost. Collectors run from here: one hop. If the wake woke anyone,
 *      the publisher yields its CPU once: a collector the kernel queued on
 *      this CPU is not always let preempt the waker, and would otherwise
 *      wait behind step 4 (a send, and the broker it wakes on the other
 *      CPU) or the trainer's next step; with nobody queued here the yield
 *      returns at once (docs/BENCHMARKS.md, "At the machine's limits", has
 *      the figures). Then a pending checksum is formed: hashed here (a
 *      few KiB) or handed to the hashing thread.
 *   4. COMMIT to the broker, which checks that latest is exactly our grant,
 *      books it and usually returns the next grant already (prefetch), so the
 *      next begin makes no round trip.
 *
 * A crash at any point leaves a state the broker repairs from what it sees
 * when our socket closes: before step 2 the grant is simply freed; from step
 * 2 on, latest equals the grant and the commit is booked. The metadata is
 * complete before latest names the slot, so either state is consistent;
 * but for a checksum still pending (checksum.c), which then stays pending
 * with our session id, and collectors that verify learn that we died.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "checksum.h"
#include "conn.h"
#include "pub_commit.h"
#include "shm/clock.h"
#include "shm/errmsg.h"
#include "shm/futex.h"

/* Unhashed bytes a commit hashes itself rather than hand to its hashing
 * thread: about what the hand-off costs (a wake and a cache line or two). */
#define SUM_INLINE_MAX (64u << 10)

/* How the begun slab's checksum is formed (checksum.c). */
enum pub_sum_how {
	SUM_NONE,        /* no checksum: 0 stored with the metadata */
	SUM_BEFORE,      /* every block hashed by a library copy: combined before step 2 */
	SUM_AFTER,       /* pending at step 2, hashed here right after the wake */
	SUM_THREAD,      /* pending at step 2, handed to the hashing thread after the wake */
};

/* Any block left to hash is hashed after the wake, so no collector waits
 * for a hash it may never check: a pass over a few KiB costs about what
 * the wake itself does. Up to SUM_INLINE_MAX unhashed bytes the commit
 * hashes them itself, more go to the hashing thread. p->sums is never the
 * thread's (a hand-off swaps in the spare), so this needs no wait for the
 * previous version's hash: that comes after the wake, before a hand-off
 * (its block list is the spare the new job takes over). */
static enum pub_sum_how pub_sum_how(struct wsync_pub *p)
{
	uint64_t unhashed;

	if (!p->checksum || !p->sums)
		return SUM_NONE;
	unhashed = sum_blocks_unhashed(p->sums, p->cur.version, p->bytes);
	if (!unhashed || !p->c->session_id)
		return SUM_BEFORE;
	return unhashed > SUM_INLINE_MAX && p->sums_spare ? SUM_THREAD : SUM_AFTER;
}

/* Hands the checksum of version in slot to the hashing thread (the slot
 * was marked pending), with the block list; the spare list is the next
 * version's. With no thread to run it, hashed here. */
/* The job forming version's checksum in slot from the publisher's current
 * block list. */
static struct sum_job pub_sum_job(const struct wsync_pub *p, uint32_t slot, uint64_t version)
{
	return (struct sum_job){
		.s = p->sums,
		.tag = version,
		.bytes = p->bytes,
		.base = p->slabs[slot],
		.checksum = &p->page->slots[slot].checksum,
		.pending = &p->page->sum_pending[slot],
		.slot = slot,
	};
}

static void pub_sum_hand_off(struct wsync_pub *p, uint32_t slot, uint64_t version)
{
	struct sum_job job = pub_sum_job(p, slot, version);

	if (sum_hasher_submit(&p->hasher, &job)) {
		sum_job_run(&job);
		return;
	}
	p->sums = p->sums_spare;
	p->sums_spare = job.s;
}

/* Steps 1-3 of the commit order (see the top of this file), and the
 * checksum: stored with the metadata when every block was hashed by a
 * library copy, else formed after step 3 (checksum.c says why the pending
 * word makes that safe for collectors). Only what collectors read goes
 * before the wake; the books after it. */
static void pub_publish(struct wsync_pub *p, uint64_t step)
{
	struct wsync_model_page *pg = p->page;
	uint32_t slot = p->cur.slot;
	struct wsync_slot_meta *meta = &pg->slots[slot];
	uint64_t version = p->cur.version, sum = 0;
	enum pub_sum_how how = pub_sum_how(p);
	bool pending = how == SUM_AFTER || how == SUM_THREAD;

	if (how == SUM_BEFORE)
		sum = sum_blocks_finish(p->sums, version, p->slabs[slot], p->bytes, 0);
	atomic_store_explicit(&meta->version, version, memory_order_relaxed);
	atomic_store_explicit(&meta->step, step, memory_order_relaxed);
	atomic_store_explicit(&meta->published_ns, wsync_real_ns(), memory_order_relaxed);
	atomic_store_explicit(&meta->checksum, sum, memory_order_relaxed);
	atomic_store_explicit(&pg->sum_pending[slot], pending ? p->c->session_id : 0,
	                      memory_order_relaxed);
	atomic_store(&pg->latest, wsync_latest_pack(version, slot));
	atomic_fetch_add(&pg->seq, 1);
	if (wsync_futex_wake(&pg->seq, INT32_MAX) > 0)
		sched_yield();
	if (how == SUM_THREAD) {
		wsync_pub_sum_settle(p, WSYNC_SLOT_NONE);
		pub_sum_hand_off(p, slot, version);
	} else if (how == SUM_AFTER) {
		struct sum_job job = pub_sum_job(p, slot, version);

		sum_job_run(&job);
	}
	wsync_pub_guard(p, slot);
	p->begun = false;
	p->last_committed = version;
}

static int pub_check_begun(struct wsync_pub *p, const char *what)
{
	if (!p)
		return wsync_fail(-EINVAL, "%s: publisher is NULL", what);
	if (!p->begun)
		return wsync_fail(-EINVAL, "model '%s': %s without a begun slab", p->model, what);
	return 0;
}

/* Whether the broker died. It holds a robust mutex in the control segment
 * for its life, whose word the kernel marks when it dies, before its sockets
 * close (shm/layout.h, broker_alive): one load where a poll() of the socket
 * costs a system call (1.1-1.4 us of CPU on the VMs we measure, most of
 * what a commit adds to a futex wake) on the path to the collectors' wake.
 * A broker that holds none (0) is asked the old way. */
static bool pub_broker_died(struct wsync_client *c)
{
	const void *alive = c->ctl->broker_alive;
	uint32_t w = atomic_load_explicit((const _Atomic uint32_t *)alive, memory_order_acquire);

	if (!w)
		return wsync_conn_hung_up(c);
	if (!(w & WSYNC_BROKER_DIED))
		return false;
	wsync_conn_mark_dead(c, "broker died");
	return true;
}

/* Commit refused before anything is published: the broker shut down, died
 * or ended this session, and collectors of a generation whose broker died
 * must see a world that no longer moves. A prefetched grant lets a trainer
 * get here without touching its socket since the broker died, so its
 * liveness is looked at first (a load). The slab is dropped (the broker, if
 * alive, frees the grant when it notices the session is gone). */
static int pub_check_alive(struct wsync_pub *p)
{
	int err = wsync_pub_gone(p);

	if (!err && !client_session_live(p->c)) {
		wsync_conn_mark_dead(p->c, "the broker ended this client's session");
		err = wsync_fail(-ECONNRESET, "model '%s': the broker ended this client's "
		                 "session (its log says why); connect again", p->model);
	}
	if (!err && pub_broker_died(p->c))
		err = wsync_conn_fail_dead(p->c);

	if (!err)
		return 0;
	wsync_pub_guard(p, p->cur.slot);
	p->begun = false;
	return err;
}

int wsync_pub_gone(struct wsync_pub *p)
{
	if (client_broker_gone(p->c))
		return client_fail_gone(p->c, p->model);
	/* A handle the broker cut off must not write the page any more: the
	 * model may have another publisher now. (Ranks of a group never write
	 * the page; the ctl entry names one of them.) */
	if (p->group_size <= 1 &&
	    atomic_load_explicit(&p->entry->publisher, memory_order_acquire) != p->c->session_id &&
	    client_session_live(p->c))
		return wsync_fail(-EPROTO, "model '%s': the broker cut this publisher off (its "
		                  "log says why); open the model again", p->model);
	if (client_is_dead(p->c))
		return wsync_conn_fail_dead(p->c);
	return 0;
}

/* Step 4: tells the broker; returns the request's seq in *seq. */
static int pub_send_commit(struct wsync_pub *p, uint64_t version, uint32_t slot,
                           uint64_t step, uint32_t *seq)
{
	union wsync_msg_any m;

	if (client_is_dead(p->c))
		return wsync_conn_fail_dead(p->c);
	*seq = wsync_conn_next_seq(p->c);
	wsync_msg_init(&m.hdr, WSYNC_MSG_COMMIT, *seq);
	m.commit.m.model_id = p->model_id;
	m.commit.slot = slot;
	m.commit.version = version;
	m.commit.step = step;
	return wsync_conn_send(p->c, &m, NULL, 0);
}

/*
 * Steps 3 and 4 for both commit flavours: makes the begun slab the latest
 * and sends COMMIT. On success returns with the client locked, the version
 * in *version and the request's seq in *seq; on failure, unlocked.
 */
static int pub_commit_locked(wsync_pub *p, uint64_t step, const char *what,
                             uint64_t *version, uint32_t *seq)
{
	uint32_t slot;
	int err;

	err = pub_check_begun(p, what);
	if (!err)
		err = pub_check_alive(p);
	if (err)
		return err;
	*version = p->cur.version;
	slot = p->cur.slot;
	if (p->group_size > 1) {
		/* the broker makes it visible when every rank committed, which
		 * frees the slot of the version before: a hash of it this rank
		 * was asked for ends first */
		wsync_pub_sum_settle(p, WSYNC_SLOT_NONE);
		wsync_pub_guard(p, slot);
		p->begun = false;
		p->group_slot = slot;
	} else {
		pub_publish(p, step);
	}

	client_lock(p->c);
	err = pub_send_commit(p, *version, slot, step, seq);
	if (err)
		client_unlock(p->c);
	return err;
}

/* A rank of a group asked to form version's checksum (WSYNC_COMMIT_HASH):
 * the version is visible, the slot's checksum pending on this session. A
 * rank without checksums (a device model's) only says there is none. */
static void pub_sum_group(struct wsync_pub *p, uint64_t version)
{
	uint32_t slot = p->group_slot;

	if (slot >= p->n_slots || !p->slabs[slot])
		return;
	wsync_pub_sum_settle(p, WSYNC_SLOT_NONE);   /* idle already: the commit waited */
	if (!p->checksum || !p->sums || !p->sums_spare) {
		sum_settle(&p->page->slots[slot].checksum, &p->page->sum_pending[slot], 0);
		return;
	}
	pub_sum_hand_off(p, slot, version);
}

/* Checks a COMMIT_OK for version and keeps its prefetched grant; consumes
 * rep's fds. Caller holds the lock. */
static int pub_apply_commit_ok(struct wsync_pub *p, uint64_t version, struct conn_reply *rep)
{
	const struct wsync_msg_commit_ok *ok = &rep->msg.commit_ok;
	bool granted = ok->flags & WSYNC_NEXT_GRANTED, has_fd = ok->flags & WSYNC_NEXT_HAS_FD;
	int err = 0;

	if (ok->model_id != p->model_id || ok->version != version) {
		err = wsync_fail(-EPROTO, "model '%s': COMMIT_OK for model %u v%llu, expected "
		                 "model %u v%llu", p->model, ok->model_id,
		                 (unsigned long long)ok->version, p->model_id,
		                 (unsigned long long)version);
	} else if (has_fd && !granted) {
		err = wsync_fail(-EPROTO, "model '%s': COMMIT_OK has a slab fd but no grant",
		                 p->model);
	} else if (granted && (ok->next_slot >= p->n_slots || ok->next_version <= version ||
	                       (has_fd && rep->n_fds < 1))) {
		err = wsync_fail(-EPROTO, "model '%s': COMMIT_OK grants slot %u v%llu with %d fds "
		                 "(%u slots, committed v%llu)", p->model, ok->next_slot,
		                 (unsigned long long)ok->next_version, rep->n_fds,
		                 p->n_slots, (unsigned long long)version);
	} else if (granted) {
		pub_grant_drop(&p->next);
		p->next.valid = true;
		p->next.slot = ok->next_slot;
		p->next.version = ok->next_version;
		p->next.fd = -1;
		if (has_fd) {
			p->next.fd = rep->fds[0];
			rep->fds[0] = -1;
		}
	}
	if (!err && (ok->flags & WSYNC_COMMIT_HASH) && p->group_size > 1)
		pub_sum_group(p, version);
	wsync_reply_close_fds(rep, 0);
	return err;
}

int wsync_pub_ack_collect(struct wsync_pub *p, int64_t deadline_ns, uint64_t *version)
{
	uint64_t v = p->ack_version;
	struct conn_reply rep;
	int err;

	if (!p->ack.seq)
		return wsync_fail(-ENOENT, "model '%s': no async commit outstanding", p->model);
	/* -ETIMEDOUT on deadline_ns leaves it outstanding */
	err = wsync_conn_await_collect(p->c, &p->ack, deadline_ns, &rep);
	if (err)
		return err;
	err = pub_apply_commit_ok(p, v, &rep);
	if (!err && version)
		*version = v;
	return err;
}

/* Device slabs are committed by wsync_pub_commit_gpu, which copies them to
 * the model's other GPUs and synchronises first. */
static int pub_check_host(struct wsync_pub *p, const char *what)
{
	if (p && p->device_model)
		return wsync_fail(-EINVAL, "model '%s' lives on GPUs: %s is not for it (commit "
		                  "with wsync_pub_commit_gpu)", p->model, what);
	return 0;
}

int wsync_pub_commit(wsync_pub *p, uint64_t step, uint64_t *version_out)
{
	int err = pub_check_host(p, "wsync_pub_commit");

	return err ? err : wsync_pub_commit_slab(p, step, version_out);
}

int wsync_pub_commit_slab(struct wsync_pub *p, uint64_t step, uint64_t *version_out)
{
	struct conn_reply rep;
	uint64_t version = 0;
	uint32_t seq = 0;
	int err;

	err = pub_commit_locked(p, step, "wsync_pub_commit", &version, &seq);
	if (err)
		return err;
	err = wsync_conn_recv(p->c, seq, WSYNC_MSG_COMMIT_OK, -1, &rep);
	if (!err) {
		err = pub_apply_commit_ok(p, version, &rep);
	} else if (err == -ETIMEDOUT && !client_is_dead(p->c)) {
		/* collectors have the version; the confirmation is collected by
		 * the next begin, like an async commit's */
		wsync_conn_await(p->c, &p->ack, seq, WSYNC_MSG_COMMIT, WSYNC_MSG_COMMIT_OK);
		p->ack_version = version;
	}
	client_unlock(p->c);
	if (err)
		return err;
	if (version_out)
		*version_out = version;
	return 0;
}

int wsync_pub_commit_async(wsync_pub *p, uint64_t step, uint64_t *version_out)
{
	uint64_t version = 0;
	uint32_t seq = 0;
	int err;

	err = pub_check_host(p, "wsync_pub_commit_async");
	if (!err)
		err = pub_commit_locked(p, step, "wsync_pub_commit_async", &version, &seq);
	if (err)
		return err;
	wsync_conn_await(p->c, &p->ack, seq, WSYNC_MSG_COMMIT, WSYNC_MSG_COMMIT_OK);
	p->ack_version = version;
	client_unlock(p->c);
	if (version_out)
		*version_out = version;
	return 0;
}

int wsync_pub_wait_commit(wsync_pub *p, int64_t timeout_ns, uint64_t *version_out)
{
	int err;

	if (!p)
		return wsync_fail(-EINVAL, "wsync_pub_wait_commit: publisher is NULL");
	if (timeout_ns < 0 && timeout_ns != WSYNC_FOREVER)
		return wsync_fail(-EINVAL, "model '%s': timeout %lld ns is negative",
		                  p->model, (long long)timeout_ns);
	client_lock(p->c);
	err = wsync_pub_ack_collect(p, wsync_deadline(timeout_ns), version_out);
	client_unlock(p->c);
	return err;
}

int wsync_pub_abort(wsync_pub *p)
{
	union wsync_msg_any m;
	struct conn_reply rep;
	int err;

	err = pub_check_begun(p, "wsync_pub_abort");
	if (err)
		return err;
	wsync_pub_guard(p, p->cur.slot);
	/* Whatever the broker answers, the slab is no longer ours to write: a
	 * grant it still holds for us comes back from the next BEGIN. */
	p->begun = false;
	p->gpu_begun = false;

	wsync_msg_init(&m.hdr, WSYNC_MSG_ABORT, 0);
	m.abort.m.model_id = p->model_id;
	m.abort.slot = p->cur.slot;
	m.abort.version = p->cur.version;
	client_lock(p->c);
	err = wsync_conn_call(p->c, &m, NULL, 0, WSYNC_MSG_ABORT_OK, &rep);
	if (!err) {
		wsync_reply_close_fds(&rep, 0);
		if (rep.msg.abort_ok.model_id != p->model_id)
			err = wsync_fail(-EPROTO, "model '%s': ABORT_OK names model %u, not %u",
			                 p->model, rep.msg.abort_ok.model_id, p->model_id);
	}
	client_unlock(p->c);
	return err;
}
