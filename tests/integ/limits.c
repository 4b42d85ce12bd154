/*
 * limits — the documented bounds hold and give back what they take: a client
 * holds up to WSYNC_MAX_VIEWS views at once (across its subscriptions), the
 * next acquire is -EAGAIN until one is released, all held views stay intact
 * and another client has its own views; one client subscribes to at most
 * AWAITED names nobody publishes (the next is -ENOBUFS naming the limit;
 * names that exist are still open to it); the broker's model table holds
 * WSYNC_MAX_MODELS models, and when several such clients fill it the next
 * new name is -ENOSPC; subscriptions to names never published give their
 * entries back when closed (or when their clients disconnect), so they can
 * be used again.
 */
#include "tests/lib/harness.h"

#include <stdio.h>
#include <string.h>

#include "shm/layout.h"

/* names nobody publishes one client may wait on: the broker's
 * SESSION_MAX_AWAITED (broker/session.h) */
#define AWAITED (WSYNC_MAX_MODELS / 4)

static struct broker B;

static void views(void)
{
	wsync_client *c = NULL, *other = NULL;
	wsync_pub *p = NULL, *q = NULL;
	wsync_sub *s1 = NULL, *s2 = NULL, *os = NULL;
	TEST_OK(harness_connect(&B, "limits-views", &c));
	TEST_OK(harness_pub_open_2t(c, "limits.a", 0, &p));
	TEST_OK(harness_pub_open_2t(c, "limits.b", 0, &q));
	uint64_t va = 0, vb = 0;
	TEST_OK(harness_publish(p, 1, HARNESS_S, &va));
	TEST_OK(harness_publish(q, 2, HARNESS_S, &vb));
	TEST_OK(wsync_sub_open(c, "limits.a", &s1));
	TEST_OK(wsync_sub_open(c, "limits.b", &s2));

	static wsync_view v[WSYNC_MAX_VIEWS];
	for (int i = 0; i < WSYNC_MAX_VIEWS; i++) {
		wsync_sub *s = i % 2 ? s2 : s1;
		int rc = wsync_sub_acquire(s, &v[i]);
		TEST_ASSERT_MSG(rc == 0, "view %d of %d: %d (%s): %s", i + 1, WSYNC_MAX_VIEWS, rc,
		                wsync_strerror(rc), wsync_errmsg());
	}
	wsync_view extra;
	TEST_RC(wsync_sub_acquire(s1, &extra), -EAGAIN);
	TEST_ASSERT(wsync_errmsg()[0] != 0);
	TEST_RC(wsync_sub_acquire(s2, &extra), -EAGAIN);
	TEST_RC(wsync_sub_wait(s1, 0, 0, &extra), -EAGAIN);

	/* another client is not limited by this one's views */
	TEST_OK(harness_connect(&B, "limits-other", &other));
	TEST_OK(wsync_sub_open(other, "limits.a", &os));
	TEST_OK(wsync_sub_acquire(os, &extra));
	TEST_EQ_U64(extra.version, va);
	wsync_sub_release(os, &extra);

	/* one released, one more acquired */
	wsync_sub_release(s1, &v[0]);
	TEST_OK(wsync_sub_acquire(s1, &v[0]));
	TEST_RC(wsync_sub_acquire(s1, &extra), -EAGAIN);

	for (int i = 0; i < WSYNC_MAX_VIEWS; i++) {
		TEST_EQ_U64(v[i].version, i % 2 ? vb : va);
		TEST_ASSERT(harness_verify_view(&v[i]) == 0);
		wsync_sub_release(i % 2 ? s2 : s1, &v[i]);
	}
	/* all records are free again */
	for (int i = 0; i < WSYNC_MAX_VIEWS; i++)
		TEST_OK(wsync_sub_acquire(s1, &v[i]));
	for (int i = 0; i < WSYNC_MAX_VIEWS; i++)
		wsync_sub_release(s1, &v[i]);

	wsync_sub_close(os);
	wsync_close(other);
	wsync_sub_close(s2);
	wsync_sub_close(s1);
	wsync_pub_close(q);
	wsync_pub_close(p);
	wsync_close(c);
}

