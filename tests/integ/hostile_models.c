/*
 * hostile_models — one session cannot take the broker's model table from
 * everybody else (DESIGN invariant 10). A SUB_OPEN of an unknown name
 * declares a model that stays while the subscription does; without a
 * budget one subscriber could hold every entry and each honest publisher
 * would get -ENOSPC.
 *
 *  1. A raw session subscribes to WSYNC_MAX_MODELS names nobody publishes:
 *     the first AWAITED are declared, every later one is refused at once
 *     with -ENOBUFS naming the session and the limit; a model that exists
 *     is still open to it.
 *  2. Meanwhile another client opens a model of a name never seen and
 *     publishes it, and reads it back; the broker stays up and an
 *     honest trainer's commit round trip stays near its idle figure.
 *  3. A second session subscribing to names the first one waits on takes
 *     no new entry, so the budget does not refuse it; new names of its own
 *     count against its own budget.
 *  4. A publisher arrives for one of the names the first session waits on:
 *     that name no longer counts, and the session may wait on one more.
 *  5. The sessions go: the entries only they held come back (the broker's
 *     fds back to the baseline once the published models are deleted).
 *  6. Another uid admitted through --group (root only, skipped otherwise)
 *     has the budget for all its sessions together: a second session of it
 *     gets only what the first left, refused with -ENOBUFS naming the uid;
 *     the broker's own uid keeps its per-session budget (part 3).
 */
#include "tests/lib/harness.h"
#include "tests/lib/hostile.h"
#include "tests/lib/raw.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shm/layout.h"

/* the broker's SESSION_MAX_AWAITED (broker/session.h) */
#define AWAITED (WSYNC_MAX_MODELS / 4)

static struct broker B;

/* Subscribes r to prefix.0 .. prefix.(n-1): how many were accepted before
 * the first refusal, which must be -ENOBUFS naming the limit, as must every
 * one after it. */
static int subscribe_names(struct raw *r, const char *who, const char *prefix, int n)
{
	int accepted = 0, refused = 0;

	for (int i = 0; i < n; i++) {
		char name[64], why[WSYNC_ERRMSG_MAX] = "";
		uint32_t id;
		int err;

		snprintf(name, sizeof name, "%s.%d", prefix, i);
		err = raw_sub_try(r, name, &id, why, sizeof why);
		if (!err) {
			TEST_ASSERT_MSG(!refused, "'%s' accepted after %d refusals", name, refused);
			accepted++;
			continue;
		}
		TEST_ASSERT_MSG(err == -ENOBUFS, "SUB_OPEN of '%s' by %s: %d (%s): %s", name, who,
		                err, wsync_strerror(err), why);
		if (!refused++)
			harness_log("%s refused after %d names: %s", who, accepted, why);
		TEST_CONTAINS(why, who);
		TEST_CONTAINS(why, "nobody publishes");
		{
			char limit[32];

			snprintf(limit, sizeof limit, "(limit %d)", AWAITED);
			TEST_CONTAINS(why, limit);
		}
	}
	return accepted;
}

static struct broker G;          /* --group: admits another uid */
static uid_t other_uid;
static gid_t other_gid;

/* Another uid's two sessions: together no more than one budget. */
static int other_user(void *arg)
{
	struct raw a, b;
	char name[64], why[WSYNC_ERRMSG_MAX] = "", want[96];
	uint32_t id;
	int got, err;

	(void)arg;
	hostile_become(other_uid, other_gid);
	raw_hello(&a, &G, "user-a");
	raw_hello(&b, &G, "user-b");
	got = subscribe_names(&a, "user-a", "uid.a", AWAITED - 6);
	TEST_EQ_U64(got, AWAITED - 6);
	for (got = 0; got < AWAITED; got++) {
		snprintf(name, sizeof name, "uid.b.%d", got);
		if ((err = raw_sub_try(&b, name, &id, why, sizeof why)))
			break;
	}
	TEST_EQ_U64(got, 6);
	TEST_ASSERT_MSG(err == -ENOBUFS, "%d: %s", err, why);
	snprintf(want, sizeof want, "the sessions of uid %u", (unsigned)other_uid);
	TEST_CONTAINS(why, want);
	TEST_CONTAINS(why, "per user");
	/* names that exist cost nothing, as for one session */
	TEST_OK(raw_sub_try(&b, "uid.a.0", &id, NULL, 0));
	raw_close(&a);
	/* the first session's names went with it: room again */
	TEST_OK(raw_sub_try(&b, "uid.b.later", &id, NULL, 0));
	raw_close(&b);
	return 0;
}

