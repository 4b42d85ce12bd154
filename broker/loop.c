/*
 * broker/loop.c — one thread, one io_uring, no polling.
 *
 * Ops in flight and what they point at (user_data = pointer | kind):
 *   accept    multishot on the listening socket, re-armed when it stops
 *   signal    a read of the signalfd (SIGTERM/SIGINT are blocked)
 *   tick      a 1 s timeout: heartbeat, refused peers' expiry, accept re-arm
 *   recv      one recvmsg per session, into the session's own buffers
 *   send      sendmsg of a reply; the buffer (message + SCM_RIGHTS) is a
 *             malloc'd sendbuf owned by the op until its CQE
 *   eventfd   a write of 1 to a NOTIFY subscriber's eventfd (a notifier)
 *
 * Memory safety rests on one rule: nothing an op points at is freed before
 * its CQE. A session counts its ops (inflight); reaping it only shuts its
 * socket down, which completes its pending recv, and the session is freed by
 * the handler of its last CQE. A notifier is reference-counted by its
 * session and its write in flight. The fds a reply carries are the broker's:
 * the control segment's and a READY model's live until the broker stops, a
 * session page as long as its session; only a never-published model's page
 * is closed earlier, when the last session holding it lets go, which that
 * session can only ask for after the reply that carried the page was
 * submitted. A send with MSG_DONTWAIT is issued during io_uring_submit and
 * never parked, so the kernel has taken its fds by then.
 *
 * Replies are sent with MSG_DONTWAIT: a full socket buffer fails the send
 * (-EAGAIN) instead of parking it, so replies leave in order and a client
 * that does not read is disconnected, never waited for.
 *
 * Received descriptors: the kernel installs the fds of a message in this
 * process before the CQE arrives, whatever the message is (zero bytes,
 * truncated, for a session being closed). on_recv takes every one of them
 * out of the control buffer into fds[] as soon as res >= 0, and closes
 * whatever is still there after the one call that may take ownership
 * (handle_message, which sets an fd it keeps to -1). There is no other path.
 *
 * Budgets: connections that have not said HELLO are at most
 * LOOP_MAX_PENDING (the newest is closed at once past it); NOTIFY eventfds
 * are at most l->max_notifiers (a share of RLIMIT_NOFILE), so no client can
 * run the broker out of descriptors.
 */
#include "loop.h"

#include <errno.h>
#include <liburing.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fault.h"
#include "auth.h"
#include "ctl.h"
#include "group.h"
#include "handlers.h"
#include "log.h"
#include "model.h"
#include "publish.h"
#include "readers.h"
#include "session.h"
#include "shm/clock.h"
#include "stats.h"

#define LOOP_SQ_ENTRIES     512
#define LOOP_CQ_ENTRIES     8192
#define LOOP_MAX_REJECTED   16                 /* refused peers awaiting an answer */
#define LOOP_REJECT_WAIT_NS (2 * 1000000000ll) /* ...for their first message */
#define LOOP_HELLO_WAIT_NS  (10 * 1000000000ll)/* a connection must say HELLO */
#define LOOP_DRAIN_NS       (3 * 1000000000ll)
#define LOOP_MAX_PENDING    256                /* connections before their HELLO */
#define LOOP_MAX_NOTIFIERS  16384              /* NOTIFY eventfds, at most */

enum op_kind {
	OP_ACCEPT = 1,
	OP_SIGNAL,
	OP_TICK,
	OP_RECV,
	OP_SEND,
	OP_EVENTFD,
	OP_CANCEL,
};
#define OP_KIND_MASK 7u

struct sendbuf {
	struct session *s;
	union wsync_msg_any msg;
	struct {
		_Alignas(struct cmsghdr) char buf[SESSION_CMSG_BYTES];
	} ctl;
	struct iovec iov;
	struct msghdr mh;
};

