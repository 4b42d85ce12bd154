/*
 * broker/dispatch.c — every message: the checks it passes first, then the
 * handler of its type (one table), then the ERROR if the handler refused.
 *
 * Every message is validated statically (wsync_msg_validate) and then
 * against the session's state. Protocol violations are counted; the 16th,
 * a message before HELLO, a truncated message or fds where none belong end
 * the session — by marking it (session_doom), like everything else that
 * ends one: the teardown runs after this event (session.h).
 */
#include "dispatch.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "handlers.h"
#include "log.h"
#include "request.h"
#include "session.h"
#include "shm/clock.h"
#include "uids.h"

typedef int (*handler_fn)(struct req *r);

enum {
	WORK_NONE,
	WORK_COUNTED,                    /* its time drains the uid's bucket */
	WORK_PACED,                      /* ...at least UIDS_WORK_MIN_NS, and asked
	                                    while it is empty, the session is not
	                                    read again until it refilled */
	WORK_REFUSED,                    /* ...and it is refused while it is empty */
};

static const struct {
	handler_fn fn;
	int fds;                         /* fds the request carries */
	bool fds_reply;                  /* its reply carries fds: budgeted
	                                    (session_fds_budget) */
	int work;                        /* WORK_*: its time is its uid's (uids.h) */
} handlers[WSYNC_MSG_TYPE_END] = {
	[WSYNC_MSG_HELLO]    = { handle_hello, 0, true, WORK_NONE },
	[WSYNC_MSG_PUB_OPEN] = { handle_pub_open, 1, true, WORK_REFUSED },
	[WSYNC_MSG_SUB_OPEN] = { handle_sub_open, 0, true, WORK_PACED },
	[WSYNC_MSG_ATTACH]   = { handle_attach, 0, true, WORK_NONE },
	[WSYNC_MSG_BEGIN]    = { handle_begin, 0, false, WORK_NONE },
	[WSYNC_MSG_COMMIT]   = { handle_commit, 0, false, WORK_NONE },
	[WSYNC_MSG_ABORT]    = { handle_abort, 0, false, WORK_NONE },
	[WSYNC_MSG_NOTIFY]   = { handle_notify, 1, false, WORK_NONE },
	[WSYNC_MSG_CLOSE]    = { handle_close, 0, false, WORK_PACED },
	[WSYNC_MSG_DELETE]   = { handle_delete, 0, false, WORK_PACED },
	[WSYNC_MSG_WAIT_READERS] = { handle_wait_readers, 0, false, WORK_NONE },
	[WSYNC_MSG_GPU_ATTACH] = { handle_gpu_attach, 0, true, WORK_NONE },
	[WSYNC_MSG_ACKED]    = { handle_acked, 0, false, WORK_COUNTED },
};

/* Checks that need no handler; 0 or -errno with the reason in r. */
static int req_screen(struct req *r, size_t len, int msg_flags, uint32_t type)
{
	struct session *s = r->s;
	int err;

	if (msg_flags & MSG_TRUNC) {
		r->disconnect = true;
		return req_fail(r, -EPROTO, "message longer than %zu bytes",
		                sizeof(union wsync_msg_any));
	}
	if (msg_flags & MSG_CTRUNC) {
		if (s->rx_out_of_fds)        /* not the client's fault: refuse, keep it */
			return req_fail(r, -EMFILE, "broker '%s' is out of file descriptors: "
			                "the message's fds could not be received",
			                r->b->cfg.name);
		r->disconnect = true;
		return req_fail(r, -EPROTO, "more than %d fds in one message", WSYNC_MSG_MAX_FDS);
	}
	err = wsync_msg_validate(r->m, len, r->why, sizeof(r->why));
	if (err) {
		if (s->state == SESSION_NEW)
			r->disconnect = true;
		return err;
	}
	if (!handlers[type].fn) {
		if (s->state == SESSION_NEW)
			r->disconnect = true;
		return req_fail(r, -EPROTO, "%s is not a request", wsync_msg_name(type));
	}
	if (r->n_fds > handlers[type].fds) {
		r->disconnect = true;
		return req_fail(r, -EPROTO, "%s carries %d fds, expected %d",
		                wsync_msg_name(type), r->n_fds, handlers[type].fds);
	}
	if (s->state == SESSION_NEW && type != WSYNC_MSG_HELLO) {
		r->disconnect = true;
		return req_fail(r, -EPROTO, "%s before HELLO", wsync_msg_name(type));
	}
	if (s->state != SESSION_NEW && type == WSYNC_MSG_HELLO) {
		r->disconnect = true;
		return req_fail(r, -EPROTO, "a second HELLO");
	}
	return 0;
}

/* A uid's share of the broker's time for opening models (uids.h): PUB_OPEN
 * asked wait ns before the bucket refills. */
