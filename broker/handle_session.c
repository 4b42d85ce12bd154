/*
 * broker/handle_session.c — HELLO: a connection becomes a session (its
 * table entry, session page and ctl entry), told the broker's figures.
 */
#include "handlers.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "request.h"
#include "session.h"

int handle_hello(struct req *r)
{
	const struct wsync_msg_hello *h = &r->m->hello;
	struct broker *b = r->b;
	union wsync_msg_any ok;
	int fds[2], err;

	if (h->layout_version != WSYNC_LAYOUT_VERSION) {
		r->disconnect = true;
		return req_fail(r, -EPROTO, "client has shared-memory layout version %u, "
		                "broker '%s' has %u", h->layout_version, b->cfg.name,
		                WSYNC_LAYOUT_VERSION);
	}
	err = session_hello(b, r->s, h->name, r->why, sizeof(r->why));
	if (err) {
		r->disconnect = true;
		return err;
	}
	memset(&ok, 0, sizeof(ok));
	ok.hello_ok.session_id = r->p->id;
	ok.hello_ok.max_slots = b->cfg.max_slots;
	ok.hello_ok.generation = b->generation;
	ok.hello_ok.ctl_bytes = CTL_BYTES;
	ok.hello_ok.broker_pid = (uint32_t)b->pid;
	ok.hello_ok.session_index = (uint32_t)r->s->index;
	fds[0] = b->ctl_ro_fd;
	fds[1] = r->s->page_fd;
	req_reply(r, &ok, WSYNC_MSG_HELLO_OK, fds, 2);
	return 0;
}

