/*
 * broker/readers.h — WAIT_READERS: a publisher waiting until its readers
 * have a version (synchronous weight updates).
 *
 * Readers do not tell the broker when they acquire: each client raises
 * acquired[model] in its own session page, and the broker looks at those
 * words of the model's subscribers. A pending wait is looked at when it
 * comes, when a member session goes, and every READERS_POLL_NS while any is
 * pending (a timer that exists only then), so an unused feature costs
 * nothing, on the acquire path one conditional store.
 */
#ifndef WSYNC_BROKER_READERS_H
#define WSYNC_BROKER_READERS_H

#include <stdint.h>

#include "broker.h"

struct model;
struct session;

#define READERS_POLL_NS (500 * 1000)     /* 0.5 ms */

/* Starts a wait for session s (request seq): answers at once when it is
 * already met, else queues it. 0, or -errno with a reason in why. */
int  readers_wait(struct broker *b, struct session *s, struct model *m, uint32_t seq,
                  uint64_t version, uint32_t n_readers, uint32_t timeout_ms,
                  char *why, size_t whylen);
/* Looks at every pending wait: answers those met, deleted or past their
 * deadline. Returns whether some are still pending. */
bool readers_poll(struct broker *b);
/* s is going: its own waits are dropped; others may now be met. */
void readers_session_gone(struct broker *b, struct session *s);

#endif
