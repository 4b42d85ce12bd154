/*
 * libclient/checksum.h — per-version slab checksums.
 *
 * The checksum of a version is a function of its slab's bytes alone, the
 * same however many threads formed it:
 *
 *   h[k]  = XXH3-64 (seed 0) of block k, bytes [k MiB, (k + 1) MiB) of the
 *           slab (the last block shorter);
 *   sum   = h[0] for a slab of one block (the XXH3-64 of the slab), else
 *           the XXH3-64 of h[0] .. h[n-1] as 8-byte little-endian words;
 *   0 is stored as 1, since 0 in the slot metadata means "none".
 *
 * A publisher hashing (every host model unless WSYNC_PUB_NO_CHECKSUM) keeps
 * a struct sum_blocks: the blocks a library copy hashed while writing them
 * (copy_engine.c), tagged with the begun version; the commit hashes the
 * other blocks and combines (docs/ARCHITECTURE.md, "Checksums"), at once
 * when few are left, else on its hashing thread (struct sum_hasher) after
 * the version became visible, with the slot's checksum marked pending.
 * Collectors check a view with wsync_view_verify(), on as many threads as
 * pay (copy_engine.c), and count a mismatch in their session page.
 */
#ifndef WSYNC_CLIENT_CHECKSUM_H
#define WSYNC_CLIENT_CHECKSUM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "copy_engine.h"
#include "shm/layout.h"
#include "wsync.h"

#define WSYNC_SUM_BLOCK COPY_BLOCK

/* The block hashes of one slab being written. */
struct sum_blocks {
	_Atomic uint64_t tag;           /* the version they are of, 0 = none */
	size_t n;                       /* blocks */
	uint64_t *hash;                 /* [n] */
	_Atomic uint8_t *ok;            /* [n]: hash[k] is of block k as it is */
};

/* For a slab of `bytes`; NULL when out of memory. */
struct sum_blocks *sum_blocks_new(uint64_t bytes);
void sum_blocks_free(struct sum_blocks *s);
/* Makes the hashes those of version tag: kept if they already are, else
 * every block is unhashed. */
void sum_blocks_claim(struct sum_blocks *s, uint64_t tag);
/* Bytes [off, off + len) of version tag may be written in ways the library
 * does not see: their blocks are hashed again at commit. */
void sum_blocks_forget(struct sum_blocks *s, uint64_t tag, uint64_t off, uint64_t len);
/* The checksum of base[0, bytes), version tag: hashes the blocks not
 * hashed yet (all unless the hashes are tag's) on up to `threads` threads
 * (0: as many as pay) and combines. */
uint64_t sum_blocks_finish(struct sum_blocks *s, uint64_t tag, const void *base,
                           uint64_t bytes, unsigned threads);

/* The bytes of version tag's slab that its commit must still hash: all
 * unless the hashes are tag's. */
uint64_t sum_blocks_unhashed(const struct sum_blocks *s, uint64_t tag, uint64_t bytes);

/*
 * A publisher's hashing thread, started at the first checksum it defers,
 * niced (SUM_HASHER_NICE) so that the trainer's next step and the broker
 * win the CPU on a full machine: it finishes one version's checksum after
 * the version became visible, stores it in the slot metadata, then clears
 * the slot's pending word (release) and wakes its waiters. One job at a
 * time: the publisher waits for the previous one before it submits (or
 * reuses its sum_blocks) and before it writes the slot being hashed again,
 * and while it waits it hashes the job's blocks too.
 */
struct sum_job {
	struct sum_blocks *s;            /* the hasher's until the job is done */
	uint64_t tag, bytes;
	const void *base;
	_Atomic uint64_t *checksum;      /* the slot metadata's */
	_Atomic uint32_t *pending;       /* the page's sum_pending[slot] */
	uint32_t slot;
};
struct sum_hasher;

/* Hands job to *h (started on first use) after claiming its block list
 * for job->tag; -errno when no thread could be started, and then nothing
 * was done. *h must be idle. */
int sum_hasher_submit(struct sum_hasher **h, const struct sum_job *job);
/* Until *h's job (if any) is done, hashing its blocks meanwhile; h may be
 * NULL. slot WSYNC_SLOT_NONE: any job, else only one of that slot. Any
 * thread may wait; only one submits, after waiting. */
void sum_hasher_wait(struct sum_hasher *h, uint32_t slot);
/* Waits, stops and frees the thread; h may be NULL. */
void sum_hasher_free(struct sum_hasher *h);
/* The job's work, on the calling thread (also when no thread starts). */
void sum_job_run(const struct sum_job *job);
/* Ends a pending checksum: stores sum (0 = none), then clears the pending
 * word with a release store and wakes whoever waits on it. */
void sum_settle(_Atomic uint64_t *checksum, _Atomic uint32_t *pending, uint64_t sum);

/* How long wsync_view_verify (and wsync_view_checksum) wait for a checksum
 * still being formed, and for one whose publisher's session is gone (it
 * may still be alive: a session the broker ended). */
#define WSYNC_SUM_WAIT_NS      (10 * 1000000000ll)
#define WSYNC_SUM_ORPHAN_NS    (500 * 1000000ll)

/* Combines n block hashes of a slab (see above); never 0. */
uint64_t wsync_sum_combine(const uint64_t *hash, size_t n);
/* The checksum of len bytes, with up to `threads` threads (0: as many as
 * pay); 1 on failure to allocate the block list. Never 0. */
uint64_t wsync_checksum_threads(const void *data, size_t len, unsigned threads);
/* The same on the calling thread only. */
uint64_t wsync_checksum(const void *data, size_t len);
/* The stored checksum of a view's version (0 = none); -EINVAL for a view
 * that is not live. A checksum its publisher still forms is waited for
 * (WSYNC_SUM_WAIT_NS): -ETIMEDOUT when it does not come, -ENODATA when its
 * publisher died before it stored it. */
int wsync_view_checksum(const wsync_view *v, uint64_t *out);

#endif
