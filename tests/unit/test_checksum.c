/*
 * test_checksum — the checksum of a version is exact whoever forms it:
 *  - the fused copy loop (libclient/xxh3_copy.c) gives XXH3_64bits of what
 *    it is fed, in every vector variant the CPU has, for lengths around
 *    every stripe and round boundary, fed in uneven runs, and stores the
 *    bytes it is asked to store;
 *  - wsync_checksum is the XXH3-64 of a slab of one block, and of the block
 *    hashes for larger ones, with 1, 2, 3 or the measured threads;
 *  - a copy (copy_run) with odd pieces, padding, pieces that start and end
 *    inside stripes, and holes, leaves exactly the source bytes in the
 *    pieces and the old bytes elsewhere, hashes every block it fills whole
 *    to the XXH3-64 of that block as copied, marks the blocks with holes
 *    unhashed and leaves untouched blocks alone, with 1, 2, 3 and the
 *    measured threads, and on a copy big enough to measure methods and
 *    threads (48 MiB);
 *  - sum_blocks: a claim for another version forgets, forget() unhashes the
 *    blocks of a range, and finish() equals wsync_checksum of the slab.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>
#include <xxhash.h>

#include "checksum.h"
#include "copy_engine.h"
#include "xxh3_copy.h"

#define MIB (1u << 20)

static uint8_t pattern(uint64_t seed, uint64_t i)
{
	uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;

	x ^= x >> 29;
	return (uint8_t)(x * 0xBF58476D1CE4E5B9ull >> 56);
}

static uint8_t *filled(size_t n, uint64_t seed)
{
	uint8_t *b = aligned_alloc(64, (n + 63) / 64 * 64 + 64);

	assert_non_null(b);
	for (size_t i = 0; i < n; i++)
		b[i] = pattern(seed, i);
	return b;
}

/* ---- the fused loop ----------------------------------------------------------- */

static void fused_loop_is_xxh3(void **state)
{
	size_t max = 3 * MIB + 77;
	uint8_t *src = filled(max + 3, 1), *dst = aligned_alloc(64, (max + 127) / 64 * 64);
	unsigned checked = 0;

	(void)state;
	assert_non_null(dst);
	for (int impl = 1; impl <= 3; impl++) {
		if (xxh3_copy_impl(impl) < 0)
			continue;
		for (size_t len = XXH3_RUN_MIN; len < max;
		     len = len < 2300 ? len + 1 : len < 70000 ? len * 5 / 4 + 63 : len * 2 + 1) {
			for (size_t off = 0; off < 2; off++) {
				const uint8_t *s = src + off * 3;
				uint64_t stripes = xxh3_run_stripes(len), done = 0;
				struct xxh3_run r;

				memset(dst, 0, (size_t)stripes * XXH3_STRIPE);
				xxh3_run_init(&r, len);
				for (unsigned turn = 0; done < stripes; turn++) {
					uint64_t n = 1 + (turn * 7 + len) % 37;
					enum xxh3_store how = (enum xxh3_store)(turn % 3);

					n = n > stripes - done ? stripes - done : n;
					xxh3_run_copy(&r, dst + done * XXH3_STRIPE, s + done * XXH3_STRIPE,
					              (size_t)n, how);
					if (how == XXH3_HASH_ONLY)
						memcpy(dst + done * XXH3_STRIPE, s + done * XXH3_STRIPE,
						       (size_t)n * XXH3_STRIPE);
					done += n;
				}
				assert_int_equal(xxh3_run_final(&r, s + len - XXH3_STRIPE),
				                 XXH3_64bits(s, len));
				assert_memory_equal(dst, s, (size_t)stripes * XXH3_STRIPE);
				checked++;
			}
		}
	}
	xxh3_copy_impl(0);
	assert_true(checked > 4000);
	free(src);
	free(dst);
}

/* The hash-only pass (a commit's and verify's) against libxxhash, at every
 * length around the short-input limit and stripe boundaries, unaligned. */
