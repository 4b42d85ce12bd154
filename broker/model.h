/*
 * broker/model.h — the model table.
 *
 * A model is DECLARED when first opened (it has a model page, so subscribers
 * can wait on it) and READY once a publisher gave it a layout (layout
 * segment and n_slots slabs exist). A READY model with a version lives
 * until the broker stops; a DECLARED one, or a READY one that never got a
 * version, is dropped when nobody has it open any more (its hwm stays
 * behind as the name's version floor), so names merely subscribed to, or
 * publishers opened and left without committing, cannot fill the table or
 * hold slab memory. Every field a client can see is
 * mirrored into the model's ctl entry.
 */
#ifndef WSYNC_BROKER_MODEL_H
#define WSYNC_BROKER_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "broker.h"
#include "slots.h"
#include "stats.h"
#include "shm/layout.h"
#include "shm/proto.h"

struct pub_group;
struct gpu_slabs;
struct peer;

/* The GPUs a PUB_OPEN asks a model to live on (n 0 = a host model). */
struct model_devices {
	uint32_t n;
	uint32_t flags;                  /* enum wsync_dev_flags */
	const uint8_t (*uuid)[16];
};

/* Moves (model_rotate) a model may make per second: a publisher of
 * another uid than the broker's and root is refused PUB_OPEN past it. */
#define MODEL_MOVE_BUDGET 4
#define MODEL_MOVE_WINDOW_NS INT64_C(1000000000)
/* Moves may take a tenth of the broker's time (MODEL_MOVE_SHARE), in
 * bursts of up to MODEL_MOVE_BURST_NS (broker.h, move_credit_ns). */
#define MODEL_MOVE_SHARE 10
#define MODEL_MOVE_BURST_NS INT64_C(250000000)

struct model {
	uint32_t id;
	uint32_t state;                  /* enum wsync_model_state */
	uint64_t incarnation;            /* broker-wide, given at declare and at
	                                    model_rotate */
	uint64_t base_incarnation;       /* the one given at declare */
	char     name[WSYNC_NAME_MAX];
	struct wsync_ctl_model *ctl;

	int      page_fd, page_ro_fd;
	struct wsync_model_page *page;   /* the publisher writes it too */

	/* READY only */
	int      layout_ro_fd;
	uint64_t layout_bytes;
	wsync_tensor_desc *tensors;      /* canonical copy */
	uint32_t n_tensors;
	uint64_t bytes;                  /* one slab */
	uint32_t slab_pages;             /* enum wsync_slab_pages (pages.h) */
	uint64_t seg_bytes;              /* one slab object: bytes, or rounded
	                                    up to huge pages; its mapping length */
	uint64_t hash;
	uint64_t accounted;              /* slab bytes counted against the limit */
	struct slot_books books;
	int      slab_fd[WSYNC_MAX_SLOTS];
	int      slab_ro_fd[WSYNC_MAX_SLOTS];
	/* a device model: its slots on each GPU (the host slabs then hold
	 * the host mirror, or nothing: created empty and never mapped with
	 * backing when the model has no mirror) */
	struct gpu_slabs *gpu;
	bool     gpu_unbacked;           /* host slabs are unbacked memfds */

	/* publishing: one publisher (pub), or a group of ranks (group.h,
	 * which alone makes and frees it) */
	struct peer *pub;
	struct pub_group *group;
	bool     granted;
	uint32_t grant_slot;
	uint64_t grant_version;
	bool     busy_logged;            /* one info line per busy spell */
	bool     forged_logged;          /* one warning per forged-latest spell */
	uid_t    owner;                  /* WSYNC_OWNER_NONE until READY (layout.h) */
	/* The uid whose publishers were handed this page's and these slabs'
	 * rw fds (has_writer once one was): a publisher of another uid gets
	 * memory of its own first, and a publisher of a uid other than the
	 * broker's and root loses the memory when it leaves (model_rotate). */
	bool     has_writer;
	uid_t    writer_uid;
	/* when its last MODEL_MOVE_BUDGET moves happened (CLOCK_MONOTONIC
	 * ns, a ring at moves % MODEL_MOVE_BUDGET): each copies the latest
	 * slab, so a uid that opens, commits and leaves
	 * again and again is refused past the budget (model_move_budget_left) */
	int64_t  move_ns[MODEL_MOVE_BUDGET];
	uint64_t moves;
	struct model_move *move;         /* its move, on the worker or queued for
	                                    it (model_moving), NULL if none */
	bool     withdrawn;              /* its latest was withdrawn (a failed move)
	                                    and no version committed since: it still
	                                    has versions and an owner, so it stays */
	uint64_t hwm;                    /* highest version ever granted */
	uint64_t latest;                 /* last validated value of page->latest */

