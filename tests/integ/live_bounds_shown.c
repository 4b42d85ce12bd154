/*
 * live_bounds_shown — the tools show each collector's lag against the
 * staleness bound it declared (docs/LIVE.md, docs/TOOLS.md).
 *
 * A collector's bound (wsync_sub_set_max_lag, wsync_sub_declare_max_lag)
 * goes through its session page and the broker's tick to the control
 * segment: wsyncctl --json sessions shows max_lag_versions and max_lag_s,
 * over_bound once its lag in versions passes the bound, and once the
 * trainer stops and its version grows older than the bound; wsyncctl
 * models and metrics count it, wsyncctl sessions and wsync-top mark it.
 * A collector without a bound shows none; a closed subscription shows none,
 * and neither does the next one the same client opens. Bad arguments fail.
 */
#include "tests/lib/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL "live.shown"
#define WAIT_MS 8000

static struct broker B;
static char json[65536];

static const char *build_dir(void)
{
	return getenv("BUILD") ? getenv("BUILD") : "build";
}

/* wsyncctl (or wsync-top) with args, its output in out. */
static void tool(const char *bin, char *out, size_t len, const char *a1, const char *a2,
                 const char *a3)
{
	char path[256];
	char *argv[] = { path, "--endpoint", B.sock, (char *)a1, (char *)a2, (char *)a3, NULL };
	int st;

	snprintf(path, sizeof(path), "%s/bin/%s", build_dir(), bin);
	st = harness_run(argv, out, len, 10000);
	TEST_ASSERT_MSG(st == 0, "%s %s %s: %s: %s", bin, a1, a2 ? a2 : "",
	                harness_status_str(st), out);
}

/* The value of field in the session object named name of the last
 * `wsyncctl --json sessions` (compact JSON: a session object holds no
 * other object), into val; 0, or -1 without such a session. */
static int field(const char *name, const char *field, char *val, size_t len)
{
	char key[128], want[96];
	const char *at, *end, *v;
	size_t n;

	snprintf(key, sizeof(key), "\"name\":\"%s\"", name);
	snprintf(want, sizeof(want), "\"%s\":", field);
	at = strstr(json, key);
	if (!at)
		return -1;
	end = strchr(at, '}');
	v = strstr(at, want);
	TEST_ASSERT_MSG(v && v < end, "no %s in session %s: %s", field, name, json);
	v += strlen(want);
	n = strcspn(v, ",}");
	snprintf(val, len, "%.*s", (int)n, v);
	return 0;
}

/* Polls wsyncctl --json sessions until session name's field reads want
 * (the broker mirrors the bounds once a tick). */
static void wait_field(const char *name, const char *f, const char *want)
{
	int64_t deadline = harness_mono_ns() + WAIT_MS * HARNESS_MS;
	char val[64] = "";

	for (;;) {
		tool("wsyncctl", json, sizeof(json), "--json", "sessions", NULL);
		if (field(name, f, val, sizeof(val)) == 0 && !strcmp(val, want))
			return;
		TEST_ASSERT_MSG(harness_mono_ns() < deadline, "session %s: %s is %s, not %s: %s",
		                name, f, val, want, json);
		harness_sleep_ms(100);
	}
}

static void expect_field(const char *name, const char *f, const char *want)
{
	char val[64] = "";

	TEST_ASSERT_MSG(field(name, f, val, sizeof(val)) == 0, "no session %s: %s", name, json);
	TEST_ASSERT_MSG(!strcmp(val, want), "session %s: %s is %s, not %s: %s", name, f, val,
	                want, json);
}

/* The value of metric family's series of the collector called name. */
static double metric(const char *text, const char *family, const char *name)
{
	char head[128], who[96];
	const char *at;

	snprintf(head, sizeof(head), "\n%s{", family);
	snprintf(who, sizeof(who), ",name=\"%s\",", name);
	for (at = strstr(text, head); at; at = strstr(at + 1, head)) {
		const char *end = strchr(at + 1, '\n'), *n = strstr(at, who);

		if (n && (!end || n < end))
			return strtod(strchr(n, '}') + 1, NULL);
	}
	return -1;
}