static void hash_pass_is_xxh3(void **state)
{
	size_t max = 2 * MIB + 99;
	uint8_t *src = filled(max + 7, 3);
	unsigned checked = 0;

	(void)state;
	for (int impl = 1; impl <= 3; impl++) {
		if (xxh3_copy_impl(impl) < 0)
			continue;
		for (size_t len = 0; len < max;
		     len = len < 1100 ? len + 1 : len < 70000 ? len * 3 / 2 + 61 : len * 2 + 3)
			for (size_t off = 0; off < 8; off += 7) {
				assert_int_equal(xxh3_hash(src + off, len), XXH3_64bits(src + off, len));
				checked++;
			}
	}
	xxh3_copy_impl(0);
	assert_int_equal(xxh3_hash(src, MIB), XXH3_64bits(src, MIB));
	assert_true(checked > 2000);
	free(src);
}

/* ---- the checksum's definition ----------------------------------------------- */

static void checksum_is_defined_by_blocks(void **state)
{
	size_t sizes[] = { 1, 240, 241, 4096, MIB - 1, MIB, MIB + 1, 5 * MIB + 12345 };
	unsigned threads[] = { 1, 2, 3, 0 };

	(void)state;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i], nb = copy_blocks(n);
		uint8_t *b = filled(n, 2 + i);
		uint64_t *h = calloc(nb, sizeof(*h)), want;

		assert_non_null(h);
		for (size_t k = 0; k < nb; k++) {
			size_t a = k * MIB, e = a + MIB < n ? a + MIB : n;

			h[k] = XXH3_64bits(b + a, e - a);
		}
		want = nb == 1 ? XXH3_64bits(b, n) : XXH3_64bits(h, nb * sizeof(*h));
		want = want ? want : 1;
		assert_int_equal(wsync_sum_combine(h, nb), want);
		for (size_t t = 0; t < 4; t++)
			assert_int_equal(wsync_checksum_threads(b, n, threads[t]), want);
		assert_int_equal(wsync_checksum(b, n), want);
		free(h);
		free(b);
	}
}

/* ---- copies that hash ---------------------------------------------------------- */

struct copy_case {
	uint64_t bytes;
	struct copy_seg segs[8];
	size_t n_segs;
	uint64_t holes[4][2];           /* byte ranges whose blocks are holes */
	size_t n_holes;
};

static void check_copy(const struct copy_case *cc, unsigned threads, uint64_t seed)
{
	size_t nb = copy_blocks(cc->bytes);
	uint8_t *base = filled(cc->bytes, seed), *before = malloc(cc->bytes);
	uint8_t *hole = calloc(nb, 1), *touched = calloc(nb, 1);
	uint64_t *hash = calloc(nb, sizeof(*hash));
	_Atomic uint8_t *ok = calloc(nb, sizeof(*ok));
	struct copy_seg segs[8];
	uint8_t *srcs[8];
	struct copy_plan pl = {
		.base = (char *)base, .bytes = cc->bytes, .segs = segs, .n_segs = cc->n_segs,
		.hole = hole, .hash = hash, .ok = ok,
	};

	assert_true(before && hole && touched && hash && ok);
	memcpy(before, base, cc->bytes);
	for (size_t k = 0; k < nb; k++) {
		atomic_store(&ok[k], 1);        /* untouched blocks must keep it */
		hash[k] = 0x5eed;
	}
	for (size_t j = 0; j < cc->n_holes; j++)
		for (size_t k = cc->holes[j][0] / MIB; k <= (cc->holes[j][1] - 1) / MIB; k++)
			hole[k] = 1;
	for (size_t i = 0; i < cc->n_segs; i++) {
		segs[i] = cc->segs[i];
		srcs[i] = filled(segs[i].len + 1, seed * 31 + i + 1) + 1;   /* unaligned */
		segs[i].src = srcs[i];
		for (size_t k = segs[i].off / MIB; k <= (segs[i].off + segs[i].len - 1) / MIB; k++)
			touched[k] = 1;
		memcpy(before + segs[i].off, srcs[i], segs[i].len);        /* what it becomes */
	}
	copy_run(&pl, threads);
	assert_memory_equal(base, before, cc->bytes);
	for (size_t k = 0; k < nb; k++) {
		size_t a = k * MIB, e = a + MIB < cc->bytes ? a + MIB : cc->bytes;

		if (!touched[k]) {
			assert_int_equal(atomic_load(&ok[k]), 1);
			assert_int_equal(hash[k], 0x5eed);
		} else if (hole[k]) {
			assert_int_equal(atomic_load(&ok[k]), 0);
		} else {
			assert_int_equal(atomic_load(&ok[k]), 1);
			assert_int_equal(hash[k], XXH3_64bits(base + a, e - a));
		}
	}
	for (size_t i = 0; i < cc->n_segs; i++)
		free(srcs[i] - 1);
	free(base);
	free(before);
	free(hole);
	free(touched);
	free(hash);
	free((void *)ok);
}

