/*
 * wait_spin — wsync_sub_set_spin: values outside 0..1 s are refused with
 * -EINVAL; a spinning wait never runs past its own deadline (a 20 ms wait
 * with a 500 ms spin times out after >= 20 ms and well before 500 ms); a
 * commit from another process that lands during the spin is returned with
 * its version and intact bytes; spin 0 turns spinning off again.
 */
#include "tests/lib/harness.h"

#define MODEL "spin.model"

static struct broker B;
static struct chan go;

static int trainer(void *arg)
{
	uint64_t step = *(uint64_t *)arg, v = 0;
	wsync_client *c = NULL;
	wsync_pub *p = NULL;

	TEST_OK(harness_connect(&B, "spin-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	chan_recv(&go, 0);                  /* the collector is about to wait */
	harness_sleep_ms(30);               /* inside its 2 s spin */
	TEST_OK(harness_publish(p, step, 5 * HARNESS_S, &v));
	wsync_pub_close(p);
	wsync_close(c);
	return 0;
}

int main(void)
{
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	uint64_t step = 77, got;
	int64_t t0, ms;

	chan_open(&go);
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	TEST_OK(harness_connect(&B, "spin-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));

	TEST_RC(wsync_sub_set_spin(NULL, 1000), -EINVAL);
	TEST_RC(wsync_sub_set_spin(s, -1), -EINVAL);
	TEST_RC(wsync_sub_set_spin(s, 2 * HARNESS_S), -EINVAL);
	TEST_CONTAINS(wsync_errmsg(), "spin");

	TEST_OK(wsync_sub_set_spin(s, 500 * HARNESS_MS));
	t0 = harness_mono_ns();
	TEST_RC(wsync_sub_wait(s, 0, 20 * HARNESS_MS, &v), -ETIMEDOUT);
	ms = (harness_mono_ns() - t0) / 1000000;
	harness_log("20 ms wait with a 500 ms spin took %lld ms", (long long)ms);
	TEST_ASSERT_MSG(ms >= 20 && ms < 400, "20 ms wait took %lld ms", (long long)ms);

	TEST_OK(wsync_sub_set_spin(s, HARNESS_S - 1));
	pid_t child = harness_fork(trainer, &step);
	chan_send(&go, 1);
	TEST_OK(wsync_sub_wait(s, 0, 10 * HARNESS_S, &v));
	TEST_EQ_U64(v.step, step);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	got = v.version;
	wsync_sub_release(s, &v);
	harness_expect_exit0(child, "trainer");

	TEST_OK(wsync_sub_set_spin(s, 0));
	TEST_RC(wsync_sub_wait(s, got, 10 * HARNESS_MS, &v), -ETIMEDOUT);

	wsync_sub_close(s);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
