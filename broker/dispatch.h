/*
 * broker/dispatch.h — a received message to its handler (handlers.h), and
 * the answer to a refused peer.
 */
#ifndef WSYNC_BROKER_DISPATCH_H
#define WSYNC_BROKER_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "broker.h"

struct session;

/*
 * Handles the message in s->conn.rx (len bytes, recvmsg flags msg_flags)
 * with the n_fds fds received with it. An fd a handler keeps is set to -1
 * in fds[]; the loop closes every other one, on every path. Sends at most
 * one reply; may mark the session for teardown, never tears it down.
 */
void dispatch_message(struct broker *b, struct session *s, size_t len, int msg_flags,
                      int *fds, int n_fds);
/* Answers a refused peer (ERROR with its refusal, for request seq) and
 * marks it for teardown. */
void dispatch_refusal(struct broker *b, struct session *s, uint32_t seq, uint32_t req_type);

#endif
