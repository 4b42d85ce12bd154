/*
 * broker/loop.h — the event loop: one thread, one io_uring, no polling.
 *
 * The loop knows sockets, eventfds, timers and signals, and the callbacks it
 * was given (struct loop_ops); it knows nothing of sessions, models or the
 * protocol. Every completion is handed to its callback, and after each one
 * the loop calls ops->settle: the one place where the layer above finishes
 * what the event started (answers owed to others, sessions to tear down).
 * Submissions queued by the callbacks go to the kernel together, at the
 * next io_uring_submit.
 *
 * A connection (struct conn) is owned by the layer above, which embeds it.
 * The loop counts the operations in flight on it; once the owner asked for
 * it to be closed (loop_conn_close) and the last of them completed, the
 * loop calls ops->released and never touches it again. Nothing an
 * operation points at is freed before its completion.
 */
#ifndef WSYNC_BROKER_LOOP_H
#define WSYNC_BROKER_LOOP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "shm/proto.h"

struct loop;

/* CMSG_SPACE(sizeof(int) * WSYNC_MSG_MAX_FDS), spelled as a constant
 * expression that every compiler accepts as an array bound. */
#define LOOP_CMSG_BYTES (sizeof(struct cmsghdr) + \
	((sizeof(int) * WSYNC_MSG_MAX_FDS + sizeof(size_t) - 1) & ~(sizeof(size_t) - 1)))

/* Replies one connection may have queued or in flight at once: well above
 * what one event can owe a session (one direct reply, plus every deferred
 * answer its budgets allow to settle together: readers.h, group.h). A send
 * past it means the peer stopped reading; the owner decides what follows. */
#define LOOP_MAX_SENDS 256

struct conn {
	int      fd;
	uint32_t inflight;               /* ops whose completion is still to come */
	uint32_t sends;                  /* of which sendmsg */
	bool     closing;                /* loop_conn_close was called */
	bool     shutdown_pending;       /* shut down once the sends left */
	bool     muted;                  /* loop_conn_mute: no recv is armed */
	bool     hup_armed;              /* the op in flight is the hangup poll */
	struct conn *idle_next;          /* the loop's, once closed and idle */
	/* the one recvmsg in flight and what it fills */
	union wsync_msg_any rx;
	struct {
		_Alignas(struct cmsghdr) char buf[LOOP_CMSG_BYTES];
	} rx_ctl;
	struct iovec rx_iov;
	struct msghdr rx_mh;
};

/* What the loop calls. ctx is the pointer given to loop_init. */
struct loop_ops {
	/* a new connection (the fd is the callee's) */
	void (*accepted)(void *ctx, int fd);
	/* a message of res bytes (res > 0) in c->rx, with n_fds fds (taken from
	 * the control data; the callee keeps an fd by setting it to -1, the
	 * loop closes the others), msg_flags as recvmsg gave them, and
	 * out_of_fds when MSG_CTRUNC came from the broker's own descriptor
	 * limit; res 0 = the peer closed, res < 0 = -errno. The loop arms the
	 * next recv unless c is closing or muted (loop_conn_mute). */
	void (*received)(void *ctx, struct conn *c, int res, int *fds, int n_fds,
	                 int msg_flags, bool out_of_fds);
	/* a send of c failed or was short (res = -errno, or the bytes sent) */
	void (*send_failed)(void *ctx, struct conn *c, int res);
	/* c was closed and nothing is in flight on it: the callee frees it */
	void (*released)(void *ctx, struct conn *c);
	void (*tick)(void *ctx);         /* every second */
	void (*timer)(void *ctx);        /* the timer of loop_timer_in */
	void (*signal)(void *ctx, int signo);
	/* the wake eventfd (loop_wake_fd) was written: another thread has
	 * something for the owner to look at */
	void (*woken)(void *ctx);
	/* after every completion: the one point where consequences settle */
	void (*settle)(void *ctx);
};

/* Sets up the ring, the signalfd for the signals in sigs (blocked by the
 * caller) and multishot accept on listen_fd: 0 or -errno. */
int  loop_init(struct loop **out, const struct loop_ops *ops, void *ctx, int listen_fd,
               const int *sigs, int n_sigs);
/* Runs until loop_stop: 0, or -errno if the ring failed. */
int  loop_run(struct loop *l);
/* Makes loop_run return after the current completion. */
void loop_stop(struct loop *l);
/* Cancels what the loop itself has armed (accept, tick, signal, timer) and
 * waits up to drain_ns until no operation is in flight (connections must
 * have been closed by then); false if some were still in flight. */
bool loop_drain(struct loop *l, int64_t drain_ns);
/* Frees the ring (after loop_drain). */
void loop_free(struct loop *l);

/* An eventfd another thread writes (8 bytes) to wake the loop, which then
 * calls ops->woken; it stays open until loop_free. */
int  loop_wake_fd(const struct loop *l);

/* Starts receiving on a connection the owner set up (fd set). */
void loop_conn_start(struct loop *l, struct conn *c, int fd);
/*
 * Queues msg (hdr.len bytes) with fds for c. The reply holds duplicates of
 * the fds until its send completed, so it carries the memory they named at
 * this call, whatever the caller closes afterwards (loop.c). 0, -ENOTCONN
 * if c is closing, -ENOBUFS if c has LOOP_MAX_SENDS replies in flight,
 * -ENOMEM, -EMFILE/-ENFILE (no descriptor for a duplicate); nothing else
 * happens (the owner decides what a failure means).
 */
int  loop_send(struct loop *l, struct conn *c, const union wsync_msg_any *msg,
               const int *fds, int n_fds);
/*
 * Stops reading c after the message in hand (or the recv in flight): no recv
 * is armed for it until loop_conn_unmute, so what its peer sends waits in
 * the socket, unread. The loop polls the socket for a hangup meanwhile; on
 * one, ops->received hears res 0 (the peer closed) and what it left unread
 * is never read: a peer that is gone waits for no answer.
 */
void loop_conn_mute(struct loop *l, struct conn *c);
/* Reads c again (its hangup poll is cancelled first). */
void loop_conn_unmute(struct loop *l, struct conn *c);
/* Closes c: its socket is shut down once its queued replies went out; the
 * owner hears ops->released when nothing is in flight any more. Once. */
void loop_conn_close(struct loop *l, struct conn *c);
/* Arms the timer to fire in about ns (sooner than an armed one moves it;
 * later leaves it). */
void loop_timer_in(struct loop *l, int64_t ns);

/*
 * A subscriber's eventfd. Referenced by its owner and by the write in
 * flight (at most one: a pending write already makes the fd readable), so
 * the fd is closed only after the kernel is done with it.
 */
struct notifier;
/* Wraps an eventfd (owned once this returns 0): 0, -EMFILE when the
 * budget of eventfds is spent, -ENOMEM. */
int  loop_notifier_new(struct loop *l, int fd, struct notifier **out);
/* How many eventfds the loop keeps at most (a share of RLIMIT_NOFILE). */
uint32_t loop_notifier_budget(const struct loop *l);
/* Drops the owner's reference; a write still in flight is cancelled. */
void loop_notifier_release(struct loop *l, struct notifier *n);
/* Queues a write of 1 to the eventfd, unless one is already in flight. */
void loop_notify(struct loop *l, struct notifier *n);

#endif
