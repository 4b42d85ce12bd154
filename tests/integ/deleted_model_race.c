/*
 * deleted_model_race — a view never carries another model's version. Two
 * collector threads acquire model A as fast as they can while the trainer,
 * again and again, deletes A, publishes model B (which takes A's id) and
 * then A again: every view they get must be A's (its bytes carry the step
 * its version says, A's steps are odd, B's even); when A is gone they get
 * -EIDRM and subscribe again. Before the incarnation was checked again
 * after the pin, a delete and reuse of the id between the check and the
 * pin could label A's bytes with B's version. A third thread reads A's
 * latest (wsync_sub_latest) the same way: the step it reports is always
 * A's, since the incarnation is checked again after the words are read.
 */
#include "tests/lib/harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#define A "race.a"
#define B_ "race.b"
#define ROUNDS 150

static struct broker B;
static atomic_int stop;
static atomic_long views, gone, latests;

static void *reader(void *arg)
{
	wsync_client *c;
	wsync_sub *s = NULL;

	(void)arg;
	TEST_OK(harness_connect(&B, "racer", &c));
	while (!atomic_load(&stop)) {
		wsync_view v;
		int err;

		if (!s && wsync_sub_open(c, A, &s))
			continue;
		err = wsync_sub_acquire(s, &v);
		if (err == -EIDRM) {
			atomic_fetch_add(&gone, 1);
			wsync_sub_close(s);
			s = NULL;
			continue;
		}
		if (err)
			continue;                /* -ENODATA before A's first version */
		TEST_ASSERT_MSG(v.step % 2 == 1, "a view of A with step %llu (B's)",
		                (unsigned long long)v.step);
		TEST_ASSERT_MSG(harness_verify_view(&v) == 0, "a view of A v%llu step %llu "
		                "whose bytes are another version's", (unsigned long long)v.version,
		                (unsigned long long)v.step);
		atomic_fetch_add(&views, 1);
		wsync_sub_release(s, &v);
	}
	if (s)
		wsync_sub_close(s);
	wsync_close(c);
	return NULL;
}

/* wsync_sub_latest on A: never a step of B's. */
static void *latest_reader(void *arg)
{
	wsync_client *c;
	wsync_sub *s = NULL;

	(void)arg;
	TEST_OK(harness_connect(&B, "latest-racer", &c));
	while (!atomic_load(&stop)) {
		uint64_t version, step;
		int err;

		if (!s && wsync_sub_open(c, A, &s))
			continue;
		err = wsync_sub_latest(s, &version, &step, NULL);
		if (err == -EIDRM) {
			wsync_sub_close(s);
			s = NULL;
			continue;
		}
		if (err)
			continue;                /* -ENODATA before A's first version */
		TEST_ASSERT_MSG(step % 2 == 1, "A's latest v%llu with step %llu (B's)",
		                (unsigned long long)version, (unsigned long long)step);
		atomic_fetch_add(&latests, 1);
	}
	if (s)
		wsync_sub_close(s);
	wsync_close(c);
	return NULL;
}

int main(void)
{
	pthread_t t[3];
	wsync_client *c;
	uint64_t step_a = 1, step_b = 2;

	if (harness_broker_start(&B, NULL))
		return 1;
	TEST_OK(harness_connect(&B, "trainer", &c));
	for (int i = 0; i < 2; i++)
		TEST_ASSERT(pthread_create(&t[i], NULL, reader, NULL) == 0);
	TEST_ASSERT(pthread_create(&t[2], NULL, latest_reader, NULL) == 0);
	for (int round = 0; round < ROUNDS; round++) {
		wsync_pub *pa, *pb;
		int err;

		TEST_OK(harness_pub_open_2t(c, A, 2, &pa));
		for (int k = 0; k < 3; k++, step_a += 2)
			TEST_OK(harness_publish(pa, step_a, HARNESS_S, NULL));
		wsync_pub_close(pa);
		/* delete A (retrying while its publisher is being let go) */
		while ((err = wsync_model_delete(c, A)) == -EBUSY)
			;
		TEST_OK(err);
		TEST_OK(harness_pub_open_2t(c, B_, 2, &pb));
		for (int k = 0; k < 3; k++, step_b += 2)
			TEST_OK(harness_publish(pb, step_b, HARNESS_S, NULL));
		wsync_pub_close(pb);
		while ((err = wsync_model_delete(c, B_)) == -EBUSY)
			;
		TEST_OK(err);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	harness_log("%ld views of A, all A's; %ld times A was gone; %ld latest reads, all "
	            "A's", atomic_load(&views), atomic_load(&gone), atomic_load(&latests));
	TEST_ASSERT(atomic_load(&views) > 0 && atomic_load(&gone) > 0 &&
	            atomic_load(&latests) > 0);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
