/*
 * explicit_ack — wsync_sub_set_ack / wsync_sub_ack: a publisher's
 * wsync_pub_wait_readers returns when a reader acknowledged a version, not
 * when it took it. A collector process acquires, "applies" for a while and
 * only then acknowledges: the wait must not return before the application
 * is marked done in shared memory. Acks of versions never acquired (0, or
 * newer than any taken) are refused; a lower ack never lowers the count;
 * turning explicit acks off makes acquires count again; after the model is
 * deleted an ack says so (-EIDRM) instead of counting for another model.
 * A collector killed between its acquire and its ack stops counting.
 */
#include "tests/lib/harness.h"

#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>

#define MODEL "ack.policy"

static struct broker B;
static struct chan up, down;
static _Atomic int *applied;           /* shared with the collector */

/* Acquires what it is told, marks it applied after a pause, then acks. */
static int collector(void *arg)
{
	wsync_client *c;
	wsync_sub *s;
	wsync_view v;

	(void)arg;
	TEST_OK(harness_connect(&B, "acking-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_set_ack(s, 1));
	for (;;) {
		uint64_t want = chan_recv(&down, 0);

		if (!want)
			break;
		TEST_OK(wsync_sub_wait(s, want - 1, 5 * HARNESS_S, &v));
		TEST_EQ_U64(v.version, want);
		TEST_ASSERT(harness_verify_view(&v) == 0);
		chan_send(&up, v.version);
		harness_sleep_ms(200);          /* "loading it into the module" */
		atomic_store(applied, (int)v.version);
		TEST_OK(wsync_sub_ack(s, v.version));
		wsync_sub_release(s, &v);
	}
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

/* Acquires, never acknowledges, and waits to be killed. */
static int stuck_collector(void *arg)
{
	wsync_client *c;
	wsync_sub *s;
	wsync_view v;

	(void)arg;
	TEST_OK(harness_connect(&B, "stuck-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_set_ack(s, 1));
	TEST_OK(wsync_sub_acquire(s, &v));
	chan_send(&up, v.version);
	for (;;)
		harness_sleep_ms(1000);
}

int main(void)
{
	wsync_client *t, *c;
	wsync_pub *p;
	wsync_sub *s;
	wsync_view v;
	uint64_t v1, v2, v3, v4, vk;
	uint32_t have = 0;
	pid_t kid;

	applied = mmap(NULL, sizeof(*applied), PROT_READ | PROT_WRITE,
	               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	TEST_ASSERT(applied != MAP_FAILED);
	if (harness_broker_start(&B, NULL))
		return 1;
	TEST_OK(harness_connect(&B, "trainer", &t));
	TEST_OK(harness_pub_open_2t(t, MODEL, 0, &p));

	/* in this process: refusals, and what counts */
	TEST_OK(harness_connect(&B, "local-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_RC(wsync_sub_set_ack(NULL, 1), -EINVAL);
	TEST_RC(wsync_sub_ack(NULL, 1), -EINVAL);
	TEST_OK(wsync_sub_set_ack(s, 1));
	TEST_RC(wsync_sub_ack(s, 1), -EINVAL);        /* nothing acquired yet */
	TEST_OK(harness_publish(p, 1, HARNESS_S, &v1));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, v1);
	TEST_RC(wsync_pub_wait_readers(p, v1, 0, 300 * HARNESS_MS, &have), -ETIMEDOUT);
	TEST_CONTAINS(wsync_errmsg(), "local-collector");
	TEST_RC(wsync_sub_ack(s, 0), -EINVAL);
	TEST_RC(wsync_sub_ack(s, v1 + 1), -EINVAL);
	TEST_CONTAINS(wsync_errmsg(), "not acquired");
	TEST_OK(wsync_sub_ack(s, v1));
	TEST_OK(wsync_pub_wait_readers(p, v1, 0, 2 * HARNESS_S, &have));
	TEST_EQ_U64(have, 1);
	wsync_sub_release(s, &v);
	TEST_OK(harness_publish(p, 2, HARNESS_S, &v2));
	TEST_OK(harness_publish(p, 3, HARNESS_S, &v3));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, v3);
	TEST_OK(wsync_sub_ack(s, v2));                /* an older one it may ack */
	TEST_OK(wsync_pub_wait_readers(p, v2, 0, 2 * HARNESS_S, &have));
	TEST_RC(wsync_pub_wait_readers(p, v3, 0, 200 * HARNESS_MS, &have), -ETIMEDOUT);
	TEST_OK(wsync_sub_ack(s, v3));
	TEST_OK(wsync_sub_ack(s, v1));                /* never lowers the count */
	TEST_OK(wsync_pub_wait_readers(p, v3, 0, 2 * HARNESS_S, &have));
	wsync_sub_release(s, &v);
	/* off again: acquiring counts */
	TEST_OK(wsync_sub_set_ack(s, 0));
	TEST_OK(harness_publish(p, 4, HARNESS_S, &v4));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_OK(wsync_pub_wait_readers(p, v4, 0, 2 * HARNESS_S, &have));
	wsync_sub_release(s, &v);
	TEST_OK(wsync_sub_set_ack(s, 1));

	/* another process: the wait returns only after its application */
	chan_open(&up);
	chan_open(&down);
	kid = harness_fork(collector, NULL);
	for (uint64_t step = 5; step <= 7; step++) {
		uint64_t version;

		TEST_OK(harness_publish(p, step, HARNESS_S, &version));
		atomic_store(applied, 0);
		chan_send(&down, version);
		TEST_EQ_U64(chan_recv(&up, kid), version);
		/* this process's own subscription acknowledges at once */
		TEST_OK(wsync_sub_acquire(s, &v));
		TEST_OK(wsync_sub_ack(s, v.version));
		wsync_sub_release(s, &v);
		TEST_OK(wsync_pub_wait_readers(p, version, 0, 5 * HARNESS_S, &have));
		TEST_EQ_U64(have, 2);
		TEST_ASSERT_MSG(atomic_load(applied) == (int)version, "wait_readers returned for "
		                "v%llu before the collector applied it",
		                (unsigned long long)version);
	}
	chan_send(&down, 0);
	harness_expect_exit0(kid, "the acknowledging collector");

	/* a collector killed between acquire and ack stops counting */
	kid = harness_fork(stuck_collector, NULL);
	vk = chan_recv(&up, kid);
	TEST_RC(wsync_pub_wait_readers(p, vk, 0, 300 * HARNESS_MS, &have), -ETIMEDOUT);
	TEST_CONTAINS(wsync_errmsg(), "stuck-collector");
	kill(kid, SIGKILL);
	TEST_ASSERT(harness_wait_status(kid, 5000) != -1);
	TEST_OK(wsync_pub_wait_readers(p, vk, 0, 5 * HARNESS_S, &have));
	TEST_EQ_U64(have, 1);

	/* a deleted model: the ack says so rather than count for another */
	wsync_pub_close(p);
	TEST_OK(wsync_model_delete(t, MODEL));
	TEST_RC(wsync_sub_ack(s, vk), -EIDRM);
	wsync_sub_close(s);
	wsync_close(c);
	wsync_close(t);
	chan_close(&up);
	chan_close(&down);
	harness_broker_finish(&B);
	return 0;
}