	struct stats_history hist;       /* its commits, for monitors (monitor.c) */

	struct peer **members;           /* peers that opened it, dense */
	uint32_t n_members;
	uint32_t subscribers;            /* sessions subscribed */
};

/* Whether uid may delete or replace m: its owner, the broker's uid, root;
 * anyone admitted while it has no owner (never published). */
static inline bool model_owned_by(const struct model *m, uid_t uid, uid_t broker_uid)
{
	return m->owner == (uid_t)WSYNC_OWNER_NONE || uid == m->owner ||
	       uid == broker_uid || uid == 0;
}

/* Whether anybody publishes m (one publisher or a group's ranks). */
static inline bool model_published(const struct model *m)
{
	return m->pub || m->group;
}

/* Whether m exists only because sessions have it open: nobody publishes
 * it and it holds no version (DECLARED, or READY with no commit). Such a
 * model goes once nobody has it open (model_drop_if_unused); until then it
 * takes a table entry, which is why subscribers get a budget of them
 * (SESSION_MAX_AWAITED, session.h). */
static inline bool model_awaited(const struct model *m)
{
	return !model_published(m) && !m->granted &&
	       (m->state == WSYNC_MODEL_DECLARED ||
	        (m->state == WSYNC_MODEL_READY && !m->withdrawn &&
	         wsync_latest_slot(m->latest) == WSYNC_SLOT_NONE));
}

/* Whether m may move once more now: fewer than MODEL_MOVE_BUDGET moves in
 * the last MODEL_MOVE_WINDOW_NS. */
static inline bool model_move_budget_left(const struct model *m, int64_t now_ns)
{
	return m->moves < MODEL_MOVE_BUDGET ||
	       now_ns - m->move_ns[m->moves % MODEL_MOVE_BUDGET] >= MODEL_MOVE_WINDOW_NS;
}

/* Freeing a layout at least this big asks the tick to return the heap's
 * free memory to the system (broker.h, trim_due). */
#define MODEL_TRIM_BYTES (256 * 1024)

/*
 * A move (model_move_start, model_move_leave): new slabs made and the
 * latest version copied by the worker thread (mover.h), applied by the
 * loop when the worker is done (model_move_finish). One on the worker at a
 * time: b->move. Departures' moves that find it busy wait in b->move_queue,
 * oldest first, prepared (the latest slab mapped) but not submitted: the
 * loop hands the next one over as each is done (model_move_next), so a
 * uid that leaves many models at once never has them copied in the loop.
 */
struct model_move {
	/* the loop's, at any time */
	struct model *m;                 /* NULL once m was removed mid-move */
	struct model_move *next;         /* in b->move_queue */
	struct peer *requester;          /* the PUB_OPEN waiting for it, NULL if
	                                    none or once its session ended */
	union wsync_msg_any open;        /* that request: its seq, its arguments */
	void    *parts;                  /* its group's parts (free'd with it) */
	struct peer *closer;             /* the CLOSE that made it (for_leave),
	                                    answered when it is done; NULL if
	                                    none or once its session ended */
	union wsync_msg_any close;       /* that request */
	bool     for_leave;              /* made because a publisher of left_uid
	                                    left (publish_revoke): applied even
	                                    with nobody waiting */
	uid_t    left_uid;
	char     reason[96];
	/* the worker's from mover_submit until mover_reap (mover.c): inputs
	 * the loop copied from the model, then the results */
	int      dirfd;                  /* named slabs: the generation's directory */
	bool     named;
	uint32_t id, n, latest;          /* latest: the slot copied, or >= n */
	uint32_t pages;                  /* enum wsync_slab_pages */
	uint64_t bytes, seg_bytes;
	void    *src;                    /* the latest slab, mapped by the loop;
	                                    the worker unmaps it */
	int      fd[WSYNC_MAX_SLOTS], ro[WSYNC_MAX_SLOTS];
	int      err;
	int64_t  work_ns;                /* the worker's CPU time for it */
};

