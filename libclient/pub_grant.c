/*
 * libclient/pub_grant.c — begin: a grant, prefetched by the last commit
 * (pub_commit.c) or asked for with BEGIN, and its slab made writable.
 *
 * A grant {slot, version} comes either from GRANT (a BEGIN round trip) or,
 * usually, from the previous COMMIT_OK (prefetch), so begin is local. The
 * broker attaches the slab's fd the first time it grants a slot to us (or
 * when the object behind the slot changed); otherwise the cached mapping is
 * reused and only made writable again.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "maps.h"
#include "pub_commit.h"
#include "pub_grant.h"
#include "shm/clock.h"
#include "shm/errmsg.h"

#define BUSY_BACKOFF_MIN_NS  50000        /* 50 µs */
#define BUSY_BACKOFF_MAX_NS  2000000      /* 2 ms */

static int grant_from_reply(struct wsync_pub *p, struct conn_reply *rep, struct pub_grant *g)
{
	const struct wsync_msg_grant *gr = &rep->msg.grant;
	bool has_fd = gr->flags & WSYNC_GRANT_HAS_FD;
	int err = 0;

	g->fd = -1;
	if (gr->model_id != p->model_id || (has_fd && rep->n_fds < 1)) {
		err = wsync_fail(-EPROTO, "model '%s': GRANT for model %u with %d fds, "
		                 "expected model %u%s", p->model, gr->model_id, rep->n_fds,
		                 p->model_id, has_fd ? " and the slab fd" : "");
	} else {
		g->valid = true;
		g->slot = gr->slot;
		g->version = gr->version;
		if (has_fd) {
			g->fd = rep->fds[0];
			rep->fds[0] = -1;
		}
	}
	wsync_reply_close_fds(rep, 0);
	return err;
}

