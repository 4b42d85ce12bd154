/*
 * tests/lib/raw.h — a client that speaks the wire protocol by hand
 * (shm/proto.h), for tests that must send what libwsync never would:
 * garbage, requests out of order, thousands of requests without reading a
 * reply, several publisher ranks on one session.
 *
 * Every call asserts (the test fails with file:line) unless it says it
 * returns an error.
 */
#ifndef WSYNC_TESTS_RAW_H
#define WSYNC_TESTS_RAW_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shm/proto.h"
#include "tests/lib/harness.h"

/* One raw session: its socket and the next request number. */
struct raw {
	int      fd;
	uint32_t seq;
	uint32_t session_id;
};

/* A connected socket, no HELLO yet. */
int     raw_connect(const struct broker *b);
/* Connects and says HELLO as name (the ctl and page fds are closed). */
void    raw_hello(struct raw *r, const struct broker *b, const char *name);
void    raw_close(struct raw *r);

/* One datagram: its length, 0 when the broker closed the connection,
 * -ETIMEDOUT when nothing came within timeout_ms. Received fds go to fds
 * (up to *nfds, the rest closed); *nfds says how many arrived. fds may be
 * NULL (then every fd is closed). */
ssize_t raw_recv(int fd, union wsync_msg_any *m, int *fds, int *nfds, int timeout_ms);
void    raw_close_fds(int *fds, int n);
/*
 * The answer to a bad request: a well-formed ERROR (with seq, if nonzero)
 * carrying no fd, or a closed connection. Returns 1 if closed, 0 if an
 * ERROR came (its code in *err when err != NULL). b (may be NULL) is
 * checked to be alive.
 */
int     raw_expect_refusal(const struct broker *b, int fd, const char *what, uint32_t seq,
                           int32_t *err);
/* A well-formed request (its seq set by the caller) and its reply, which
 * must be of type want; the reply replaces *m. */
void    raw_request(int fd, union wsync_msg_any *m, size_t len, const int *sfds, int nsfds,
                    uint32_t want, int *fds, int *nfds);

/* Fills the header of a request of type on r with r's next seq; returns
 * the seq. */
uint32_t raw_init(struct raw *r, union wsync_msg_any *m, uint32_t type);
/* Sends a request of r without waiting for its answer: 0 or -errno. */
int     raw_post(struct raw *r, const union wsync_msg_any *m, const int *fds, int nfds);

/* A publisher group's rank for raw_pub_open (NULL = a single publisher). */
struct raw_rank {
	uint16_t size, rank;
	uint32_t timeout_ms;
	const wsync_shard *parts;
	uint32_t n_parts;
};
/* PUB_OPEN of the n tensors d (offsets computed here) with slots slots.
 * Returns 0 with the model id in *id (the page's rw fd in *page_fd when it
 * is not NULL, else closed), or the broker's error code (its message
 * not logged). */
int     raw_pub_open(struct raw *r, const char *model, const wsync_tensor_desc *d, uint32_t n,
                     uint32_t slots, const struct raw_rank *g, uint32_t *id, int *page_fd);
/* The same, keeping every fd PUB_OPEN_OK brought: the page's and each
 * slab's, rw (up to *nfds; *nfds says how many came). */
int     raw_pub_open_fds(struct raw *r, const char *model, const wsync_tensor_desc *d,
                         uint32_t n, uint32_t slots, const struct raw_rank *g, uint32_t *id,
                         int *fds, int *nfds);
/* SUB_OPEN that may be refused: 0 with the model id in *id, or the
 * broker's error code with its message in why (NULL = not kept). Every fd
 * is closed. */
int     raw_sub_try(struct raw *r, const char *model, uint32_t *id, char *why, size_t whylen);
/* SUB_OPEN: the model id (every fd closed). */
uint32_t raw_sub_open(struct raw *r, const char *model);
/* BEGIN then COMMIT of model id with step on a single publisher, reading
 * both answers: the version committed. */
uint64_t raw_publish(struct raw *r, uint32_t id, uint64_t step);

#endif
