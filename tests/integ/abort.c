/*
 * abort — an aborted slab is never seen: begin, scribble, abort leaves the
 * latest version unchanged and intact for a collector in another process;
 * a second begin without commit or abort is -EALREADY and the first slab
 * stays usable; repeated begin/abort cycles leak no slot of a 2-slot model;
 * versions keep going up after aborts.
 */
#include "tests/lib/harness.h"

#include <string.h>

#define MODEL "abort.policy"

static struct broker B;
static struct chan to_child, to_parent;

/* Acquires the latest in a separate process and reports version and step;
 * the bytes must match the step's pattern. */
static int reader(void *arg)
{
	(void)arg;
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	TEST_OK(harness_connect(&B, "abort-reader", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	for (;;) {
		if (chan_recv(&to_child, 0) == 0)
			break;
		wsync_view v;
		TEST_OK(wsync_sub_acquire(s, &v));
		TEST_ASSERT(harness_verify_view(&v) == 0);
		chan_send(&to_parent, v.version);
		chan_send(&to_parent, v.step);
		wsync_sub_release(s, &v);
	}
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

static void expect_latest(pid_t child, uint64_t version, uint64_t step)
{
	chan_send(&to_child, 1);
	TEST_EQ_U64(chan_recv(&to_parent, child), version);
	TEST_EQ_U64(chan_recv(&to_parent, child), step);
}

int main(void)
{
	chan_open(&to_child);
	chan_open(&to_parent);
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);

	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	TEST_OK(harness_connect(&B, "abort-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 2, &p));
	uint64_t v1 = 0;
	TEST_OK(harness_publish(p, 10, HARNESS_S, &v1));

	pid_t child = harness_fork(reader, NULL);
	expect_latest(child, v1, 10);

	/* begin, scribble over the whole slab, abort */
	wsync_slab slab;
	memset(&slab, 0, sizeof slab);
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	harness_fill(slab.base, slab.bytes, 666);
	TEST_OK(wsync_pub_abort(p));
	expect_latest(child, v1, 10);

	/* begin twice: -EALREADY, and the first slab is still the one to commit */
	memset(&slab, 0, sizeof slab);
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	wsync_slab second;
	memset(&second, 0, sizeof second);
	TEST_RC(wsync_pub_begin(p, 5 * HARNESS_S, &second), -EALREADY);
	harness_fill(slab.base, slab.bytes, 11);
	uint64_t v2 = 0;
	TEST_OK(wsync_pub_commit(p, 11, &v2));
	TEST_GT_U64(v2, v1);
	expect_latest(child, v2, 11);

	/* many aborts on a 2-slot model: none of them keeps a slot */
	uint64_t last = v2;
	for (int i = 0; i < 10; i++) {
		memset(&slab, 0, sizeof slab);
		TEST_OK(wsync_pub_begin(p, 2 * HARNESS_S, &slab));
		harness_fill(slab.base, slab.bytes, 1000 + (uint64_t)i);
		TEST_OK(wsync_pub_abort(p));
		uint64_t v = 0;
		TEST_OK(harness_publish(p, 20 + (uint64_t)i, 2 * HARNESS_S, &v));
		TEST_GT_U64(v, last);
		last = v;
	}
	expect_latest(child, last, 29);

	/* abort then close: the latest survives the publisher */
	memset(&slab, 0, sizeof slab);
	TEST_OK(wsync_pub_begin(p, 2 * HARNESS_S, &slab));
	harness_fill(slab.base, slab.bytes, 777);
	wsync_pub_close(p);         /* aborts the begun slab */
	expect_latest(child, last, 29);

	chan_send(&to_child, 0);
	harness_expect_exit0(child, "reader");
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
