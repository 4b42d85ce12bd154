/*
 * broker_stalled — the data path does not go through the broker: with the
 * broker stopped (SIGSTOP), a collector still acquires and verifies the
 * latest version, a wait with a timeout still returns -ETIMEDOUT on time,
 * the trainer still begins (on the grant prefetched with its last commit)
 * and commits asynchronously, and the waiting collector gets that version at
 * once; only the broker's confirmation waits: wsync_pub_wait_commit times
 * out, and returns the version once the broker runs again (SIGCONT).
 */
#include "tests/lib/harness.h"

#include <signal.h>
#include <string.h>

#define MODEL "stall.policy"

static struct broker B;
static struct chan to_child, to_parent;

static int collector(void *arg)
{
	(void)arg;
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	TEST_OK(harness_connect(&B, "stall-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_wait(s, 0, 10 * HARNESS_S, &v));
	uint64_t v1 = v.version;
	wsync_sub_release(s, &v);
	chan_send(&to_parent, v1);

	chan_recv(&to_child, 0);                    /* the broker is stopped */
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, v1);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	int64_t t0 = harness_mono_ns();
	TEST_RC(wsync_sub_wait(s, v1, 100 * HARNESS_MS, &v), -ETIMEDOUT);
	int64_t took = harness_mono_ns() - t0;
	TEST_ASSERT_MSG(took >= 100 * HARNESS_MS && took < 2 * HARNESS_S,
	                "100 ms wait with a stopped broker took %lld ms",
	                (long long)(took / HARNESS_MS));
	chan_send(&to_parent, 1);

	TEST_OK(wsync_sub_wait(s, v1, 10 * HARNESS_S, &v));
	TEST_ASSERT(harness_verify_view(&v) == 0);
	TEST_EQ_U64(v.step, 2);
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
	TEST_OK(harness_connect(&B, "stall-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	uint64_t v1 = 0;
	TEST_OK(harness_publish(p, 1, HARNESS_S, &v1));
	TEST_EQ_U64(chan_recv(&to_parent, child), v1);

	TEST_ASSERT(kill(B.pid, SIGSTOP) == 0);
	chan_send(&to_child, 1);
	chan_recv(&to_parent, child);

	wsync_slab slab;
	memset(&slab, 0, sizeof slab);
	int rc = wsync_pub_begin(p, HARNESS_S, &slab);
	if (rc != 0) {
		kill(B.pid, SIGCONT);
		TEST_ASSERT_MSG(0, "begin needed the stopped broker (no prefetched grant): %d (%s)",
		                rc, wsync_strerror(rc));
	}
	harness_fill(slab.base, slab.bytes, 2);
	uint64_t v2 = 0, confirmed = 0;
	TEST_OK(wsync_pub_commit_async(p, 2, &v2));
	TEST_GT_U64(v2, v1);
	TEST_EQ_U64(chan_recv(&to_parent, child), v2);    /* seen without the broker */
	TEST_RC(wsync_pub_wait_commit(p, 100 * HARNESS_MS, &confirmed), -ETIMEDOUT);

	TEST_ASSERT(kill(B.pid, SIGCONT) == 0);
	TEST_OK(wsync_pub_wait_commit(p, 10 * HARNESS_S, &confirmed));
	TEST_EQ_U64(confirmed, v2);
	harness_expect_exit0(child, "collector");

	uint64_t v3 = 0;
	TEST_OK(harness_publish(p, 3, 5 * HARNESS_S, &v3));
	TEST_GT_U64(v3, v2);
	wsync_pub_close(p);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
