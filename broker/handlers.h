/*
 * broker/handlers.h — one function per request type (shm/proto.h), grouped
 * by family: handle_session.c (HELLO), handle_publish.c (PUB_OPEN, BEGIN,
 * COMMIT, ABORT), handle_subscribe.c (SUB_OPEN, ATTACH, GPU_ATTACH, NOTIFY,
 * ACKED),
 * handle_lifecycle.c (CLOSE, DELETE, WAIT_READERS). dispatch.c holds the
 * table. Each returns 0 after sending its reply, or -errno with the reason
 * in r->why (request.h).
 */
#ifndef WSYNC_BROKER_HANDLERS_H
#define WSYNC_BROKER_HANDLERS_H

struct req;
struct broker;

int handle_hello(struct req *r);
int handle_pub_open(struct req *r);
/* The mover woke the loop: a move is done, applied or not, and whoever
 * waits for it is answered: a PUB_OPEN, the CLOSE of a departure
 * (handle_publish.c); then the next departure's move queued for the
 * worker is handed to it. */
void handle_pub_open_moved(struct broker *b);
int handle_begin(struct req *r);
int handle_commit(struct req *r);
int handle_abort(struct req *r);
int handle_sub_open(struct req *r);
int handle_attach(struct req *r);
int handle_gpu_attach(struct req *r);
int handle_notify(struct req *r);
int handle_acked(struct req *r);
int handle_close(struct req *r);
int handle_delete(struct req *r);
int handle_wait_readers(struct req *r);

#endif
