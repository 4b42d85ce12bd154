/*
 * shm/tensor_layout.h — the canonical placement of tensors in a slab.
 *
 * Client and broker both call wsync_layout_compute(): the client to fill the
 * offsets it hands to the user, the broker to check that a publisher's
 * descriptors are exactly the canonical ones, so two processes can never
 * disagree on where a tensor lives.
 */
#ifndef WSYNC_SHM_TENSOR_LAYOUT_H
#define WSYNC_SHM_TENSOR_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "../libclient/wsync.h"

/*
 * Validates n descriptors (names valid and unique, known dtype, ndim in
 * range, unused shape entries 0, sizes without overflow) and writes each
 * tensor's offset into out[] (a copy of in[], may alias in). Tensors are
 * placed in order, each at the next multiple of WSYNC_ALIGN; the slab size
 * (*bytes) is rounded up to a page. A model needs at least one tensor; an
 * empty tensor (a 0 in its shape) takes no bytes but keeps its name.
 * Returns 0 or -EINVAL with a reason in why (may be NULL).
 */
int wsync_layout_compute(const wsync_tensor_desc *in, size_t n,
                         wsync_tensor_desc *out, uint64_t *bytes,
                         char *why, size_t whylen);

/* xxh64 over the descriptor array as laid out in memory. */
uint64_t wsync_layout_hash(const wsync_tensor_desc *d, size_t n);

/*
 * Describes the first difference between two layouts ("tensor 3 'fc.bias':
 * shape [10] here, [12] in the existing model") into why; returns 0 if they
 * are identical.
 */
int wsync_layout_diff(const wsync_tensor_desc *a, size_t na,
                      const wsync_tensor_desc *b, size_t nb,
                      char *why, size_t whylen);

/* Name index for O(1) lookup: open addressing over xxh64 of the names, with
 * a random seed per process (names cannot be chosen to collide). */
struct wsync_name_index {
	uint32_t *slots;      /* tensor index + 1, 0 = empty */
	uint32_t  mask;       /* capacity - 1, capacity a power of two >= 2n */
};
int  wsync_name_index_build(struct wsync_name_index *ix,
                            const wsync_tensor_desc *d, size_t n);
/* Index of the tensor called name, or -1. */
long wsync_name_index_find(const struct wsync_name_index *ix,
                           const wsync_tensor_desc *d, const char *name);
void wsync_name_index_free(struct wsync_name_index *ix);

#endif
