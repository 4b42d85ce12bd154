/*
 * libclient/conn.c — requests and replies on the session socket.
 *
 * One SOCK_SEQPACKET datagram is one message. The broker answers requests in
 * order, each reply repeating the request's seq, so a reply that is not the
 * one awaited can only answer an earlier request (an async commit's
 * acknowledgement, parked for whoever registered its seq); anything else
 * means the two sides disagree on the conversation, and the connection is
 * given up (marked dead).
 *
 * Every wait for the broker is bounded: by the caller's deadline where the
 * API takes a timeout, else by WSYNC_REPLY_TIMEOUT_MS (30 s by default), so
 * a stopped broker costs a timeout, never a hang. A timeout alone never
 * gives the connection up: the request stays sent, and its reply, when it
 * comes, is recognised by its seq (replies come in request order, so one
 * older than the awaited request belongs to an abandoned one) and either
 * parked in the registration that will collect it (struct conn_await: a
 * late GRANT, a commit's acknowledgement), undone (a late PUB_OPEN_OK or
 * SUB_OPEN_OK is answered with CLOSE) or dropped. This file knows nothing
 * of publishers or subscriptions: whoever needs a late reply registers its
 * seq here.
 * Sends use MSG_NOSIGNAL: the library must never raise SIGPIPE in its host
 * process. Every fd received is checked to belong to the broker's uid, then
 * either handed to the caller or closed.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conn.h"
#include "shm/clock.h"
#include "shm/errmsg.h"

void wsync_conn_mark_dead(struct wsync_client *c, const char *why)
{
	int expected = 0;

	/* The first reason wins: 2 claims the slot for writing it, 1 publishes
	 * it, so a reader that sees 1 also sees the whole reason. */
	if (!atomic_compare_exchange_strong(&c->dead, &expected, 2))
		return;
	snprintf(c->dead_why, sizeof(c->dead_why), "%s", why);
	atomic_store_explicit(&c->dead, 1, memory_order_release);
}

bool wsync_conn_hung_up(struct wsync_client *c)
{
	struct pollfd pfd = { .fd = c->sock, .events = POLLRDHUP };

	if (poll(&pfd, 1, 0) <= 0 ||
	    !(pfd.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)))
		return false;
	wsync_conn_mark_dead(c, "broker went away");
	return true;
}

int wsync_conn_fail_dead(struct wsync_client *c)
{
	if (atomic_load_explicit(&c->dead, memory_order_acquire) == 1)
		return wsync_fail(-ENOTCONN, "not connected to the broker: %s", c->dead_why);
	return wsync_fail(-ENOTCONN, "not connected to the broker");
}

uint32_t wsync_conn_next_seq(struct wsync_client *c)
{
	uint32_t seq = c->next_seq++;

	if (seq == 0)
		seq = c->next_seq++;
	return seq;
}

void wsync_reply_close_fds(struct conn_reply *rep, int from)
{
	for (int i = from; i < rep->n_fds; i++)
		if (rep->fds[i] >= 0)
			close(rep->fds[i]);
	if (from < rep->n_fds)
		rep->n_fds = from < 0 ? 0 : from;
}

int wsync_conn_error(const struct wsync_msg_error *e, uint32_t req_type)
{
	int err = e->err;

	if (err >= 0 || err < -4095)
		return wsync_fail(-EPROTO, "broker answered %s with invalid error code %d",
		                  wsync_msg_name(req_type), err);
	if (e->msg[0])
		return wsync_fail(err, "%s", e->msg);
	return wsync_fail(err, "broker refused %s: %s", wsync_msg_name(req_type),
	                  wsync_strerror(err));
}

/* Milliseconds for poll() until deadline_ns, rounded up; 0 if past. */
static int poll_ms(int64_t deadline_ns)
{
	int64_t left = deadline_ns - wsync_mono_ns();

	if (left <= 0)
		return 0;
	left = (left + 999999) / 1000000;
	return left > INT_MAX ? INT_MAX : (int)left;
}

static int conn_lost(struct wsync_client *c)
{
	wsync_conn_mark_dead(c, "broker closed the connection");
	return wsync_fail(-ENOTCONN, "broker closed the connection");
}

