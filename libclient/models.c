/*
 * libclient/models.c — the broker's models: listing them (from the control
 * segment, no round trip), deleting one, and waiting until a model's
 * readers have a version.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "conn.h"
#include "pub.h"
#include "shm/clock.h"
#include "shm/errmsg.h"

/* One entry copied out of the control segment; false if it holds no model.
 * The broker may change it meanwhile: the name is re-checked after the
 * copy, so a reused entry is not reported under the old name. */
static bool model_snapshot(const struct wsync_client *c, uint32_t id, wsync_model_info *out)
{
	const struct wsync_ctl_model *e = client_ctl_model(c, id);
	uint64_t inc = atomic_load_explicit(&e->incarnation, memory_order_acquire);
	uint32_t state = atomic_load_explicit(&e->state, memory_order_acquire);
	uint64_t l;

	if (!inc || state == WSYNC_MODEL_FREE)
		return false;
	memset(out, 0, sizeof(*out));
	memcpy(out->name, e->name, sizeof(out->name));
	out->name[sizeof(out->name) - 1] = '\0';
	out->published = state == WSYNC_MODEL_READY;
	out->n_tensors = e->n_tensors;
	out->n_slots = e->n_slots;
	out->bytes = e->bytes;
	l = atomic_load_explicit(&e->latest, memory_order_acquire);
	if (wsync_latest_slot(l) != WSYNC_SLOT_NONE) {
		out->version = wsync_latest_version(l);
		out->step = atomic_load_explicit(&e->last_step, memory_order_relaxed);
		out->published_ns = atomic_load_explicit(&e->last_commit_ns, memory_order_relaxed);
	}
	out->publishers = atomic_load_explicit(&e->publisher, memory_order_relaxed) ? 1 : 0;
	out->subscribers = atomic_load_explicit(&e->subscribers, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(&e->incarnation, memory_order_relaxed) == inc;
}

int wsync_models(wsync_client *c, wsync_model_info *out, size_t cap, size_t *n)
{
	size_t found = 0;

	if (!c || !n || (cap && !out))
		return wsync_fail(-EINVAL, "wsync_models: client and n must not be NULL, nor "
		                  "out when cap > 0");
	if (client_broker_gone(c))
		return client_fail_gone(c, NULL);
	for (uint32_t id = 0; id < WSYNC_MAX_MODELS; id++) {
		wsync_model_info info;

		if (!model_snapshot(c, id, &info))
			continue;
		if (found < cap)
			out[found] = info;
		found++;
	}
	*n = found;
	return 0;
}

int wsync_model_delete(wsync_client *c, const char *model)
{
	union wsync_msg_any m;
	struct conn_reply rep;
	int err;

	if (!c || !model)
		return wsync_fail(-EINVAL, "wsync_model_delete: client and model must not be NULL");
	if (!wsync_name_valid(model, WSYNC_NAME_MAX))
		return wsync_fail(-EINVAL, "model name '%.128s' is invalid (1..%d of "
		                  "[A-Za-z0-9._:/-], not starting with '.' or '/')",
		                  model, WSYNC_NAME_MAX - 1);
	wsync_msg_init(&m.hdr, WSYNC_MSG_DELETE, 0);
	snprintf(m.delete_.model, sizeof(m.delete_.model), "%s", model);
	client_lock(c);
	err = wsync_conn_call(c, &m, NULL, 0, WSYNC_MSG_DELETE_OK, &rep);
	if (!err)
		wsync_reply_close_fds(&rep, 0);
	client_unlock(c);
	return err;
}

int wsync_pub_wait_readers(wsync_pub *p, uint64_t version, uint32_t n_readers,
                           int64_t timeout_ns, uint32_t *have)
{
	union wsync_msg_any m;
	struct conn_reply rep;
	int64_t deadline;
	int err;

	if (!p)
		return wsync_fail(-EINVAL, "wsync_pub_wait_readers: publisher is NULL");
	if (timeout_ns < 0 && timeout_ns != WSYNC_FOREVER)
		return wsync_fail(-EINVAL, "model '%s': timeout %lld ns is negative", p->model,
		                  (long long)timeout_ns);
	if (version == 0)
		return wsync_fail(-EINVAL, "model '%s': version 0 is never published", p->model);
	deadline = wsync_deadline(timeout_ns);
	wsync_msg_init(&m.hdr, WSYNC_MSG_WAIT_READERS, 0);
	m.wait_readers.m.model_id = p->model_id;
	m.wait_readers.version = version;
	m.wait_readers.n_readers = n_readers;
	/* the broker keeps the deadline; we wait a little longer for its answer */
	m.wait_readers.timeout_ms = timeout_ns < 0 ? UINT32_MAX :
	                            timeout_ns / 1000000 >= UINT32_MAX - 1 ? UINT32_MAX - 1 :
	                            (uint32_t)((timeout_ns + 999999) / 1000000);
	client_lock(p->c);
	err = wsync_conn_call_by(p->c, &m, NULL, 0, WSYNC_MSG_WAIT_READERS_OK,
	                         deadline < 0 ? -1 : deadline + 200 * 1000000ll, NULL, &rep);
	if (!err) {
		wsync_reply_close_fds(&rep, 0);
		if (have)
			*have = rep.msg.wait_readers_ok.n_readers;
	}
	client_unlock(p->c);
	return err;
}
