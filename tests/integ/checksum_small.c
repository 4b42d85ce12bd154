/*
 * checksum_small — a small version written without the copy helper is made
 * visible (and its collectors woken) with its checksum pending, and the
 * commit forms the checksum itself right after the wake (pub_commit.c):
 *  1. when wsync_pub_commit returns, the checksum of the version is stored
 *     and no longer pending, for each of 200 versions in turn;
 *  2. meanwhile a collector in another process, woken by each commit,
 *     verifies every version it gets at once (racing the publisher's hash)
 *     and finds the stored checksum equal to that of its view: a checksum
 *     left pending, stored late for the wrong version or missing would show
 *     as a timeout, -EBADMSG or -ENODATA;
 *  3. a stray write into the committed slab afterwards is still caught.
 */
#include "tests/lib/harness.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "libclient/checksum.h"
#include "libclient/pub.h"

#define MODEL    "sum.small"
#define BYTES    4096u
#define VERSIONS 200

static struct broker B;

static int collector(void *arg)
{
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	uint64_t after = 0, stored = 0;
	int seen = 0;

	(void)arg;
	TEST_OK(harness_connect(&B, "small-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	while (after < VERSIONS) {
		wsync_view v;

		TEST_OK(wsync_sub_wait(s, after, 10 * HARNESS_S, &v));
		TEST_OK(wsync_view_verify(&v));
		TEST_OK(wsync_view_checksum(&v, &stored));
		TEST_EQ_U64(stored, wsync_checksum(v.base, v.bytes));
		TEST_EQ_U64(((const uint8_t *)v.base)[0], (uint8_t)v.step);
		after = v.version;
		seen++;
		wsync_sub_release(s, &v);
	}
	TEST_ASSERT(seen > 0);
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

int main(void)
{
	static const uint64_t shape[] = { BYTES };
	wsync_tensor_desc d;
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	wsync_slab slab;
	uint64_t version = 0;
	uint32_t slot = 0;
	pid_t child;

	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	TEST_OK(harness_connect(&B, "small-trainer", &c));
	harness_desc(&d, "w", WSYNC_U8, 1, shape);
	TEST_OK(wsync_pub_open(c, MODEL, &d, 1, NULL, &p));
	child = harness_fork(collector, NULL);
	for (uint64_t step = 1; step <= VERSIONS; step++) {
		uint64_t l;

		TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
		memset(slab.base, (int)(uint8_t)step, BYTES);
		((uint8_t *)slab.base)[BYTES - 1] = (uint8_t)(step * 7);
		TEST_OK(wsync_pub_commit(p, step, &version));
		l = atomic_load(&p->page->latest);
		TEST_EQ_U64(wsync_latest_version(l), version);
		slot = wsync_latest_slot(l);
		TEST_EQ_U64(atomic_load(&p->page->sum_pending[slot]), 0);
		TEST_EQ_U64(atomic_load(&p->page->slots[slot].checksum),
		            wsync_checksum(slab.base, BYTES));
		if (step % 16 == 0)
			harness_sleep_ms(1);   /* now and then, one that woke from idle */
	}
	harness_expect_exit0(child, "collector");

	/* a byte changed behind the library's back after the commit */
	{
		wsync_sub *s = NULL;
		wsync_view v;

		TEST_OK(wsync_sub_open(c, MODEL, &s));
		TEST_OK(wsync_sub_acquire(s, &v));
		TEST_EQ_U64(v.version, version);
		((uint8_t *)p->slabs[slot])[17] ^= 0x5a;
		TEST_RC(wsync_view_verify(&v), -EBADMSG);
		wsync_sub_release(s, &v);
		wsync_sub_close(s);
	}
	wsync_pub_close(p);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