struct loop {
	struct io_uring ring;
	int      signal_fd;
	struct signalfd_siginfo si;
	struct __kernel_timespec tick;
	struct __kernel_timespec poll;   /* readers.c's timer; its address tells
	                                    its CQE from the tick's */
	bool     poll_armed;
	int64_t  poll_due_ns;            /* when the armed one fires (CLOCK_MONOTONIC) */
	bool     accept_armed, signal_armed, tick_armed;
	bool     stopping, stop;
	uint32_t writes;                 /* eventfd writes in flight */
	uint32_t cancels;                /* cancel requests in flight */
	int64_t  hello_wait_ns;          /* LOOP_HELLO_WAIT_NS unless a test shortens it */
	uint32_t notifiers;              /* live NOTIFY eventfds */
	uint32_t max_notifiers;          /* their budget */
	bool     pending_full_logged;    /* one line per spell of LOOP_MAX_PENDING */
	bool     fds_out_logged;         /* one line per spell of EMFILE on recv */
};

static const uint64_t eventfd_one = 1;

static_assert(_Alignof(struct session) >= 8 && _Alignof(struct sendbuf) >= 8 &&
              _Alignof(struct notifier) >= 8, "low pointer bits carry the op kind");

static uint64_t op_data(const void *p, enum op_kind kind)
{
	return (uint64_t)(uintptr_t)p | kind;
}

/* An SQE, submitting what is queued if the ring is full. Never NULL: after a
 * submit the SQ is empty again. */
static struct io_uring_sqe *sqe_get(struct loop *l)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);

	while (!sqe) {
		int ret = io_uring_submit(&l->ring);

		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY)
			log_error("io_uring_submit: %s", strerror(-ret));
		sqe = io_uring_get_sqe(&l->ring);
	}
	return sqe;
}

/* ---- notifiers ------------------------------------------------------------ */

int notifier_new(struct broker *b, int fd, struct notifier **out)
{
	struct loop *l = b->loop;
	struct notifier *n;

	if (!l)
		return -ESHUTDOWN;
	if (l->notifiers >= l->max_notifiers)
		return -EMFILE;
	n = fault_calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->fd = fd;
	n->refs = 1;
	n->loop = l;
	l->notifiers++;
	*out = n;
	return 0;
}

uint32_t loop_notifier_budget(const struct broker *b)
{
	return b->loop ? b->loop->max_notifiers : 0;
}

static void notifier_put(struct notifier *n)
{
	if (--n->refs)
		return;
	n->loop->notifiers--;
	close(n->fd);
	free(n);
}

void loop_notifier_release(struct broker *b, struct notifier *n)
{
	struct loop *l = b->loop;

	/* A client that never drains its eventfd can park a write forever
	 * (counter at its maximum): cancel it so the fd and memory go. */
	if (n->writing && l) {
		struct io_uring_sqe *sqe = sqe_get(l);

		io_uring_prep_cancel64(sqe, op_data(n, OP_EVENTFD), 0);
		io_uring_sqe_set_data64(sqe, op_data(NULL, OP_CANCEL));
		l->cancels++;
	}
	notifier_put(n);
}

void loop_notify(struct broker *b, struct notifier *n)
{
	struct loop *l = b->loop;
	struct io_uring_sqe *sqe;

	if (!l || n->writing)
		return;
	sqe = sqe_get(l);
	io_uring_prep_write(sqe, n->fd, &eventfd_one, sizeof(eventfd_one), 0);
	io_uring_sqe_set_data64(sqe, op_data(n, OP_EVENTFD));
	n->writing = true;
	n->refs++;
	l->writes++;
}

static void on_eventfd(struct loop *l, struct notifier *n, int res)
{
	n->writing = false;
	l->writes--;
	if (res < 0 && res != -ECANCELED)
		log_debug("eventfd write: %s", strerror(-res));
	notifier_put(n);
}

/*
 * A quarter of the descriptors the process may open, past what the session
 * table and the model table can hold (each session a socket and a page,
 * each model a page, a layout and two per slab), and at most
 * LOOP_MAX_NOTIFIERS.
 */
