/*
 * live_bounds — the staleness bound of docs/LIVE.md from C.
 *
 * wsync_pub_set_max_lead: begin waits while a live collector acts with a
 * version more than max_lead behind the one it would publish, then fails
 * with -ETIMEDOUT naming it; the broker counts the waits and timeouts in
 * the model's ctl entry, wsyncctl models shows the bound with the
 * collectors at it, and wsyncctl metrics the counts. A collector killed (SIGKILL) while behind, one
 * that closed its subscription, and one that never acquired never hold the
 * publisher back; one that keeps up does not either.
 *
 * wsync_sub_set_max_lag: acquire refuses a newest version older than the
 * bound; with a stopped trainer it fails by its timeout naming the last
 * commit, and a version committed within the timeout is taken.
 */
#include "tests/lib/harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libclient/client.h"

#define MODEL "live.bounds"

static struct broker B;
static struct chan up;

static const struct wsync_ctl_model *entry_of(wsync_client *c, const char *model)
{
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		const struct wsync_ctl_model *e = client_ctl_model(c, i);

		if (atomic_load(&e->state) != WSYNC_MODEL_FREE && !strcmp(e->name, model))
			return e;
	}
	TEST_ASSERT_MSG(0, "model %s not in the control segment", model);
	return NULL;
}

/* The value of the metric family's series of MODEL in wsyncctl metrics's
 * text (-1 if absent). */
static long long metric(const char *text, const char *family)
{
	char head[128];
	const char *at;

	snprintf(head, sizeof(head), "\n%s{", family);
	for (at = strstr(text, head); at; at = strstr(at + 1, head)) {
		const char *end = strchr(at + 1, '\n'), *model = strstr(at, "model=\"" MODEL "\"}");

		if (model && (!end || model < end))
			return strtoll(strchr(model, '}') + 1, NULL, 10);
	}
	return -1;
}

