/*
 * kill_trainer — a trainer killed with SIGKILL loses nothing for the others:
 * killed between begin and commit (with half a slab scribbled), the latest
 * version stays readable and intact, a new trainer can open the model and
 * publish, versions go on increasing, and no slot is leaked (a 2-slot model
 * cycles through both slots many times). Killed right after an async commit,
 * the version it made visible stays the latest and intact, and the next
 * trainer's versions are greater.
 */
#include "tests/lib/harness.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MODEL "killt.policy"

static struct broker B;
static struct chan to_parent;

/* pub_open, retrying -EBUSY while the broker has not yet noticed that the
 * previous publisher is gone (it notices when the socket closes). */
static wsync_pub *open_publisher(wsync_client *c)
{
	wsync_pub *p = NULL;
	int64_t deadline = harness_mono_ns() + 10 * HARNESS_S;
	for (;;) {
		int rc = harness_pub_open_2t(c, MODEL, 2, &p);
		if (rc == 0)
			return p;
		TEST_ASSERT_MSG(rc == -EBUSY, "pub_open: %d (%s): %s", rc, wsync_strerror(rc),
		                wsync_errmsg());
		TEST_ASSERT_MSG(harness_mono_ns() < deadline,
		                "the dead publisher still holds the model after 10 s: %s",
		                wsync_errmsg());
		harness_sleep_ms(10);
	}
}

static int trainer_killed_in_write(void *arg)
{
	(void)arg;
	wsync_client *c = NULL;
	TEST_OK(harness_connect(&B, "trainer-1", &c));
	wsync_pub *p = open_publisher(c);
	uint64_t v = 0;
	for (uint64_t step = 1; step <= 3; step++)
		TEST_OK(harness_publish(p, step, 5 * HARNESS_S, &v));
	wsync_slab slab;
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	harness_fill(slab.base, slab.bytes / 2, 999);   /* half written */
	chan_send(&to_parent, v);
	for (;;)
		pause();
}

static int trainer_killed_after_async_commit(void *arg)
{
	(void)arg;
	wsync_client *c = NULL;
	TEST_OK(harness_connect(&B, "trainer-2", &c));
	wsync_pub *p = open_publisher(c);
	wsync_slab slab;
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	harness_fill(slab.base, slab.bytes, 50);
	uint64_t v = 0;
	TEST_OK(wsync_pub_commit_async(p, 50, &v));
	chan_send(&to_parent, v);
	for (;;)
		pause();
}

static void kill_and_reap(pid_t pid)
{
	kill(pid, SIGKILL);
	int st = harness_wait_status(pid, HARNESS_WAIT_MS);
	TEST_ASSERT_MSG(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
	                "trainer ended with %s", harness_status_str(st));
}

static void expect_latest(wsync_sub *s, uint64_t version, uint64_t step)
{
	wsync_view v;
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, version);
	TEST_EQ_U64(v.step, step);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
}

/* Publishes n versions through the model's 2 slots; returns the last. */
static uint64_t cycle(wsync_pub *p, wsync_sub *s, uint64_t after, uint64_t first_step, int n)
{
	uint64_t last = after;
	for (int i = 0; i < n; i++) {
		uint64_t v = 0;
		TEST_OK(harness_publish(p, first_step + (uint64_t)i, 5 * HARNESS_S, &v));
		TEST_GT_U64(v, last);
		last = v;
		expect_latest(s, v, first_step + (uint64_t)i);
	}
	return last;
}

int main(void)
{
	chan_open(&to_parent);
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);

	pid_t t1 = harness_fork(trainer_killed_in_write, NULL);
	uint64_t v3 = chan_recv(&to_parent, t1);

	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	TEST_OK(harness_connect(&B, "killt-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	expect_latest(s, v3, 3);
	kill_and_reap(t1);
	expect_latest(s, v3, 3);

	/* a new trainer takes over; both slots cycle */
	wsync_client *tc = NULL;
	TEST_OK(harness_connect(&B, "trainer-3", &tc));
	wsync_pub *p = open_publisher(tc);
	expect_latest(s, v3, 3);
	uint64_t last = cycle(p, s, v3, 100, 6);
	wsync_pub_close(p);
	expect_latest(s, last, 105);

	/* a trainer killed right after an async commit */
	pid_t t2 = harness_fork(trainer_killed_after_async_commit, NULL);
	uint64_t va = chan_recv(&to_parent, t2);
	TEST_GT_U64(va, last);
	expect_latest(s, va, 50);
	kill_and_reap(t2);
	expect_latest(s, va, 50);

	p = open_publisher(tc);
	last = cycle(p, s, va, 200, 6);
	wsync_pub_close(p);

	wsync_close(tc);
	wsync_sub_close(s);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
