/*
 * broker/request.h — one request being handled: what every handler needs
 * (the session, the message, the fds that came with it) and the helpers to
 * refuse it with a reason or answer it.
 *
 * A handler either sends its *_OK reply (req_reply) and returns 0, or
 * returns -errno with the reason in req.why, and the dispatcher sends the
 * ERROR (dispatch.c). Handlers never tear a session down: a request that
 * must end its session sets `disconnect`, and the dispatcher marks it.
 */
#ifndef WSYNC_BROKER_REQUEST_H
#define WSYNC_BROKER_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "broker.h"
#include "shm/proto.h"

struct session;
struct peer;
struct model;

struct req {
	struct broker *b;
	struct session *s;
	struct peer *p;                  /* the session's peer */
	const union wsync_msg_any *m;
	int     *fds;
	int      n_fds;
	bool     disconnect;             /* end the session after the reply */
	char     why[WSYNC_ERRMSG_MAX];
};

/* Sets r->why and returns err. */
int  req_fail(struct req *r, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Takes ownership of the one fd the request carries, or -1. */
int  req_take_fd(struct req *r);
/* Fills msg's header (type, its size, the request's seq) and sends it. */
void req_reply(struct req *r, union wsync_msg_any *msg, uint32_t type, const int *fds,
               int n_fds);
/* Declares a model of that name (its version floor from the versions
 * file): model_declare's result, the reason in r->why. */
int  req_declare(struct req *r, const char *name, struct model **out);
/* The model named by a request's model id, if this session opened it. */
struct model *req_model(struct req *r, uint32_t id);
/* The same, if this session also publishes it (alone or as a rank). */
struct model *req_published(struct req *r, uint32_t id);

#endif
