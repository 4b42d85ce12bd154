/*
 * broker/group.h — a model published by a group of ranks (sharded trainers).
 *
 * Each rank of a group declares the parts of the layout it writes (checked
 * against the other ranks': no overlap, and once every rank is there, every
 * byte owned). One version is one grant shared by all ranks; each writes
 * its parts of the slot and sends COMMIT. The broker answers no rank until
 * the last one committed: then, if every rank gave the same step, it books
 * the version and makes it visible itself (ctl latest, then the page's
 * latest, then the wake: one hop from the last COMMIT), and answers every
 * rank COMMIT_OK. A rank that aborts, leaves or dies, a step that differs,
 * or a group deadline that passes, drops the version: its slot is free
 * again, nothing of it was ever visible, and every rank that committed is
 * answered with the reason; the others learn it at their COMMIT. The model
 * stays usable: the group publishes again once every rank is back.
 */
#ifndef WSYNC_BROKER_GROUP_H
#define WSYNC_BROKER_GROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "broker.h"
#include "shm/proto.h"

struct model;
struct session;

struct pub_group {
	uint32_t size;                           /* ranks */
	uint32_t timeout_ms;                     /* 0 = no group deadline */
	struct session *rank[WSYNC_MAX_RANKS];
	wsync_shard *parts[WSYNC_MAX_RANKS];
	size_t   n_parts[WSYNC_MAX_RANKS];
	uint32_t committed;                      /* ranks whose COMMIT came */
	uint32_t commit_seq[WSYNC_MAX_RANKS];    /* their answers are owed */
	uint64_t step[WSYNC_MAX_RANKS];
	int64_t  deadline_ns;                    /* -1 = none running */
	uint64_t dropped_version;                /* the last version dropped... */
	int      dropped_err;                    /* ...how, */
	char     dropped_why[160];               /* ...and why */
};

/* Rank `rank` of a group of `size` opens m with its parts (taken over on
 * success): 0 or -errno with a reason in why. */
int  group_join(struct broker *b, struct model *m, struct session *s, uint32_t size,
                uint32_t rank, uint32_t timeout_ms, wsync_shard *parts, size_t n_parts,
                char *why, size_t whylen);
/* Whether s is a rank of m's group; its rank in *rank. */
bool group_rank_of(const struct model *m, const struct session *s, uint32_t *rank);
/* -EAGAIN (with the missing ranks in why) until every rank has opened. */
int  group_ready(const struct model *m, char *why, size_t whylen);
/* A rank's COMMIT of the grant: 0 (answered now or later) or -errno. */
int  group_commit(struct broker *b, struct model *m, uint32_t rank, uint32_t seq,
                  uint32_t slot, uint64_t version, uint64_t step, char *why, size_t whylen);
/* Drops the version in progress, answering the ranks that committed with
 * err (-ECONNABORTED, or -EINVAL when their steps differ); a rank that
 * commits it later gets the same. */
void group_drop(struct broker *b, struct model *m, int err, const char *why);
/* A rank leaves (CLOSE, reap, cut off): the version in progress is dropped. */
void group_leave(struct broker *b, struct model *m, struct session *s, const char *why);
/* Drops versions past their group deadline; ns until the next deadline,
 * or -1 when none is running. */
int64_t group_poll(struct broker *b);
void group_free(struct pub_group *g);

#endif