static void copies_hash_what_they_write(void **state)
{
	static const struct copy_case cases[] = {
		/* tensors 64-byte aligned with padding, an odd tail, a tensor
		 * left to the commit (hole) */
		{ 5 * MIB + 4096, {
			{ 0, NULL, 3 * 1000 },
			{ 3008, NULL, MIB + 13 },
			{ MIB + 3072, NULL, 2 * MIB + 1 },
			{ 4 * MIB + 64, NULL, 333 },
		  }, 4, { { 3 * MIB + 3200, 3 * MIB + 9000 } }, 1 },
		/* a range starting and ending inside stripes (wsync_slab_copy) */
		{ 3 * MIB, { { 77, NULL, 2 * MIB + 5 } }, 1, { { 0, 77 } }, 1 },
		/* a last block shorter than a stripe run, and one of 300 bytes */
		{ 2 * MIB + 100, { { 0, NULL, 2 * MIB + 100 } }, 1, { { 0, 0 } }, 0 },
		{ MIB + 300, { { 0, NULL, MIB + 300 } }, 1, { { 0, 0 } }, 0 },
		/* big enough to measure the methods and the threads */
		{ 48 * MIB + 4096, { { 0, NULL, 20 * MIB + 3 }, { 20 * MIB + 64, NULL, 28 * MIB } },
		  2, { { 0, 0 } }, 0 },
	};
	unsigned threads[] = { 1, 2, 3, 0 };

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		for (size_t t = 0; t < 4; t++)
			check_copy(&cases[i], threads[t], 100 + i * 4 + t);
}

static void plain_copies_copy(void **state)
{
	size_t sizes[] = { 1, 4095, MIB + 7, 40 * MIB + 5 };

	(void)state;
	for (size_t i = 0; i < 4; i++) {
		uint8_t *src = filled(sizes[i], 7 + i), *dst = calloc(1, sizes[i] + 1);
		struct copy_seg seg = { 0, src, sizes[i] };
		struct copy_plan pl = { .base = (char *)dst + 1, .bytes = sizes[i], .segs = &seg,
		                        .n_segs = 1 };

		assert_non_null(dst);
		copy_run(&pl, 0);
		assert_memory_equal(dst + 1, src, sizes[i]);
		free(src);
		free(dst);
	}
}

