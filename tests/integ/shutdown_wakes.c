/*
 * shutdown_wakes — a clean shutdown never leaves anyone hanging: collectors
 * in other processes asleep in wsync_sub_wait(WSYNC_FOREVER) — on a model
 * with versions, and on one never published — return -ENOTCONN within
 * seconds of the broker's SIGTERM; the broker exits 0 although clients are
 * still connected and leaves no segment in /dev/shm; the still-open handles
 * of the test's own client answer -ENOTCONN instead of hanging.
 */
#include "tests/lib/harness.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#define MODEL       "shut.policy"
#define MODEL_NEVER "shut.never"
#define WAITERS     3

static struct broker B;
static struct chan to_parent[WAITERS];

static int waiter(void *arg)
{
	int i = (int)(intptr_t)arg;
	const char *model = i == 2 ? MODEL_NEVER : MODEL;
	char name[32];
	snprintf(name, sizeof name, "shut-waiter-%d", i);
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	TEST_OK(harness_connect(&B, name, &c));
	TEST_OK(wsync_sub_open(c, model, &s));
	uint64_t after = 0;
	if (i != 2) {
		TEST_OK(wsync_sub_acquire(s, &v));
		after = v.version;
		wsync_sub_release(s, &v);
	}
	chan_send(&to_parent[i], 1);
	int rc = wsync_sub_wait(s, after, WSYNC_FOREVER, &v);
	TEST_ASSERT_MSG(rc == -ENOTCONN, "waiter %d: wait returned %d (%s), expected -ENOTCONN",
	                i, rc, wsync_strerror(rc));
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

int main(void)
{
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);

	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	wsync_sub *s = NULL;
	TEST_OK(harness_connect(&B, "shut-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	uint64_t v1 = 0;
	TEST_OK(harness_publish(p, 1, HARNESS_S, &v1));
	TEST_OK(wsync_sub_open(c, MODEL, &s));

	pid_t pids[WAITERS];
	for (int i = 0; i < WAITERS; i++) {
		chan_open(&to_parent[i]);
		pids[i] = harness_fork(waiter, (void *)(intptr_t)i);
	}
	for (int i = 0; i < WAITERS; i++) {
		chan_recv(&to_parent[i], pids[i]);
		harness_wait_sleeping(pids[i], 2000);
	}

	int64_t t0 = harness_mono_ns();
	TEST_ASSERT_MSG(harness_broker_stop(&B) == 0, "the broker did not exit 0 on SIGTERM");
	for (int i = 0; i < WAITERS; i++) {
		int64_t left_ms = (5 * HARNESS_S - (harness_mono_ns() - t0)) / HARNESS_MS;
		int st = harness_wait_status(pids[i], left_ms > 0 ? (int)left_ms : 0);
		TEST_ASSERT_MSG(st != -1, "waiter %d still waiting 5 s after the broker's SIGTERM", i);
		TEST_ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "waiter %d ended with %s", i,
		                harness_status_str(st));
	}
	TEST_ASSERT(harness_shm_leftovers(&B, 1) == 0);

	/* our own handles: errors, not hangs */
	wsync_view v;
	TEST_RC(wsync_sub_wait(s, v1, WSYNC_FOREVER, &v), -ENOTCONN);
	TEST_RC(wsync_sub_acquire(s, &v), -ENOTCONN);
	wsync_slab slab;
	int rc = wsync_pub_begin(p, HARNESS_S, &slab);
	if (rc == 0) {
		harness_fill(slab.base, slab.bytes, 2);
		rc = wsync_pub_commit(p, 2, NULL);
	}
	TEST_ASSERT_MSG(rc == -ENOTCONN || rc == -EPIPE || rc == -ECONNRESET,
	                "publishing after shutdown: %d (%s)", rc, wsync_strerror(rc));
	wsync_sub_close(s);
	wsync_pub_close(p);
	wsync_close(c);
	return 0;
}
