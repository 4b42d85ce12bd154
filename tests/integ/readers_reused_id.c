/*
 * readers_reused_id — wsync_pub_wait_readers counts only what a reader
 * acquired of this model: a collector that acquired model A at v5, then
 * subscribed to model B, which got A's id after A was deleted, has acquired
 * nothing of B. A wait for B's v3 by all readers times out naming it, and
 * returns once it acquires B.
 */
#include "tests/lib/harness.h"

#define A "reused.a"
#define B_ "reused.b"

static struct broker B;

int main(void)
{
	wsync_client *t, *c;
	wsync_pub *pa, *pb;
	wsync_sub *sa, *sb;
	wsync_view v;
	wsync_model_info info[4];
	uint64_t version = 0;
	uint32_t have = 99;
	size_t n;

	if (harness_broker_start(&B, NULL))
		return 1;
	TEST_OK(harness_connect(&B, "trainer", &t));
	TEST_OK(harness_connect(&B, "collector", &c));
	TEST_OK(harness_pub_open_2t(t, A, 0, &pa));
	TEST_OK(wsync_sub_open(c, A, &sa));
	for (uint64_t step = 1; step <= 5; step++)
		TEST_OK(harness_publish(pa, step, HARNESS_S, &version));
	TEST_OK(wsync_sub_acquire(sa, &v));
	TEST_EQ_U64(v.version, version);
	wsync_sub_release(sa, &v);
	wsync_sub_close(sa);
	wsync_pub_close(pa);
	TEST_OK(wsync_model_delete(t, A));

	/* B takes the id A had */
	TEST_OK(harness_pub_open_2t(t, B_, 0, &pb));
	TEST_OK(wsync_models(t, info, 4, &n));
	TEST_EQ_U64(n, 1);
	TEST_OK(wsync_sub_open(c, B_, &sb));
	for (uint64_t step = 1; step <= 3; step++)
		TEST_OK(harness_publish(pb, step, HARNESS_S, &version));
	harness_log("A reached v5 in the collector; B is at v%llu",
	            (unsigned long long)version);
	TEST_ASSERT(version <= 5);
	TEST_RC(wsync_pub_wait_readers(pb, version, 0, 300 * HARNESS_MS, &have), -ETIMEDOUT);
	TEST_CONTAINS(wsync_errmsg(), "collector");
	/* once it acquires, it counts */
	TEST_OK(wsync_sub_acquire(sb, &v));
	TEST_OK(wsync_pub_wait_readers(pb, version, 0, 2 * HARNESS_S, &have));
	TEST_EQ_U64(have, 1);
	wsync_sub_release(sb, &v);
	wsync_sub_close(sb);
	wsync_pub_close(pb);
	wsync_close(c);
	wsync_close(t);
	harness_broker_finish(&B);
	return 0;
}
