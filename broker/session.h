/*
 * broker/session.h — one connected client.
 *
 * A session is accepted (NEW), says HELLO (ACTIVE) and is eventually reaped
 * (CLOSING): its grants settled, subscriptions dropped, ctl entry cleared.
 * Its memory outlives the reap until every io_uring op naming it completed.
 * A peer that is not admitted becomes REJECTED: its first message is
 * answered with the refusal, then it is closed.
 */
#ifndef WSYNC_BROKER_SESSION_H
#define WSYNC_BROKER_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "broker.h"
#include "shm/proto.h"

struct model;
struct notifier;

#define SESSION_MAX_INVALID 16

enum session_state {
	SESSION_NEW,
	SESSION_ACTIVE,
	SESSION_REJECTED,
	SESSION_CLOSING,
};

struct session_model {
	bool     pub;                    /* it publishes the model */
	uint32_t subs;                   /* SUB_OPENs not yet closed */
	uint32_t fds_sent;               /* slots whose rw fd it received */
	struct notifier *ev;             /* NOTIFY eventfd */
};

/* CMSG_SPACE(sizeof(int) * WSYNC_MSG_MAX_FDS), spelled as a constant
 * expression that every compiler accepts as an array bound. */
#define SESSION_CMSG_BYTES (sizeof(struct cmsghdr) + \
	((sizeof(int) * WSYNC_MSG_MAX_FDS + sizeof(size_t) - 1) & ~(sizeof(size_t) - 1)))

struct session_rx {
	union wsync_msg_any msg;
	struct {
		_Alignas(struct cmsghdr) char buf[SESSION_CMSG_BYTES];
	} ctl;
	struct iovec iov;
	struct msghdr mh;
	bool     out_of_fds;             /* MSG_CTRUNC because the broker hit
	                                    RLIMIT_NOFILE, not the client */
};

struct session {
	uint32_t id;
	int      index;                  /* in b->sessions and the ctl table, -1 = none */
	enum session_state state;
	int      fd;
	pid_t    pid;
	uid_t    uid;
	gid_t    gid;
	char     name[WSYNC_INSTANCE_MAX];
	int64_t  connected_ns;           /* CLOCK_REALTIME */
	int64_t  accepted_mono_ns;
	int      page_fd;
	struct wsync_session_page *page; /* written by the client at any time */
	uint64_t models;                 /* bit i = model i opened */
	uint32_t invalid;                /* protocol errors so far */
	int      reject_err;
	char     reject_why[160];
	struct session_model m[WSYNC_MAX_MODELS];

	/* io state, owned by loop.c */
	struct session *all_next, **all_pprev;
	uint32_t inflight;               /* ops whose CQE is still to come */
	uint32_t sends;                  /* of which sendmsg */
	bool     shutdown_pending;
	struct session_rx rx;
};

/* Allocates a session for an accepted socket (which it then owns). */
struct session *session_new(struct broker *b, int fd, pid_t pid, uid_t uid, gid_t gid);
/* Takes an entry of the session table: 0 or -EAGAIN (table full). Done by
 * session_hello. */
int  session_admit(struct broker *b, struct session *s);
/* Marks a peer refused: its first message gets err and why. */
void session_reject(struct broker *b, struct session *s, int err, const char *why);
/* HELLO: session table entry (-EAGAIN when full), session page and ctl
 * entry. 0 or -errno with a reason in why. */
int  session_hello(struct broker *b, struct session *s, const char *name,
                   char *why, size_t whylen);

/* Opening and closing models: membership, bitmask, ctl mirror. */
int  session_open_model(struct broker *b, struct session *s, struct model *m);
/* Lets go of m once s neither publishes nor subscribes to it; m may be
 * freed (a never-published model nobody has open), so callers must not
 * use it afterwards. */
void session_release_model(struct broker *b, struct session *s, struct model *m);
void session_mirror(struct broker *b, struct session *s);
/* Forgets m entirely (it is being deleted; s does not publish it): its
 * subscriptions and notifier go, without freeing m. */
void session_forget_model(struct broker *b, struct session *s, struct model *m);

/*
 * Reaps a session (any reason): settles what it published, drops its
 * subscriptions, clears its ctl entry, logs why, and lets the loop close the
 * socket. Idempotent. The session stays allocated until its io is done.
 */
void session_disconnect(struct broker *b, struct session *s, const char *why);
/* Frees a closed session with nothing in flight (called by the loop). */
void session_free(struct broker *b, struct session *s);

#endif