static void sum_blocks_follow_the_version(void **state)
{
	size_t n = 3 * MIB + 5;
	uint8_t *slab = filled(n, 9);
	struct sum_blocks *s = sum_blocks_new(n);

	(void)state;
	assert_non_null(s);
	assert_int_equal(s->n, 4);
	sum_blocks_claim(s, 7);
	for (size_t k = 0; k < s->n; k++) {
		atomic_store(&s->ok[k], 1);
		s->hash[k] = 123;                  /* wrong on purpose */
	}
	sum_blocks_claim(s, 7);                    /* same version: kept */
	assert_int_equal(atomic_load(&s->ok[2]), 1);
	sum_blocks_forget(s, 7, MIB + 10, MIB);    /* blocks 1 and 2 */
	assert_int_equal(atomic_load(&s->ok[0]), 1);
	assert_int_equal(atomic_load(&s->ok[1]), 0);
	assert_int_equal(atomic_load(&s->ok[2]), 0);
	assert_int_equal(atomic_load(&s->ok[3]), 1);
	sum_blocks_forget(s, 6, 0, n);             /* another version: nothing */
	assert_int_equal(atomic_load(&s->ok[0]), 1);
	sum_blocks_claim(s, 8);                    /* a new version: all unhashed */
	for (size_t k = 0; k < s->n; k++)
		assert_int_equal(atomic_load(&s->ok[k]), 0);
	assert_int_equal(sum_blocks_finish(s, 8, slab, n, 0), wsync_checksum(slab, n));
	/* finish for a version the hashes are not of hashes everything */
	for (size_t k = 0; k < s->n; k++)
		s->hash[k] = 1;
	assert_int_equal(sum_blocks_finish(s, 9, slab, n, 1), wsync_checksum(slab, n));
	sum_blocks_free(s);
	free(slab);
}

/* The hashing thread stores the checksum of the slab, reusing the blocks
 * hashed for the version, then clears the pending word; a wait for another
 * slot does not wait, one for its slot (or any) returns once stored, the
 * waiter hashing blocks too. */
static void hasher_stores_then_clears(void **state)
{
	size_t n = 5 * COPY_BLOCK + 12345;
	uint8_t *slab = malloc(n);
	struct sum_blocks *s = sum_blocks_new(n), *t = sum_blocks_new(n);
	struct sum_hasher *h = NULL;
	_Atomic uint64_t checksum = 0;
	_Atomic uint32_t pending = 77;
	struct sum_job job = { .s = s, .tag = 4, .bytes = n, .base = slab,
	                       .checksum = &checksum, .pending = &pending, .slot = 2 };

	(void)state;
	assert_non_null(slab);
	assert_non_null(s);
	assert_non_null(t);
	for (size_t i = 0; i < n; i++)
		slab[i] = (uint8_t)(i * 131 + (i >> 11));
	sum_blocks_claim(s, 4);
	s->hash[1] = xxh3_hash(slab + COPY_BLOCK, COPY_BLOCK);
	atomic_store(&s->ok[1], 1);
	assert_int_equal(sum_blocks_unhashed(s, 4, n), n - COPY_BLOCK);
	assert_int_equal(sum_blocks_unhashed(s, 5, n), n);
	assert_int_equal(sum_hasher_submit(&h, &job), 0);
	assert_non_null(h);
	sum_hasher_wait(h, 3);                      /* another slot: no wait */
	sum_hasher_wait(h, 2);
	assert_int_equal(atomic_load(&pending), 0);
	assert_int_equal(atomic_load(&checksum), wsync_checksum(slab, n));
	/* a second job on another list (a version no copy hashed), waited
	 * for at once: the waiter helps */
	job.s = t;
	job.tag = 5;
	atomic_store(&pending, 78);
	atomic_store(&checksum, 0);
	slab[n - 1] ^= 1;
	assert_int_equal(sum_hasher_submit(&h, &job), 0);
	sum_hasher_wait(h, WSYNC_SLOT_NONE);
	assert_int_equal(atomic_load(&pending), 0);
	assert_int_equal(atomic_load(&checksum), wsync_checksum(slab, n));
	sum_hasher_free(h);
	sum_hasher_free(NULL);
	sum_hasher_wait(NULL, 0);
	sum_blocks_free(s);
	sum_blocks_free(t);
	free(slab);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fused_loop_is_xxh3),
		cmocka_unit_test(hash_pass_is_xxh3),
		cmocka_unit_test(checksum_is_defined_by_blocks),
		cmocka_unit_test(copies_hash_what_they_write),
		cmocka_unit_test(plain_copies_copy),
		cmocka_unit_test(sum_blocks_follow_the_version),
		cmocka_unit_test(hasher_stores_then_clears),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
