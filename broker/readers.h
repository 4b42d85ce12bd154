/*
 * broker/readers.h — WAIT_READERS: a publisher waiting until its readers
 * have a version (synchronous weight updates).
 *
 * Readers do not tell the broker when they acquire: each client raises
 * acquired[model] in its own session page, and the broker looks at those
 * words of the model's subscribers. A pending wait is looked at when it
 * comes, and then by the poll (readers_poll): every READERS_POLL_NS while it
 * is young, less often as it ages (up to READERS_POLL_MAX_NS), and at its
 * deadline — a timer that exists only while waits pend, so an unused
 * feature costs nothing, on the acquire path one conditional store, and a
 * wait left pending for minutes costs the broker a look every 10 ms.
 *
 * A collector that acknowledges explicitly (wsync_sub_ack) need not wait
 * for that poll: while a wait on the model pends, its ctl entry's
 * reader_waits hint is set, and such a collector then sends ACKED
 * (handle_subscribe.c), which looks at the model's waits at once
 * (readers_acked). The hint is stored before the words are read, and a
 * collector stores its word before it reads the hint, so one of the two
 * sees the other; a hint missed or stale costs a poll's delay or one
 * message, never a wrong answer: the broker reads the words either way.
 *
 * A max_lead wait (n_readers with WSYNC_READERS_LEAD, libclient/pub_lead.c)
 * counts the subscribers that acquired any version of the model: one that
 * never did acts with none yet, one that closed its subscription or whose
 * session ended is no reader at all, so neither holds a publisher back. It
 * keeps the model's lead_* stats in its ctl entry (waits that did not
 * settle at once, and their timeouts) and names the collectors behind.
 *
 * Budget: a session has at most READERS_MAX_PER_PEER waits pending, and
 * all the sessions of a uid other than the broker's and root together
 * UIDS_MAX_WAITS (uids.h); past that a WAIT_READERS is refused at once
 * (-ENOBUFS, naming the limit). Each peer lists its own waits, so a
 * session's teardown drops them without walking anybody else's. The
 * poll's work is per model with waits: one pass over its members, sorted
 * once, then a binary search per wait — it does not grow with the number of
 * members times the number of waits a client queued.
 */
#ifndef WSYNC_BROKER_READERS_H
#define WSYNC_BROKER_READERS_H

#include <stddef.h>
#include <stdint.h>

#include "broker.h"

struct model;
struct peer;

#define READERS_POLL_NS      (500 * 1000)        /* 0.5 ms */
#define READERS_POLL_MAX_NS  (10 * 1000 * 1000)  /* 10 ms */
#define READERS_MAX_PER_PEER 64

/* Starts a wait for peer p (request seq): answered at once when it is
 * already met (through the outbox), else queued. 0, or -errno with a reason
 * in why (-ENOBUFS past the budget). */
int  readers_wait(struct broker *b, struct peer *p, struct model *m, uint32_t seq,
                  uint64_t version, uint32_t n_readers, uint32_t timeout_ms,
                  char *why, size_t whylen);
/* Looks at every pending wait: answers those met, deleted or past their
 * deadline. Returns ns until the next look is due, -1 when none pends. */
int64_t readers_poll(struct broker *b);
/* A subscriber of m acknowledged a version (ACKED): answers m's waits that
 * are met now, without waiting for the poll. */
void readers_acked(struct broker *b, struct model *m);
/* p is going: its own waits are dropped unanswered, and the others are
 * looked at again soon (p no longer counts as a reader). */
void readers_peer_gone(struct broker *b, struct peer *p);
/* Frees every wait (shutdown). */
void readers_free_all(struct broker *b);

#endif