/* Waits until fd is ready for events or deadline_ns: 0, -ETIMEDOUT or -errno. */
static int conn_poll(struct wsync_client *c, short events, int64_t deadline_ns)
{
	struct pollfd pfd = { .fd = c->sock, .events = events };

	for (;;) {
		int ms = poll_ms(deadline_ns);
		int r = poll(&pfd, 1, ms);

		if (r > 0)
			return 0;
		if (r == 0) {
			if (ms == 0)
				return -ETIMEDOUT;
			continue;
		}
		if (errno != EINTR)
			return wsync_fail(-errno, "poll on the broker socket: %s", strerror(errno));
	}
}

int wsync_conn_send(struct wsync_client *c, const union wsync_msg_any *req,
                    const int *fds, int n_fds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * WSYNC_MSG_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = (void *)req, .iov_len = req->hdr.len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	int64_t deadline = wsync_conn_deadline(c, -1);

	if (client_is_dead(c))
		return wsync_conn_fail_dead(c);
	if (n_fds < 0 || n_fds > WSYNC_MSG_MAX_FDS)
		return wsync_fail(-EINVAL, "%d fds in one message", n_fds);
	if (n_fds > 0) {
		struct cmsghdr *cm;

		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n_fds);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n_fds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)n_fds);
	}
	for (;;) {
		ssize_t r = sendmsg(c->sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		int err;

		if (r == (ssize_t)req->hdr.len)
			return 0;
		if (r >= 0)
			return wsync_fail(-EPROTO, "short send of %s: %zd of %u bytes",
			                  wsync_msg_name(req->hdr.type), r, req->hdr.len);
		if (errno == EINTR)
			continue;
		if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)
			return conn_lost(c);
		if (errno != EAGAIN)
			return wsync_fail(-errno, "send %s to the broker: %s",
			                  wsync_msg_name(req->hdr.type), strerror(errno));
		err = conn_poll(c, POLLOUT, deadline);
		if (err == -ETIMEDOUT)   /* nothing was sent: the conversation holds */
			return wsync_fail(-ETIMEDOUT, "broker did not take %s within %lld ms",
			                  wsync_msg_name(req->hdr.type),
			                  (long long)(c->reply_timeout_ns / 1000000));
		if (err)
			return err;
	}
}

int64_t wsync_conn_deadline(const struct wsync_client *c, int64_t deadline_ns)
{
	int64_t now = wsync_mono_ns();
	/* reply_timeout_ns is at most a day (client.c): no overflow */
	int64_t limit = now + c->reply_timeout_ns;

	if (deadline_ns < 0 || deadline_ns > limit)
		return limit;
	if (deadline_ns < now + WSYNC_RTT_GRACE_NS)
		return now + WSYNC_RTT_GRACE_NS;
	return deadline_ns;
}

/* Whether every fd of rep is an object of the broker's uid: a broker hands
 * out only its own segments (and a client checks who the broker is at
 * connect), so anything else is a protocol error, never mapped. */
static bool fds_are_brokers(const struct wsync_client *c, const struct conn_reply *rep)
{
	for (int i = 0; i < rep->n_fds; i++) {
		struct stat st;

		if (fstat(rep->fds[i], &st) < 0 || st.st_uid != c->broker_uid)
			return false;
	}
	return true;
}

/* Moves the fds of every SCM_RIGHTS header into rep; more than fit were
 * already closed by the kernel (MSG_CTRUNC). */
static void collect_fds(struct msghdr *mh, struct conn_reply *rep)
{
	rep->n_fds = 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		size_t n;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (rep->n_fds < WSYNC_MSG_MAX_FDS)
				rep->fds[rep->n_fds++] = fd;
			else
				close(fd);
		}
	}
}

/* A message the broker should never send: the conversation is lost. */
static int conn_garbled(struct wsync_client *c, struct conn_reply *rep, const char *why)
{
	wsync_reply_close_fds(rep, 0);
	wsync_conn_mark_dead(c, "protocol error");
	return wsync_fail(-EPROTO, "bad message from the broker: %s", why);
}

