/*
 * slab_copy — wsync_slab_copy fills a begun slab exactly, whatever the
 * thread count (1, 3, 0 = one per CPU) and for sizes that do not divide into
 * pages or threads; a collector in another process then sees every byte.
 * It refuses (-EINVAL, with a message) a range past the slab, a NULL source,
 * and a slab already committed or aborted; wsync_copy copies odd lengths
 * and zero bytes. wsync_slab_copy_tensors copies every tensor of a
 * multi-tensor model in one pass (odd sizes, an empty tensor), leaves a
 * tensor whose source is NULL untouched, and refuses a slab not begun.
 */
#include "tests/lib/harness.h"

#include <stdlib.h>
#include <string.h>

#define MODEL "copy.model"

static struct broker B;

/* One u8 tensor of 13 MiB + 3 bytes: several 4 MiB parts and an odd tail. */
static const uint64_t BYTES = (13u << 20) + 3;

static uint8_t pattern(uint64_t step, size_t i)
{
	return (uint8_t)(step * 131 + i * 7 + (i >> 12));
}

static int collector(void *arg)
{
	uint64_t want_step = *(uint64_t *)arg;
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	const void *data;

	TEST_OK(harness_connect(&B, "copy-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_wait(s, 0, 10 * HARNESS_S, &v));
	TEST_EQ_U64(v.step, want_step);
	TEST_OK(wsync_view_tensor(&v, "blob", &data, NULL));
	for (size_t i = 0; i < BYTES; i++)
		if (((const uint8_t *)data)[i] != pattern(want_step, i))
			TEST_ASSERT_MSG(0, "byte %zu is %u, expected %u", i,
			                ((const uint8_t *)data)[i], pattern(want_step, i));
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

static void check_wsync_copy(void)
{
	size_t sizes[] = { 0, 1, 4095, 4097, (9u << 20) + 5 };
	unsigned threads[] = { 1, 2, 0 };

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k];
		uint8_t *src = malloc(n + 1), *dst = malloc(n + 1);

		TEST_ASSERT(src && dst);
		for (size_t i = 0; i < n; i++)
			src[i] = pattern(k, i);
		for (size_t t = 0; t < 3; t++) {
			memset(dst, 0xa5, n + 1);
			TEST_OK(wsync_copy(dst, src, n, threads[t]));
			TEST_ASSERT_MSG(memcmp(dst, src, n) == 0, "wsync_copy of %zu bytes "
			                "with %u threads differs", n, threads[t]);
			TEST_ASSERT_MSG(dst[n] == 0xa5, "wsync_copy wrote past %zu bytes", n);
		}
		free(src);
		free(dst);
	}
	TEST_RC(wsync_copy(NULL, "x", 1, 1), -EINVAL);
}

#define MULTI "copy.multi"
#define N_MULTI 5

/* f32 [1000,1001], u8 [3], f32 [0] (empty), i64 [700000], bf16 [2,999999] */
static void multi_layout(wsync_tensor_desc d[N_MULTI])
{
	static const uint64_t s0[] = { 1000, 1001 }, s1[] = { 3 }, s2[] = { 0 },
	                      s3[] = { 700000 }, s4[] = { 2, 999999 };

	harness_desc(&d[0], "a", WSYNC_F32, 2, s0);
	harness_desc(&d[1], "b", WSYNC_U8, 1, s1);
	harness_desc(&d[2], "empty", WSYNC_F32, 1, s2);
	harness_desc(&d[3], "untouched", WSYNC_I64, 1, s3);
	harness_desc(&d[4], "e", WSYNC_BF16, 2, s4);
}

static void check_copy_tensors(wsync_client *c)
{
	wsync_tensor_desc d[N_MULTI];
	wsync_pub *p = NULL;
	wsync_slab slab, stale;
	const void *srcs[N_MULTI];
	uint8_t *bufs[N_MULTI];
	unsigned threads[] = { 1, 2, 0 };

	multi_layout(d);
	TEST_OK(wsync_pub_open(c, MULTI, d, N_MULTI, NULL, &p));
	for (size_t t = 0; t < 3; t++) {
		uint64_t step = 100 + t;

		TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
		for (size_t i = 0; i < N_MULTI; i++) {
			size_t n = (size_t)wsync_tensor_bytes(&slab.tensors[i]);

			bufs[i] = malloc(n + 1);
			TEST_ASSERT(bufs[i] != NULL);
			for (size_t k = 0; k < n; k++)
				bufs[i][k] = pattern(step + i, k);
			srcs[i] = bufs[i];
		}
		/* the NULL source's tensor keeps what is written here */
		memset((char *)slab.base + slab.tensors[3].offset, 0x5a,
		       (size_t)wsync_tensor_bytes(&slab.tensors[3]));
		srcs[3] = NULL;
		TEST_RC(wsync_slab_copy_tensors(&slab, NULL, threads[t]), -EINVAL);
		TEST_OK(wsync_slab_copy_tensors(&slab, srcs, threads[t]));
		for (size_t i = 0; i < N_MULTI; i++) {
			const uint8_t *got = (const uint8_t *)slab.base + slab.tensors[i].offset;
			size_t n = (size_t)wsync_tensor_bytes(&slab.tensors[i]);

			for (size_t k = 0; k < n; k++) {
				uint8_t want = i == 3 ? 0x5a : pattern(step + i, k);

				TEST_ASSERT_MSG(got[k] == want, "threads %u: tensor %zu byte %zu "
				                "is %u, expected %u", threads[t], i, k, got[k], want);
			}
		}
		stale = slab;
		TEST_OK(wsync_pub_commit(p, step, NULL));
		TEST_RC(wsync_slab_copy_tensors(&stale, srcs, 1), -EINVAL);
		for (size_t i = 0; i < N_MULTI; i++)
			free(bufs[i]);
	}
	wsync_pub_close(p);
}

int main(void)
{
	wsync_tensor_desc d;
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	wsync_slab slab, stale;
	uint8_t *src = malloc(BYTES);
	uint64_t shape[1] = { BYTES }, step = 0;
	unsigned threads[] = { 1, 3, 0 };

	check_wsync_copy();
	TEST_ASSERT(src != NULL);
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	TEST_OK(harness_connect(&B, "copy-trainer", &c));
	harness_desc(&d, "blob", WSYNC_U8, 1, shape);
	TEST_OK(wsync_pub_open(c, MODEL, &d, 1, NULL, &p));

	for (size_t t = 0; t < 3; t++) {
		step = 10 + t;
		for (size_t i = 0; i < BYTES; i++)
			src[i] = pattern(step, i);
		TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
		TEST_RC(wsync_slab_copy(&slab, 1, src, slab.bytes, threads[t]), -EINVAL);
		TEST_CONTAINS(wsync_errmsg(), "past the slab");
		TEST_RC(wsync_slab_copy(&slab, 0, NULL, 8, threads[t]), -EINVAL);
		TEST_OK(wsync_slab_copy(&slab, slab.tensors[0].offset, src, BYTES, threads[t]));
		stale = slab;
		TEST_OK(wsync_pub_commit(p, step, NULL));
		TEST_RC(wsync_slab_copy(&stale, 0, src, 8, 1), -EINVAL);
		TEST_CONTAINS(wsync_errmsg(), "not begun");
		pid_t child = harness_fork(collector, &step);
		harness_expect_exit0(child, "collector");
	}

	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	stale = slab;
	TEST_OK(wsync_pub_abort(p));
	TEST_RC(wsync_slab_copy(&stale, 0, src, 8, 1), -EINVAL);

	wsync_pub_close(p);
	check_copy_tensors(c);
	wsync_close(c);
	free(src);
	harness_broker_finish(&B);
	return 0;
}
