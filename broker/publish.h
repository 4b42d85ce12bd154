/*
 * broker/publish.h — grants and commits: the broker's side of the one-hop
 * commit path (see the essay at the top of publish.c).
 */
#ifndef WSYNC_BROKER_PUBLISH_H
#define WSYNC_BROKER_PUBLISH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "broker.h"

struct model;
struct model_move;
struct peer;

struct grant {
	uint32_t slot;
	uint64_t version;
	bool     has_fd;                 /* s had not received this slab's rw fd */
	int      fd;                     /* the slab's rw fd when has_fd */
};

/*
 * Grants p (the publisher) the next slot: hazard scan, slot_pick, a fresh
 * version stored in the ctl entry. 0, -EBUSY (why names the holders when
 * why != NULL) or -EOVERFLOW (versions exhausted).
 */
int  publish_grant(struct broker *b, struct model *m, struct peer *p,
                   struct grant *g, char *why, size_t whylen);
/* The outstanding grant again, for a repeated BEGIN. */
void publish_current(struct model *m, struct peer *p, struct grant *g);
/* Books the outstanding grant as the new latest; its NOTIFY fds are owed a
 * wake-up (outbox). */
void publish_book(struct broker *b, struct model *m, uint64_t step, int64_t ns);
/* Drops the outstanding grant unpublished (ABORT). */
void publish_abort(struct broker *b, struct model *m);
/*
 * Puts back the last validated latest under a fresh version, after the page
 * was found holding seen, which the broker never validated.
 */
void publish_restore(struct broker *b, struct model *m, uint64_t seen);
/* The single publisher leaves (CLOSE, cut off or teardown): its grant is
 * booked if it already published it, else freed; then the model has no
 * publisher, and one of another uid than the broker's and root loses the
 * memory it could write (publish_revoke). (A group's rank leaves through
 * group_leave.) */
void publish_leave(struct broker *b, struct model *m, struct peer *p, const char *why);
/* The last publisher of m, of uid, is gone: unless uid is the broker's or
 * root, m gets new memory its processes cannot reach, so its write right
 * ends when it leaves (DESIGN invariant 11): copied on the mover's thread
 * (model_move_leave: queued behind the moves before it while the worker is
 * busy; a PUB_OPEN meanwhile waits for it), or here (model_rotate) only
 * while the broker stops. */
void publish_revoke(struct broker *b, struct model *m, uid_t uid);
/* A move for uid's departure failed (why): m's latest is withdrawn. */
void publish_revoke_failed(struct model *m, uid_t uid, const char *why);
/* Finishes a move the mover is done with (model_move_finish): applied when
 * apply or when made for a departure, whose failure withdraws the latest
 * (publish_revoke_failed). model_move_finish's result. */
int  publish_move_done(struct broker *b, struct model_move *mv, bool apply, char *why,
                       size_t whylen);
/*
 * Checks the page's `latest` against what the broker validated (its latest,
 * or the outstanding grant) and repairs it if it holds anything else
 * (publish.c says how, and why nobody is cut off for it). true if it was
 * valid; why is logged once per spell.
 */
bool publish_check_latest(struct broker *b, struct model *m, const char *why);
/* publish_check_latest on every model: run at the housekeeping tick, so a
 * word forged between two messages is undone within a tick. */
void publish_audit(struct broker *b);
/* Every NOTIFY subscriber of m is owed a wake-up (outbox). */
void publish_notify(struct broker *b, struct model *m);

#endif
