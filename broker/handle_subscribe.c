/*
 * broker/handle_subscribe.c — a collector's requests: SUB_OPEN, ATTACH
 * (the layout and slabs, read-only), GPU_ATTACH (a device model's slots on
 * one GPU), NOTIFY (an eventfd written at every commit) and ACKED (an
 * explicit ack while the publisher waits for its readers).
 */
#include "handlers.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_slab.h"
#include "group.h"
#include "log.h"
#include "loop.h"
#include "model.h"
#include "peer.h"
#include "readers.h"
#include "request.h"
#include "session.h"


static int ready_fds(const struct model *m, int *fds)
{
	int n = 0;

	fds[n++] = m->layout_ro_fd;
	for (uint32_t k = 0; k < m->books.n_slots; k++)
		fds[n++] = m->slab_ro_fd[k];
	return n;
}

int handle_sub_open(struct req *r)
{
	const struct wsync_msg_sub_open *p = &r->m->sub_open;
	struct session *s = r->s;
	int fds[WSYNC_MSG_MAX_FDS], n_fds = 0, err;
	union wsync_msg_any ok;
	struct peer_model *sm;
	struct model *m;

	m = model_find(r->b, p->model);
	if (!m) {
		/* A new entry that stays as long as this subscription does:
		 * within the session's budget, so that one client cannot take
		 * the whole table from the publishers (invariant 10). */
		uint32_t awaited = session_awaited(r->b, s);

		if (awaited >= SESSION_MAX_AWAITED)
			return req_fail(r, -ENOBUFS, "model '%s': session '%s' already waits on "
			                "%u models nobody publishes (limit %d)", p->model,
			                s->p.name, awaited, SESSION_MAX_AWAITED);
		if (s->p.uid != r->b->uid && s->p.uid != 0) {
			awaited = uid_awaited(r->b, s->p.uid);
			if (awaited >= UID_MAX_AWAITED)
				return req_fail(r, -ENOBUFS, "model '%s': the sessions of uid %u "
				                "already wait on %u models nobody publishes "
				                "(limit %d per user)", p->model,
				                (unsigned)s->p.uid, awaited, UID_MAX_AWAITED);
		}
		err = req_declare(r, p->model, &m);
		if (err)
			return err;
	}
	err = session_open_model(r->b, s, m);
	if (err) {
		model_drop_if_unused(r->b, m);
		return req_fail(r, err, "model '%s': too many sessions", p->model);
	}
	sm = &s->p.m[m->id];
	if (sm->subs++ == 0) {
		m->subscribers++;
		atomic_store(&m->ctl->subscribers, m->subscribers);
		/* What this session acquired of an earlier model under this id
		 * must not count for this one (wsync_pub_wait_readers): a new
		 * subscription has acquired nothing yet. */
		atomic_store(&s->p.page->acquired[m->id], 0);
		/* nor a staleness bound declared by an earlier subscription */
		atomic_store(&s->p.page->lag_bound_ns[m->id], 0);
		atomic_store(&s->p.page->lag_bound_versions[m->id], 0);
	}
	session_mirror(r->b, s);
	log_debug("session %u '%s': subscribed to '%s'", s->p.id, s->p.name, m->name);

	memset(&ok, 0, sizeof(ok));
	ok.sub_open_ok.model_id = m->id;
	ok.sub_open_ok.state = m->state;
	ok.sub_open_ok.incarnation = m->incarnation;
	ok.sub_open_ok.base_incarnation = m->base_incarnation;
	fds[n_fds++] = m->page_ro_fd;
	if (m->state == WSYNC_MODEL_READY) {
		ok.sub_open_ok.n_slots = m->books.n_slots;
		ok.sub_open_ok.n_tensors = m->n_tensors;
		ok.sub_open_ok.bytes = m->bytes;
		ok.sub_open_ok.layout_bytes = m->layout_bytes;
		n_fds += ready_fds(m, fds + n_fds);
	}
	req_reply(r, &ok, WSYNC_MSG_SUB_OPEN_OK, fds, n_fds);
	return 0;
}

int handle_attach(struct req *r)
{
	uint32_t id = r->m->attach.m.model_id;
	struct model *m = req_model(r, id);
	int fds[WSYNC_MSG_MAX_FDS], n_fds;
	union wsync_msg_any ok;

	if (!m || !r->p->m[id].subs)
		return req_fail(r, -EIDRM, "ATTACH of model %u, which this session does not "
		                "subscribe to (deleted?)", id);
	if (m->state != WSYNC_MODEL_READY)
		return req_fail(r, -ENODATA, "model '%s' has no layout yet (no publisher "
		                "opened it)", m->name);
	memset(&ok, 0, sizeof(ok));
	ok.attach_ok.model_id = m->id;
	ok.attach_ok.n_slots = m->books.n_slots;
	ok.attach_ok.n_tensors = m->n_tensors;
	ok.attach_ok.bytes = m->bytes;
	ok.attach_ok.layout_bytes = m->layout_bytes;
	ok.attach_ok.incarnation = m->incarnation;
	/* the page too: after a new publisher's memory (model_rotate) the
	 * subscriber maps all of it anew */
	fds[0] = m->page_ro_fd;
	n_fds = 1 + ready_fds(m, fds + 1);
	req_reply(r, &ok, WSYNC_MSG_ATTACH_OK, fds, n_fds);
	return 0;
}

