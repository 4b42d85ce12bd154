/*
 * no_torn_reads — the central invariant under contention: a trainer
 * publishes as fast as it can into a 2-slot model while two collector
 * processes, two threads each sharing one subscription, acquire, verify every
 * byte, sometimes hold a view for a while (verifying it again after), and
 * release. Every view verifies against its own step, and each thread sees
 * versions that never go down. Bounded by a commit count and a time limit.
 */
#include "tests/lib/harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define MODEL      "torn.policy"
#define COMMITS    1500
#define RUN_NS     (3 * HARNESS_S)
#define COLLECTORS 2
#define THREADS    2

struct shared {
	_Atomic int      done;
	_Atomic uint64_t commits;
	_Atomic uint64_t views[COLLECTORS][THREADS];
	_Atomic int      started;     /* reader threads with a first verified view */
};

static struct broker B;
static struct shared *sh;
static struct chan ready, go;

static int trainer(void *arg)
{
	(void)arg;
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	TEST_OK(harness_connect(&B, "torn-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 2, &p));
	uint64_t last = 0;
	TEST_OK(harness_publish(p, 1, 5 * HARNESS_S, &last));
	chan_send(&ready, 1);
	chan_recv(&go, 0);                      /* every reader is reading */
	int64_t end = harness_mono_ns() + RUN_NS;
	for (uint64_t step = 2; step <= COMMITS && harness_mono_ns() < end; step++) {
		uint64_t v = 0;
		TEST_OK(harness_publish(p, step, 10 * HARNESS_S, &v));
		TEST_GT_U64(v, last);
		last = v;
		atomic_fetch_add(&sh->commits, 1);
	}
	atomic_store(&sh->done, 1);
	wsync_pub_close(p);
	wsync_close(c);
	return 0;
}

struct reader_arg {
	wsync_sub *s;
	int        who, thread;
	int        failed;
};

static void *reader_thread(void *argp)
{
	struct reader_arg *a = argp;
	uint64_t last = 0, n = 0;
	while (!atomic_load(&sh->done)) {
		wsync_view v;
		int rc = (n & 7) == 7 ? wsync_sub_wait(a->s, last, 50 * HARNESS_MS, &v)
		                      : wsync_sub_acquire(a->s, &v);
		if (rc == -ETIMEDOUT)
			continue;
		if (rc != 0) {
			harness_log("collector %d.%d: %s: %s", a->who, a->thread, wsync_strerror(rc),
			            wsync_errmsg());
			a->failed = 1;
			break;
		}
		if (v.version < last) {
			harness_log("collector %d.%d: version went down: %llu after %llu", a->who,
			            a->thread, (unsigned long long)v.version, (unsigned long long)last);
			a->failed = 1;
		}
		last = v.version;
		if (harness_verify_view(&v) != 0) {
			harness_log("collector %d.%d: torn view of v%llu", a->who, a->thread,
			            (unsigned long long)v.version);
			a->failed = 1;
		}
		if ((n & 63) == 0) {        /* hold it while the trainer goes on */
			harness_sleep_ms(2);
			if (harness_verify_view(&v) != 0) {
				harness_log("collector %d.%d: v%llu changed while held", a->who,
				            a->thread, (unsigned long long)v.version);
				a->failed = 1;
			}
		}
		wsync_sub_release(a->s, &v);
		if (n++ == 0)
			atomic_fetch_add(&sh->started, 1);
		atomic_store(&sh->views[a->who][a->thread], n);
		if (a->failed)
			break;
	}
	return NULL;
}

static int collector(void *arg)
{
	int who = (int)(intptr_t)arg;
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	char name[32];
	snprintf(name, sizeof name, "torn-collector-%d", who);
	TEST_OK(harness_connect(&B, name, &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	pthread_t t[THREADS];
	struct reader_arg a[THREADS];
	for (int i = 0; i < THREADS; i++) {
		a[i] = (struct reader_arg){ .s = s, .who = who, .thread = i };
		TEST_ASSERT(pthread_create(&t[i], NULL, reader_thread, &a[i]) == 0);
	}
	int failed = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		failed |= a[i].failed;
	}
	wsync_sub_close(s);
	wsync_close(c);
	return failed;
}

int main(void)
{
	sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	TEST_ASSERT(sh != MAP_FAILED);
	memset(sh, 0, sizeof *sh);
	chan_open(&ready);
	chan_open(&go);
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);

	pid_t tp = harness_fork(trainer, NULL);
	chan_recv(&ready, tp);                  /* a first version exists */
	pid_t cp[COLLECTORS];
	for (int i = 0; i < COLLECTORS; i++)
		cp[i] = harness_fork(collector, (void *)(intptr_t)i);
	int64_t deadline = harness_mono_ns() + HARNESS_WAIT_MS * HARNESS_MS;
	while (atomic_load(&sh->started) < COLLECTORS * THREADS) {
		TEST_ASSERT_MSG(harness_mono_ns() < deadline, "readers did not start");
		harness_sleep_ms(1);
	}
	chan_send(&go, 1);

	harness_expect_exit0(tp, "trainer");
	for (int i = 0; i < COLLECTORS; i++)
		harness_expect_exit0(cp[i], "collector");

	uint64_t commits = atomic_load(&sh->commits);
	harness_log("%llu commits", (unsigned long long)commits);
	TEST_ASSERT_MSG(commits >= 100, "only %llu commits: too little contention to prove anything",
	                (unsigned long long)commits);
	for (int i = 0; i < COLLECTORS; i++)
		for (int k = 0; k < THREADS; k++) {
			uint64_t n = atomic_load(&sh->views[i][k]);
			harness_log("collector %d thread %d verified %llu views", i, k,
			            (unsigned long long)n);
			TEST_ASSERT_MSG(n > 0, "collector %d thread %d verified no view", i, k);
		}
	harness_broker_finish(&B);
	return 0;
}
