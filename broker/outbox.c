/* broker/outbox.c — consequences queued by state modules; see outbox.h. */
#include "outbox.h"

#include <stdio.h>
#include <string.h>

#include "fault.h"

void outbox_init(struct outbox *o)
{
	memset(o, 0, sizeof(*o));
	o->tail = &o->head;
	o->timer_ns = -1;
}

void outbox_reply(struct outbox *o, struct peer *to, const union wsync_msg_any *msg)
{
	struct out_reply *r;

	if (!to || to->doomed || !to->active)
		return;
	r = fault_malloc(sizeof(*r));
	if (!r) {
		if (!to->unanswered)
			o->unanswered++;
		to->unanswered = true;
		return;
	}
	r->next = NULL;
	r->to = to;
	memcpy(&r->msg, msg, msg->hdr.len <= sizeof(r->msg) ? msg->hdr.len : sizeof(r->msg));
	*o->tail = r;
	o->tail = &r->next;
}

void outbox_error(struct outbox *o, struct peer *to, uint32_t seq, uint32_t req_type,
                  int err, const char *why)
{
	union wsync_msg_any e;

	wsync_msg_init(&e.hdr, WSYNC_MSG_ERROR, seq);
	e.error.err = err;
	e.error.req_type = (uint16_t)(wsync_msg_size(req_type) ? req_type : 0);
	snprintf(e.error.msg, sizeof(e.error.msg), "%s", why);
	outbox_reply(o, to, &e);
}

static_assert(WSYNC_MAX_MODELS <= 64, "one bit per model in outbox.notify");

void outbox_notify(struct outbox *o, uint32_t model_id)
{
	if (model_id < WSYNC_MAX_MODELS)
		o->notify |= UINT64_C(1) << model_id;
}

void outbox_timer_in(struct outbox *o, int64_t ns)
{
	if (ns < 0)
		ns = 0;
	if (o->timer_ns < 0 || ns < o->timer_ns)
		o->timer_ns = ns;
}

struct out_reply *outbox_take(struct outbox *o)
{
	struct out_reply *r = o->head;

	if (!r)
		return NULL;
	o->head = r->next;
	if (!o->head)
		o->tail = &o->head;
	return r;
}

bool outbox_pending(const struct outbox *o)
{
	return o->head || o->notify || o->timer_ns >= 0 || o->unanswered;
}
