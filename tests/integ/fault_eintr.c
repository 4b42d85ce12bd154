/*
 * fault_eintr — an EINTR storm: a 10 kHz SIGALRM (a handler installed
 * without SA_RESTART, so every blocking call it hits returns EINTR) runs in
 * the collector and in the trainer for the whole test. Under it:
 *   - wsync_connect, wsync_sub_open, wsync_pub_open and publishing work;
 *   - wsync_sub_wait with no commit coming still returns -ETIMEDOUT, not
 *     early (elapsed >= the timeout) and not hugely late (sanity bound);
 *   - 200 commits, each made after the collector said it waits, are all
 *     seen by waits with a long timeout and verified byte for byte;
 *   - the storm really happened (thousands of signals delivered).
 */
#include "tests/lib/faults.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#define MODEL   "eintr.policy"
#define ROUNDS  200

static struct broker B;
static struct chan to_trainer, to_collector;
static volatile sig_atomic_t signals;

static void on_alarm(int sig)
{
	(void)sig;
	signals++;
}

static void storm(void)
{
	struct sigaction sa;
	struct itimerval it = { { 0, 100 }, { 0, 100 } };   /* 10 kHz */

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;     /* no SA_RESTART: syscalls see EINTR */
	sigemptyset(&sa.sa_mask);
	TEST_ASSERT(sigaction(SIGALRM, &sa, NULL) == 0);
	TEST_ASSERT(setitimer(ITIMER_REAL, &it, NULL) == 0);
}

static int trainer(void *arg)
{
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	uint64_t v;

	(void)arg;
	storm();
	TEST_OK(harness_connect(&B, "eintr-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	chan_send(&to_collector, 1);                      /* model exists */
	for (int i = 0; i < ROUNDS; i++) {
		uint64_t after = chan_recv(&to_trainer, 0);   /* collector waits */
		TEST_OK(harness_publish(p, 100 + (uint64_t)i, 5 * HARNESS_S, &v));
		TEST_GT_U64(v, after);
	}
	wsync_pub_close(p);
	wsync_close(c);
	harness_log("trainer: %ld signals", (long)signals);
	TEST_ASSERT(signals > 100);
	return 0;
}

static int collector(void *arg)
{
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	uint64_t last = 0;

	(void)arg;
	storm();
	TEST_OK(harness_connect(&B, "eintr-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	chan_recv(&to_collector, 0);
	/* timeouts are honoured */
	for (int i = 0; i < 3; i++) {
		int64_t t0 = harness_mono_ns();
		TEST_RC(wsync_sub_wait(s, 0, 300 * HARNESS_MS, &v), -ETIMEDOUT);
		int64_t took = harness_mono_ns() - t0;
		TEST_ASSERT_MSG(took >= 300 * HARNESS_MS, "a 300 ms wait returned after %lld ms",
		                (long long)(took / HARNESS_MS));
		TEST_ASSERT_MSG(took < 10 * HARNESS_S, "a 300 ms wait took %lld ms",
		                (long long)(took / HARNESS_MS));
	}
	/* commits are seen */
	for (int i = 0; i < ROUNDS; i++) {
		chan_send(&to_trainer, last);
		TEST_OK(wsync_sub_wait(s, last, 10 * HARNESS_S, &v));
		TEST_GT_U64(v.version, last);
		TEST_ASSERT(harness_verify_view(&v) == 0);
		TEST_EQ_U64(v.step, 100 + (uint64_t)i);
		last = v.version;
		wsync_sub_release(s, &v);
	}
	wsync_sub_close(s);
	wsync_close(c);
	harness_log("collector: %ld signals", (long)signals);
	TEST_ASSERT(signals > 1000);
	return 0;
}

int main(void)
{
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	chan_open(&to_trainer);
	chan_open(&to_collector);
	pid_t cp = harness_fork(collector, NULL);
	pid_t tp = harness_fork(trainer, NULL);
	harness_expect_exit0(cp, "the collector under the signal storm");
	harness_expect_exit0(tp, "the trainer under the signal storm");
	faults_normal_client(&B, "an EINTR storm");
	harness_broker_finish(&B);
	return 0;
}
