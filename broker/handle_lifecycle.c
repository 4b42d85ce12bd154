/*
 * broker/handle_lifecycle.c — ending things: CLOSE of a publisher or a
 * subscription, DELETE of a model, and WAIT_READERS (a publisher waiting
 * until its readers have a version before it goes on).
 */
#include "handlers.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group.h"
#include "model.h"
#include "peer.h"
#include "readers.h"
#include "request.h"
#include "session.h"

int handle_close(struct req *r)
{
	const struct wsync_msg_close *c = &r->m->close;
	struct model *m = req_model(r, c->m.model_id);
	struct peer_model *sm;
	union wsync_msg_any ok;

	if (!m)   /* deleted meanwhile, or never opened: nothing to close */
		return req_fail(r, -EIDRM, "CLOSE of model %u, which this session does not "
		                "have open (deleted?)", c->m.model_id);
	sm = &r->p->m[m->id];
	if (c->what == WSYNC_CLOSE_PUB) {
		if (m->pub != r->p && !group_rank_of(m, r->p, NULL))
			return req_fail(r, -EPROTO, "CLOSE of the publisher of '%s', which this "
			                "session is not", m->name);
		session_leave_pub(r->b, r->s, m, "closed");
		/* Its leave moves the model on the mover's thread (at once or
		 * queued): CLOSE_OK once the copy is done, so nothing it writes
		 * after hearing it lands in the copy (handle_pub_open_moved). */
		if (model_moving(r->b, m) && m->move->for_leave && !m->move->closer) {
			m->move->closer = r->p;
			m->move->close = *r->m;
			session_release_model(r->b, r->s, m);
			return 0;
		}
	} else {
		if (!sm->subs)
			return req_fail(r, -EIDRM, "CLOSE of a subscription to '%s', which this "
			                "session does not have", m->name);
		if (--sm->subs == 0) {
			m->subscribers--;
			atomic_store(&m->ctl->subscribers, m->subscribers);
		}
	}
	session_release_model(r->b, r->s, m);   /* m may be gone now */
	memset(&ok, 0, sizeof(ok));
	ok.close_ok.model_id = c->m.model_id;
	req_reply(r, &ok, WSYNC_MSG_CLOSE_OK, NULL, 0);
	return 0;
}

int handle_delete(struct req *r)
{
	const struct wsync_msg_delete *d = &r->m->delete_;
	struct model *m = model_find(r->b, d->model);
	union wsync_msg_any ok;
	char why[64 + WSYNC_INSTANCE_MAX];
	uint64_t hwm;

	if (!m)
		return req_fail(r, -ENOENT, "no model '%s' in broker '%s'", d->model,
		                r->b->cfg.name);
	if (!model_owned_by(m, r->p->uid, r->b->uid))
		return req_fail(r, -EPERM, "model '%s' belongs to uid %u: only its owner, the "
		                "broker's user (uid %u) and root may delete it", m->name,
		                (unsigned)m->owner, (unsigned)r->b->uid);
	if (m->pub)
		return req_fail(r, -EBUSY, "model '%s' is published by session %u '%s' (pid "
		                "%d): close the publisher first", m->name, m->pub->id,
		                m->pub->name, (int)m->pub->pid);
	if (m->group)
		return req_fail(r, -EBUSY, "model '%s' is published by a group of %u ranks: "
		                "close them first", m->name, m->group->size);
	hwm = m->hwm;
	snprintf(why, sizeof(why), "deleted by session %u '%s'", r->p->id, r->p->name);
	session_delete_model(r->b, m, why);
	memset(&ok, 0, sizeof(ok));
	ok.delete_ok.hwm = hwm;
	req_reply(r, &ok, WSYNC_MSG_DELETE_OK, NULL, 0);
	return 0;
}

int handle_wait_readers(struct req *r)
{
	const struct wsync_msg_wait_readers *w = &r->m->wait_readers;
	struct model *m = req_model(r, w->m.model_id);

	if (!m)
		return req_fail(r, -EIDRM, "WAIT_READERS on model %u, which this session does "
		                "not have open (deleted?)", w->m.model_id);
	if (m->state != WSYNC_MODEL_READY || w->version > m->hwm)
		return req_fail(r, -EINVAL, "model '%s': v%llu was never granted (newest "
		                "v%llu)", m->name, (unsigned long long)w->version,
		                (unsigned long long)m->hwm);
	return readers_wait(r->b, r->p, m, r->m->hdr.seq, w->version, w->n_readers,
	                    w->timeout_ms, r->why, sizeof(r->why));
}

