/*
 * broker/events.c — what the broker does with each event of its loop: the
 * callbacks loop.c was given (loop.h), and nothing else.
 *
 *   accepted     a new connection: credentials, the budget of connections
 *                that have not said HELLO, admission (--group)
 *   received     a message to dispatch, or the end of a connection
 *   send_failed  a reply that could not leave: the session is not reading
 *   released     a torn-down session with nothing in flight: freed
 *   tick         each second: heartbeat, the audit of every model's latest,
 *                the monitors' figures, the deadlines of silent connections
 *   timer        group deadlines, readers' waits and muted sessions'
 *                refills, when due
 *   signal       SIGTERM/SIGINT stop the loop; SIGHUP reopens the log
 *   woken        the mover finished a move: its PUB_OPEN is answered
 *   settle       after every event: the teardown point (session_settle)
 *
 * None of these tears a session down itself; they mark it (session_doom)
 * and settle does the rest once the event is handled.
 */
#include "events.h"

#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "auth.h"
#include "dispatch.h"
#include "fault.h"
#include "group.h"
#include "handlers.h"
#include "log.h"
#include "loop.h"
#include "mover.h"
#include "outbox.h"
#include "publish.h"
#include "readers.h"
#include "service.h"
#include "session.h"
#include "state.h"
#include "shm/clock.h"
#include "uids.h"

#define EVENTS_MAX_REJECTED   16                 /* refused peers awaiting an answer */
#define EVENTS_REJECT_WAIT_NS (2 * 1000000000ll) /* ...for their first message */
#define EVENTS_HELLO_WAIT_NS  (2 * 1000000000ll) /* a connection must say HELLO */
#define EVENTS_MAX_PENDING    256                /* connections before their HELLO */
/* ...of which one uid other than the broker's and root holds at most this
 * many together, and one process of the broker's uid or root as many */
#define EVENTS_PENDING_SHARE  32

/* Whether a and a connection of pid/uid count against the same share. */
static bool pending_same(const struct broker *b, const struct session *a, pid_t pid, uid_t uid)
{
	if (uid == b->uid || uid == 0)
		return a->p.uid == uid && a->p.pid == pid;
	return a->p.uid == uid;
}

/* Whether s has said nothing yet: a HELLO already in its socket, which
 * this event's batch has not read yet, is not silence. */
static bool pending_silent(const struct session *s)
{
	int n = 0;

	return ioctl(s->conn.fd, FIONREAD, &n) < 0 || n <= 0;
}

/*
 * Makes room for one more connection that has not said HELLO. A client
 * says HELLO as soon as it connects, so the newest connection is the one
 * most likely to speak: what goes is the oldest silent one of the same
 * share (a uid past EVENTS_PENDING_SHARE cycles through its own), or, with
 * EVENTS_MAX_PENDING in all, the oldest silent one of all. Nobody locks
 * another out, and a burst of clients that connect at once loses none of
 * them: one whose HELLO waits in its socket is never taken for silent.
 */
static void pending_make_room(struct broker *b, pid_t pid, uid_t uid)
{
	struct session *same = NULL, *oldest = NULL;
	uint32_t n_same = 0, n_live = 0;

	for (struct session *s = b->pending_first; s; s = s->pend_next) {
		bool mine;

		if (s->p.doomed)
			continue;
		n_live++;
		mine = pending_same(b, s, pid, uid);
		n_same += mine;
		/* looked at in order, oldest first, until one is silent */
		if ((!oldest || (mine && !same)) && pending_silent(s)) {
			if (!oldest)
				oldest = s;
			if (mine && !same)
				same = s;
		}
	}
	if (n_same >= EVENTS_PENDING_SHARE && same) {
		if (!b->pending_full_logged)
			log_warn("pid %d uid %u keeps %d connections that have not said HELLO: "
			         "closing its oldest as it opens more", (int)pid, (unsigned)uid,
			         EVENTS_PENDING_SHARE);
		b->pending_full_logged = true;
		session_doom(b, same, "no HELLO, and its user opened more connections");
	} else if (n_live >= EVENTS_MAX_PENDING && oldest) {
		if (!b->pending_full_logged)
			log_warn("%d connections have not said HELLO yet: closing the oldest as "
			         "new ones come (latest pid %d uid %u)", EVENTS_MAX_PENDING,
			         (int)pid, (unsigned)uid);
		b->pending_full_logged = true;
		session_doom(b, oldest, "no HELLO, and the broker had too many such connections");
	} else {
		b->pending_full_logged = false;
	}
}

