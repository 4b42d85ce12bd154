/*
 * lifecycle — models come and go across training runs:
 *  - wsync_models lists every model with its latest version and counts;
 *  - delete refuses a model with a publisher (-EBUSY) or an unknown name
 *    (-ENOENT); deleting a model whose collector holds a view leaves the
 *    view's bytes intact, wakes a waiter with -EIDRM, makes the next
 *    acquire -EIDRM; a new subscription sees the name published again at
 *    versions above the old ones;
 *  - a publisher opening another layout gets -EEXIST, and with
 *    WSYNC_PUB_REPLACE replaces the model while a collector holds a view of
 *    the old layout (intact; the collector then gets -EIDRM and
 *    resubscribes to the new layout);
 *  - wsync_sub_latest peeks at the newest version while publishes race it:
 *    never going down, step matching the version;
 *  - a wait on a model never published says so when it times out;
 *  - wsync_pub_wait_readers returns once every collector (or N) took the
 *    version, stops counting a collector killed with SIGKILL, and on
 *    timeout names the collector that never acquires.
 */
#include "tests/lib/harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

static struct broker B;

static const wsync_model_info *find_info(const wsync_model_info *v, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i].name, name))
			return &v[i];
	return NULL;
}

static void delete_case(void)
{
	wsync_client *t = NULL, *c = NULL;
	wsync_pub *p = NULL;
	wsync_sub *s = NULL, *s2 = NULL;
	wsync_model_info info[64];
	wsync_view held, v;
	uint64_t version = 0, old = 0;
	size_t n = 0;

	TEST_OK(harness_connect(&B, "run-1", &t));
	TEST_OK(harness_pub_open_2t(t, "life.del", 2, &p));
	for (uint64_t step = 1; step <= 3; step++)
		TEST_OK(harness_publish(p, step, HARNESS_S, &version));
	TEST_OK(harness_connect(&B, "collector", &c));
	TEST_OK(wsync_sub_open(c, "life.del", &s));
	TEST_OK(wsync_sub_open(c, "life.never", &s2));

	TEST_OK(wsync_models(c, info, 64, &n));
	TEST_ASSERT(n >= 2);
	const wsync_model_info *mi = find_info(info, n, "life.del");
	TEST_ASSERT(mi && mi->published && mi->version == version && mi->step == 3 &&
	            mi->publishers == 1 && mi->subscribers == 1 && mi->n_tensors == 2);
	mi = find_info(info, n, "life.never");
	TEST_ASSERT(mi && !mi->published && mi->subscribers == 1 && mi->version == 0);
	TEST_OK(wsync_models(c, NULL, 0, &n));
	TEST_ASSERT(n >= 2);

	/* a wait on a name nobody publishes says so */
	TEST_RC(wsync_sub_wait(s2, 0, 50 * HARNESS_MS, &v), -ETIMEDOUT);
	TEST_CONTAINS(wsync_errmsg(), "never been published");

	TEST_RC(wsync_model_delete(c, "life.del"), -EBUSY);
	TEST_CONTAINS(wsync_errmsg(), "run-1");
	TEST_RC(wsync_model_delete(c, "life.nosuch"), -ENOENT);
	wsync_pub_close(p);
	TEST_OK(wsync_sub_acquire(s, &held));
	old = held.version;
	/* deleted while held: the bytes stay, the subscription is told */
	{
		int64_t deadline = harness_mono_ns() + 10 * HARNESS_S;
		int rc;

		while ((rc = wsync_model_delete(c, "life.del")) == -EBUSY &&
		       harness_mono_ns() < deadline)
			harness_sleep_ms(10);   /* the publisher's CLOSE is on its way */
		TEST_OK(rc);
	}
	TEST_ASSERT(harness_verify_view(&held) == 0);
	TEST_RC(wsync_sub_acquire(s, &v), -EIDRM);
	TEST_RC(wsync_sub_wait(s, old, HARNESS_S, &v), -EIDRM);
	TEST_RC(wsync_sub_latest(s, NULL, NULL, NULL), -EIDRM);
	TEST_ASSERT(harness_verify_view(&held) == 0);
	wsync_sub_release(s, &held);
	wsync_sub_close(s);
	TEST_OK(wsync_models(c, info, 64, &n));
	TEST_ASSERT(!find_info(info, n, "life.del"));

	/* the name again: versions above the old ones */
	TEST_OK(harness_pub_open_2t(t, "life.del", 2, &p));
	TEST_OK(harness_publish(p, 1, HARNESS_S, &version));
	TEST_GT_U64(version, old);
	TEST_OK(wsync_sub_open(c, "life.del", &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, version);
	wsync_sub_release(s, &v);
	wsync_close(c);
	wsync_close(t);
}

/* A waiter blocked on the model when it is deleted wakes with -EIDRM. */
static int waiter_child(void *arg)
{
	struct chan *ready = arg;
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	uint64_t latest = 0;

	TEST_OK(harness_connect(&B, "waiter", &c));
	TEST_OK(wsync_sub_open(c, "life.wait", &s));
	TEST_OK(wsync_sub_latest(s, &latest, NULL, NULL));
	chan_send(ready, 1);
	TEST_RC(wsync_sub_wait(s, latest, 10 * HARNESS_S, &v), -EIDRM);
	wsync_close(c);
	return 0;
}

static void delete_waiter_case(void)
{
	struct chan ready;
	wsync_client *t = NULL;
	wsync_pub *p = NULL;

	chan_open(&ready);
	TEST_OK(harness_connect(&B, "trainer", &t));
	TEST_OK(harness_pub_open_2t(t, "life.wait", 2, &p));
	TEST_OK(harness_publish(p, 1, HARNESS_S, NULL));
	wsync_pub_close(p);
	pid_t pid = harness_fork(waiter_child, &ready);
	chan_recv(&ready, pid);
	harness_wait_sleeping(pid, 2000);
	TEST_OK(wsync_model_delete(t, "life.wait"));
	harness_expect_exit0(pid, "the waiter");
	chan_close(&ready);
	wsync_close(t);
}

static void replace_case(void)
{
	wsync_client *t = NULL, *c = NULL;
	wsync_pub *p = NULL, *p2 = NULL;
	wsync_sub *s = NULL;
	wsync_view held, v;
	wsync_tensor_desc d;
	uint64_t shape[1] = { 4096 }, version = 0, old;
	wsync_model_opts o = { .flags = WSYNC_PUB_REPLACE };

	TEST_OK(harness_connect(&B, "run-a", &t));
	TEST_OK(harness_pub_open_2t(t, "life.re", 2, &p));
	TEST_OK(harness_publish(p, 1, HARNESS_S, &version));
	TEST_OK(harness_connect(&B, "collector", &c));
	TEST_OK(wsync_sub_open(c, "life.re", &s));
	TEST_OK(wsync_sub_acquire(s, &held));
	old = held.version;
	wsync_pub_close(p);

	harness_desc(&d, "w", WSYNC_F32, 1, shape);
	TEST_RC(wsync_pub_open(t, "life.re", &d, 1, NULL, &p2), -EEXIST);
	TEST_CONTAINS(wsync_errmsg(), "replace");
	{
		int64_t deadline = harness_mono_ns() + 10 * HARNESS_S;
		int rc;

		while ((rc = wsync_pub_open(t, "life.re", &d, 1, &o, &p2)) == -EBUSY &&
		       harness_mono_ns() < deadline)
			harness_sleep_ms(10);
		TEST_OK(rc);
	}
	TEST_ASSERT(harness_verify_view(&held) == 0);
	TEST_RC(wsync_sub_acquire(s, &v), -EIDRM);
	wsync_sub_release(s, &held);
	wsync_sub_close(s);
	TEST_OK(harness_publish(p2, 5, HARNESS_S, &version));
	TEST_GT_U64(version, old);
	TEST_OK(wsync_sub_open(c, "life.re", &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.n_tensors, 1);
	TEST_EQ_U64(v.bytes, 16384);
	TEST_EQ_U64(v.version, version);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	wsync_close(c);
	wsync_close(t);
}

/* ---- peek racing publishes ------------------------------------------------- */

static _Atomic int stop_publishing;

static void *publisher_thread(void *arg)
{
	wsync_pub *p = arg;

	for (uint64_t step = 2; !atomic_load(&stop_publishing) && step < 100000; step++)
		if (harness_publish(p, step, HARNESS_S, NULL))
			break;
	return NULL;
}

static void peek_case(void)
{
	wsync_client *t = NULL, *c = NULL;
	wsync_pub *p = NULL;
	wsync_sub *s = NULL;
	uint64_t prev = 0, first_v = 0, first_step = 0;
	pthread_t th;

	TEST_OK(harness_connect(&B, "peek-trainer", &t));
	TEST_OK(harness_pub_open_2t(t, "life.peek", 3, &p));
	TEST_OK(harness_connect(&B, "peeker", &c));
	TEST_OK(wsync_sub_open(c, "life.peek", &s));
	TEST_RC(wsync_sub_latest(s, NULL, NULL, NULL), -ENODATA);
	TEST_OK(harness_publish(p, 1, HARNESS_S, &first_v));
	TEST_OK(wsync_sub_latest(s, &prev, &first_step, NULL));
	TEST_EQ_U64(prev, first_v);
	TEST_EQ_U64(first_step, 1);
	TEST_ASSERT(pthread_create(&th, NULL, publisher_thread, p) == 0);
	int64_t deadline = harness_mono_ns() + 20 * HARNESS_S;
	while (prev < first_v + 200 && harness_mono_ns() < deadline) {
		uint64_t v = 0, step = 0;
		int64_t ns = 0;

		TEST_OK(wsync_sub_latest(s, &v, &step, &ns));
		TEST_ASSERT_MSG(v >= prev, "peek went down: v%llu after v%llu",
		                (unsigned long long)v, (unsigned long long)prev);
		/* one grant per step, consecutive: step = version - (first_v - 1) */
		TEST_ASSERT_MSG(step == v - first_v + 1, "v%llu carries step %llu",
		                (unsigned long long)v, (unsigned long long)step);
		TEST_ASSERT(ns > 0);
		prev = v;
	}
	atomic_store(&stop_publishing, 1);
	pthread_join(th, NULL);
	TEST_GT_U64(prev, first_v);
	wsync_close(c);
	wsync_close(t);
}

/* ---- readers' acknowledgement ----------------------------------------------- */

struct reader_arg {
	struct chan *ready;
	int acquire;                    /* 0: never acquires */
};

static int reader_child(void *arg)
{
	struct reader_arg *ra = arg;
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	uint64_t seen = 0;

	TEST_OK(harness_connect(&B, ra->acquire ? "reader" : "sleepy-reader", &c));
	TEST_OK(wsync_sub_open(c, "life.ack", &s));
	chan_send(ra->ready, 1);
	for (;;) {
		wsync_view v;
		int rc;

		if (!ra->acquire) {
			pause();
			continue;
		}
		rc = wsync_sub_wait(s, seen, 5 * HARNESS_S, &v);
		if (rc == -ETIMEDOUT)
			continue;
		TEST_OK(rc);
		seen = v.version;
		wsync_sub_release(s, &v);
	}
}

static void wait_readers_case(void)
{
	struct chan ready;
	struct reader_arg good = { &ready, 1 }, bad = { &ready, 0 };
	wsync_client *t = NULL;
	wsync_pub *p = NULL;
	pid_t r[3], sleepy;
	uint64_t version = 0;
	uint32_t have = 0;

	chan_open(&ready);
	TEST_OK(harness_connect(&B, "sync-trainer", &t));
	TEST_OK(harness_pub_open_2t(t, "life.ack", 3, &p));
	/* nobody subscribed: met at once */
	TEST_OK(harness_publish(p, 1, HARNESS_S, &version));
	TEST_OK(wsync_pub_wait_readers(p, version, 0, HARNESS_S, &have));
	TEST_EQ_U64(have, 0);
	for (int i = 0; i < 3; i++) {
		r[i] = harness_fork(reader_child, &good);
		chan_recv(&ready, r[i]);
	}
	for (uint64_t step = 2; step <= 6; step++) {
		TEST_OK(harness_publish(p, step, HARNESS_S, &version));
		TEST_OK(wsync_pub_wait_readers(p, version, 0, 10 * HARNESS_S, &have));
		TEST_EQ_U64(have, 3);
	}
	/* a reader killed stops counting */
	kill(r[0], SIGKILL);
	harness_wait_status(r[0], 5000);
	TEST_OK(harness_publish(p, 7, HARNESS_S, &version));
	TEST_OK(wsync_pub_wait_readers(p, version, 0, 10 * HARNESS_S, &have));
	TEST_EQ_U64(have, 2);
	/* one that never acquires: all of them is a timeout naming it, N=2 is met */
	sleepy = harness_fork(reader_child, &bad);
	chan_recv(&ready, sleepy);
	TEST_OK(harness_publish(p, 8, HARNESS_S, &version));
	TEST_OK(wsync_pub_wait_readers(p, version, 2, 10 * HARNESS_S, &have));
	TEST_ASSERT(have >= 2);
	TEST_RC(wsync_pub_wait_readers(p, version, 0, 300 * HARNESS_MS, &have), -ETIMEDOUT);
	TEST_CONTAINS(wsync_errmsg(), "sleepy-reader");
	harness_log("laggards named: %s", wsync_errmsg());
	for (int i = 1; i < 3; i++)
		kill(r[i], SIGKILL);
	kill(sleepy, SIGKILL);
	for (int i = 1; i < 3; i++)
		harness_wait_status(r[i], 5000);
	harness_wait_status(sleepy, 5000);
	chan_close(&ready);
	wsync_close(t);
}

int main(void)
{
	if (harness_broker_start(&B, NULL))
		return 1;
	delete_case();
	delete_waiter_case();
	replace_case();
	peek_case();
	wait_readers_case();
	harness_broker_finish(&B);
	return 0;
}