static uint32_t loop_notifier_cap(void)
{
	const uint64_t fixed = 2 * WSYNC_MAX_SESSIONS + LOOP_MAX_PENDING +
	                       WSYNC_MAX_MODELS * (3 + 2 * WSYNC_MAX_SLOTS) + 64;
	struct rlimit rl;
	uint64_t cap;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return LOOP_MAX_NOTIFIERS;
	cap = rl.rlim_cur > fixed ? (rl.rlim_cur - fixed) / 4 : 0;
	if (cap < 16)
		cap = rl.rlim_cur / 8;   /* a tiny limit: some, not none */
	return cap > LOOP_MAX_NOTIFIERS ? LOOP_MAX_NOTIFIERS : (uint32_t)cap;
}

/* ---- arming --------------------------------------------------------------- */

static void arm_accept(struct broker *b)
{
	struct loop *l = b->loop;
	struct io_uring_sqe *sqe = sqe_get(l);

	io_uring_prep_multishot_accept(sqe, b->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, op_data(NULL, OP_ACCEPT));
	l->accept_armed = true;
}

static void arm_signal(struct loop *l)
{
	struct io_uring_sqe *sqe = sqe_get(l);

	io_uring_prep_read(sqe, l->signal_fd, &l->si, sizeof(l->si), 0);
	io_uring_sqe_set_data64(sqe, op_data(NULL, OP_SIGNAL));
	l->signal_armed = true;
}

static void arm_tick(struct loop *l)
{
	struct io_uring_sqe *sqe = sqe_get(l);

	l->tick.tv_sec = 1;
	l->tick.tv_nsec = 0;
	io_uring_prep_timeout(sqe, &l->tick, 0, 0);
	io_uring_sqe_set_data64(sqe, op_data(NULL, OP_TICK));
	l->tick_armed = true;
}

void loop_poll_soon(struct broker *b, int64_t ns)
{
	struct loop *l = b->loop;
	struct io_uring_sqe *sqe;
	int64_t due = wsync_mono_ns() + ns;

	if (!l || l->stopping || (l->poll_armed && l->poll_due_ns <= due))
		return;
	sqe = sqe_get(l);
	l->poll.tv_sec = ns / 1000000000;
	l->poll.tv_nsec = ns % 1000000000;
	if (l->poll_armed) {
		/* sooner than the timer armed: move it */
		io_uring_prep_timeout_update(sqe, &l->poll, op_data(&l->poll, OP_TICK), 0);
		io_uring_sqe_set_data64(sqe, op_data(NULL, OP_CANCEL));
		l->cancels++;
	} else {
		io_uring_prep_timeout(sqe, &l->poll, 0, 0);
		io_uring_sqe_set_data64(sqe, op_data(&l->poll, OP_TICK));
		l->poll_armed = true;
	}
	l->poll_due_ns = due;
}

static void on_poll(struct broker *b)
{
	struct loop *l = b->loop;

	int64_t next;

	l->poll_armed = false;
	if (l->stopping)
		return;
	next = group_poll(b);
	if (readers_poll(b) && (next < 0 || next > READERS_POLL_NS))
		next = READERS_POLL_NS;
	if (next >= 0)
		loop_poll_soon(b, next);
}

static void arm_recv(struct loop *l, struct session *s)
{
	struct session_rx *rx = &s->rx;
	struct io_uring_sqe *sqe = sqe_get(l);

	rx->iov.iov_base = &rx->msg;
	rx->iov.iov_len = sizeof(rx->msg);
	memset(&rx->mh, 0, sizeof(rx->mh));
	rx->mh.msg_iov = &rx->iov;
	rx->mh.msg_iovlen = 1;
	/* A zeroed buffer: nothing of an earlier message can pass for fds. */
	memset(rx->ctl.buf, 0, sizeof(rx->ctl.buf));
	rx->mh.msg_control = rx->ctl.buf;
	rx->mh.msg_controllen = sizeof(rx->ctl.buf);
	io_uring_prep_recvmsg(sqe, s->fd, &rx->mh, MSG_CMSG_CLOEXEC);
	io_uring_sqe_set_data64(sqe, op_data(s, OP_RECV));
	s->inflight++;
}

