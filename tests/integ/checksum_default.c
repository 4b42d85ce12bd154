/*
 * checksum_default — every version of a host model carries a checksum
 * unless its publisher says WSYNC_PUB_NO_CHECKSUM, and it is the checksum of
 * the bytes collectors see, however the slab was written:
 *  - wsync_slab_copy_tensors on 1, 2, 3 and the measured threads (the copy
 *    hashes as it writes);
 *  - a tensor left out of the copy (NULL) and written through the slab
 *    before it, and one rewritten through a wsync_slab_tensor pointer taken
 *    after the copy (both hashed at commit);
 *  - wsync_slab_copy of a range that starts and ends inside tensors, the
 *    rest written directly;
 *  - no library copy at all.
 * A collector in another process verifies each version (0) and finds the
 * stored checksum equal to wsync_checksum of its view. A publisher's stray
 * write into a committed slab is caught: the collector's verify says
 * -EBADMSG, and the model's checksum_failures in the control segment
 * counts it within the broker's tick. WSYNC_PUB_NO_CHECKSUM publishes
 * without (verify: -ENODATA); asking for both is -EINVAL.
 */
#include "tests/lib/harness.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libclient/checksum.h"
#include "libclient/pub.h"

#define MODEL "sum.model"
#define BARE  "sum.bare"
#define N_T 4

static struct broker B;

static void layout(wsync_tensor_desc d[N_T])
{
	static const uint64_t s0[] = { 700001 }, s1[] = { 3 }, s2[] = { 1024, 777 },
	                      s3[] = { 600000 };

	harness_desc(&d[0], "a", WSYNC_U8, 1, s0);
	harness_desc(&d[1], "b", WSYNC_F32, 1, s1);
	harness_desc(&d[2], "c", WSYNC_F32, 2, s2);
	harness_desc(&d[3], "d", WSYNC_I16, 1, s3);
}

static uint8_t byte_at(uint64_t step, size_t t, size_t i)
{
	return (uint8_t)(step * 37 + t * 101 + i * 13 + (i >> 9));
}

struct expect {
	uint64_t step;
	int verify;                      /* what wsync_view_verify must say */
};

/* A collector: waits for the step, verifies, checks the stored checksum
 * against the view's bytes. */
static int collector(void *arg)
{
	const struct expect *x = arg;
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	uint64_t stored = 0;
	wsync_view v;

	TEST_OK(harness_connect(&B, "sum-collector", &c));
	TEST_OK(wsync_sub_open(c, x->verify == -ENODATA ? BARE : MODEL, &s));
	TEST_OK(wsync_sub_wait(s, 0, 10 * HARNESS_S, &v));
	TEST_EQ_U64(v.step, x->step);
	TEST_RC(wsync_view_verify(&v), x->verify);
	TEST_OK(wsync_view_checksum(&v, &stored));
	if (x->verify == -ENODATA)
		TEST_EQ_U64(stored, 0);
	else if (x->verify == 0)
		TEST_EQ_U64(stored, wsync_checksum(v.base, v.bytes));
	else
		TEST_ASSERT(stored != wsync_checksum(v.base, v.bytes));
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_close(c);
	/* _exit, not a return into exit(): this child was forked from a
	 * trainer whose copy and hashing threads run in the sanitizers'
	 * runtime, and a fork can copy its allocator lock held; LeakSanitizer's
	 * check at exit then waits on it forever (ASan builds only). What it
	 * opened it closed above. */
	_exit(0);
}

static void expect_collector(uint64_t step, int verify)
{
	struct expect x = { step, verify };
	pid_t child = harness_fork(collector, &x);

	harness_expect_exit0(child, "collector");
}

/* Sources of every tensor for a step. */
static uint8_t *srcs_make(const wsync_slab *slab, uint64_t step, const void *srcs[N_T])
{
	size_t total = 0, at = 0;
	uint8_t *all;

	for (size_t t = 0; t < N_T; t++)
		total += (size_t)wsync_tensor_bytes(&slab->tensors[t]) + 1;
	all = malloc(total);
	TEST_ASSERT(all != NULL);
	for (size_t t = 0; t < N_T; t++) {
		size_t n = (size_t)wsync_tensor_bytes(&slab->tensors[t]);

		for (size_t i = 0; i < n; i++)
			all[at + 1 + i] = byte_at(step, t, i);
		srcs[t] = all + at + 1;           /* odd addresses */
		at += n + 1;
	}
	return all;
}

static void write_direct(const wsync_slab *slab, size_t t, uint64_t step)
{
	uint8_t *dst = (uint8_t *)slab->base + slab->tensors[t].offset;
	size_t n = (size_t)wsync_tensor_bytes(&slab->tensors[t]);

	for (size_t i = 0; i < n; i++)
		dst[i] = byte_at(step, t, i);
}