static int per_user_budget(void)
{
	int skip = harness_other_user("subscribe as another uid", &other_uid, &other_gid);
	pid_t pid;

	if (skip)
		return skip;
	TEST_ASSERT(harness_broker_start(&G, HARNESS_OTHER_USERS, NULL) == 0);
	pid = harness_fork(other_user, NULL);
	harness_expect_exit0(pid, "the other uid's sessions");
	harness_broker_finish(&G);
	return 0;
}

int main(void)
{
	struct hostile_base base;
	struct raw h, h2;
	wsync_client *c;
	wsync_pub *honest, *fresh, *late;
	wsync_sub *s;
	wsync_view v;
	uint64_t version;
	uint32_t id;
	int got;

	if (harness_broker_start(&B, NULL))
		return 1;
	TEST_OK(harness_connect(&B, "honest-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, "models.honest", 0, &honest));
	hostile_base_take(&B, honest, &base);

	/* 1. one session tries to reserve the whole table */
	raw_hello(&h, &B, "hoarder");
	got = subscribe_names(&h, "hoarder", "models.grab", WSYNC_MAX_MODELS);
	TEST_EQ_U64(got, AWAITED);
	TEST_OK(raw_sub_try(&h, "models.honest", &id, NULL, 0));
	hostile_check_rtt(&B, honest, &base, "while a session holds its budget of names");

	/* 2. a new model still fits, and is published and read */
	TEST_OK(harness_pub_open_2t(c, "models.fresh", 0, &fresh));
	TEST_OK(harness_publish(fresh, 7, HARNESS_S, &version));
	TEST_OK(wsync_sub_open(c, "models.fresh", &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, version);
	TEST_EQ_U64(v.step, 7);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);

	/* 3. names that exist cost nothing; new ones count per session */
	raw_hello(&h2, &B, "second");
	got = subscribe_names(&h2, "second", "models.own", AWAITED + 4);
	TEST_EQ_U64(got, AWAITED);
	for (int i = 0; i < AWAITED; i++) {
		char name[64];

		snprintf(name, sizeof name, "models.grab.%d", i);
		TEST_OK(raw_sub_try(&h2, name, &id, NULL, 0));
	}

	/* 4. a publisher for one of the names: it no longer counts */
	TEST_OK(harness_pub_open_2t(c, "models.grab.0", 0, &late));
	TEST_OK(harness_publish(late, 1, HARNESS_S, &version));
	got = subscribe_names(&h, "hoarder", "models.more", 4);
	TEST_EQ_U64(got, 1);
	hostile_check_rtt(&B, honest, &base, "after two sessions spent their budgets");

	/* 5. the sessions go; their names with them */
	raw_close(&h);
	raw_close(&h2);
	wsync_pub_close(late);
	wsync_pub_close(fresh);
	/* CLOSE and DELETE on one socket: the broker sees them in order */
	TEST_OK(wsync_model_delete(c, "models.grab.0"));
	TEST_OK(wsync_model_delete(c, "models.fresh"));
	hostile_check_settled(&B, &base, 8 * 1024, "the hoarding sessions went");
	hostile_check_rtt(&B, honest, &base, "after the hoarding sessions went");
	wsync_pub_close(honest);
	wsync_close(c);
	harness_broker_finish(&B);

	/* 6. another uid: one budget for all its sessions */
	return per_user_budget();
}
