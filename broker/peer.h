/*
 * broker/peer.h — a client as the state modules see it (models, publish,
 * groups, readers): who it is, the memory it writes (its session page), and
 * which models it has open in which role.
 *
 * A peer is part of a session (session.h), which owns it, sets every field,
 * and removes it from every model, group and wait in its one teardown before
 * the memory goes. State modules hold peer pointers only in structures the
 * session teardown clears (model members, group ranks, reader waits); they
 * read the fields and never act on the session: what a peer must be sent
 * goes through the outbox (outbox.h).
 */
#ifndef WSYNC_BROKER_PEER_H
#define WSYNC_BROKER_PEER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "shm/layout.h"

struct reader_wait;
struct uid_books;

struct peer_model {
	bool     pub;                    /* it publishes the model (alone or as a rank) */
	uint32_t subs;                   /* SUB_OPENs not yet closed */
	uint32_t fds_sent;               /* slots whose rw fd it received */
	uint32_t verify_seen;            /* its page's verify_failed, last tick */
};

struct peer {
	uint32_t id;                     /* session id, never reused in a generation */
	pid_t    pid;
	uid_t    uid;
	char     name[WSYNC_INSTANCE_MAX];
	/* Said HELLO and not torn down yet: its hazards count (a peer marked
	 * for teardown still counts until the teardown ran). */
	bool     active;
	/* Marked for teardown: nothing more is sent to it. */
	bool     doomed;
	/* A deferred answer to it could not be queued (out of memory): the
	 * session layer cuts it off (outbox.h). */
	bool     unanswered;
	uint32_t waits;                  /* its pending WAIT_READERS (readers.c) */
	struct reader_wait *wait_list;   /* them (readers.c) */
	/* its uid's books (uids.h), NULL for the broker's uid and root, whose
	 * budgets are per session */
	struct uid_books *books;
	struct wsync_session_page *page; /* written by the client at any time */
	uint64_t models;                 /* bit i = model i opened */
	struct peer_model m[WSYNC_MAX_MODELS];
};

#endif
