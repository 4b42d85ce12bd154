/*
 * broker/loop.c — one thread, one io_uring, no polling (see loop.h).
 *
 * Invariant 9 (DESIGN.md section 4, docs/INVARIANTS.md section 9): one
 * teardown point, no re-entry. Whatever notices that a session must go only
 * marks it; its teardown runs once, in session_settle, which this loop calls
 * (ops->settle) after each completion, outside every callback and scan. This
 * file's part is to never call up except from the completion loop: loop_send,
 * loop_conn_close, loop_conn_mute/unmute, loop_notify and loop_timer_in only
 * queue SQEs (or set a flag), and
 * sqe_get sets completions aside rather than dispatch them. The argument why
 * no path re-enters a teardown is in broker/session.c.
 *
 * Ops in flight and what they point at (user_data = pointer | kind):
 *   accept    multishot on the listening socket, re-armed when it stops
 *   signal    a read of the signalfd (the signals are blocked)
 *   tick      a 1 s timeout; timer: the owner's timeout (loop_timer_in)
 *   recv      one recvmsg per connection, into the connection's buffers;
 *             or, while the owner muted it (loop_conn_mute), a poll of its
 *             socket for a hangup in its place: one or the other is in
 *             flight, never both, and conn.hup_armed says which (kind recv)
 *   send      sendmsg of a reply; the buffer (message + SCM_RIGHTS) is a
 *             malloc'd sendbuf owned by the op until its completion, and
 *             so are the duplicates of the fds it carries (below)
 *   eventfd   a write of 1 to a subscriber's eventfd (a notifier)
 *   wake      a read of the loop's own wake eventfd, which another thread
 *             (the mover, mover.h) writes; re-armed after each (kind
 *             signal, told apart by its buffer's address)
 *
 * Memory safety rests on one rule: nothing an op points at is freed before
 * its completion. A connection counts its ops (inflight); closing it only
 * shuts its socket down, which completes its pending recv, and the owner
 * frees it when ops->released says the last one came back. A notifier is
 * reference-counted by its owner and its write in flight.
 *
 * A reply carries memory, not fd numbers. The kernel resolves the numbers
 * in SCM_RIGHTS when it issues the sendmsg, at the next io_uring_submit,
 * after every other completion of the batch was handled; by then the owner
 * may have closed an fd it named (a model deleted or moved by a later
 * message of the same batch) and a new memfd may have taken its number,
 * which the reply would hand over instead. So loop_send duplicates every fd
 * of a reply into its sendbuf, and on_send closes the duplicates when the
 * send completed (sent, failed or cancelled): the reply's memory stays
 * open until the reply has left, whatever its owner closes meanwhile, and
 * the owner may close its own fds at any time after loop_send returned.
 *
 * Replies are sent with MSG_DONTWAIT: a full socket buffer fails the send
 * (-EAGAIN) instead of parking it, so replies leave in order and a client
 * that does not read is reported (ops->send_failed), never waited for.
 *
 * Received descriptors: the kernel installs the fds of a message in this
 * process before the completion arrives, whatever the message is (zero
 * bytes, truncated, for a connection being closed). on_recv takes every one
 * of them out of the control buffer as soon as res >= 0, hands them to
 * ops->received, and closes whatever the callee did not keep. There is no
 * other path.
 *
 * No re-entry: the loop calls a callback only from the completion loop,
 * never from a function the callbacks call (loop_send, loop_conn_close,
 * loop_notify only queue SQEs), and ops->settle runs after each completion,
 * so the layer above finishes one event before the next begins.
 */
#include "loop.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "log.h"
#include "shm/clock.h"
#include "shm/layout.h"

#define LOOP_SQ_ENTRIES     512
#define LOOP_CQ_ENTRIES     8192
#define LOOP_MAX_NOTIFIERS  16384              /* eventfds, at most */

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
	struct conn *c;
	int      n_fds;
	int      fds[WSYNC_MSG_MAX_FDS];  /* the reply's own duplicates */
	union wsync_msg_any msg;
	struct {
		_Alignas(struct cmsghdr) char buf[LOOP_CMSG_BYTES];
	} ctl;
	struct iovec iov;
	struct msghdr mh;
};

