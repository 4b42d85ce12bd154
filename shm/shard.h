/*
 * shm/shard.h — which parts of a layout a group of publisher ranks writes.
 *
 * Client and broker both check a group's declarations with
 * wsync_shards_check(): every byte of every tensor owned by exactly one
 * rank, each tensor either whole (one rank) or cut along one dimension (0 or
 * 1) into ranges that tile it. The geometry of one part (wsync_shard_slice)
 * is public in wsync.h.
 */
#ifndef WSYNC_SHM_SHARD_H
#define WSYNC_SHM_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "../libclient/wsync.h"

/*
 * parts[r] (n_parts[r] entries) are rank r's declarations, r < ranks; a
 * rank that has not declared yet has n_parts[r] == 0 and is skipped unless
 * complete is set. Checks: tensor indices and ranges valid, no two parts
 * overlap, one dimension per tensor; and when complete, every tensor fully
 * covered. 0 or -EINVAL with a reason in why naming the tensor and ranks.
 */
int wsync_shards_check(const wsync_tensor_desc *t, size_t n_tensors,
                       const wsync_shard *const *parts, const size_t *n_parts,
                       uint32_t ranks, int complete, char *why, size_t whylen);

#endif
