/*
 * tools/bench/checksum.c — what WSYNC_PUB_CHECKSUM costs a publisher: the
 * XXH3-64 of a 256 MiB slab (libclient/checksum.c, one read pass), against
 * one single-thread memcpy of 256 MiB between warm buffers, same run.
 */
#include <stdio.h>
#include <string.h>

#include "bench_common.h"
#include "checksum.h"

#define CS_BYTES (256 * MIB)
#define CS_MAX_REPEATS 32

int bench_checksum(struct bench *b)
{
	double copy[CS_MAX_REPEATS], hash[CS_MAX_REPEATS];
	int n = b->repeats < CS_MAX_REPEATS ? b->repeats : CS_MAX_REPEATS;
	void *src = warm_alloc(CS_BYTES), *dst = warm_alloc(CS_BYTES);
	volatile uint64_t sink = 0;
	struct bench_row *row;
	double m;

	if (!src || !dst) {
		row_skip("checksum", "XXH3-64 of 256 MiB", "out of memory");
		warm_free(src, CS_BYTES);
		warm_free(dst, CS_BYTES);
		return -1;
	}
	sink ^= wsync_checksum(src, CS_BYTES);           /* warm up both paths */
	memcpy(dst, src, CS_BYTES);
	for (int i = 0; i < n; i++) {
		int64_t t0 = mono_ns();

		memcpy(dst, src, CS_BYTES);
		copy[i] = (double)(mono_ns() - t0) / 1e6;
		t0 = mono_ns();
		sink ^= wsync_checksum(src, CS_BYTES);
		hash[i] = (double)(mono_ns() - t0) / 1e6;
	}
	(void)sink;
	m = stat_median(copy, (size_t)n);

	row_add("checksum", "memcpy 256 MiB, 1 thread, warm buffers (reference)", "ms", m);
	row = row_add("checksum", "XXH3-64 of 256 MiB (WSYNC_PUB_CHECKSUM at commit, "
	              "wsync_view_verify)", "ms", stat_median(hash, (size_t)n));
	row_ref(row, "memcpy, 1 thread", m);
	warm_free(src, CS_BYTES);
	warm_free(dst, CS_BYTES);
	return 0;
}