/* A completion as drain_cqes needs it. */
struct cqe_copy {
	uint64_t data;
	int32_t  res;
	uint32_t flags;
};

struct notifier {
	_Alignas(8) int fd;              /* aligned: user_data keeps a tag below */
	uint32_t refs;
	bool     writing;
	struct loop *loop;
};

struct loop {
	struct io_uring ring;
	const struct loop_ops *ops;
	void    *ctx;
	int      listen_fd;
	int      signal_fd;
	struct signalfd_siginfo si;
	struct __kernel_timespec tick;
	struct __kernel_timespec timer;  /* its address tells its CQE from the tick's */
	bool     timer_armed;
	int64_t  timer_due_ns;           /* when the armed one fires (CLOCK_MONOTONIC) */
	bool     accept_armed, signal_armed, tick_armed, wake_armed;
	int      wake_fd;                /* loop_wake_fd */
	_Alignas(8) uint64_t wake_count; /* what its read fills */
	bool     stopping, stop;
	uint32_t writes;                 /* eventfd writes in flight */
	uint32_t cancels;                /* cancel requests in flight */
	uint32_t conns;                  /* connections started, not yet released */
	struct conn *idle;               /* closed with nothing in flight */
	uint32_t notifiers;              /* live eventfds */
	uint32_t max_notifiers;          /* their budget */
	bool     fds_out_logged;         /* one line per spell of EMFILE on recv */
	/* Completions moved out of the CQ by sqe_get, not yet dispatched:
	 * backlog[head..tail), oldest first (see sqe_get). */
	struct cqe_copy *backlog;
	uint32_t backlog_head, backlog_tail, backlog_cap;
	bool     backlog_logged;         /* one line per spell */
	bool     submit_refused;         /* injected: -EBUSY until the CQ is reaped */
};

static const uint64_t eventfd_one = 1;

static_assert(_Alignof(struct conn) >= 8 && _Alignof(struct sendbuf) >= 8 &&
              _Alignof(struct notifier) >= 8, "low pointer bits carry the op kind");

static uint64_t op_data(const void *p, enum op_kind kind)
{
	return (uint64_t)(uintptr_t)p | kind;
}

/*
 * Moves every completion waiting in the CQ (and what the kernel flushes from
 * its overflow list on the way) to the backlog, undispatched. false if none
 * could be moved: the CQ is empty, or the backlog cannot grow.
 */
static bool backlog_fill(struct loop *l)
{
	struct io_uring_cqe *cqe;
	bool moved = false;

	l->submit_refused = false;       /* the peek flushes the overflow */
	while (io_uring_peek_cqe(&l->ring, &cqe) == 0) {
		if (l->backlog_tail == l->backlog_cap && l->backlog_head) {
			/* what was dispatched meanwhile makes room */
			l->backlog_tail -= l->backlog_head;
			memmove(l->backlog, l->backlog + l->backlog_head,
			        l->backlog_tail * sizeof(*l->backlog));
			l->backlog_head = 0;
		}
		if (l->backlog_tail == l->backlog_cap) {
			uint32_t cap = l->backlog_cap ? 2 * l->backlog_cap : LOOP_CQ_ENTRIES;
			struct cqe_copy *b = cap > l->backlog_cap ?
			        fault_realloc(l->backlog, (size_t)cap * sizeof(*b)) : NULL;

			if (!b)
				break;
			l->backlog = b;
			l->backlog_cap = cap;
		}
		l->backlog[l->backlog_tail++] = (struct cqe_copy){
			io_uring_cqe_get_data64(cqe), cqe->res, cqe->flags };
		io_uring_cqe_seen(&l->ring, cqe);
		moved = true;
	}
	return moved;
}