/* ---- sessions ------------------------------------------------------------- */

static void session_shutdown(struct session *s)
{
	s->shutdown_pending = false;
	/* Completes the pending recv (with 0); the socket is closed at free. */
	shutdown(s->fd, SHUT_RDWR);
}

void loop_close_session(struct broker *b, struct session *s)
{
	(void)b;
	if (s->sends)
		s->shutdown_pending = true;   /* after the last reply left */
	else
		session_shutdown(s);
}

static void session_maybe_free(struct broker *b, struct session *s)
{
	if (s->state == SESSION_CLOSING && !s->inflight)
		session_free(b, s);
}

int loop_send(struct broker *b, struct session *s, const union wsync_msg_any *msg,
              const int *fds, int n_fds)
{
	struct loop *l = b->loop;
	struct io_uring_sqe *sqe;
	struct sendbuf *sb;
	size_t len = msg->hdr.len;

	if (s->state == SESSION_CLOSING || !l)
		return -ENOTCONN;
	if (len > sizeof(sb->msg) || n_fds < 0 || n_fds > WSYNC_MSG_MAX_FDS)
		return -EINVAL;
	if (s->sends >= LOOP_MAX_SENDS) {
		session_disconnect(b, s, "it does not read its replies");
		return -ENOBUFS;
	}
	sb = fault_malloc(sizeof(*sb));
	if (!sb) {
		session_disconnect(b, s, "out of memory for its reply");
		return -ENOMEM;
	}
	sb->s = s;
	memcpy(&sb->msg, msg, len);
	sb->iov.iov_base = &sb->msg;
	sb->iov.iov_len = len;
	memset(&sb->mh, 0, sizeof(sb->mh));
	sb->mh.msg_iov = &sb->iov;
	sb->mh.msg_iovlen = 1;
	if (n_fds) {
		struct cmsghdr *cm;

		memset(&sb->ctl, 0, sizeof(sb->ctl));
		sb->mh.msg_control = sb->ctl.buf;
		sb->mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n_fds);
		cm = CMSG_FIRSTHDR(&sb->mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n_fds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)n_fds);
	}
	sqe = sqe_get(l);
	io_uring_prep_sendmsg(sqe, s->fd, &sb->mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, op_data(sb, OP_SEND));
	s->inflight++;
	s->sends++;
	return 0;
}

static void on_send(struct broker *b, struct sendbuf *sb, int res)
{
	struct session *s = sb->s;
	size_t len = sb->iov.iov_len;

	free(sb);
	s->inflight--;
	s->sends--;
	if (s->state != SESSION_CLOSING && (res < 0 || (size_t)res != len)) {
		if (res == -EAGAIN)
			session_disconnect(b, s, "its socket buffer is full: it does not "
			                   "read its replies");
		else if (res < 0)
			session_disconnect(b, s, strerror(-res));
		else
			session_disconnect(b, s, "short send");
	}
	if (s->state == SESSION_CLOSING && s->shutdown_pending && !s->sends)
		session_shutdown(s);
	session_maybe_free(b, s);
}

/* Moves the received fds into fds[] (closing any past WSYNC_MSG_MAX_FDS);
 * returns how many. */
static int rx_fds(struct msghdr *mh, int *fds)
{
	int n = 0;

	if (!mh->msg_control || mh->msg_controllen < sizeof(struct cmsghdr))
		return 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		size_t k;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
		    cm->cmsg_len < CMSG_LEN(0))
			continue;
		k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (fd < 0)
				continue;
			if (n < WSYNC_MSG_MAX_FDS)
				fds[n++] = fd;
			else
				close(fd);
		}
	}
	mh->msg_controllen = 0;          /* taken: never parsed twice */
	return n;
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/*
 * MSG_CTRUNC means some fds did not arrive: either the client sent more
 * than a message may carry (the buffer holds WSYNC_MSG_MAX_FDS), or the
 * broker is at its own descriptor limit and the kernel could not install
 * them. Tell them apart for the log and the client.
 */
