/*
 * libclient/copy_engine.h — copying pieces into a destination at memory
 * speed, across threads, hashing the destination's 1 MiB blocks as they are
 * written (copy_engine.c says how the threads and the store method are
 * chosen). slab_copy.c builds the pieces of a slab copy; checksum.c and
 * the commit use the hash-only pass.
 */
#ifndef WSYNC_COPY_ENGINE_H
#define WSYNC_COPY_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The unit of work of the threads and of the checksum (checksum.h): bytes
 * [k * COPY_BLOCK, (k + 1) * COPY_BLOCK) of the destination are block k. */
#define COPY_BLOCK (1u << 20)

static inline size_t copy_blocks(uint64_t bytes)
{
	return (size_t)((bytes + COPY_BLOCK - 1) / COPY_BLOCK);
}

/* A piece: len bytes from src to base + off. */
struct copy_seg {
	uint64_t off;
	const void *src;
	size_t len;
};

struct copy_plan {
	char *base;                   /* the destination */
	uint64_t bytes;               /* its extent: blocks of [0, bytes) */
	const struct copy_seg *segs;  /* sorted by off, disjoint, within bytes */
	size_t n_segs;
	/* Hashing, or hash == NULL for a plain copy. A block the pieces touch
	 * is hashed as it is copied (its bytes outside every piece read from
	 * base: padding), into hash[k] with ok[k] = 1, unless hole[k]: then
	 * it is only copied and ok[k] = 0 (the caller hashes it later).
	 * Blocks no piece touches are left alone. */
	const uint8_t *hole;
	uint64_t *hash;
	_Atomic uint8_t *ok;
	/* > 0: a paced copy, spread over this many nanoseconds (copy_engine.c,
	 * "Pacing"); 0: as fast as the threads go. */
	int64_t spread_ns;
};

/* Copies the plan with up to `threads` threads (the caller among them;
 * 0 = as many as pay on this machine, measured once per process, or one
 * for a paced copy); returns when every byte is stored and visible to
 * other threads. */
void copy_run(const struct copy_plan *plan, unsigned threads);

/* hash[k] = the XXH3-64 of block k of base[0, bytes) for every k with
 * !ok[k] (ok NULL: every block), with up to `threads` threads as above. */
void copy_hash_blocks(const void *base, uint64_t bytes, uint64_t *hash,
                      const _Atomic uint8_t *ok, unsigned threads);

/* What this process measured (0 = not yet): threads that pay, and the
 * store methods (for the bench and the docs' figures). */
struct copy_tuning {
	unsigned threads;
	bool plain_streams, hashed_streams;
	bool plain_decided, hashed_decided;
};
void copy_tuning_get(struct copy_tuning *out);

#endif /* WSYNC_COPY_ENGINE_H */
