/*
 * tests/lib/faults.h — helpers for the fault, security and soak tests: a raw
 * SOCK_SEQPACKET client (to misbehave on purpose), checks that the broker is
 * alive and still serves a normal client, reading the broker's log, and the
 * crash soak (trainers and collectors verifying every byte while the broker,
 * trainers and collectors are SIGKILLed and restarted at seeded random times).
 */
#ifndef WSYNC_TESTS_FAULTS_H
#define WSYNC_TESTS_FAULTS_H

#include <stdint.h>
#include <sys/types.h>

#include "tests/lib/harness.h"
#include "shm/proto.h"

/* ---- raw protocol ------------------------------------------------------- */

/* A connected SOCK_SEQPACKET socket to the broker (fails the test if not). */
int     faults_raw_connect(const struct broker *b);
/* Sends one datagram with nfds fds attached: 0, or -errno. */
int     faults_raw_send(int fd, const void *buf, size_t len, const int *fds, int nfds);
/* Receives one datagram: its length, 0 when the broker closed the
 * connection, -ETIMEDOUT if nothing came within timeout_ms. Up to *nfds
 * received fds are stored in fds (the rest closed); *nfds is set to the
 * number stored. nfds may be NULL (all closed). */
ssize_t faults_raw_recv(int fd, union wsync_msg_any *m, int *fds, int *nfds, int timeout_ms);
/* Sends HELLO (seq) and requires HELLO_OK; *ctl_fd and *page_fd get its fds
 * (either pointer may be NULL: closed). Fails the test otherwise. */
void    faults_raw_hello(int fd, uint32_t seq, const char *name, int *ctl_fd, int *page_fd);
/* Reads datagrams until the broker closes the connection, up to timeout_ms;
 * returns how many came first, or -1 if the connection stayed open. */
int     faults_raw_drain_to_eof(int fd, int timeout_ms);

/* ---- the broker is fine ---------------------------------------------------- */

/* Fails the test if the broker process has exited (says after what). */
void    faults_broker_alive_at(struct broker *b, const char *after, const char *file, int line);
#define faults_broker_alive(b, after) faults_broker_alive_at((b), (after), __FILE__, __LINE__)
/* A normal client publishes step to a fresh model (name + a counter) and a
 * second client acquires it and verifies every byte; fails the test
 * otherwise. */
void    faults_normal_client_at(const struct broker *b, const char *what,
                                const char *file, int line);
#define faults_normal_client(b, what) faults_normal_client_at((b), (what), __FILE__, __LINE__)
/* Whether the broker's log contains needle (case-sensitive). */
int     faults_log_contains(const struct broker *b, const char *needle);
/* Number of sessions in the broker's control segment (-1 if unreadable). */
int     faults_ctl_sessions(const struct broker *b);

/* ---- crash soak ------------------------------------------------------------ */

struct soak_opts {
	int      seconds;        /* of random kills */
	uint64_t seed;           /* 0: from the clock; printed either way */
	int      trainers;       /* one model each, 1..4 */
	int      collectors;     /* 1..8, each subscribes to every model */
	int      broker_kills;   /* percent of kills that hit the broker */
	int      ranks;          /* a publisher group of that many ranks on one
	                            more model, 2..4; 0 = none */
};

struct soak_result {
	uint64_t seed;
	uint64_t kills_broker, kills_trainer, kills_collector, kills_rank;
	uint64_t commits, views, reconnects;
	uint64_t group_versions, group_dropped;  /* rank 0's commits, and the
	                                            versions every rank saw dropped */
	uint64_t torn, backward;
};

/* Runs the soak against a broker of its own; fails the test on a torn or
 * backward view, a process that does not recover, a leaked slot or a
 * segment left after the clean stop. Fills r. */
void    soak_run(const struct soak_opts *o, struct soak_result *r);

#endif
