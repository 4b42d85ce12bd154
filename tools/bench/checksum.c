/*
 * tools/bench/checksum.c — what a version's checksum costs where it is not
 * formed during a copy: the checksum of a 256 MiB slab (libclient/
 * checksum.c: XXH3-64 of each MiB, combined) on one thread, as a commit
 * forms it for bytes no library copy wrote, and on the threads the library
 * measured as paying, as wsync_view_verify forms it in a collector; and the
 * library's fused copy + hash against its copy alone, on one thread. The
 * reference is one single-thread memcpy of 256 MiB between warm buffers,
 * same run, interleaved with the rest.
 */
#include <stdio.h>
#include <string.h>

#include "bench_common.h"
#include "checksum.h"

#define CS_BYTES (256 * MIB)
#define CS_MAX_REPEATS 32

int bench_checksum(struct bench *b)
{
	double copy[CS_MAX_REPEATS], hash1[CS_MAX_REPEATS], hashn[CS_MAX_REPEATS];
	int n = b->repeats < CS_MAX_REPEATS ? b->repeats : CS_MAX_REPEATS;
	void *src = warm_alloc(CS_BYTES), *dst = warm_alloc(CS_BYTES);
	volatile uint64_t sink = 0;
	struct bench_row *row;
	double m;

	if (!src || !dst) {
		row_skip("checksum", "checksum of 256 MiB", "out of memory");
		warm_free(src, CS_BYTES);
		warm_free(dst, CS_BYTES);
		return -1;
	}
	sink ^= wsync_checksum_threads(src, CS_BYTES, 0);   /* warm up every path */
	sink ^= wsync_checksum(src, CS_BYTES);
	memcpy(dst, src, CS_BYTES);
	for (int i = 0; i < n; i++) {
		int64_t t0 = mono_ns();

		memcpy(dst, src, CS_BYTES);
		copy[i] = (double)(mono_ns() - t0) / 1e6;
		t0 = mono_ns();
		sink ^= wsync_checksum(src, CS_BYTES);
		hash1[i] = (double)(mono_ns() - t0) / 1e6;
		t0 = mono_ns();
		sink ^= wsync_checksum_threads(src, CS_BYTES, 0);
		hashn[i] = (double)(mono_ns() - t0) / 1e6;
	}
	(void)sink;
	m = stat_median(copy, (size_t)n);

	row_add("checksum", "memcpy 256 MiB, 1 thread, warm buffers (reference)", "ms", m);
	row = row_add("checksum", "checksum of 256 MiB, 1 thread (a commit's, for bytes no "
	              "copy hashed)", "ms", stat_median(hash1, (size_t)n));
	row_ref(row, "memcpy, 1 thread", m);
	row = row_add("checksum", "checksum of 256 MiB, threads the library measured "
	              "(wsync_view_verify)", "ms", stat_median(hashn, (size_t)n));
	row_ref(row, "memcpy, 1 thread", m);
	warm_free(src, CS_BYTES);
	warm_free(dst, CS_BYTES);
	return 0;
}
