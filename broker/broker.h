/*
 * broker/broker.h — the broker's state, passed to every part as `b`.
 *
 * One thread owns all of it; nothing here is shared with another thread,
 * except the one move in progress, whose worker's fields change hands
 * through the mover's lock (mover.c); the moves queued behind it are the
 * loop's alone until they are handed over.
 * What clients see of it is mirrored into the control segment (ctl.h).
 */
#ifndef WSYNC_BROKER_BROKER_H
#define WSYNC_BROKER_BROKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "config.h"
#include "outbox.h"
#include "shm/layout.h"
#include "shm/segment.h"

struct session;
struct model;
struct loop;
struct hwm_floors;
struct reader_wait;
struct uid_books;
struct mover;
struct model_move;

struct broker {
	struct config cfg;
	uid_t    uid;
	pid_t    pid;
	uint64_t generation;
	int64_t  started_ns;

	/* this generation's private directory in /dev/shm (shm/segment.h),
	 * named in <rundir>/<name>.state once the generation is installed */
	int      seg_dirfd;
	char     seg_dir[WSYNC_SHM_NAME_MAX];
	char     state_path[PATH_MAX];

	/* control segment: broker writes, clients map read-only */
	int      ctl_fd, ctl_ro_fd;
	bool     ctl_alive_held;          /* ctl->broker_alive locked (ctl.c) */
	struct wsync_ctl_header *ctl;

	bool     stopping;                /* broker_stop has begun */
	/* Moves copy a latest slab (on the mover's thread, or in the loop:
	 * model_rotate): the CPU time they may take, a bucket that fills at a
	 * tenth of real time up to MODEL_MOVE_BURST_NS and that each move
	 * drains by its CPU time;
	 * while it is below zero, publishers of other uids than the broker's
	 * and root are refused PUB_OPEN (model_move_wait_ns), however many
	 * models a uid cycles through. */
	int64_t  move_credit_ns;
	int64_t  move_credit_at_ns;            /* when it was last filled, 0 = never */
	int64_t  moved_ns;                     /* all moves' time: a request that
	                                          moved a model is charged the rest
	                                          of its time only (dispatch.c) */

	/* the worker thread of moves and the one move in progress, NULL if
	 * none (model.h, model_move_start); departures' moves waiting for the
	 * worker, oldest first (model_move_leave) */
	struct mover      *mover;
	struct model_move *move;
	struct model_move *move_queue;

	struct model   *models[WSYNC_MAX_MODELS];
	uint64_t        shm_used;              /* slab bytes of all models */
	bool            trim_due;              /* much heap freed: malloc_trim at
	                                          the next tick (events.c) */

	struct session *sessions[WSYNC_MAX_SESSIONS];  /* admitted, by table index */
	uint32_t        n_sessions;            /* entries in use in sessions[] */
	uint32_t        next_session_id;       /* never reused in a generation */
	struct session *all_sessions;          /* every allocated session */
	struct session *doomed;                /* marked for teardown (session.h) */
	uint32_t        n_rejected;            /* refused peers awaiting their answer */
	uint64_t        incarnations;          /* last model incarnation given */
	uint32_t        n_pending;             /* accepted, no HELLO yet (SESSION_NEW) */
	struct session *pending_first, *pending_last;  /* those, oldest first */
	struct session *muted;                 /* not read until their uid's work
	                                          bucket refills (session_mute) */
	uint32_t        n_muted;
	bool            pending_full_logged;   /* one line per spell (events.c) */
	int64_t         hello_wait_ns;         /* a connection must say HELLO by then */

	/* what state modules owe the layer above (outbox.h), and pending
	 * WAIT_READERS per model (readers.c) */
	struct outbox   out;
	struct reader_wait *reader_waits[WSYNC_MAX_MODELS];

	/* what the sessions of each uid other than the broker's and root
	 * hold together (uids.h), and the fds in flight budgets */
	struct uid_books **uids;
	uint32_t n_uids, uids_cap;
	uint32_t fds_share;                    /* per uid, per trusted session */
	uint32_t fds_others_max, fds_others;   /* all untrusted uids together */

	struct hwm_floors *floors;             /* from <rundir>/<name>.versions */
	bool     hugetlb_ok, thp_ok;           /* huge pages to try (pages.c) */

	struct loop *loop;
	int      lock_fd, listen_fd;
	struct stat sock_bound;                /* the socket inode we bound */
	bool     pointed;                      /* we made <socket>.wsync (rundir.h) */
	struct stat pointer_made;              /* its inode */
	char     versions_path[PATH_MAX];
	char     lock_path[PATH_MAX];
};

/* Startup through a listening socket and a running event loop; on failure a
 * message was printed and everything undone. */
int  broker_start(struct broker *b, const struct config *cfg);
/* Clean shutdown: wake all waiters, save versions, release everything. */
void broker_stop(struct broker *b);

#endif
