/*
 * wait_timeout — waits keep their deadlines and wake on commits: with no
 * publisher, acquire is -ENODATA, wsync_sub_wait with 100 ms returns
 * -ETIMEDOUT after at least 100 ms (and well before 2 s), timeout 0 polls
 * without sleeping; a collector asleep in wsync_sub_wait wakes when a trainer
 * in another process commits and gets exactly that version; a wait whose
 * version is already there returns at once; a wait for a newer one than the
 * latest times out and leaves nothing held.
 */
#include "tests/lib/harness.h"

#include <string.h>
#include <unistd.h>

#define MODEL "wait.policy"

static struct broker B;
static struct chan to_child, to_parent;

static int trainer(void *arg)
{
	pid_t waiter = *(pid_t *)arg;
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	TEST_OK(harness_connect(&B, "wait-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	for (int round = 1; round <= 2; round++) {
		chan_recv(&to_child, 0);              /* the collector is about to wait */
		harness_wait_sleeping(waiter, 2000);  /* most often: it is asleep now */
		uint64_t v = 0;
		TEST_OK(harness_publish(p, 700 + (uint64_t)round, 5 * HARNESS_S, &v));
		chan_send(&to_parent, v);
	}
	wsync_pub_close(p);
	wsync_close(c);
	return 0;
}

int main(void)
{
	chan_open(&to_child);
	chan_open(&to_parent);
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);

	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	TEST_OK(harness_connect(&B, "wait-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));

	/* nothing published yet */
	memset(&v, 0, sizeof v);
	TEST_RC(wsync_sub_acquire(s, &v), -ENODATA);

	int64_t t0 = harness_mono_ns();
	TEST_RC(wsync_sub_wait(s, 0, 100 * HARNESS_MS, &v), -ETIMEDOUT);
	int64_t took = harness_mono_ns() - t0;
	TEST_ASSERT_MSG(took >= 100 * HARNESS_MS, "100 ms wait returned after %lld ns",
	                (long long)took);
	TEST_ASSERT_MSG(took < 2 * HARNESS_S, "100 ms wait returned after %lld ms",
	                (long long)(took / HARNESS_MS));

	t0 = harness_mono_ns();
	TEST_RC(wsync_sub_wait(s, 0, 0, &v), -ETIMEDOUT);
	took = harness_mono_ns() - t0;
	TEST_ASSERT_MSG(took < HARNESS_S, "a poll (timeout 0) took %lld ms",
	                (long long)(took / HARNESS_MS));

	/* a commit from another process wakes the wait */
	pid_t self = getpid();
	pid_t child = harness_fork(trainer, &self);
	chan_send(&to_child, 1);
	t0 = harness_mono_ns();
	TEST_OK(wsync_sub_wait(s, 0, 10 * HARNESS_S, &v));
	took = harness_mono_ns() - t0;
	uint64_t v1 = chan_recv(&to_parent, child);
	TEST_EQ_U64(v.version, v1);
	TEST_EQ_U64(v.step, 701);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	TEST_ASSERT_MSG(took < 10 * HARNESS_S, "woken only at the deadline");
	wsync_sub_release(s, &v);

	/* fast path: a version newer than after_version is already there */
	TEST_OK(wsync_sub_wait(s, 0, 0, &v));
	TEST_EQ_U64(v.version, v1);
	wsync_sub_release(s, &v);
	TEST_OK(wsync_sub_wait(s, v1 - 1, WSYNC_FOREVER, &v));
	TEST_EQ_U64(v.version, v1);
	wsync_sub_release(s, &v);

	/* nothing newer than the latest: poll and short wait time out */
	TEST_RC(wsync_sub_wait(s, v1, 0, &v), -ETIMEDOUT);
	t0 = harness_mono_ns();
	TEST_RC(wsync_sub_wait(s, v1, 100 * HARNESS_MS, &v), -ETIMEDOUT);
	TEST_ASSERT(harness_mono_ns() - t0 >= 100 * HARNESS_MS);

	/* waiting after the latest version wakes on the next commit */
	chan_send(&to_child, 2);
	TEST_OK(wsync_sub_wait(s, v1, 10 * HARNESS_S, &v));
	uint64_t v2 = chan_recv(&to_parent, child);
	TEST_GT_U64(v2, v1);
	TEST_EQ_U64(v.version, v2);
	TEST_EQ_U64(v.step, 702);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	harness_expect_exit0(child, "trainer");

	/* after the trainer left, the latest stays readable */
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, v2);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);

	wsync_sub_close(s);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
