/*
 * broker_restart — a broker crash loses nothing: a collector holding a view
 * when the broker is SIGKILLed keeps reading it intact; its
 * wsync_sub_wait(WSYNC_FOREVER) returns -ENOTCONN within seconds instead of
 * hanging; the trainer's next call fails instead of succeeding silently. The
 * broker restarted under the same name, socket and directory adopts the
 * model: the collector reconnects and acquires a version >= the one it held,
 * with the same bytes; the trainer reconnects and its next version is
 * greater, and reaches the collector. After a clean stop (exit 0, no segment
 * left) and a fresh start, versions still go up.
 */
#include "tests/lib/harness.h"

#include <string.h>

#define MODEL "restart.policy"

static struct broker B;
static struct chan to_child, to_parent;

static int collector(void *arg)
{
	(void)arg;
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view held, v;
	TEST_OK(harness_connect(&B, "restart-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	uint64_t v3 = chan_recv(&to_child, 0);
	TEST_OK(wsync_sub_acquire(s, &held));
	TEST_EQ_U64(held.version, v3);
	TEST_ASSERT(harness_verify_view(&held) == 0);
	chan_send(&to_parent, 1);

	/* the broker is dead */
	chan_recv(&to_child, 0);
	TEST_ASSERT(harness_verify_view(&held) == 0);
	int64_t t0 = harness_mono_ns();
	TEST_RC(wsync_sub_wait(s, held.version, WSYNC_FOREVER, &v), -ENOTCONN);
	int64_t took = harness_mono_ns() - t0;
	TEST_ASSERT_MSG(took < 5 * HARNESS_S, "the wait noticed the dead broker after %lld ms",
	                (long long)(took / HARNESS_MS));
	TEST_ASSERT(harness_verify_view(&held) == 0);
	chan_send(&to_parent, 2);

	/* the broker is back: the old view is still intact; reconnect */
	chan_recv(&to_child, 0);
	TEST_ASSERT(harness_verify_view(&held) == 0);
	uint64_t old_version = held.version, old_step = held.step;
	wsync_sub_release(s, &held);
	wsync_sub_close(s);
	wsync_close(c);

	TEST_OK(harness_connect(&B, "restart-collector-2", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_wait(s, 0, 10 * HARNESS_S, &v));
	TEST_ASSERT_MSG(v.version >= old_version, "adopted version %llu < %llu held before",
	                (unsigned long long)v.version, (unsigned long long)old_version);
	TEST_EQ_U64(v.step, old_step);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	uint64_t adopted = v.version;
	wsync_sub_release(s, &v);
	chan_send(&to_parent, adopted);

	/* the reconnected trainer's next version reaches us */
	TEST_OK(wsync_sub_wait(s, adopted, 10 * HARNESS_S, &v));
	TEST_GT_U64(v.version, adopted);
	TEST_EQ_U64(v.step, 4);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	chan_send(&to_parent, v.version);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

int main(void)
{
	chan_open(&to_child);
	chan_open(&to_parent);
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);

	pid_t child = harness_fork(collector, NULL);

	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	TEST_OK(harness_connect(&B, "restart-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	uint64_t v = 0, v3 = 0;
	for (uint64_t step = 1; step <= 3; step++) {
		TEST_OK(harness_publish(p, step, HARNESS_S, &v));
		TEST_GT_U64(v, v3);
		v3 = v;
	}
	chan_send(&to_child, v3);
	chan_recv(&to_parent, child);

	/* crash */
	harness_broker_kill(&B);
	chan_send(&to_child, 1);
	chan_recv(&to_parent, child);

	/* restart: same name, socket, XDG_RUNTIME_DIR */
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	chan_send(&to_child, 1);
	uint64_t adopted = chan_recv(&to_parent, child);

	/* the trainer's old session is gone: its next begin/commit must fail */
	wsync_slab slab;
	memset(&slab, 0, sizeof slab);
	int rc = wsync_pub_begin(p, HARNESS_S, &slab);
	if (rc == 0) {
		harness_fill(slab.base, slab.bytes, 99);
		rc = wsync_pub_commit(p, 99, &v);
	}
	TEST_ASSERT_MSG(rc == -ENOTCONN || rc == -EPIPE || rc == -ECONNRESET,
	                "publishing through a session of the dead broker: %d (%s)",
	                rc, wsync_strerror(rc));
	wsync_pub_close(p);
	wsync_close(c);

	/* reconnect and publish: above everything before */
	TEST_OK(harness_connect(&B, "restart-trainer-2", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	uint64_t v4 = 0;
	TEST_OK(harness_publish(p, 4, 5 * HARNESS_S, &v4));
	TEST_GT_U64(v4, v3);
	TEST_GT_U64(v4, adopted);
	TEST_EQ_U64(chan_recv(&to_parent, child), v4);
	harness_expect_exit0(child, "collector");

	/* clean stop (the trainer still connected), then a fresh start */
	harness_broker_finish(&B);
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	wsync_pub_close(p);
	wsync_close(c);
	TEST_OK(harness_connect(&B, "restart-trainer-3", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	uint64_t v5 = 0;
	TEST_OK(harness_publish(p, 5, 5 * HARNESS_S, &v5));
	TEST_GT_U64(v5, v4);

	wsync_sub *s = NULL;
	wsync_view view;
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire(s, &view));
	TEST_EQ_U64(view.version, v5);
	TEST_EQ_U64(view.step, 5);
	TEST_ASSERT(harness_verify_view(&view) == 0);
	wsync_sub_release(s, &view);
	wsync_sub_close(s);

	/* and once more, a crash right after: the next start goes on from there */
	uint64_t v6 = 0;
	TEST_OK(harness_publish(p, 6, 5 * HARNESS_S, &v6));
	TEST_GT_U64(v6, v5);
	harness_broker_kill(&B);
	wsync_pub_close(p);
	wsync_close(c);
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	TEST_OK(harness_connect(&B, "restart-trainer-4", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	uint64_t v7 = 0;
	TEST_OK(harness_publish(p, 7, 5 * HARNESS_S, &v7));
	TEST_GT_U64(v7, v6);
	wsync_pub_close(p);
	wsync_close(c);

	harness_broker_finish(&B);
	return 0;
}