static void on_accepted(void *ctx, int fd)
{
	struct broker *b = ctx;
	struct ucred cred;
	struct session *s;
	bool admitted;
	char why[160];
	int err;

	err = auth_peer(fd, &cred);
	if (err) {
		log_warn("accepted a connection without peer credentials: %s", strerror(-err));
		close(fd);
		return;
	}
	/* Silent connections cost a socket each until their HELLO deadline:
	 * bounded per uid and in all (pending_make_room). Admitted sessions
	 * are bounded by the session table, which they enter at HELLO. */
	admitted = auth_admit(&b->cfg, b->uid, fd, &cred);
	if (admitted)
		pending_make_room(b, cred.pid, cred.uid);
	s = session_new(b, fd, cred.pid, cred.uid, cred.gid);
	if (!s) {
		log_error("out of memory for a session of pid %d", (int)cred.pid);
		return;
	}
	if (!admitted) {
		snprintf(why, sizeof(why), "uid %u is not allowed by broker '%s'",
		         (unsigned)cred.uid, b->cfg.name);
		log_warn("refused pid %d uid %u gid %u: %s", (int)cred.pid,
		         (unsigned)cred.uid, (unsigned)cred.gid,
		         b->cfg.has_group ? "neither the broker's uid nor in its group"
		                          : "not the broker's uid");
		session_reject(b, s, -EPERM, why);
		/* A refused peer gets its answer in reply to its first message
		 * (so it carries that request's seq); too many waiting: now. */
		if (b->n_rejected > EVENTS_MAX_REJECTED)
			dispatch_refusal(b, s, 0, 0);
	} else {
		log_debug("session %u: accepted pid %d uid %u", s->p.id, (int)cred.pid,
		          (unsigned)cred.uid);
	}
}

static void on_received(void *ctx, struct conn *c, int res, int *fds, int n_fds,
                        int msg_flags, bool out_of_fds)
{
	struct broker *b = ctx;
	struct session *s = session_of_conn(c);

	if (s->p.doomed)
		return;
	if (res == 0 && n_fds) {
		session_doom(b, s, "it sent an empty message with fds");
	} else if (res == 0 || res == -ECONNRESET) {
		/* a client that exits or closes: the usual end, logged at debug */
		s->normal_end = true;
		session_doom(b, s, res ? "the client closed its socket with replies unread"
		                       : "the client closed its socket");
	} else if (res < 0) {
		session_doom(b, s, strerror(-res));
	} else {
		s->rx_out_of_fds = out_of_fds;
		dispatch_message(b, s, (size_t)res, msg_flags, fds, n_fds);
	}
}

static void on_send_failed(void *ctx, struct conn *c, int res)
{
	struct broker *b = ctx;
	struct session *s = session_of_conn(c);

	if (res == -EAGAIN) {
		session_doom(b, s, "its socket buffer is full: it does not read its replies");
	} else if (res == -EPIPE || res == -ECONNRESET) {
		/* a client that exited while a reply was on its way: the usual
		 * end, as on the receive path, logged at debug */
		s->normal_end = true;
		session_doom(b, s, "the client closed its socket before a reply reached it");
	} else if (res < 0) {
		session_doom(b, s, strerror(-res));
	} else {
		session_doom(b, s, "short send");
	}
}

static void on_released(void *ctx, struct conn *c)
{
	session_free(ctx, session_of_conn(c));
}

/* jemalloc's control call: the broker links jemalloc (Makefile); weak, so
 * that what links the broker's objects without it (unit tests, fuzzers)
 * still links, and falls back to glibc's trim. */
extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp,
                   size_t newlen) __attribute__((weak));