static bool rx_out_of_fds(struct loop *l, int msg_flags, int n_fds)
{
	if (!(msg_flags & MSG_CTRUNC) || n_fds >= WSYNC_MSG_MAX_FDS)
		return false;
	if (!l->fds_out_logged)
		log_error("the broker is out of file descriptors (RLIMIT_NOFILE): a "
		          "message's fds could not be received");
	l->fds_out_logged = true;
	return true;
}

static void on_recv(struct broker *b, struct session *s, int res)
{
	struct loop *l = b->loop;
	int fds[WSYNC_MSG_MAX_FDS];
	int n_fds = 0, flags = 0;

	s->inflight--;
	/* Every fd that came with the message is in fds[] from here on and is
	 * closed at the end unless handle_message kept it (set it to -1). */
	if (res >= 0) {
		n_fds = rx_fds(&s->rx.mh, fds);
		flags = s->rx.mh.msg_flags;
	}
	if (s->state == SESSION_CLOSING) {
		/* reaped while the recv was pending: nothing more to read */
	} else if (res == 0) {
		session_disconnect(b, s, n_fds ? "it sent an empty message with fds"
		                               : "the client closed its socket");
	} else if (res == -EINTR || res == -EAGAIN) {
		arm_recv(l, s);
	} else if (res < 0) {
		session_disconnect(b, s, strerror(-res));
	} else {
		s->rx.out_of_fds = rx_out_of_fds(l, flags, n_fds);
		if (!(flags & MSG_CTRUNC))
			l->fds_out_logged = false;
		handle_message(b, s, (size_t)res, flags, fds, n_fds);
		if (s->state != SESSION_CLOSING)
			arm_recv(l, s);
	}
	close_fds(fds, n_fds);
	session_maybe_free(b, s);
}

static void on_accept(struct broker *b, int fd)
{
	struct loop *l = b->loop;
	struct ucred cred;
	struct session *s;
	char why[160];
	int err;

	err = auth_peer(fd, &cred);
	if (err) {
		log_warn("accepted a connection without peer credentials: %s", strerror(-err));
		close(fd);
		return;
	}
	/* Silent connections cost a socket each until their HELLO deadline:
	 * bounded, the newest goes first. Admitted sessions are bounded by the
	 * session table, which they enter at HELLO. */
	if (b->n_pending >= LOOP_MAX_PENDING) {
		if (!l->pending_full_logged)
			log_warn("%d connections have not said HELLO yet: closing new ones "
			         "at once (latest pid %d uid %u)", LOOP_MAX_PENDING,
			         (int)cred.pid, (unsigned)cred.uid);
		l->pending_full_logged = true;
		close(fd);
		return;
	}
	l->pending_full_logged = false;
	s = session_new(b, fd, cred.pid, cred.uid, cred.gid);
	if (!s) {
		log_error("out of memory for a session of pid %d", (int)cred.pid);
		close(fd);
		return;
	}
	if (!auth_admit(&b->cfg, b->uid, fd, &cred)) {
		snprintf(why, sizeof(why), "uid %u is not allowed by broker '%s'",
		         (unsigned)cred.uid, b->cfg.name);
		log_warn("refused pid %d uid %u gid %u: %s", (int)cred.pid,
		         (unsigned)cred.uid, (unsigned)cred.gid,
		         b->cfg.has_group ? "neither the broker's uid nor in its group"
		                          : "not the broker's uid");
		session_reject(b, s, -EPERM, why);
	} else {
		log_debug("session %u: accepted pid %d uid %u", s->id, (int)cred.pid,
		          (unsigned)cred.uid);
	}
	/* A refused peer gets its answer in reply to its first message (so it
	 * carries that request's seq); too many waiting: answer right away. */
	if (s->state == SESSION_REJECTED && b->n_rejected > LOOP_MAX_REJECTED) {
		handle_refusal(b, s, 0, 0);
		return;
	}
	arm_recv(l, s);
}