/* Receives one validated message by deadline_ns. */
static int conn_recv_one(struct wsync_client *c, int64_t deadline_ns, struct conn_reply *rep)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * WSYNC_MSG_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	char why[160];

	for (;;) {
		struct iovec iov = { .iov_base = &rep->msg, .iov_len = sizeof(rep->msg) };
		struct msghdr mh = {
			.msg_iov = &iov, .msg_iovlen = 1,
			.msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf),
		};
		ssize_t r = recvmsg(c->sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		int err;

		if (r > 0) {
			collect_fds(&mh, rep);
			if (mh.msg_flags & MSG_TRUNC)
				return conn_garbled(c, rep, "message longer than any message type");
			if (mh.msg_flags & MSG_CTRUNC)
				return conn_garbled(c, rep, "more fds than any message carries");
			err = wsync_msg_validate(&rep->msg, (size_t)r, why, sizeof(why));
			if (err)
				return conn_garbled(c, rep, why);
			if (!fds_are_brokers(c, rep))
				return conn_garbled(c, rep, "an fd of another owner than the broker");
			return 0;
		}
		if (r == 0)
			return conn_lost(c);
		if (errno == EINTR)
			continue;
		if (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN)
			return conn_lost(c);
		if (errno != EAGAIN)
			return wsync_fail(-errno, "receive from the broker: %s", strerror(errno));
		err = conn_poll(c, POLLIN, deadline_ns);
		if (err)
			return err;
	}
}

int wsync_conn_post(struct wsync_client *c, union wsync_msg_any *req)
{
	if (client_is_dead(c))
		return wsync_conn_fail_dead(c);
	req->hdr.seq = wsync_conn_next_seq(c);
	return wsync_conn_send(c, req, NULL, 0);
}

/* Undoes what a request we stopped waiting for did on the broker's side. */
static void conn_undo(struct wsync_client *c, uint32_t model_id, uint32_t what)
{
	union wsync_msg_any m;

	wsync_msg_init(&m.hdr, WSYNC_MSG_CLOSE, 0);
	m.close.m.model_id = model_id;
	m.close.what = what;
	(void)wsync_conn_post(c, &m);
}

void wsync_conn_await(struct wsync_client *c, struct conn_await *a, uint32_t seq,
                      uint32_t req_type, uint32_t want)
{
	if (a->seq) {                    /* registered already: keep its place */
		wsync_reply_close_fds(&a->rep, 0);
	} else {
		a->next = c->awaits;
		c->awaits = a;
	}
	a->seq = seq;
	a->req_type = req_type;
	a->want = want;
	a->ready = false;
	a->rep.n_fds = 0;
}

static void await_unlink(struct wsync_client *c, struct conn_await *a)
{
	for (struct conn_await **pp = &c->awaits; *pp; pp = &(*pp)->next) {
		if (*pp == a) {
			*pp = a->next;
			break;
		}
	}
	a->next = NULL;
	a->seq = 0;
	a->ready = false;
}

void wsync_conn_await_cancel(struct wsync_client *c, struct conn_await *a)
{
	if (!a->seq)
		return;
	wsync_reply_close_fds(&a->rep, 0);
	await_unlink(c, a);
}

int wsync_conn_await_collect(struct wsync_client *c, struct conn_await *a,
                             int64_t deadline_ns, struct conn_reply *rep)
{
	int err = 0;

	if (a->ready) {
		*rep = a->rep;
		a->rep.n_fds = 0;
	} else {
		err = wsync_conn_recv(c, a->seq, a->want, deadline_ns, rep);
		if (err == -ETIMEDOUT && !client_is_dead(c))
			return err;              /* still awaited */
	}
	await_unlink(c, a);
	if (err)
		return err;
	if (rep->msg.hdr.type == WSYNC_MSG_ERROR) {
		wsync_reply_close_fds(rep, 0);
		return wsync_conn_error(&rep->msg.error, a->req_type);
	}
	return 0;
}

/* Parks rep in the registration that awaits it; false if none does. */
static bool conn_park(struct wsync_client *c, struct conn_reply *rep)
{
	uint32_t type = rep->msg.hdr.type;

	for (struct conn_await *a = c->awaits; a; a = a->next) {
		if (a->seq == rep->msg.hdr.seq && !a->ready &&
		    (type == a->want || type == WSYNC_MSG_ERROR)) {
			a->rep = *rep;
			rep->n_fds = 0;
			a->ready = true;
			return true;
		}
	}
	return false;
}