/* A publisher's or subscriber's slots of its model on one of the model's
 * GPUs: the exported VMM fds, which the client imports and maps. */
int handle_gpu_attach(struct req *r)
{
	const struct wsync_msg_gpu_attach *a = &r->m->gpu_attach;
	struct model *m = req_model(r, a->m.model_id);
	int fds[WSYNC_MAX_SLOTS];
	union wsync_msg_any ok;

	if (!m)
		return req_fail(r, -EIDRM, "GPU_ATTACH of model %u, which this session has not "
		                "open (deleted?)", a->m.model_id);
	if (m->state != WSYNC_MODEL_READY)
		return req_fail(r, -ENODATA, "model '%s' has no layout yet (no publisher "
		                "opened it)", m->name);
	if (!m->gpu)
		return req_fail(r, -ENODEV, "model '%s' is a host model: it has no GPU slabs",
		                m->name);
	if (a->device >= m->gpu->n_devices)
		return req_fail(r, -ENODEV, "model '%s' lives on %u GPUs, not on its GPU %u",
		                m->name, m->gpu->n_devices, a->device);
	/* An exported VMM allocation carries no access mode: whoever imports it
	 * may map it writable. Host slabs reach other users (--group) as
	 * read-only fds; device slabs cannot, so only the broker's own user
	 * (and root) read them, and another user only as their publisher. */
	if (r->p->uid != r->b->uid && r->p->uid != 0 && m->pub != r->p &&
	    !group_rank_of(m, r->p, NULL))
		return req_fail(r, -EPERM, "model '%s': device memory cannot be shared read-only "
		                "with another user (uid %u; the broker runs as %u): read its host "
		                "mirror instead (WSYNC_DEV_HOST_MIRROR)", m->name,
		                (unsigned)r->p->uid, (unsigned)r->b->uid);
	for (uint32_t k = 0; k < m->books.n_slots; k++)
		fds[k] = m->gpu->fd[a->device][k];
	memset(&ok, 0, sizeof(ok));
	ok.gpu_attach_ok.model_id = m->id;
	ok.gpu_attach_ok.device = a->device;
	ok.gpu_attach_ok.n_slots = m->books.n_slots;
	ok.gpu_attach_ok.dev_bytes = m->gpu->dev_bytes;
	ok.gpu_attach_ok.incarnation = m->incarnation;
	req_reply(r, &ok, WSYNC_MSG_GPU_ATTACH_OK, fds, (int)m->books.n_slots);
	return 0;
}

static bool fd_is_eventfd(int fd)
{
	char path[64], target[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return false;
	target[n] = '\0';
	return !strcmp(target, "anon_inode:[eventfd]");
}

int handle_notify(struct req *r)
{
	uint32_t id = r->m->notify.m.model_id;
	struct model *m = req_model(r, id);
	union wsync_msg_any ok;
	struct notifier *n;
	int fd, err;

	if (!m || !r->p->m[id].subs)
		return req_fail(r, -EIDRM, "NOTIFY for model %u, which this session does not "
		                "subscribe to (deleted?)", id);
	fd = req_take_fd(r);
	if (fd < 0)
		return req_fail(r, -EINVAL, "NOTIFY came without an eventfd");
	if (!fd_is_eventfd(fd)) {
		close(fd);
		return req_fail(r, -EINVAL, "NOTIFY: the fd is not an eventfd");
	}
	err = loop_notifier_new(r->b->loop, fd, &n);
	if (err == -EMFILE) {
		close(fd);
		log_warn("session %u '%s' pid %d: NOTIFY refused: the broker keeps at most "
		         "%u NOTIFY eventfds", r->p->id, r->p->name, (int)r->p->pid,
		         loop_notifier_budget(r->b->loop));
		return req_fail(r, -EMFILE, "NOTIFY: broker '%s' already holds its maximum of "
		                "%u eventfds; use wsync_sub_wait instead", r->b->cfg.name,
		                loop_notifier_budget(r->b->loop));
	}
	if (err) {
		close(fd);
		return req_fail(r, err, "NOTIFY: %s", strerror(-err));
	}
	if (r->s->ev[id])
		loop_notifier_release(r->b->loop, r->s->ev[id]);
	r->s->ev[id] = n;
	memset(&ok, 0, sizeof(ok));
	ok.notify_ok.model_id = id;
	req_reply(r, &ok, WSYNC_MSG_NOTIFY_OK, NULL, 0);
	return 0;
}


/* A collector's explicit ack while its publisher waited: the waits of the
 * model are looked at now (broker/readers.c). Only a subscriber may ask:
 * anybody else's ack counts for nothing anyway. A one-way ACKED gets no
 * reply: its refusal is the dispatcher's to count and log, unanswered. */
int handle_acked(struct req *r)
{
	uint32_t id = r->m->acked.model_id;
	struct model *m = req_model(r, id);
	union wsync_msg_any ok;

	if (!m || !r->p->m[id].subs)
		return req_fail(r, -EIDRM, "ACKED for model %u, which this session does not "
		                "subscribe to (deleted?)", id);
	readers_acked(r->b, m);
	if (r->m->acked.flags & WSYNC_ACKED_ONEWAY)
		return 0;
	memset(&ok, 0, sizeof(ok));
	ok.acked_ok.model_id = id;
	req_reply(r, &ok, WSYNC_MSG_ACKED_OK, NULL, 0);
	return 0;
}