/*
 * An SQE, submitting what is queued if the ring is full. Never NULL: after a
 * submit the SQ is empty again.
 *
 * The kernel refuses a submit (-EBUSY, -EAGAIN) while completions it could
 * not post wait in its overflow list, or while it is short of memory, and
 * only reaping completions ends that. They cannot be dispatched here (this
 * runs inside a callback: invariant 9), so they go to the backlog, which
 * drain_cqes dispatches first, in order. If nothing could be moved the
 * retry waits 1 ms: slow, never a spin.
 */
static struct io_uring_sqe *sqe_get(struct loop *l)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);

	while (!sqe) {
		int ret;

		if (!l->submit_refused && fault_hit(FAULT_SUBMIT, "sqe_get"))
			l->submit_refused = true;
		ret = l->submit_refused ? -EBUSY : io_uring_submit(&l->ring);
		if (ret == -EBUSY || ret == -EAGAIN) {
			if (!l->backlog_logged)
				log_warn("io_uring_submit: %s: completions set aside until the "
				         "loop reaps them", strerror(-ret));
			l->backlog_logged = true;
			if (!backlog_fill(l)) {
				struct timespec ms = { 0, 1000000 };

				nanosleep(&ms, NULL);
			}
		} else if (ret < 0 && ret != -EINTR) {
			log_error("io_uring_submit: %s", strerror(-ret));
		}
		sqe = io_uring_get_sqe(&l->ring);
	}
	return sqe;
}

/* ---- notifiers ------------------------------------------------------------ */