/* Acquires the newest version once, says which, and stays (held) until killed. */
static int slow_collector(void *arg)
{
	wsync_client *c;
	wsync_sub *s;
	wsync_view v;

	(void)arg;
	TEST_OK(harness_connect(&B, "slow-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	chan_send(&up, v.version);
	for (;;)
		harness_sleep_ms(1000);
}

static wsync_pub *late_pub;

static void *publish_later(void *arg)
{
	(void)arg;
	harness_sleep_ms(100);
	TEST_OK(harness_publish(late_pub, 100, HARNESS_S, NULL));
	return NULL;
}

int main(void)
{
	wsync_client *t, *c, *idle_c, *gone_c;
	wsync_sub *keep, *idle, *gone, *lag;
	const struct wsync_ctl_model *e;
	wsync_pub *p;
	wsync_view v;
	uint64_t ver, held;
	int64_t t0, took;
	pthread_t th;
	pid_t kid;

	if (harness_broker_start(&B, NULL))
		return 1;
	TEST_OK(harness_connect(&B, "trainer", &t));
	TEST_OK(harness_pub_open_2t(t, MODEL, 0, &p));
	e = entry_of(t, MODEL);
	TEST_RC(wsync_pub_set_max_lead(NULL, 1), -EINVAL);
	TEST_RC(wsync_pub_set_max_lead(p, 0x80000000u), -EINVAL);
	TEST_OK(wsync_pub_set_max_lead(p, 2));

	/* a subscriber that never acquires, one that keeps up, a slow process */
	TEST_OK(harness_connect(&B, "idle-collector", &idle_c));
	TEST_OK(wsync_sub_open(idle_c, MODEL, &idle));
	TEST_OK(harness_connect(&B, "keeping-up", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &keep));
	TEST_OK(harness_publish(p, 1, HARNESS_S, &ver));
	chan_open(&up);
	kid = harness_fork(slow_collector, NULL);
	held = chan_recv(&up, kid);
	TEST_EQ_U64(held, ver);
	for (uint64_t step = 2; step <= 3; step++) {      /* within the bound of v1 */
		TEST_OK(harness_publish(p, step, HARNESS_S, &ver));
		TEST_OK(wsync_sub_acquire(keep, &v));
		wsync_sub_release(keep, &v);
	}
	TEST_EQ_U64(atomic_load(&e->lead_timeouts), 0);
	/* v4 would put the slow collector 3 behind: begin waits, then names it */
	t0 = harness_mono_ns();
	TEST_RC(harness_publish(p, 4, 300 * HARNESS_MS, &ver), -ETIMEDOUT);
	took = harness_mono_ns() - t0;
	TEST_ASSERT_MSG(took >= 250 * HARNESS_MS && took < 2 * HARNESS_S, "begin took %lld ms",
	                (long long)(took / HARNESS_MS));
	TEST_CONTAINS(wsync_errmsg(), "max_lead 2");
	TEST_CONTAINS(wsync_errmsg(), "slow-collector");
	TEST_ASSERT(strstr(wsync_errmsg(), "keeping-up") == NULL);
	TEST_ASSERT(strstr(wsync_errmsg(), "idle-collector") == NULL);
	TEST_EQ_U64(atomic_load(&e->max_lead), 2);
	TEST_ASSERT(atomic_load(&e->lead_waits) >= 1);
	TEST_EQ_U64(atomic_load(&e->lead_timeouts), 1);
	/* wsyncctl models shows the bound and who is at it (the broker's
	 * reading figures are a tick old at most) */
	{
		char ctl[256], out[16384];
		const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
		char *argv[] = { ctl, "--endpoint", B.sock, "models", NULL };
		int st;

		harness_sleep_ms(1100);
		snprintf(ctl, sizeof(ctl), "%s/bin/wsyncctl", build);
		st = harness_run(argv, out, sizeof(out), 10000);
		TEST_ASSERT_MSG(st == 0, "wsyncctl models: %s: %s", harness_status_str(st), out);
		TEST_CONTAINS(out, MODEL ": max_lead 2, ");
		TEST_CONTAINS(out, "1 timed out; at the bound: 'slow-collector'");
		TEST_CONTAINS(out, ", 2 behind");
		TEST_ASSERT_MSG(strstr(out, "'keeping-up'") == NULL, "%s", out);
		/* and the metrics */
		argv[3] = "metrics";
		st = harness_run(argv, out, sizeof(out), 10000);
		TEST_ASSERT_MSG(st == 0, "wsyncctl metrics: %s: %s", harness_status_str(st), out);
		TEST_EQ_U64(metric(out, "wsync_model_max_lead"), 2);
		TEST_EQ_U64(metric(out, "wsync_model_lead_timeouts_total"), 1);
		TEST_ASSERT(metric(out, "wsync_model_lead_waits_total") >= 1);
	}

	/* killed while behind: it no longer holds anyone back */
	kill(kid, SIGKILL);
	TEST_ASSERT(harness_wait_status(kid, 5000) != -1);
	t0 = harness_mono_ns();
	TEST_OK(harness_publish(p, 4, 5 * HARNESS_S, &ver));
	took = harness_mono_ns() - t0;
	TEST_ASSERT_MSG(took < 2 * HARNESS_S, "begin after the kill took %lld ms",
	                (long long)(took / HARNESS_MS));

	/* one that closed its subscription (its client stays) neither */
	TEST_OK(harness_connect(&B, "departing", &gone_c));
	TEST_OK(wsync_sub_open(gone_c, MODEL, &gone));
	TEST_OK(wsync_sub_acquire(gone, &v));
	wsync_sub_release(gone, &v);
	for (uint64_t step = 5; step <= 6; step++) {
		TEST_OK(harness_publish(p, step, HARNESS_S, &ver));
		TEST_OK(wsync_sub_acquire(keep, &v));
		wsync_sub_release(keep, &v);
	}
	TEST_RC(harness_publish(p, 7, 200 * HARNESS_MS, &ver), -ETIMEDOUT);
	TEST_CONTAINS(wsync_errmsg(), "departing");
	wsync_sub_close(gone);
	TEST_OK(harness_publish(p, 7, 5 * HARNESS_S, &ver));
	TEST_EQ_U64(atomic_load(&e->lead_timeouts), 2);
	wsync_close(gone_c);

	/* max_lag: a stopped trainer fails an acquire by its timeout */
	TEST_OK(wsync_sub_open(c, MODEL, &lag));
	TEST_RC(wsync_sub_set_max_lag(NULL, 1, 0), -EINVAL);
	TEST_RC(wsync_sub_set_max_lag(lag, -1, 0), -EINVAL);
	TEST_RC(wsync_sub_set_max_lag(lag, 1, -5), -EINVAL);
	TEST_OK(wsync_sub_set_max_lag(lag, 200 * HARNESS_MS, 300 * HARNESS_MS));
	TEST_OK(harness_publish(p, 8, HARNESS_S, &ver));
	TEST_OK(wsync_sub_acquire(lag, &v));             /* fresh */
	TEST_EQ_U64(v.version, ver);
	wsync_sub_release(lag, &v);
	harness_sleep_ms(250);
	t0 = harness_mono_ns();
	TEST_RC(wsync_sub_acquire(lag, &v), -ETIMEDOUT);
	took = harness_mono_ns() - t0;
	TEST_ASSERT_MSG(took >= 250 * HARNESS_MS && took < 2 * HARNESS_S, "acquire took %lld ms",
	                (long long)(took / HARNESS_MS));
	{
		char want[64];

		snprintf(want, sizeof(want), "last commit is v%llu (step 8)",
		         (unsigned long long)ver);
		TEST_CONTAINS(wsync_errmsg(), want);
	}
	/* a version committed within the timeout is taken; off again: any */
	late_pub = p;
	TEST_ASSERT(pthread_create(&th, NULL, publish_later, NULL) == 0);
	TEST_OK(wsync_sub_acquire(lag, &v));
	TEST_EQ_U64(v.step, 100);
	wsync_sub_release(lag, &v);
	pthread_join(th, NULL);
	TEST_OK(wsync_sub_set_max_lag(lag, 0, 0));
	harness_sleep_ms(250);
	TEST_OK(wsync_sub_acquire(lag, &v));
	wsync_sub_release(lag, &v);

	wsync_sub_close(lag);
	wsync_sub_close(keep);
	wsync_sub_close(idle);
	wsync_pub_close(p);
	wsync_close(c);
	wsync_close(idle_c);
	wsync_close(t);
	chan_close(&up);
	harness_broker_finish(&B);
	return 0;
}
