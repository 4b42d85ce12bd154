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
 * rank COMMIT_OK. Only the broker makes a group's version visible: the
 * grant is never published in the ctl entry, so a rank (or an earlier
 * publisher still mapping the page) that stores `latest` early is ignored
 * by collectors and repaired.
 *
 * A rank that aborts, leaves or dies, a step that differs, or a group
 * deadline that passes, drops the version: its slot is free again, nothing
 * of it was ever visible, and every rank that committed is answered with the
 * reason. A rank that had begun the dropped version but had not committed
 * it yet keeps the reason: its late COMMIT (or ABORT) of that version is
 * answered with it ("v7 was dropped: rank 2 missed the group deadline of
 * 200 ms"), never taken for a protocol violation, and its next BEGIN gets
 * the version in progress. The model stays usable: the group publishes
 * again once every rank is back.
 *
 * One session publishes at most one rank of a group: COMMIT names no rank,
 * so two would be ambiguous (a second open is refused with -EBUSY naming
 * the rank the session has).
 *
 * The group's pending answers are at most one per rank (its COMMIT), so
 * nothing here grows with what a client sends.
 */
#ifndef WSYNC_BROKER_GROUP_H
#define WSYNC_BROKER_GROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "broker.h"
#include "shm/proto.h"

struct model;
struct peer;

/* What a rank that began a version before it was dropped is told when it
 * commits or aborts it late. */
struct group_dropped {
	uint64_t version;                /* 0 = nothing owed */
	int      err;
	char     why[160];
};

struct pub_group {
	uint32_t size;                           /* ranks */
	uint32_t timeout_ms;                     /* 0 = no group deadline */
	struct peer *rank[WSYNC_MAX_RANKS];
	bool     sums[WSYNC_MAX_RANKS];          /* opened with WSYNC_OPEN_CHECKSUM */
	wsync_shard *parts[WSYNC_MAX_RANKS];
	size_t   n_parts[WSYNC_MAX_RANKS];
	uint32_t committed;                      /* ranks whose COMMIT came */
	uint32_t begun;                          /* ranks given the grant */
	uint32_t commit_seq[WSYNC_MAX_RANKS];    /* their answers are owed */
	uint64_t step[WSYNC_MAX_RANKS];
	int64_t  deadline_ns;                    /* -1 = none running */
	struct group_dropped dropped[WSYNC_MAX_RANKS];
};

/* Rank `rank` of a group of `size` opens m with its parts (taken over on
 * success): 0 or -errno with a reason in why. sums: it keeps checksums,
 * so it may be the rank that forms a version's (group_complete). */
int  group_join(struct broker *b, struct model *m, struct peer *p, uint32_t size,
                uint32_t rank, uint32_t timeout_ms, bool sums, wsync_shard *parts,
                size_t n_parts, char *why, size_t whylen);
/* Whether p is a rank of m's group; its rank in *rank. */
bool group_rank_of(const struct model *m, const struct peer *p, uint32_t *rank);
/* -EAGAIN (with the missing ranks in why) until every rank has opened. */
int  group_ready(const struct model *m, char *why, size_t whylen);
/* Rank `rank` was handed the grant in progress (BEGIN). */
void group_begun(struct model *m, uint32_t rank);
/* A rank's COMMIT of the grant: 0 (answered now or later) or -errno; a
 * COMMIT of a version dropped before it came gets the drop's reason. */
int  group_commit(struct broker *b, struct model *m, uint32_t rank, uint32_t seq,
                  uint32_t slot, uint64_t version, uint64_t step, char *why, size_t whylen);
/* A rank's ABORT of version: 0 (the version in progress is dropped, or it
 * was dropped already), or -EPROTO for a version the rank never had. */
int  group_abort(struct broker *b, struct model *m, uint32_t rank, uint32_t slot,
                 uint64_t version, char *why, size_t whylen);
/* A rank leaves (CLOSE, cut off, teardown): the version in progress is
 * dropped; the last rank to leave ends the group. */
void group_leave(struct broker *b, struct model *m, struct peer *p, const char *why);
/* Drops versions past their group deadline; ns until the next deadline,
 * or -1 when none is running. */
int64_t group_poll(struct broker *b);

#endif