int loop_notifier_new(struct loop *l, int fd, struct notifier **out)
{
	struct notifier *n;

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

uint32_t loop_notifier_budget(const struct loop *l)
{
	return l->max_notifiers;
}

static void notifier_put(struct notifier *n)
{
	if (--n->refs)
		return;
	n->loop->notifiers--;
	close(n->fd);
	free(n);
}

void loop_notifier_release(struct loop *l, struct notifier *n)
{
	/* A client that never drains its eventfd can park a write forever
	 * (counter at its maximum): cancel it so the fd and memory go. */
	if (n->writing) {
		struct io_uring_sqe *sqe = sqe_get(l);

		io_uring_prep_cancel64(sqe, op_data(n, OP_EVENTFD), 0);
		io_uring_sqe_set_data64(sqe, op_data(NULL, OP_CANCEL));
		l->cancels++;
	}
	notifier_put(n);
}

void loop_notify(struct loop *l, struct notifier *n)
{
	struct io_uring_sqe *sqe;

	if (n->writing)
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
static uint32_t notifier_cap(void)
{
	const uint64_t fixed = 2 * WSYNC_MAX_SESSIONS + 256 +
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

static void arm_accept(struct loop *l)
{
	struct io_uring_sqe *sqe = sqe_get(l);

	io_uring_prep_multishot_accept(sqe, l->listen_fd, NULL, NULL, SOCK_CLOEXEC);
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

void loop_timer_in(struct loop *l, int64_t ns)
{
	struct io_uring_sqe *sqe;
	int64_t due;

	if (ns < 0)
		ns = 0;
	due = wsync_mono_ns() + ns;
	if (l->stopping || (l->timer_armed && l->timer_due_ns <= due))
		return;
	sqe = sqe_get(l);
	l->timer.tv_sec = ns / 1000000000;
	l->timer.tv_nsec = ns % 1000000000;
	if (l->timer_armed) {
		/* sooner than the one armed: move it */
		io_uring_prep_timeout_update(sqe, &l->timer, op_data(&l->timer, OP_TICK), 0);
		io_uring_sqe_set_data64(sqe, op_data(NULL, OP_CANCEL));
		l->cancels++;
	} else {
		io_uring_prep_timeout(sqe, &l->timer, 0, 0);
		io_uring_sqe_set_data64(sqe, op_data(&l->timer, OP_TICK));
		l->timer_armed = true;
	}
	l->timer_due_ns = due;
}

/* While c is muted: a poll for its peer's hangup instead of a recv. */
static void arm_hup(struct loop *l, struct conn *c)
{
	struct io_uring_sqe *sqe = sqe_get(l);

	io_uring_prep_poll_add(sqe, c->fd, POLLRDHUP);
	io_uring_sqe_set_data64(sqe, op_data(c, OP_RECV));
	c->hup_armed = true;
	c->inflight++;
}

static void arm_recv(struct loop *l, struct conn *c)
{
	struct io_uring_sqe *sqe;

	if (c->muted) {
		arm_hup(l, c);
		return;
	}
	sqe = sqe_get(l);

	c->rx_iov.iov_base = &c->rx;
	c->rx_iov.iov_len = sizeof(c->rx);
	memset(&c->rx_mh, 0, sizeof(c->rx_mh));
	c->rx_mh.msg_iov = &c->rx_iov;
	c->rx_mh.msg_iovlen = 1;
	/* A zeroed buffer: nothing of an earlier message can pass for fds. */
	memset(c->rx_ctl.buf, 0, sizeof(c->rx_ctl.buf));
	c->rx_mh.msg_control = c->rx_ctl.buf;
	c->rx_mh.msg_controllen = sizeof(c->rx_ctl.buf);
	io_uring_prep_recvmsg(sqe, c->fd, &c->rx_mh, MSG_CMSG_CLOEXEC);
	io_uring_sqe_set_data64(sqe, op_data(c, OP_RECV));
	c->inflight++;
}

/* ---- connections ---------------------------------------------------------- */

void loop_conn_start(struct loop *l, struct conn *c, int fd)
{
	c->fd = fd;
	l->conns++;
	arm_recv(l, c);
}

void loop_conn_mute(struct loop *l, struct conn *c)
{
	(void)l;
	if (!c->closing)
		c->muted = true;
}

void loop_conn_unmute(struct loop *l, struct conn *c)
{
	struct io_uring_sqe *sqe;

	if (!c->muted)
		return;
	c->muted = false;
	if (c->closing || !c->hup_armed)
		return;                  /* the recv in flight is re-armed as usual */
	/* its completion (cancelled, or a hangup that came first) arms the recv */
	sqe = sqe_get(l);
	io_uring_prep_poll_remove(sqe, op_data(c, OP_RECV));
	io_uring_sqe_set_data64(sqe, op_data(NULL, OP_CANCEL));
	l->cancels++;
}

static void conn_shutdown(struct conn *c)
{
	c->shutdown_pending = false;
	/* Completes the pending recv (with 0); the owner closes the socket. */
	shutdown(c->fd, SHUT_RDWR);
}

/* The owner hears of c for the last time once it is closed and idle. */
static void conn_maybe_release(struct loop *l, struct conn *c)
{
	if (c->closing && !c->inflight) {
		l->conns--;
		l->ops->released(l->ctx, c);
	}
}

void loop_conn_close(struct loop *l, struct conn *c)
{
	if (c->closing)
		return;
	c->closing = true;
	if (c->sends) {
		c->shutdown_pending = true;   /* after the last reply left */
	} else if (c->inflight) {
		conn_shutdown(c);
	} else {
		/* Nothing will complete on it: released after this event's
		 * settle, never from inside the owner's own call. */
		c->idle_next = l->idle;
		l->idle = c;
	}
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

int loop_send(struct loop *l, struct conn *c, const union wsync_msg_any *msg,
              const int *fds, int n_fds)
{
	struct io_uring_sqe *sqe;
	struct sendbuf *sb;
	size_t len = msg->hdr.len;

	if (c->closing)
		return -ENOTCONN;
	if (len > sizeof(sb->msg) || n_fds < 0 || n_fds > WSYNC_MSG_MAX_FDS)
		return -EINVAL;
	if (c->sends >= LOOP_MAX_SENDS)
		return -ENOBUFS;
	sb = fault_malloc(sizeof(*sb));
	if (!sb)
		return -ENOMEM;
	for (sb->n_fds = 0; sb->n_fds < n_fds; sb->n_fds++) {
		int fd = fcntl(fds[sb->n_fds], F_DUPFD_CLOEXEC, 0);

		if (fd < 0) {
			int err = -errno;

			close_fds(sb->fds, sb->n_fds);
			free(sb);
			return err;
		}
		sb->fds[sb->n_fds] = fd;
	}
	sb->c = c;
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
		memcpy(CMSG_DATA(cm), sb->fds, sizeof(int) * (size_t)n_fds);
	}
	sqe = sqe_get(l);
	io_uring_prep_sendmsg(sqe, c->fd, &sb->mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, op_data(sb, OP_SEND));
	c->inflight++;
	c->sends++;
	return 0;
}

static void on_send(struct loop *l, struct sendbuf *sb, int res)
{
	struct conn *c = sb->c;
	size_t len = sb->iov.iov_len;

	close_fds(sb->fds, sb->n_fds);
	free(sb);
	c->inflight--;
	c->sends--;
	if (!c->closing && (res < 0 || (size_t)res != len))
		l->ops->send_failed(l->ctx, c, res);
	if (c->closing && c->shutdown_pending && !c->sends)
		conn_shutdown(c);
	conn_maybe_release(l, c);
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

/*
 * MSG_CTRUNC means some fds did not arrive: either the client sent more
 * than a message may carry (the buffer holds WSYNC_MSG_MAX_FDS), or the
 * broker is at its own descriptor limit and the kernel could not install
 * them. Tell them apart for the log and the client.
 */
static bool rx_out_of_fds(struct loop *l, int msg_flags, int n_fds)
{
	if (!(msg_flags & MSG_CTRUNC)) {
		l->fds_out_logged = false;
		return false;
	}
	if (n_fds >= WSYNC_MSG_MAX_FDS)
		return false;
	if (!l->fds_out_logged)
		log_error("the broker is out of file descriptors (RLIMIT_NOFILE): a "
		          "message's fds could not be received");
	l->fds_out_logged = true;
	return true;
}

static void on_recv(struct loop *l, struct conn *c, int res)
{
	int fds[WSYNC_MSG_MAX_FDS];
	int n_fds = 0, flags = 0;
	bool out_of_fds = false;

	c->inflight--;
	/* Every fd that came with the message is in fds[] from here on and is
	 * closed at the end unless the callee kept it (set it to -1). */
	if (res >= 0) {
		n_fds = rx_fds(&c->rx_mh, fds);
		flags = c->rx_mh.msg_flags;
		out_of_fds = rx_out_of_fds(l, flags, n_fds);
	}
	if (c->closing) {
		/* closed while the recv was pending: nothing more to read */
	} else if (res == -EINTR || res == -EAGAIN) {
		arm_recv(l, c);
	} else {
		l->ops->received(l->ctx, c, res, fds, n_fds, flags, out_of_fds);
		if (!c->closing && res > 0)
			arm_recv(l, c);
	}
	close_fds(fds, n_fds);
	conn_maybe_release(l, c);
}

/*
 * The hangup poll of a muted c completed: res is the poll's events, or
 * -ECANCELED when loop_conn_unmute took it back. A hangup of a connection
 * still muted ends it (the owner hears res 0, as from a recv); otherwise
 * the recv (or, still muted, the poll) is armed again.
 */
static void on_hup(struct loop *l, struct conn *c, int res)
{
	c->inflight--;
	c->hup_armed = false;
	if (c->closing) {
		/* its shutdown completed the poll: nothing more to read */
	} else if (c->muted && res > 0 && (res & (POLLRDHUP | POLLHUP | POLLERR))) {
		l->ops->received(l->ctx, c, 0, NULL, 0, 0, false);
	} else {
		arm_recv(l, c);
	}
	conn_maybe_release(l, c);
}

/* ---- signal, tick, accept ------------------------------------------------- */

static void on_signal(struct loop *l, int res)
{
	l->signal_armed = false;
	if (res == (int)sizeof(l->si))
		l->ops->signal(l->ctx, (int)l->si.ssi_signo);
	else if (res < 0 && res != -EINTR && res != -EAGAIN && res != -ECANCELED)
		log_error("reading the signalfd: %s", strerror(-res));
	if (!l->stopping && res != -ECANCELED)
		arm_signal(l);
}

static void on_tick(struct loop *l, int res)
{
	l->tick_armed = false;
	if (l->stopping || res == -ECANCELED)
		return;
	l->ops->tick(l->ctx);
	/* out of fds earlier: accepting again once a second, never a spin */
	if (!l->accept_armed)
		arm_accept(l);
	arm_tick(l);
}

static void on_timer(struct loop *l)
{
	l->timer_armed = false;
	if (!l->stopping)
		l->ops->timer(l->ctx);
}

static void on_accept(struct loop *l, int res, uint32_t flags)
{
	if (res >= 0 && l->stopping)
		close(res);
	else if (res >= 0)
		l->ops->accepted(l->ctx, res);
	else if (res != -ECANCELED)
		log_warn("accept: %s", strerror(-res));
	if (!(flags & IORING_CQE_F_MORE)) {
		l->accept_armed = false;
		/* Out of fds: try again at the next tick rather than spin. */
		if (!l->stopping && res != -EMFILE && res != -ENFILE && res != -ENOBUFS &&
		    res != -ENOMEM && res != -ECANCELED)
			arm_accept(l);
	}
}

/* Connections closed with nothing in flight: the owner frees them now. */
static void release_idle(struct loop *l)
{
	while (l->idle) {
		struct conn *c = l->idle;

		l->idle = c->idle_next;
		l->conns--;
		l->ops->released(l->ctx, c);
	}
}

/* ---- the wake eventfd ----------------------------------------------------- */

static void arm_wake(struct loop *l)
{
	struct io_uring_sqe *sqe = sqe_get(l);

	io_uring_prep_read(sqe, l->wake_fd, &l->wake_count, sizeof(l->wake_count), 0);
	/* its address tells its CQE from the signalfd's */
	io_uring_sqe_set_data64(sqe, op_data(&l->wake_count, OP_SIGNAL));
	l->wake_armed = true;
}

static void on_wake(struct loop *l, int res)
{
	l->wake_armed = false;
	if (res < 0 && res != -EINTR && res != -EAGAIN && res != -ECANCELED)
		log_error("reading the wake eventfd: %s", strerror(-res));
	if (!l->stopping && res != -ECANCELED)
		arm_wake(l);
	if (res > 0)
		l->ops->woken(l->ctx);
}

int loop_wake_fd(const struct loop *l)
{
	return l->wake_fd;
}

static void dispatch(struct loop *l, uint64_t data, int res, uint32_t flags)
{
	void *p = (void *)(uintptr_t)(data & ~(uint64_t)OP_KIND_MASK);

	switch (data & OP_KIND_MASK) {
	case OP_ACCEPT:  on_accept(l, res, flags); break;
	case OP_SIGNAL:
		if (p == &l->wake_count)
			on_wake(l, res);
		else
			on_signal(l, res);
		break;
	case OP_TICK:
		if (p == &l->timer)
			on_timer(l);
		else
			on_tick(l, res);
		break;
	case OP_RECV:
		if (((struct conn *)p)->hup_armed)
			on_hup(l, p, res);
		else
			on_recv(l, p, res);
		break;
	case OP_SEND:    on_send(l, p, res); break;
	case OP_EVENTFD: on_eventfd(l, p, res); break;
	case OP_CANCEL:  l->cancels--; break;
	default:
		log_error("completion with unknown user data 0x%llx", (unsigned long long)data);
	}
}

/* The oldest completion not dispatched yet: the backlog's (older than any
 * in the CQ), else the CQ's, copied and retired. false if there is none. */
static bool next_cqe(struct loop *l, struct cqe_copy *out)
{
	struct io_uring_cqe *cqe;

	if (l->backlog_head < l->backlog_tail) {
		*out = l->backlog[l->backlog_head++];
		if (l->backlog_head == l->backlog_tail) {
			l->backlog_head = l->backlog_tail = 0;
			l->backlog_logged = false;
		}
		return true;
	}
	if (io_uring_peek_cqe(&l->ring, &cqe) != 0)
		return false;
	*out = (struct cqe_copy){ io_uring_cqe_get_data64(cqe), cqe->res, cqe->flags };
	io_uring_cqe_seen(&l->ring, cqe);
	return true;
}

static void drain_cqes(struct loop *l)
{
	struct cqe_copy c;

	/* Copy and retire each CQE first: a callback may submit, and the CQ
	 * must keep room for what that completes. */
	while (next_cqe(l, &c)) {
		dispatch(l, c.data, c.res, c.flags);
		l->ops->settle(l->ctx);
		release_idle(l);
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

int loop_init(struct loop **out, const struct loop_ops *ops, void *ctx, int listen_fd,
              const int *sigs, int n_sigs)
{
	struct loop *l = fault_calloc(1, sizeof(*l));
	sigset_t set;
	int err;

	if (!l)
		return -ENOMEM;
	l->ops = ops;
	l->ctx = ctx;
	l->listen_fd = listen_fd;
	l->max_notifiers = notifier_cap();
	sigemptyset(&set);
	for (int i = 0; i < n_sigs; i++)
		sigaddset(&set, sigs[i]);
	l->signal_fd = signalfd(-1, &set, SFD_CLOEXEC);
	if (l->signal_fd < 0) {
		err = -errno;
		goto out_free;
	}
	/* blocking: io_uring waits for a read of it instead of failing it */
	l->wake_fd = eventfd(0, EFD_CLOEXEC);
	if (l->wake_fd < 0) {
		err = -errno;
		goto out_close_signal;
	}
	err = ring_init(&l->ring);
	if (err)
		goto out_close_wake;
	arm_accept(l);
	arm_signal(l);
	arm_tick(l);
	arm_wake(l);
	*out = l;
	return 0;

out_close_wake:
	close(l->wake_fd);
out_close_signal:
	close(l->signal_fd);
out_free:
	free(l);
	return err;
}

int loop_run(struct loop *l)
{
	while (!l->stop) {
		int ret = io_uring_submit_and_wait(&l->ring, 1);

		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
			log_error("io_uring: %s", strerror(-ret));
			return ret;
		}
		drain_cqes(l);
	}
	return 0;
}

void loop_stop(struct loop *l)
{
	l->stop = true;
}

static bool loop_busy(const struct loop *l)
{
	return l->conns || l->writes || l->cancels || l->accept_armed || l->signal_armed ||
	       l->tick_armed || l->timer_armed || l->wake_armed;
}

bool loop_drain(struct loop *l, int64_t drain_ns)
{
	struct io_uring_sqe *sqe;
	int64_t deadline = wsync_mono_ns() + drain_ns;

	l->stopping = true;
	/* What the owner queued last (replies, shutdowns) goes out first. */
	io_uring_submit(&l->ring);
	drain_cqes(l);
	/* Then cancel whatever still waits (accept, tick, timer, signal read,
	 * parked eventfd writes). */
	sqe = sqe_get(l);
	io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
	io_uring_sqe_set_data64(sqe, op_data(NULL, OP_CANCEL));
	l->cancels++;
	release_idle(l);
	while (loop_busy(l)) {
		struct __kernel_timespec ts = { .tv_sec = 0, .tv_nsec = 100 * 1000000 };
		struct io_uring_cqe *cqe;

		io_uring_submit(&l->ring);
		io_uring_wait_cqe_timeout(&l->ring, &cqe, &ts);
		drain_cqes(l);
		if (wsync_mono_ns() > deadline)
			return false;
	}
	return true;
}

void loop_free(struct loop *l)
{
	if (!l)
		return;
	io_uring_queue_exit(&l->ring);
	close(l->signal_fd);
	close(l->wake_fd);
	free(l->backlog);
	free(l);
}