static int dispatch_work_refuse(struct req *r, int64_t wait)
{
	return req_fail(r, -EBUSY, "the sessions of uid %u took their share of the broker's "
	                "time for opening and closing models (1/%d, bursts of %lld ms): try "
	                "again in %lld ms", (unsigned)r->p->uid, UIDS_WORK_SHARE,
	                (long long)(UIDS_WORK_BURST_NS / 1000000), (long long)(wait / 1000000 + 1));
}

/* A request that asked for no reply (an ACKED with WSYNC_ACKED_ONEWAY): read
 * from the bytes received, valid or not, so a refused one stays unanswered
 * too. */
static bool dispatch_oneway(const struct req *r, size_t len, uint32_t type)
{
	return type == WSYNC_MSG_ACKED && len == sizeof(struct wsync_msg_acked) &&
	       (r->m->acked.flags & WSYNC_ACKED_ONEWAY);
}

void dispatch_refusal(struct broker *b, struct session *s, uint32_t seq, uint32_t req_type)
{
	session_send_error(b, s, seq, req_type, s->reject_err, s->reject_why);
	session_doom(b, s, s->reject_why);
}

void dispatch_message(struct broker *b, struct session *s, size_t len, int msg_flags,
                      int *fds, int n_fds)
{
	struct req r = { .b = b, .s = s, .p = &s->p, .m = &s->conn.rx, .fds = fds,
	                 .n_fds = n_fds };
	uint32_t seq = 0, type = 0;
	int64_t wait = 0;                /* ns until its uid's bucket refills */
	const char *what;
	bool violation, paced = false;
	int err;

	atomic_fetch_add(&b->ctl->messages, 1);
	if (len >= sizeof(struct wsync_msg_hdr)) {
		seq = r.m->hdr.seq;
		type = r.m->hdr.type;
	}
	if (s->state == SESSION_REJECTED) {
		dispatch_refusal(b, s, seq, type);
		return;
	}
	r.why[0] = '\0';
	err = req_screen(&r, len, msg_flags, type);
	violation = err != 0 && err != -EMFILE;
	if (!err && handlers[type].work >= WORK_PACED && s->p.books) {
		paced = true;
		wait = uids_work_wait_ns(s->p.books, wsync_mono_ns());
	}
	/* The fds of replies a uid has not read are in flight, and the kernel
	 * caps them for the broker's user as a whole: past its share a uid
	 * is refused what would send more (uids.h). Not a violation. */
	if (!err && handlers[type].fds_reply)
		err = session_fds_budget(b, s, r.why, sizeof(r.why));
	if (!err && handlers[type].work == WORK_REFUSED && wait)
		err = dispatch_work_refuse(&r, wait);
	if (!err) {
		int64_t t0 = handlers[type].work && s->p.books ? wsync_mono_ns() : 0;
		int64_t moved0 = b->moved_ns;

		err = handlers[type].fn(&r);
		/* a move it caused has a bucket of its own (model.h) */
		if (t0) {
			int64_t ns = wsync_mono_ns() - t0 - (b->moved_ns - moved0);

			uids_work_charge(s->p.books, paced && ns < UIDS_WORK_MIN_NS ?
			                 UIDS_WORK_MIN_NS : ns);
			paced = false;       /* charged */
		}
		/* A refused layout cost the broker work proportional to its size:
		 * it counts toward the limit like a protocol error. */
		violation = err == -EPROTO ||
		            (type == WSYNC_MSG_PUB_OPEN && (err == -EINVAL || err == -EEXIST));
	}
	if (paced)                       /* refused before its handler ran */
		uids_work_charge(s->p.books, UIDS_WORK_MIN_NS);
	/* Asked while its uid's bucket was empty: answered, and then not read
	 * again until the bucket refilled (session_mute), so that a uid past
	 * its share costs the broker no more than the share, refusals
	 * included. Its other sessions are read until they ask too. */
	if (wait)
		session_mute(b, s, uids_work_wait_ns(s->p.books, wsync_mono_ns()));
	if (!err)
		return;

	atomic_fetch_add(&b->ctl->bad_messages, 1);
	what = wsync_msg_size(type) ? wsync_msg_name(type) : "a message";
	if (!r.why[0])
		snprintf(r.why, sizeof(r.why), "%s", strerror(-err));
	/* a one-way request is never answered, a refusal neither (proto.h):
	 * counted above and logged below only */
	if (!dispatch_oneway(&r, len, type))
		session_send_error(b, s, seq, type, err, r.why);
	if (violation || r.disconnect)
		log_warn("session %u '%s' pid %d: %s refused: %s", s->p.id, s->p.name,
		         (int)s->p.pid, what, r.why);
	else
		log_debug("session %u '%s' pid %d: %s refused: %s", s->p.id, s->p.name,
		          (int)s->p.pid, what, r.why);
	if (violation && ++s->invalid >= SESSION_MAX_INVALID && !r.disconnect) {
		r.disconnect = true;
		snprintf(r.why, sizeof(r.why), "%d invalid messages", SESSION_MAX_INVALID);
	}
	if (r.disconnect)
		session_doom(b, s, r.why);
}

