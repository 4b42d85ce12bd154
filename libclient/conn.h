/*
 * libclient/conn.h — requests and replies on a client's session socket
 * (conn.c), and the registry of replies collected later.
 */
#ifndef WSYNC_CONN_H
#define WSYNC_CONN_H

#include <stdbool.h>
#include <stdint.h>

#include "client.h"
#include "shm/proto.h"

/* One received message and the fds that came with it. */
struct conn_reply {
	union wsync_msg_any msg;
	int fds[WSYNC_MSG_MAX_FDS];
	int n_fds;
};

/*
 * A reply its owner collects later: the answer to a request whose caller
 * stopped waiting for it (a BEGIN past its deadline) or never waited (an
 * async COMMIT). While seq is registered, a receive that meets this reply on
 * the way to another one parks it here instead of dropping it.
 */
struct conn_await {
	struct conn_await *next;         /* in c->awaits while seq != 0 */
	uint32_t seq;                    /* the request; 0 = nothing awaited */
	uint32_t req_type;               /* its type, for the error message */
	uint32_t want;                   /* the reply it expects (or ERROR) */
	bool     ready;                  /* rep holds the reply */
	struct conn_reply rep;           /* with its fds */
};

/* Marks the connection unusable; later requests fail with -ENOTCONN. */
void wsync_conn_mark_dead(struct wsync_client *c, const char *why);
/* -ENOTCONN with the reason the client died. Caller holds the lock. */
int wsync_conn_fail_dead(struct wsync_client *c);
/* Polls the socket without waiting: true (and the client marked dead) if
 * the broker hung up. */
bool wsync_conn_hung_up(struct wsync_client *c);
/* Next request number (never 0). Caller holds the lock. */
uint32_t wsync_conn_next_seq(struct wsync_client *c);
/* Sends a request whose header is filled (wsync_msg_init), with fds. */
int wsync_conn_send(struct wsync_client *c, const union wsync_msg_any *req,
                    const int *fds, int n_fds);
/*
 * Receives until the reply of seq arrives or deadline_ns (CLOCK_MONOTONIC;
 * -1 = the client's reply limit; see wsync_conn_deadline) passes. Replies
 * that others collect later (registered with wsync_conn_await) are parked
 * in their registrations; replies to requests nobody waits for any more are
 * dropped or undone (conn.c). An ERROR reply becomes its error code and
 * message, with its fds closed. A reply of another type than want, or one
 * to a request not yet sent, is -EPROTO and the connection is given up. A
 * timeout leaves the connection usable. Caller holds the lock.
 */
int wsync_conn_recv(struct wsync_client *c, uint32_t seq, uint32_t want,
                    int64_t deadline_ns, struct conn_reply *rep);
/* send + recv of the reply by the client's reply limit, under the lock
 * the caller holds. */
int wsync_conn_call(struct wsync_client *c, union wsync_msg_any *req,
                    const int *fds, int n_fds, uint32_t want,
                    struct conn_reply *rep);
/* The same by deadline_ns (see wsync_conn_deadline). On -ETIMEDOUT the
 * request stays sent: its reply is dropped when it comes (conn_stale), and
 * *seq_out (may be NULL) says which it was. */
int wsync_conn_call_by(struct wsync_client *c, union wsync_msg_any *req,
                       const int *fds, int n_fds, uint32_t want, int64_t deadline_ns,
                       uint32_t *seq_out, struct conn_reply *rep);
/* Sends a request whose reply nobody waits for: it is dropped when it
 * comes. For CLOSE and ABORT on the way out, which must not wait for a
 * broker that may be stopped. Caller holds the lock. */
int wsync_conn_post(struct wsync_client *c, union wsync_msg_any *req);
/* The deadline for a round trip of a call given deadline_ns
 * (CLOCK_MONOTONIC, -1 = none): never past the reply limit, never sooner
 * than WSYNC_RTT_GRACE_NS from now, so that a call with timeout 0 can still
 * make one round trip to a broker that answers. */
int64_t wsync_conn_deadline(const struct wsync_client *c, int64_t deadline_ns);
#define WSYNC_RTT_GRACE_NS 5000000       /* 5 ms */

/* Registers a for the reply of request seq, sent already as a req_type
 * that expects want. A registration ends when the reply is collected or
 * cancelled. Caller holds the lock. */
void wsync_conn_await(struct wsync_client *c, struct conn_await *a, uint32_t seq,
                      uint32_t req_type, uint32_t want);
/* The awaited reply by deadline_ns (-1: the reply limit): 0 and the reply,
 * its error code for an ERROR (fds closed), -ETIMEDOUT with the reply
 * still awaited, or another error that ends the registration. Caller holds
 * the lock. */
int wsync_conn_await_collect(struct wsync_client *c, struct conn_await *a,
                             int64_t deadline_ns, struct conn_reply *rep);
/* Ends a registration without collecting it (nothing if none), closing the
 * fds of a reply that came meanwhile. Caller holds the lock. */
void wsync_conn_await_cancel(struct wsync_client *c, struct conn_await *a);

/* Closes rep->fds[from..]. */
void wsync_reply_close_fds(struct conn_reply *rep, int from);
/* Converts an ERROR message into its error code and detail message. */
int wsync_conn_error(const struct wsync_msg_error *e, uint32_t req_type);

#endif /* WSYNC_CONN_H */