static void sleep_ns(int64_t ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* BEGIN until granted; -EBUSY (all slots held) is retried with backoff until
 * deadline_ns, without holding the lock while asleep. A BEGIN whose answer
 * does not come by deadline_ns stays outstanding (p->begin_wait) and the
 * next begin collects it. Caller holds the lock. */
static int pub_request_grant(struct wsync_pub *p, int64_t deadline_ns, struct pub_grant *g)
{
	int64_t backoff = BUSY_BACKOFF_MIN_NS;
	union wsync_msg_any m;
	struct conn_reply rep;
	int err;

	for (;;) {
		int64_t now, nap;

		if (!p->begin_wait.seq) {
			wsync_msg_init(&m.hdr, WSYNC_MSG_BEGIN, 0);
			m.begin.m.model_id = p->model_id;
			m.hdr.seq = wsync_conn_next_seq(p->c);
			err = wsync_conn_send(p->c, &m, NULL, 0);
			if (err)
				return err;
			wsync_conn_await(p->c, &p->begin_wait, m.hdr.seq, WSYNC_MSG_BEGIN,
			                 WSYNC_MSG_GRANT);
		}
		/* the answer, -ETIMEDOUT with the BEGIN still outstanding, or its
		 * error */
		err = wsync_conn_await_collect(p->c, &p->begin_wait, deadline_ns, &rep);
		if (!err)
			return grant_from_reply(p, &rep, g);
		/* all slots held, or (a group) a rank not open yet: try again */
		if (err != -EBUSY && !(err == -EAGAIN && p->group_size > 1))
			return err;
		/* the broker's message (who holds what) stays in wsync_errmsg */
		now = wsync_mono_ns();
		if (deadline_ns >= 0 && now >= deadline_ns)
			return err;
		nap = backoff;
		if (deadline_ns >= 0 && deadline_ns - now < nap)
			nap = deadline_ns - now;
		client_unlock(p->c);
		sleep_ns(nap);
		client_lock(p->c);
		backoff = backoff * 2 > BUSY_BACKOFF_MAX_NS ? BUSY_BACKOFF_MAX_NS : backoff * 2;
	}
}

static int grant_check(const struct wsync_pub *p, const struct pub_grant *g)
{
	if (g->slot >= p->n_slots)
		return wsync_fail(-EPROTO, "model '%s': granted slot %u of %u", p->model,
		                  g->slot, p->n_slots);
	if (g->version <= p->last_committed)
		return wsync_fail(-EPROTO, "model '%s': granted v%llu, not above the last "
		                  "commit v%llu", p->model, (unsigned long long)g->version,
		                  (unsigned long long)p->last_committed);
	if (g->fd < 0 && !p->slabs[g->slot])
		return wsync_fail(-EPROTO, "model '%s': grant of slot %u without its fd, and "
		                  "that slot was never mapped", p->model, g->slot);
	return 0;
}

/* Makes the granted slab writable: a fresh mapping when the fd came with the
 * grant (an older mapping of the slot is stale), else the cached one. */
static int grant_map(struct wsync_pub *p, struct pub_grant *g)
{
	void *addr;
	int err;

	if (g->fd >= 0) {
		if (p->slabs[g->slot]) {
			munmap(p->slabs[g->slot], p->map_bytes);
			p->slabs[g->slot] = NULL;
		}
		err = wsync_map_slab(g->fd, p->bytes, 1, !p->device_only, &p->map_bytes, &addr);
		close(g->fd);
		g->fd = -1;
		if (err)
			return err;
		p->slabs[g->slot] = addr;
		return 0;
	}
	if (p->guarded && mprotect(p->slabs[g->slot], p->map_bytes, PROT_READ | PROT_WRITE) < 0)
		return wsync_fail(-errno, "model '%s': making slot %u writable: %s",
		                  p->model, g->slot, strerror(errno));
	return 0;
}

/* Gives a grant we cannot use back to the broker, best effort. */
static void grant_return(struct wsync_pub *p, const struct pub_grant *g)
{
	union wsync_msg_any m;
	struct conn_reply rep;
	char keep[WSYNC_ERRMSG_LEN];

	snprintf(keep, sizeof(keep), "%s", wsync_errmsg_get());
	wsync_msg_init(&m.hdr, WSYNC_MSG_ABORT, 0);
	m.abort.m.model_id = p->model_id;
	m.abort.slot = g->slot;
	m.abort.version = g->version;
	client_lock(p->c);
	if (wsync_conn_call(p->c, &m, NULL, 0, WSYNC_MSG_ABORT_OK, &rep) == 0)
		wsync_reply_close_fds(&rep, 0);
	client_unlock(p->c);
	wsync_fail(0, "%s", keep);
}

int wsync_pub_begin(wsync_pub *p, int64_t timeout_ns, wsync_slab *out)
{
	if (!p || !out)
		return wsync_fail(-EINVAL, "wsync_pub_begin: publisher and out must not be NULL");
	if (p->device_model)
		return wsync_fail(-EINVAL, "model '%s' lives on GPUs: begin its versions with "
		                  "wsync_pub_begin_gpu", p->model);
	return wsync_pub_begin_slab(p, timeout_ns, out);
}

int wsync_pub_begin_slab(struct wsync_pub *p, int64_t timeout_ns, wsync_slab *out)
{
	struct pub_grant g = { .fd = -1 };
	int64_t deadline;
	int err;

	if (timeout_ns < 0 && timeout_ns != WSYNC_FOREVER)
		return wsync_fail(-EINVAL, "model '%s': timeout %lld ns is negative",
		                  p->model, (long long)timeout_ns);
	if (p->begun)
		return wsync_fail(-EALREADY, "model '%s': slab v%llu is already begun",
		                  p->model, (unsigned long long)p->cur.version);
	/* a prefetched grant would still work locally, but a world whose
	 * broker is gone must not move any more */
	err = wsync_pub_gone(p);
	if (err)
		return err;
	deadline = wsync_deadline(timeout_ns);
	if (p->max_lead) {
		err = wsync_pub_lead_wait(p, deadline);
		if (err)
			return err;
	}

	client_lock(p->c);
	if (p->ack.seq) {
		err = wsync_pub_ack_collect(p, deadline, NULL);
		if (err)
			goto out_unlock;
	}
	if (p->next.valid) {
		g = p->next;
		p->next.valid = false;
		p->next.fd = -1;
	} else {
		err = pub_request_grant(p, deadline, &g);
		if (err)
			goto out_unlock;
	}
	client_unlock(p->c);

	err = grant_check(p, &g);
	if (err)
		goto out_drop;
	/* never granted while the hasher reads it (it is the latest), but
	 * the grant is what makes writing it safe, so it waits */
	wsync_pub_sum_settle(p, g.slot);
	err = grant_map(p, &g);
	if (err)
		goto out_return;
	p->cur = g;
	p->begun = true;
	out->base = p->slabs[g.slot];
	out->bytes = p->bytes;
	out->n_tensors = p->n_tensors;
	out->tensors = p->tensors;
	out->priv_pub = p;
	out->priv_version = g.version;
	out->priv_slot = g.slot;
	out->priv_pad = 0;
	return 0;

out_return:
	grant_return(p, &g);
out_drop:
	pub_grant_drop(&g);
	return err;
out_unlock:
	client_unlock(p->c);
	return err;
}