static void publish_ways(wsync_pub *p)
{
	unsigned threads[] = { 1, 2, 3, 0 };
	const void *srcs[N_T];
	wsync_slab slab;
	uint64_t step = 1;
	uint8_t *all;
	void *ptr;

	/* the copy hashes everything */
	for (size_t k = 0; k < 4; k++, step++) {
		TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
		all = srcs_make(&slab, step, srcs);
		TEST_OK(wsync_slab_copy_tensors(&slab, srcs, threads[k]));
		TEST_OK(wsync_pub_commit(p, step, NULL));
		free(all);
		expect_collector(step, 0);
	}
	/* one tensor written before the copy, one after it through a pointer */
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	all = srcs_make(&slab, step, srcs);
	write_direct(&slab, 2, step);
	srcs[2] = NULL;
	TEST_OK(wsync_slab_copy_tensors(&slab, srcs, 0));
	TEST_OK(wsync_slab_tensor(&slab, "a", &ptr, NULL));
	memset(ptr, 0x33, 1000);
	TEST_OK(wsync_pub_commit(p, step, NULL));
	free(all);
	expect_collector(step++, 0);
	/* a range that starts and ends inside tensors */
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	for (size_t t = 0; t < N_T; t++)
		write_direct(&slab, t, step);
	{
		size_t from = (size_t)slab.tensors[0].offset + 5000;
		size_t to = (size_t)slab.tensors[3].offset + 999;
		uint8_t *buf = malloc(to - from);

		TEST_ASSERT(buf != NULL);
		for (size_t i = 0; i < to - from; i++)
			buf[i] = (uint8_t)(i * 7 + 1);
		TEST_OK(wsync_slab_copy(&slab, from, buf, to - from, 0));
		free(buf);
	}
	TEST_OK(wsync_pub_commit(p, step, NULL));
	expect_collector(step++, 0);
	/* nothing copied by the library */
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	for (size_t t = 0; t < N_T; t++)
		write_direct(&slab, t, step);
	TEST_OK(wsync_pub_commit(p, step, NULL));
	expect_collector(step++, 0);
	/* a stray write after the commit (the slab is not guarded) */
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	all = srcs_make(&slab, step, srcs);
	TEST_OK(wsync_slab_copy_tensors(&slab, srcs, 0));
	TEST_OK(wsync_pub_commit(p, step, NULL));
	free(all);
	((uint8_t *)slab.base)[slab.tensors[3].offset + 4321] ^= 0x40;
	expect_collector(step++, -EBADMSG);
}

static const struct wsync_ctl_model *entry_of(wsync_client *c, const char *model)
{
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		const struct wsync_ctl_model *e = client_ctl_model(c, i);

		if (atomic_load(&e->state) != WSYNC_MODEL_FREE && !strcmp(e->name, model))
			return e;
	}
	TEST_ASSERT_MSG(0, "model %s not in the control segment", model);
	return NULL;
}

int main(void)
{
	wsync_tensor_desc d[N_T];
	wsync_model_opts o = { .flags = WSYNC_PUB_NO_CHECKSUM | WSYNC_PUB_CHECKSUM };
	const struct wsync_ctl_model *e;
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	wsync_slab slab;
	int64_t deadline;

	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	TEST_OK(harness_connect(&B, "sum-trainer", &c));
	layout(d);
	TEST_RC(wsync_pub_open(c, MODEL, d, N_T, &o, &p), -EINVAL);
	TEST_CONTAINS(wsync_errmsg(), "WSYNC_PUB_NO_CHECKSUM");
	TEST_OK(wsync_pub_open(c, MODEL, d, N_T, NULL, &p));
	publish_ways(p);
	/* the broker counts the collector's mismatch within its tick */
	e = entry_of(c, MODEL);
	deadline = harness_mono_ns() + 5 * HARNESS_S;
	while (atomic_load(&e->checksum_failures) < 1 && harness_mono_ns() < deadline)
		harness_sleep_ms(50);
	TEST_EQ_U64(atomic_load(&e->checksum_failures), 1);
	wsync_pub_close(p);

	o.flags = WSYNC_PUB_NO_CHECKSUM;
	TEST_OK(wsync_pub_open(c, BARE, d, N_T, &o, &p));
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	for (size_t t = 0; t < N_T; t++)
		write_direct(&slab, t, 50);
	TEST_OK(wsync_pub_commit(p, 50, NULL));
	expect_collector(50, -ENODATA);
	wsync_pub_close(p);

	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
