/*
 * broker/loop.h — the event loop: one thread, one io_uring.
 *
 * Everything the broker does happens in a completion handler of this loop:
 * accepting, receiving a request, a finished send, a signal, the 1 s tick.
 * Handlers queue their replies and eventfd writes as SQEs; they all go to
 * the kernel in the next io_uring_submit, together.
 */
#ifndef WSYNC_BROKER_LOOP_H
#define WSYNC_BROKER_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "broker.h"
#include "shm/proto.h"

/* Replies a session may have in flight before it counts as not reading. */
#define LOOP_MAX_SENDS 32

/*
 * A subscriber's eventfd. Referenced by its session and by the write in
 * flight (at most one: a pending write already makes the fd readable), so
 * the fd is closed only after the kernel is done with it.
 */
struct loop;
struct notifier {
	_Alignas(8) int fd;              /* aligned: user_data keeps a tag below */
	uint32_t refs;
	bool     writing;
	struct loop *loop;               /* counts it against the budget */
};

/* Wraps an eventfd (owned once this returns 0): 0, -EMFILE when the
 * broker's budget of NOTIFY eventfds is spent, -ENOMEM. */
int  notifier_new(struct broker *b, int fd, struct notifier **out);
/* How many NOTIFY eventfds the broker keeps at most. */
uint32_t loop_notifier_budget(const struct broker *b);
/* Drops the session's reference; a write still in flight is cancelled. */
void loop_notifier_release(struct broker *b, struct notifier *n);

int  loop_init(struct broker *b);
/* Runs until SIGTERM/SIGINT: 0, or -errno if the ring failed. */
int  loop_run(struct broker *b);
/* Disconnects every session and waits until no operation is in flight. */
void loop_shutdown(struct broker *b);
void loop_exit(struct broker *b);

/*
 * Queues msg (hdr.len bytes) with fds for s. The fds must stay open until
 * the send completes (they are broker-owned and live at least as long as s).
 * 0, or -ENOTCONN if s is closing, -ENOBUFS if s stopped reading (it is
 * being disconnected then).
 */
int  loop_send(struct broker *b, struct session *s, const union wsync_msg_any *msg,
               const int *fds, int n_fds);
/* Queues a write of 1 to the eventfd, unless one is already in flight. */
void loop_notify(struct broker *b, struct notifier *n);
/* Called once a session is reaped: shuts its socket down as soon as its
 * queued replies went out; the session is freed when its last op completes. */
void loop_close_session(struct broker *b, struct session *s);
/* Calls readers_poll() in about ns, and again while it says waits are
 * pending; nothing if such a call is already due. */
void loop_poll_soon(struct broker *b, int64_t ns);

#endif
