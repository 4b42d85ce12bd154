/*
 * restart_superseded — no silent staleness after a broker restart. A
 * collector loops on wsync_sub_acquire (never a wait, so it never polls its
 * socket) while the broker is SIGKILLed and started again: while no broker
 * runs it keeps getting the last version (nothing can change it); once the
 * restarted broker adopted the models, acquire, latest and wsync_models
 * return -ENOTCONN saying the broker restarted, within a moment, never the
 * old generation's version. A view held across all of it keeps its bytes.
 * The collector connects again and the versions go on above the old ones.
 * wsync_connect_wait waits for a broker that is not up yet and gives up
 * with -ETIMEDOUT naming the socket when none comes.
 */
#include "tests/lib/harness.h"

#include <stdatomic.h>
#include <unistd.h>

#define MODEL "super.policy"

static struct broker B;
static struct chan up, down;

static int collector(void *arg)
{
	wsync_client *c;
	wsync_sub *s;
	wsync_view held, v;
	wsync_model_info info;
	uint64_t version, before, served_after = 0;
	size_t n;
	int err;

	(void)arg;
	TEST_OK(harness_connect(&B, "looping-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire(s, &held));
	before = held.version;
	chan_send(&up, before);
	/* dead broker: the last version is still what there is */
	chan_recv(&down, 0);
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, before);
	wsync_sub_release(s, &v);
	chan_send(&up, 1);
	/* the restarted broker is up: within a moment acquire refuses */
	chan_recv(&down, 0);
	for (int64_t end = harness_mono_ns() + 5 * HARNESS_S;;) {
		err = wsync_sub_acquire(s, &v);
		if (err)
			break;
		served_after++;
		wsync_sub_release(s, &v);
		TEST_ASSERT_MSG(harness_mono_ns() < end, "acquire served the dead generation's "
		                "v%llu for 5 s after the broker came back",
		                (unsigned long long)before);
	}
	TEST_RC(err, -ENOTCONN);
	TEST_CONTAINS(wsync_errmsg(), "restarted");
	harness_log("acquire after the restart: %s (%llu old views served while the new "
	            "broker adopted)", wsync_errmsg(), (unsigned long long)served_after);
	TEST_RC(wsync_sub_latest(s, &version, NULL, NULL), -ENOTCONN);
	TEST_RC(wsync_models(c, &info, 1, &n), -ENOTCONN);
	TEST_RC(wsync_sub_wait(s, before, 100 * HARNESS_MS, &v), -ENOTCONN);
	TEST_ASSERT(harness_verify_view(&held) == 0);
	wsync_sub_release(s, &held);
	wsync_sub_close(s);
	wsync_close(c);
	/* connect again: the versions go on */
	TEST_OK(wsync_connect_wait(B.sock, "looping-collector", 5 * HARNESS_S, &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_wait(s, 0, 5 * HARNESS_S, &v));
	TEST_ASSERT(v.version >= before);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	chan_send(&up, 2);
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

/* Started before the broker: waits for it. */
static int late_connect(void *arg)
{
	wsync_client *c;

	(void)arg;
	TEST_OK(wsync_connect_wait(B.sock, "late", 10 * HARNESS_S, &c));
	wsync_close(c);
	return 0;
}

int main(void)
{
	wsync_client *c;
	wsync_pub *p;
	uint64_t v1;
	int64_t t0;
	pid_t kid;

	if (harness_broker_start(&B, NULL))
		return 1;
	TEST_OK(harness_connect(&B, "trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	TEST_OK(harness_publish(p, 7, HARNESS_S, &v1));
	chan_open(&up);
	chan_open(&down);
	kid = harness_fork(collector, NULL);
	TEST_EQ_U64(chan_recv(&up, kid), v1);
	wsync_pub_close(p);
	wsync_close(c);

	harness_broker_kill(&B);
	chan_send(&down, 1);
	TEST_EQ_U64(chan_recv(&up, kid), 1);
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	chan_send(&down, 2);
	TEST_EQ_U64(chan_recv(&up, kid), 2);
	harness_expect_exit0(kid, "the looping collector");

	/* wsync_connect_wait: no broker at all, then one that comes late */
	TEST_ASSERT(harness_broker_stop(&B) == 0);
	t0 = harness_mono_ns();
	TEST_RC(wsync_connect_wait(B.sock, "early", 300 * HARNESS_MS, &c), -ETIMEDOUT);
	TEST_ASSERT(harness_mono_ns() - t0 >= 300 * HARNESS_MS);
	TEST_CONTAINS(wsync_errmsg(), B.sock);
	kid = harness_fork(late_connect, NULL);
	harness_sleep_ms(300);
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	harness_expect_exit0(kid, "a client waiting for its broker");
	harness_broker_finish(&B);
	return 0;
}
