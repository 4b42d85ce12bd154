/*
 * broker/outbox.h — what a state module decided must happen outside it.
 *
 * Models, publishing, groups and reader waits change the broker's books
 * and, as a consequence, owe answers to peers (a group's ranks when the
 * version completes or drops, a publisher whose wait settled), owe wake-ups
 * to a model's eventfd subscribers, or need the timer. They never send,
 * notify or arm anything themselves: they put it here, and the session
 * layer carries it out after the event (session_settle), where sending can
 * fail and cut a session off without re-entering the module that asked.
 */
#ifndef WSYNC_BROKER_OUTBOX_H
#define WSYNC_BROKER_OUTBOX_H

#include <stdbool.h>
#include <stdint.h>

#include "peer.h"
#include "shm/proto.h"

struct out_reply {
	struct out_reply *next;
	struct peer *to;
	union wsync_msg_any msg;
};

struct outbox {
	struct out_reply *head, **tail;
	uint64_t notify;                 /* bit i = wake model i's eventfds */
	int64_t  timer_ns;               /* the timer is wanted in this many ns, -1 = not */
	uint32_t unanswered;             /* peers flagged unanswered since the last flush */
};

void outbox_init(struct outbox *o);
/* Queues msg (a whole message, header filled) for peer to; a peer already
 * doomed gets nothing. Out of memory flags the peer (peer.h). */
void outbox_reply(struct outbox *o, struct peer *to, const union wsync_msg_any *msg);
/* An ERROR answer to request seq of type req_type. */
void outbox_error(struct outbox *o, struct peer *to, uint32_t seq, uint32_t req_type,
                  int err, const char *why);
void outbox_notify(struct outbox *o, uint32_t model_id);
/* The timer is wanted within ns (the soonest request wins). */
void outbox_timer_in(struct outbox *o, int64_t ns);
/* Takes the first queued reply (the caller frees it), or NULL. */
struct out_reply *outbox_take(struct outbox *o);
/* Whether anything is queued. */
bool outbox_pending(const struct outbox *o);

#endif