/* Versions fit in the 56 high bits of `latest`. */
#define MODEL_VERSION_MAX ((UINT64_C(1) << 56) - 2)

struct model *model_find(const struct broker *b, const char *name);
/* The model with this id, or NULL (id is checked). */
struct model *model_get(const struct broker *b, uint32_t id);

/*
 * Declares a model: table entry, model page, ctl entry. id < 0 takes the
 * first free entry. hwm is the version floor (latest = pack(hwm, NONE)).
 * 0 or -ENOSPC (table or /dev/shm full) / -errno, with a reason in why.
 */
int  model_declare(struct broker *b, const char *name, int id, uint64_t hwm,
                   struct model **out, char *why, size_t whylen);
/*
 * Gives a declared model its layout and slabs. Takes ownership of tensors
 * (malloc'd, canonical) on success only. Slab memory is counted against the
 * shm limit. dev (NULL = none) makes it a device model (gpu_slab.h). On
 * failure nothing created remains.
 */
int  model_make_ready(struct broker *b, struct model *m, wsync_tensor_desc *tensors,
                      uint32_t n_tensors, uint64_t bytes, uint64_t hash,
                      uint32_t n_slots, const struct model_devices *dev,
                      char *why, size_t whylen);
/*
 * Gives m new memory — a new model page and new slabs, the latest version
 * copied into its slot, the other slots free — so that no process that was
 * handed the old ones' rw fds can write what collectors read from now on;
 * then a new incarnation, which tells subscribers to map the new memory
 * (libclient follows it), and a wake of whoever sleeps on the old page. For
 * a host model with no publisher and no grant; afterwards nobody has its rw
 * fds (has_writer false). reason is logged. 0, or -errno (nothing changed)
 * with a reason in why. The copy runs here, in the loop (counted in the
 * ctl header's moves_on_loop): for a stopping broker's departures only,
 * every other move copies on the mover's thread (model_move_start,
 * model_move_leave).
 */
int  model_rotate(struct broker *b, struct model *m, const char *reason, char *why,
                  size_t whylen);
/*
 * model_rotate in two halves, the slow one on the worker thread: starts
 * moving m (the same preconditions), submitting the new slabs and the copy
 * to b->mover; b->move and m->move are then the move. 0, -EBUSY if a move
 * is in progress or queued, or -errno (nothing changed) with a reason in
 * why. While it moves, m serves its old memory and must get no publisher.
 */
int  model_move_start(struct broker *b, struct model *m, const char *reason, char *why,
                      size_t whylen);
/*
 * The move of a departure of uid (for_leave): started as model_move_start
 * does when the worker is free, else queued behind the moves before it
 * (counted in the ctl header's moves_queued); m->move is the move either
 * way, and m is moving until it is applied. 0, or -errno (nothing changed)
 * with a reason in why.
 */
int  model_move_leave(struct broker *b, struct model *m, uid_t uid, const char *reason,
                      char *why, size_t whylen);
/*
 * Once the worker is free (b->move reaped): hands it the oldest queued
 * move. NULL when it did, or none waits; else a move that could not start,
 * taken off the queue with mv->err set, for the caller to finish as a
 * failed move (publish_move_done) and free; call again then.
 */
struct model_move *model_move_next(struct broker *b);
/* At a stop, the mover stopped: the oldest queued move, taken off the
 * queue, NULL if none. */