/* ---- signal, tick --------------------------------------------------------- */

static void on_signal(struct broker *b, int res)
{
	struct loop *l = b->loop;

	l->signal_armed = false;
	if (res == (int)sizeof(l->si)) {
		log_info("SIG%s received: shutting down", sigabbrev_np((int)l->si.ssi_signo));
		l->stop = true;
		return;
	}
	if (res < 0 && res != -EINTR && res != -EAGAIN && res != -ECANCELED)
		log_error("reading the signalfd: %s", strerror(-res));
	if (!l->stopping && res != -ECANCELED)
		arm_signal(l);
}

static void on_tick(struct broker *b, int res)
{
	struct loop *l = b->loop;
	int64_t now = wsync_mono_ns();

	l->tick_armed = false;
	if (l->stopping || res == -ECANCELED)
		return;
	atomic_store(&b->ctl->heartbeat_ns, wsync_real_ns());
	publish_audit(b);
	stats_tick(b);
	/* Reaping never frees (only CQE handlers do): the walk stays valid. */
	for (struct session *s = b->all_sessions; s; s = s->all_next) {
		int64_t age = now - s->accepted_mono_ns;

		if (s->state == SESSION_REJECTED && age > LOOP_REJECT_WAIT_NS)
			handle_refusal(b, s, 0, 0);
		else if (s->state == SESSION_NEW && age > l->hello_wait_ns) {
			log_info("session %u pid %d sent no HELLO within %lld ms: closed",
			         s->id, (int)s->pid, (long long)(l->hello_wait_ns / 1000000));
			session_disconnect(b, s, "no HELLO in time");
		}
	}
	if (!l->accept_armed)
		arm_accept(b);
	arm_tick(l);
}

static void on_accept_cqe(struct broker *b, int res, uint32_t flags)
{
	struct loop *l = b->loop;

	if (res >= 0 && l->stopping)
		close(res);
	else if (res >= 0)
		on_accept(b, res);
	else if (res != -ECANCELED)
		log_warn("accept: %s", strerror(-res));
	if (!(flags & IORING_CQE_F_MORE)) {
		l->accept_armed = false;
		/* Out of fds: try again at the next tick rather than spin. */
		if (!l->stopping && res != -EMFILE && res != -ENFILE && res != -ENOBUFS &&
		    res != -ENOMEM && res != -ECANCELED)
			arm_accept(b);
	}
}

static void dispatch(struct broker *b, uint64_t data, int res, uint32_t flags)
{
	struct loop *l = b->loop;
	void *p = (void *)(uintptr_t)(data & ~(uint64_t)OP_KIND_MASK);

	switch (data & OP_KIND_MASK) {
	case OP_ACCEPT:  on_accept_cqe(b, res, flags); break;
	case OP_SIGNAL:  on_signal(b, res); break;
	case OP_TICK:
		if (p == &l->poll)
			on_poll(b);
		else
			on_tick(b, res);
		break;
	case OP_RECV:    on_recv(b, p, res); break;
	case OP_SEND:    on_send(b, p, res); break;
	case OP_EVENTFD: on_eventfd(l, p, res); break;
	case OP_CANCEL:  l->cancels--; break;
	default:
		log_error("completion with unknown user data 0x%llx", (unsigned long long)data);
	}
}

static void drain_cqes(struct broker *b)
{
	struct io_uring_cqe *cqe;

	/* Copy and retire each CQE first: a handler may submit, and the CQ
	 * must keep room for what that completes. */
	while (io_uring_peek_cqe(&b->loop->ring, &cqe) == 0) {
		uint64_t data = io_uring_cqe_get_data64(cqe);
		int res = cqe->res;
		uint32_t flags = cqe->flags;

		io_uring_cqe_seen(&b->loop->ring, cqe);
		dispatch(b, data, res, flags);
	}
}

/* ---- life ------------------------------------------------------------------ */