/* A reply to a request nobody waits for any more (see the top of the file). */
static void conn_stale(struct wsync_client *c, struct conn_reply *rep)
{
	if (conn_park(c, rep))
		return;
	wsync_reply_close_fds(rep, 0);
	if (rep->msg.hdr.type == WSYNC_MSG_PUB_OPEN_OK)
		conn_undo(c, rep->msg.pub_open_ok.model_id, WSYNC_CLOSE_PUB);
	else if (rep->msg.hdr.type == WSYNC_MSG_SUB_OPEN_OK)
		conn_undo(c, rep->msg.sub_open_ok.model_id, WSYNC_CLOSE_SUB);
}

/* Whether request a was sent before request b (seqs wrap, 0 is skipped). */
static bool seq_before(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) < 0;
}

int wsync_conn_recv(struct wsync_client *c, uint32_t seq, uint32_t want,
                    int64_t deadline_ns, struct conn_reply *rep)
{
	int64_t deadline = wsync_conn_deadline(c, deadline_ns);
	bool on_limit = deadline_ns < 0 || deadline_ns >= deadline;
	char why[160];
	int err;

	rep->n_fds = 0;
	if (client_is_dead(c))
		return wsync_conn_fail_dead(c);
	for (;;) {
		err = conn_recv_one(c, deadline, rep);
		if (err == -ETIMEDOUT) {
			if (!on_limit)
				return wsync_fail(-ETIMEDOUT, "no %s from the broker in time",
				                  wsync_msg_name(want));
			return wsync_fail(-ETIMEDOUT, "broker did not answer within %lld ms "
			                  "(waiting for %s)",
			                  (long long)(c->reply_timeout_ns / 1000000),
			                  wsync_msg_name(want));
		}
		if (err)
			return err;
		if (rep->msg.hdr.seq == seq)
			break;
		/* seq 0 is never a request's: the broker refuses this session
		 * (not admitted, table full) before it read our request. */
		if (rep->msg.hdr.seq == 0 && rep->msg.hdr.type == WSYNC_MSG_ERROR) {
			wsync_reply_close_fds(rep, 0);
			err = wsync_conn_error(&rep->msg.error, rep->msg.error.req_type);
			wsync_conn_mark_dead(c, "refused by the broker");
			return err;
		}
		if (seq_before(rep->msg.hdr.seq, seq)) {
			conn_stale(c, rep);
			continue;
		}
		snprintf(why, sizeof(why), "unexpected %s with seq %u while waiting for %s seq %u",
		         wsync_msg_name(rep->msg.hdr.type), rep->msg.hdr.seq,
		         wsync_msg_name(want), seq);
		return conn_garbled(c, rep, why);
	}
	if (rep->msg.hdr.type == WSYNC_MSG_ERROR) {
		wsync_reply_close_fds(rep, 0);
		return wsync_conn_error(&rep->msg.error, rep->msg.error.req_type);
	}
	if (rep->msg.hdr.type != want) {
		snprintf(why, sizeof(why), "%s in reply to a request expecting %s",
		         wsync_msg_name(rep->msg.hdr.type), wsync_msg_name(want));
		return conn_garbled(c, rep, why);
	}
	return 0;
}

int wsync_conn_call_by(struct wsync_client *c, union wsync_msg_any *req,
                       const int *fds, int n_fds, uint32_t want, int64_t deadline_ns,
                       uint32_t *seq_out, struct conn_reply *rep)
{
	int err;

	rep->n_fds = 0;
	if (client_is_dead(c))
		return wsync_conn_fail_dead(c);
	req->hdr.seq = wsync_conn_next_seq(c);
	if (seq_out)
		*seq_out = req->hdr.seq;
	err = wsync_conn_send(c, req, fds, n_fds);
	if (err)
		return err;
	return wsync_conn_recv(c, req->hdr.seq, want, deadline_ns, rep);
}

int wsync_conn_call(struct wsync_client *c, union wsync_msg_any *req,
                    const int *fds, int n_fds, uint32_t want,
                    struct conn_reply *rep)
{
	return wsync_conn_call_by(c, req, fds, n_fds, want, -1, NULL, rep);
}
