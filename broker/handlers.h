/*
 * broker/handlers.h — one function per request type (see shm/proto.h), and
 * the checks every message passes first.
 */
#ifndef WSYNC_BROKER_HANDLERS_H
#define WSYNC_BROKER_HANDLERS_H

#include <stddef.h>
#include <stdint.h>

#include "broker.h"

struct session;

/*
 * Handles the message in s->rx (len bytes, recvmsg flags msg_flags) with the
 * n_fds fds received with it. An fd a handler keeps is set to -1 in fds[];
 * the caller (loop.c on_recv) closes every other one, on every path. Sends
 * at most one reply; may reap the session.
 */
void handle_message(struct broker *b, struct session *s, size_t len, int msg_flags,
                    int *fds, int n_fds);
/* Answers a refused peer (ERROR with its refusal, for request seq) and
 * reaps it. */
void handle_refusal(struct broker *b, struct session *s, uint32_t seq, uint32_t req_type);

#endif
