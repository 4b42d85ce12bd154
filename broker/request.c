/* broker/request.c — helpers every handler uses; see request.h. */
#include "request.h"

#include <stdarg.h>
#include <stdio.h>

#include "group.h"
#include "model.h"
#include "session.h"
#include "state.h"

int req_fail(struct req *r, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->why, sizeof(r->why), fmt, ap);
	va_end(ap);
	return err;
}

int req_take_fd(struct req *r)
{
	int fd;

	if (r->n_fds < 1 || r->fds[0] < 0)
		return -1;
	fd = r->fds[0];
	r->fds[0] = -1;
	return fd;
}

void req_reply(struct req *r, union wsync_msg_any *msg, uint32_t type, const int *fds,
               int n_fds)
{
	msg->hdr.magic = WSYNC_PROTO_MAGIC;
	msg->hdr.type = (uint16_t)type;
	msg->hdr.version = WSYNC_PROTO_VERSION;
	msg->hdr.len = (uint32_t)wsync_msg_size(type);
	msg->hdr.seq = r->m->hdr.seq;
	session_send(r->b, r->s, msg, fds, n_fds);
}

struct model *req_model(struct req *r, uint32_t id)
{
	struct model *m = model_get(r->b, id);

	if (!m || !(r->p->models & (UINT64_C(1) << id)))
		return NULL;
	return m;
}

struct model *req_published(struct req *r, uint32_t id)
{
	struct model *m = req_model(r, id);

	return m && m->state == WSYNC_MODEL_READY &&
	       (m->pub == r->p || group_rank_of(m, r->p, NULL)) ? m : NULL;
}

int req_declare(struct req *r, const char *name, struct model **out)
{
	return model_declare(r->b, name, -1, state_floor(r->b->floors, name), out,
	                     r->why, sizeof(r->why));
}