static int ring_init(struct io_uring *ring)
{
	static const unsigned flag_sets[] = {
		IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN,
		IORING_SETUP_CQSIZE,
	};
	int ret = -EINVAL;

	for (size_t i = 0; i < sizeof(flag_sets) / sizeof(flag_sets[0]); i++) {
		struct io_uring_params p;

		memset(&p, 0, sizeof(p));
		p.flags = flag_sets[i];
		p.cq_entries = LOOP_CQ_ENTRIES;
		ret = io_uring_queue_init_params(LOOP_SQ_ENTRIES, ring, &p);
		if (ret != -EINVAL)
			break;
	}
	return ret;
}

int loop_init(struct broker *b)
{
	struct loop *l = fault_calloc(1, sizeof(*l));
	sigset_t set;
	int err;

	if (!l)
		return -ENOMEM;
	l->hello_wait_ns = fault_hello_wait_ns(LOOP_HELLO_WAIT_NS);
	l->max_notifiers = loop_notifier_cap();
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0) {
		err = -errno;
		goto out_free;
	}
	l->signal_fd = signalfd(-1, &set, SFD_CLOEXEC);
	if (l->signal_fd < 0) {
		err = -errno;
		goto out_free;
	}
	err = ring_init(&l->ring);
	if (err)
		goto out_close_signal;
	b->loop = l;
	arm_accept(b);
	arm_signal(l);
	arm_tick(l);
	return 0;

out_close_signal:
	close(l->signal_fd);
out_free:
	free(l);
	return err;
}

int loop_run(struct broker *b)
{
	struct loop *l = b->loop;

	while (!l->stop) {
		int ret = io_uring_submit_and_wait(&l->ring, 1);

		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
			log_error("io_uring: %s", strerror(-ret));
			return ret;
		}
		drain_cqes(b);
	}
	return 0;
}

static bool loop_busy(const struct broker *b)
{
	const struct loop *l = b->loop;

	return b->all_sessions || l->writes || l->cancels || l->accept_armed ||
	       l->signal_armed || l->tick_armed || l->poll_armed;
}

void loop_shutdown(struct broker *b)
{
	struct loop *l = b->loop;
	struct io_uring_sqe *sqe;
	int64_t deadline = wsync_mono_ns() + LOOP_DRAIN_NS;

	if (!l)
		return;
	l->stopping = true;
	/* Replies queued by the last completions go out before reaping can
	 * close an fd one of them carries (a dropped model's page). */
	io_uring_submit(&l->ring);
	for (struct session *s = b->all_sessions; s; s = s->all_next)
		session_disconnect(b, s, "the broker is shutting down");
	/* Then cancel whatever still waits (accept, tick, signal read, parked
	 * eventfd writes). */
	io_uring_submit(&l->ring);
	drain_cqes(b);
	sqe = sqe_get(l);
	io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
	io_uring_sqe_set_data64(sqe, op_data(NULL, OP_CANCEL));
	l->cancels++;
	while (loop_busy(b)) {
		struct __kernel_timespec ts = { .tv_sec = 0, .tv_nsec = 100 * 1000000 };
		struct io_uring_cqe *cqe;

		io_uring_submit(&l->ring);
		io_uring_wait_cqe_timeout(&l->ring, &cqe, &ts);
		drain_cqes(b);
		if (wsync_mono_ns() > deadline) {
			log_warn("shutdown: operations still in flight after %lld s",
			         (long long)(LOOP_DRAIN_NS / 1000000000));
			break;
		}
	}
}

void loop_exit(struct broker *b)
{
	struct loop *l = b->loop;

	if (!l)
		return;
	io_uring_queue_exit(&l->ring);
	close(l->signal_fd);
	free(l);
	b->loop = NULL;
	/* Only if the drain timed out: the ring is gone, nothing points here. */
	while (b->all_sessions) {
		struct session *s = b->all_sessions;

		s->inflight = 0;
		s->state = SESSION_CLOSING;
		session_free(b, s);
	}
}