int main(void)
{
	static char out[65536];
	wsync_client *t, *c, *free_c;
	wsync_sub *s, *s2, *other;
	wsync_pub *p;
	wsync_view v;
	uint64_t ver;

	if (harness_broker_start(&B, NULL))
		return 1;
	TEST_OK(harness_connect(&B, "trainer", &t));
	TEST_OK(harness_pub_open_2t(t, MODEL, 0, &p));
	TEST_OK(harness_connect(&B, "bounded", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(harness_connect(&B, "unbounded", &free_c));
	TEST_OK(wsync_sub_open(free_c, MODEL, &other));

	TEST_RC(wsync_sub_declare_max_lag(NULL, 1, 0), -EINVAL);
	TEST_RC(wsync_sub_declare_max_lag(s, 1, -1), -EINVAL);

	/* the enforced bound alone: seconds, no versions */
	TEST_OK(wsync_sub_set_max_lag(s, 30 * HARNESS_S, HARNESS_S));
	TEST_OK(harness_publish(p, 1, HARNESS_S, &ver));
	TEST_OK(wsync_sub_acquire(s, &v));
	wsync_sub_release(s, &v);
	TEST_OK(wsync_sub_acquire(other, &v));
	wsync_sub_release(other, &v);
	wait_field("bounded", "max_lag_s", "30.0");
	expect_field("bounded", "max_lag_versions", "null");
	expect_field("bounded", "over_bound", "false");
	expect_field("unbounded", "max_lag_s", "null");
	expect_field("unbounded", "max_lag_versions", "null");
	expect_field("unbounded", "over_bound", "false");

	/* versions declared too; three commits it does not take pass 2 */
	TEST_OK(wsync_sub_declare_max_lag(s, 2, 30 * HARNESS_S));
	wait_field("bounded", "max_lag_versions", "2");
	expect_field("bounded", "over_bound", "false");
	for (uint64_t step = 2; step <= 4; step++)
		TEST_OK(harness_publish(p, step, HARNESS_S, &ver));
	wait_field("bounded", "over_bound", "true");
	expect_field("bounded", "lag", "3");
	expect_field("unbounded", "over_bound", "false");     /* as far behind, no bound */
	tool("wsyncctl", out, sizeof(out), "models", NULL, NULL);
	TEST_CONTAINS(out, MODEL ": 1 of 2 collectors declare max_lag, 1 past it: 'bounded'");
	TEST_CONTAINS(out, "max_lag 2v/30s");
	tool("wsyncctl", out, sizeof(out), "sessions", NULL, NULL);
	TEST_CONTAINS(out, " !2v/30s\n");
	tool("wsyncctl", out, sizeof(out), "--json", "models", NULL);
	TEST_CONTAINS(out, "\"collectors_bounded\":1,\"collectors_over_bound\":1");
	tool("wsyncctl", out, sizeof(out), "metrics", NULL, NULL);
	TEST_ASSERT_MSG(metric(out, "wsync_collector_max_lag_versions", "bounded") == 2, "%s", out);
	TEST_ASSERT_MSG(metric(out, "wsync_collector_max_lag_seconds", "bounded") == 30, "%s", out);
	TEST_ASSERT_MSG(metric(out, "wsync_collector_over_bound", "bounded") == 1, "%s", out);
	TEST_ASSERT_MSG(metric(out, "wsync_collector_over_bound", "unbounded") == -1, "%s", out);
	TEST_CONTAINS(out, "\nwsync_model_collectors_over_bound{broker=");
	tool("wsync-top", out, sizeof(out), "-b", "-n", "1");
	TEST_CONTAINS(out, "BOUND");
	TEST_CONTAINS(out, "!2v/30s");
	TEST_CONTAINS(out, "!1/1");

	/* it catches up: within the bound again */
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, ver);
	wsync_sub_release(s, &v);
	wait_field("bounded", "over_bound", "false");

	/* the trainer stops: the version it took, the newest, grows older than
	 * 3 s (the tick that mirrors the bound comes within about one) */
	TEST_OK(wsync_sub_declare_max_lag(s, 2, 3 * HARNESS_S));
	TEST_OK(harness_publish(p, 5, HARNESS_S, &ver));
	TEST_OK(wsync_sub_acquire(s, &v));
	wsync_sub_release(s, &v);
	wait_field("bounded", "max_lag_s", "3.0");
	expect_field("bounded", "lag", "0");
	{
		char age[64];

		TEST_OK(field("bounded", "age_s", age, sizeof(age)));
		if (strtod(age, NULL) < 2.9)          /* not a machine too loaded to tell */
			expect_field("bounded", "over_bound", "false");
		wait_field("bounded", "over_bound", "true");
		expect_field("bounded", "lag", "0");
		TEST_OK(field("bounded", "age_s", age, sizeof(age)));
		TEST_ASSERT_MSG(strtod(age, NULL) > 3.0, "age %s: %s", age, json);
	}

	/* closed: no bound shown; nor in the next subscription of the client */
	wsync_sub_close(s);
	wait_field("bounded", "max_lag_s", "null");
	expect_field("bounded", "max_lag_versions", "null");
	expect_field("bounded", "over_bound", "false");
	TEST_OK(wsync_sub_open(c, MODEL, &s2));
	TEST_OK(wsync_sub_acquire(s2, &v));
	wsync_sub_release(s2, &v);
	harness_sleep_ms(1200);                      /* a tick at least */
	tool("wsyncctl", json, sizeof(json), "--json", "sessions", NULL);
	expect_field("bounded", "max_lag_s", "null");
	expect_field("bounded", "max_lag_versions", "null");
	expect_field("bounded", "over_bound", "false");
	tool("wsyncctl", out, sizeof(out), "models", NULL, NULL);
	TEST_ASSERT_MSG(strstr(out, "declare max_lag") == NULL, "%s", out);

	wsync_sub_close(s2);
	wsync_sub_close(other);
	wsync_pub_close(p);
	wsync_close(free_c);
	wsync_close(c);
	wsync_close(t);
	harness_broker_finish(&B);
	return 0;
}
