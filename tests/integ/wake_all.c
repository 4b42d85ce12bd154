/*
 * wake_all — one commit wakes every waiting collector: 16 collector
 * processes asleep in wsync_sub_wait(WSYNC_FOREVER) on the same model all
 * return that commit's version, with intact bytes, and each then waits for
 * and gets the next one too.
 */
#include "tests/lib/harness.h"

#include <stdio.h>
#include <string.h>

#define MODEL   "wake.policy"
#define WAITERS 16

static struct broker B;
static struct chan up[WAITERS], down[WAITERS];

static int waiter(void *arg)
{
	int i = (int)(intptr_t)arg;
	char name[32];
	snprintf(name, sizeof name, "wake-%d", i);
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	TEST_OK(harness_connect(&B, name, &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	uint64_t after = 0;
	for (int round = 0; round < 2; round++) {
		chan_send(&up[i], 0);                      /* about to wait */
		TEST_OK(wsync_sub_wait(s, after, WSYNC_FOREVER, &v));
		TEST_ASSERT(harness_verify_view(&v) == 0);
		chan_send(&up[i], v.version);
		after = v.version;
		wsync_sub_release(s, &v);
		chan_recv(&down[i], 0);
	}
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

int main(void)
{
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	pid_t pids[WAITERS];
	for (int i = 0; i < WAITERS; i++) {
		chan_open(&up[i]);
		chan_open(&down[i]);
		pids[i] = harness_fork(waiter, (void *)(intptr_t)i);
	}
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	TEST_OK(harness_connect(&B, "wake-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));

	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < WAITERS; i++) {
			chan_recv(&up[i], pids[i]);
			harness_wait_sleeping(pids[i], 1000);
		}
		uint64_t v = 0;
		TEST_OK(harness_publish(p, 10 + (uint64_t)round, 5 * HARNESS_S, &v));
		for (int i = 0; i < WAITERS; i++)
			TEST_EQ_U64(chan_recv(&up[i], pids[i]), v);
		for (int i = 0; i < WAITERS; i++)
			chan_send(&down[i], 1);
	}
	for (int i = 0; i < WAITERS; i++)
		harness_expect_exit0(pids[i], "waiter");
	wsync_pub_close(p);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
