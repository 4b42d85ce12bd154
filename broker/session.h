/*
 * broker/session.h — one connected client, and the one place it ends.
 *
 * A session is accepted (NEW), says HELLO (ACTIVE) and ends (CLOSING). A
 * peer that is not admitted becomes REJECTED: its first message is answered
 * with the refusal, then it ends.
 *
 * Ending is two steps (DESIGN invariant 9). Whatever notices that a session
 * must go (a hang-up, a protocol violation, a reply queue that does not
 * drain, out of memory, the broker stopping) only marks it: session_doom
 * records the first reason and puts it on the doomed list; nothing else
 * happens, so it is safe anywhere, inside any scan or send. The teardown —
 * leaving its groups (the other ranks are answered), settling its grants,
 * dropping its subscriptions, notifiers, pending waits and ctl entry, and
 * closing its socket — runs only in session_settle, which the loop calls
 * after each event, once per session. The session's memory outlives the
 * teardown until every io_uring op naming it completed (loop.h).
 */
#ifndef WSYNC_BROKER_SESSION_H
#define WSYNC_BROKER_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "broker.h"
#include "loop.h"
#include "peer.h"
#include "shm/proto.h"

struct model;
struct notifier;

#define SESSION_MAX_INVALID 16
/* Models one session may keep in the table by subscribing to names nobody
 * publishes (model_awaited): a collector started before its trainers needs
 * a few, and a quarter of the table leaves the rest to publishers. Past it
 * a SUB_OPEN that would declare a model is refused with -ENOBUFS. */
#define SESSION_MAX_AWAITED (WSYNC_MAX_MODELS / 4)
/* The same budget for all the sessions of one uid admitted through --group
 * (not the broker's own uid, not root): the security boundary is the uid
 * (DESIGN invariant 5), so another user cannot take the table with many
 * sessions either. */
#define UID_MAX_AWAITED     SESSION_MAX_AWAITED
#define SESSION_WHY_MAX     160

enum session_state {
	SESSION_NEW,
	SESSION_ACTIVE,
	SESSION_REJECTED,
	SESSION_CLOSING,                 /* torn down; freed when its io is done */
};

struct session {
	struct peer p;                   /* what the state modules see */
	struct conn conn;                /* the loop's part */
	enum session_state state;
	int      index;                  /* in b->sessions and the ctl table, -1 = none */
	gid_t    gid;
	int64_t  connected_ns;           /* CLOCK_REALTIME */
	int64_t  accepted_mono_ns;
	int      page_fd;
	uint32_t invalid;                /* protocol errors so far */
	bool     rx_out_of_fds;          /* the message's fds were lost to the
	                                    broker's own descriptor limit */
	bool     normal_end;             /* it closed its socket: logged at debug */
	int      reject_err;
	char     reject_why[SESSION_WHY_MAX];
	char     doom_why[SESSION_WHY_MAX];
	struct notifier *ev[WSYNC_MAX_MODELS];   /* NOTIFY eventfds */
	uint32_t fds_unread;             /* fds in replies its peer has not read */
	struct session *doomed_next;
	struct session *all_next, **all_pprev;
	/* while NEW: the broker's connections waiting for HELLO, oldest first
	 * (b->pending_first) */
	struct session *pend_next, *pend_prev;
	/* muted (session_mute): on b->muted, its socket not read */
	bool     muted;
	struct session *mute_next, **mute_pprev;
};

static inline struct session *session_of_peer(struct peer *p)
{
	return (struct session *)((char *)p - offsetof(struct session, p));
}
static inline struct session *session_of_conn(struct conn *c)
{
	return (struct session *)((char *)c - offsetof(struct session, conn));
}

/* A session for an accepted socket (which it then owns), receiving; NULL
 * when out of memory (the socket is closed then). */
struct session *session_new(struct broker *b, int fd, pid_t pid, uid_t uid, gid_t gid);
/* Marks a peer refused: its first message gets err and why. */
void session_reject(struct broker *b, struct session *s, int err, const char *why);
/* HELLO: session table entry (-EAGAIN when full), session page and ctl
 * entry. 0 or -errno with a reason in why. */
int  session_hello(struct broker *b, struct session *s, const char *name,
                   char *why, size_t whylen);

/*
 * Sends a reply. 0; -ENOTCONN if s is ending; or the loop's failure, after
 * which s is doomed (a reply queue that does not drain, out of memory): the
 * caller just returns.
 */
int  session_send(struct broker *b, struct session *s, const union wsync_msg_any *msg,
                  const int *fds, int n_fds);
/*
 * Whether a reply carrying fds may go to s now: 0, or -ENOBUFS with the
 * reason in why when the fds its peer (its uid's sessions, for a uid other
 * than the broker's and root) has not read are at the share (uids.h).
 */
int  session_fds_budget(struct broker *b, struct session *s, char *why, size_t whylen);
/* An ERROR reply to request seq of type req_type. */
void session_send_error(struct broker *b, struct session *s, uint32_t seq,
                        uint32_t req_type, int err, const char *why);

/*
 * Pacing (uids.h): s asked its uid for work while the uid's bucket was
 * empty, and was answered; its socket is not read again (loop_conn_mute)
 * until the bucket refilled, wait_ns from now, when session_unmute_due
 * finds it. What its peer sends meanwhile waits in the socket, unread; a
 * hangup still ends it at once (the loop polls for one).
 */
void session_mute(struct broker *b, struct session *s, int64_t wait_ns);
/* Reads again every muted session whose uid's bucket refilled: ns until the
 * next one is due, -1 when none is muted (the timer, events.c). */
int64_t session_unmute_due(struct broker *b);

/* Marks s to be torn down for why (the first reason is kept). Only marks. */
void session_doom(struct broker *b, struct session *s, const char *why);
/* Marks every session (the broker is stopping). */
void session_doom_all(struct broker *b, const char *why);
/*
 * The teardown point: delivers what state modules queued (outbox.h), then
 * tears down each doomed session, again and again until neither is left
 * (a teardown may owe others answers; their sends may doom them in turn).
 * Called by the loop after every event and at shutdown; never re-entered.
 */
void session_settle(struct broker *b);
/* Frees a torn-down session with nothing in flight (the loop's release). */
void session_free(struct broker *b, struct session *s);

/* Opening and closing models: membership, bitmask, ctl mirror. */
int  session_open_model(struct broker *b, struct session *s, struct model *m);
/* How many of the models s subscribes to are awaited (model_awaited):
 * what its SESSION_MAX_AWAITED budget counts. */
uint32_t session_awaited(const struct broker *b, const struct session *s);
/* How many models the sessions of uid together keep awaited (each counted
 * once): what UID_MAX_AWAITED counts. */
uint32_t uid_awaited(const struct broker *b, uid_t uid);
/* Lets go of m once s neither publishes nor subscribes to it; m may be
 * freed (a never-published model nobody has open), so callers must not use
 * it afterwards. */
void session_release_model(struct broker *b, struct session *s, struct model *m);
/* s stops publishing m (alone or as a group's rank): grants settled, the
 * group's version in progress dropped. */
void session_leave_pub(struct broker *b, struct session *s, struct model *m, const char *why);
/* Deletes m: every member forgets it (subscriptions and notifier), then
 * model_delete. m must have no publisher. */
void session_delete_model(struct broker *b, struct model *m, const char *why);
/* Mirrors s's roles and models into its ctl entry. */
void session_mirror(struct broker *b, struct session *s);
/* Mirrors the models' and every active session's figures for monitors
 * (monitor.h, stats.h) and stamps the ctl header's stats_ns, once a tick. */
void session_mirror_stats(struct broker *b);

#endif