/* Returns the heap's free pages to the system now rather than as the
 * allocator's decay gets to it. */
static void heap_give_back(void)
{
	/* 4096 is MALLCTL_ARENAS_ALL: every arena */
	if (!mallctl || mallctl("arena.4096.purge", NULL, NULL, NULL, 0) != 0)
		malloc_trim(0);
}

static void on_tick(void *ctx)
{
	struct broker *b = ctx;
	int64_t now = wsync_mono_ns();

	atomic_store(&b->ctl->heartbeat_ns, wsync_real_ns());
	/* before the mirror, which reads the hazards' since_ns against it */
	atomic_store_explicit(&b->ctl->tick_ns, wsync_clock_ns(CLOCK_MONOTONIC_COARSE),
	                      memory_order_relaxed);
	service_watchdog();
	publish_audit(b);
	session_mirror_stats(b);
	uids_tick(b);
	/* a big layout or folded version floors were freed: the heap keeps
	 * their pages unless asked to give them back */
	if (state_trim_due(b->floors) || b->trim_due) {
		b->trim_due = false;
		heap_give_back();
	}
	/* Marking never frees (only the loop's release does): the walk stays
	 * valid. */
	for (struct session *s = b->all_sessions; s; s = s->all_next) {
		int64_t age = now - s->accepted_mono_ns;

		if (s->p.doomed)
			continue;
		if (s->state == SESSION_REJECTED && age > EVENTS_REJECT_WAIT_NS) {
			dispatch_refusal(b, s, 0, 0);
		} else if (s->state == SESSION_NEW && age > b->hello_wait_ns) {
			log_info("session %u pid %d sent no HELLO within %lld ms: closed",
			         s->p.id, (int)s->p.pid, (long long)(b->hello_wait_ns / 1000000));
			session_doom(b, s, "no HELLO in time");
		}
	}
}

static void on_timer(void *ctx)
{
	struct broker *b = ctx;
	int64_t next = group_poll(b), readers = readers_poll(b), muted = session_unmute_due(b);

	if (readers >= 0 && (next < 0 || readers < next))
		next = readers;
	if (muted >= 0 && (next < 0 || muted < next))
		next = muted;
	if (next >= 0)
		outbox_timer_in(&b->out, next);
}

static void on_signal(void *ctx, int signo)
{
	struct broker *b = ctx;
	int err;

	if (signo != SIGHUP) {
		log_info("SIG%s received: shutting down", sigabbrev_np(signo));
		loop_stop(b->loop);
		return;
	}
	/* a closed terminal, or logrotate: never a reason to stop */
	service_reloading();
	err = log_reopen();
	if (err)
		log_error("SIGHUP: cannot reopen the log file %s: %s; still writing to the "
		          "old one", b->cfg.log_file, strerror(-err));
	else
		log_info("SIGHUP received: %s", b->cfg.log_file[0] ? "log file reopened"
		                                                   : "nothing to reload");
	service_ready("serving");
}

static void on_woken(void *ctx)
{
	handle_pub_open_moved(ctx);
}

static void on_settle(void *ctx)
{
	session_settle(ctx);
}

static const struct loop_ops broker_events = {
	.accepted    = on_accepted,
	.received    = on_received,
	.send_failed = on_send_failed,
	.released    = on_released,
	.tick        = on_tick,
	.timer       = on_timer,
	.signal      = on_signal,
	.woken       = on_woken,
	.settle      = on_settle,
};

int events_start(struct broker *b)
{
	static const int sigs[] = { SIGTERM, SIGINT, SIGHUP };
	int err;

	b->hello_wait_ns = fault_hello_wait_ns(EVENTS_HELLO_WAIT_NS);
	outbox_init(&b->out);
	err = loop_init(&b->loop, &broker_events, b, b->listen_fd, sigs,
	                (int)(sizeof(sigs) / sizeof(sigs[0])));
	if (err)
		return err;
	err = mover_start(&b->mover, loop_wake_fd(b->loop));
	if (err) {
		loop_free(b->loop);
		b->loop = NULL;
	}
	return err;
}