/* Subscribes to fresh names until the table is full, over clients c[0..n),
 * each up to its budget of names nobody publishes (past it -ENOBUFS naming
 * the limit, and the next client goes on); returns how many were accepted. */
static int fill_table(wsync_client **c, int n, const char *prefix, wsync_sub **subs, int max)
{
	int k = 0, mine = 0;

	for (int i = 0; i < max; i++) {
		char name[64];
		snprintf(name, sizeof name, "%s.%d", prefix, i);
		int rc = wsync_sub_open(c[k], name, &subs[i]);
		if (rc == -ENOBUFS) {
			TEST_CONTAINS(wsync_errmsg(), "nobody publishes");
			TEST_ASSERT_MSG(mine == AWAITED, "client %d refused after %d names: %s", k,
			                mine, wsync_errmsg());
			TEST_ASSERT_MSG(++k < n, "%d clients' budgets spent before the table is full",
			                n);
			mine = 0;
			rc = wsync_sub_open(c[k], name, &subs[i]);
		}
		if (rc == -ENOSPC) {
			TEST_CONTAINS(wsync_errmsg(), "table is full");
			return i;
		}
		TEST_ASSERT_MSG(rc == 0, "sub_open %s: %d (%s): %s", name, rc, wsync_strerror(rc),
		                wsync_errmsg());
		mine++;
	}
	return max;
}

static void connect_all(wsync_client **c, int n)
{
	for (int k = 0; k < n; k++) {
		char name[32];
		snprintf(name, sizeof name, "limits-table-%d", k);
		TEST_OK(harness_connect(&B, name, &c[k]));
	}
}

static void model_table(void)
{
	/* limits.a and limits.b exist already (published, so they stay) */
	enum { N_CLIENTS = WSYNC_MAX_MODELS / AWAITED + 1 };
	int room = WSYNC_MAX_MODELS - 2;
	static wsync_sub *subs[WSYNC_MAX_MODELS + 8];
	wsync_client *c[N_CLIENTS];
	connect_all(c, N_CLIENTS);
	int got = fill_table(c, N_CLIENTS, "limits.x", subs, WSYNC_MAX_MODELS + 8);
	TEST_ASSERT_MSG(got == room, "%d new models accepted, expected %d", got, room);
	/* a model that exists is still open to new subscribers, even to a
	 * client past its budget */
	wsync_sub *s = NULL;
	TEST_OK(wsync_sub_open(c[0], "limits.a", &s));
	wsync_sub_close(s);
	TEST_OK(wsync_sub_open(c[0], "limits.x.20", &s));
	wsync_sub_close(s);

	/* closing the subscriptions gives the entries back */
	for (int i = 0; i < got; i++)
		wsync_sub_close(subs[i]);
	got = fill_table(c, N_CLIENTS, "limits.y", subs, WSYNC_MAX_MODELS + 8);
	TEST_ASSERT_MSG(got == room, "after closing: %d new models accepted, expected %d", got, room);

	/* so does disconnecting */
	for (int k = 0; k < N_CLIENTS; k++)
		wsync_close(c[k]);
	connect_all(c, N_CLIENTS);
	int64_t deadline = harness_mono_ns() + 5 * HARNESS_S;
	for (;;) {
		got = fill_table(c, N_CLIENTS, "limits.z", subs, WSYNC_MAX_MODELS + 8);
		if (got == room || harness_mono_ns() > deadline)
			break;
		/* the broker may not have reaped the closed sessions yet */
		for (int i = 0; i < got; i++)
			wsync_sub_close(subs[i]);
		harness_sleep_ms(20);
	}
	TEST_ASSERT_MSG(got == room, "after a disconnect: %d new models accepted, expected %d",
	                got, room);
	for (int i = 0; i < got; i++)
		wsync_sub_close(subs[i]);
	for (int k = 0; k < N_CLIENTS; k++)
		wsync_close(c[k]);
}

int main(void)
{
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	views();
	model_table();
	harness_broker_finish(&B);
	return 0;
}