struct model_move *model_move_dequeue(struct broker *b);
/* The worker's part of mv run here, in the loop (a stop's moves), counted
 * in the ctl header's moves_on_loop; then model_move_finish as usual. */
void model_move_work_here(struct broker *b, struct model_move *mv);
/* p's session ends: no move answers it any more. */
void model_move_forget_peer(struct broker *b, const struct peer *p);
/* Whether m is being moved: on the worker (b->move is its) or queued. */
static inline bool model_moving(const struct broker *b, const struct model *m)
{
	(void)b;
	return m->move != NULL;
}
/*
 * Once the worker is done with mv (mover_reap): applies it when apply and
 * its model is still there unchanged, as model_rotate does, else frees the
 * new memory. Its time is charged to the move budget either way; m is no
 * longer moving. 0, or -errno with a reason in why (-EIDRM: the model was
 * removed meanwhile; -ECANCELED: not applied). mv itself stays the
 * caller's (model_move_free).
 */
int  model_move_finish(struct broker *b, struct model_move *mv, bool apply, char *why,
                       size_t whylen);
/* Frees a move that is not on the worker: its mapping of the latest slab
 * if still held, its parts; its model, if any, is no longer moving. */
void model_move_free(struct model_move *mv);
/* 0 if moves have time left now, else how long until they have
 * (broker.h, move_credit_ns). */
int64_t model_move_wait_ns(struct broker *b, int64_t now_ns);

/*
 * Withdraws m's latest version: collectors get nothing newer than what they
 * hold (-ENODATA for a new view, waits wait) until a publisher commits the
 * next version (above every earlier one: the hwm stays). For a move that
 * failed: the memory holding the latest stays writable by a publisher that
 * left, so it must not be served.
 */
void model_withdraw_latest(struct model *m);
/* Records uid as m's owner (first publisher, or the adopted entry's). */
void model_set_owner(struct model *m, uid_t uid);
/* Whether a PUB_OPEN's devices are the model's (both none, or the same
 * GPUs in the same order with the same flags). */
bool model_devices_match(const struct model *m, const struct model_devices *dev);
/* Removes a model that has no members and no layout (a failed first open,
 * or a name only subscribed to whose last subscriber left); its hwm is kept
 * as the name's version floor. */
void model_undeclare(struct broker *b, struct model *m, const char *why);
/* Undeclares m if nobody has it open and it is DECLARED, or READY without
 * a version ever committed; true if it did. */
bool model_drop_if_unused(struct broker *b, struct model *m);
/*
 * Deletes a model that has no publisher and no member any more (the session
 * layer made every member forget it first): the ctl entry is cleared
 * (incarnation 0, which tells subscribers -EIDRM), waiters are woken, and
 * the segments are unlinked; mappings in clients keep the memory while they
 * last. The high-water mark stays the floor of the name.
 */
void model_delete(struct broker *b, struct model *m, const char *why);
/* Frees a model at shutdown (every session gone, so no group is left),
 * unlinking its segments when unlink_them, else all but its layout and its
 * latest version's slab (what the next start adopts). */
void model_destroy(struct broker *b, struct model *m, bool unlink_them);

void model_set_slot(struct model *m, uint32_t slot, uint32_t state, uint64_t version);
void model_set_latest(struct model *m, uint64_t latest);
/* The grant collectors may trust in the model page besides `latest`:
 * pack(version, slot), 0 = none. Store `latest` first (sub.c reads them in
 * the other order). */
void model_set_grant(struct model *m, uint64_t grant);
void model_set_hwm(struct model *m, uint64_t hwm);
/* ++hwm, stored in the ctl entry before anyone hears of it; 0 if exhausted. */
uint64_t model_next_version(struct model *m);
/* seq + 1 and FUTEX_WAKE of every waiter. */
void model_wake(struct model *m);
/* Marks the page CLOSED and wakes everyone (clean shutdown). */
void model_close_page(struct model *m);

int  model_add_member(struct model *m, struct peer *p);
void model_remove_member(struct model *m, struct peer *p);

#endif
