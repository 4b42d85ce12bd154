/*
 * limits — the documented bounds hold and give back what they take: a client
 * holds up to WSYNC_MAX_VIEWS views at once (across its subscriptions), the
 * next acquire is -EAGAIN until one is released, all held views stay intact
 * and another client has its own views; the broker's model table holds
 * WSYNC_MAX_MODELS models, the next new name is -ENOSPC, and subscriptions to
 * names never published give their entries back when closed (or when their
 * client disconnects), so they can be used again.
 */
#include "tests/lib/harness.h"

#include <stdio.h>
#include <string.h>

#include "shm/layout.h"

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

/* Subscribes to fresh names until refused; returns how many were accepted. */
static int fill_table(wsync_client *c, const char *prefix, wsync_sub **subs, int max)
{
	for (int i = 0; i < max; i++) {
		char name[64];
		snprintf(name, sizeof name, "%s.%d", prefix, i);
		int rc = wsync_sub_open(c, name, &subs[i]);
		if (rc == -ENOSPC) {
			TEST_ASSERT(wsync_errmsg()[0] != 0);
			return i;
		}
		TEST_ASSERT_MSG(rc == 0, "sub_open %s: %d (%s): %s", name, rc, wsync_strerror(rc),
		                wsync_errmsg());
	}
	return max;
}

static void model_table(void)
{
	/* limits.a and limits.b exist already (published, so they stay) */
	int room = WSYNC_MAX_MODELS - 2;
	static wsync_sub *subs[WSYNC_MAX_MODELS + 8];
	wsync_client *c = NULL;
	TEST_OK(harness_connect(&B, "limits-table", &c));
	int got = fill_table(c, "limits.x", subs, WSYNC_MAX_MODELS + 8);
	TEST_ASSERT_MSG(got == room, "%d new models accepted, expected %d", got, room);
	/* a model that exists is still open to new subscribers */
	wsync_sub *s = NULL;
	TEST_OK(wsync_sub_open(c, "limits.a", &s));
	wsync_sub_close(s);

	/* closing the subscriptions gives the entries back */
	for (int i = 0; i < got; i++)
		wsync_sub_close(subs[i]);
	got = fill_table(c, "limits.y", subs, WSYNC_MAX_MODELS + 8);
	TEST_ASSERT_MSG(got == room, "after closing: %d new models accepted, expected %d", got, room);

	/* so does disconnecting */
	wsync_close(c);
	TEST_OK(harness_connect(&B, "limits-table-2", &c));
	int64_t deadline = harness_mono_ns() + 5 * HARNESS_S;
	for (;;) {
		got = fill_table(c, "limits.z", subs, WSYNC_MAX_MODELS + 8);
		if (got == room || harness_mono_ns() > deadline)
			break;
		/* the broker may not have reaped the closed session yet */
		for (int i = 0; i < got; i++)
			wsync_sub_close(subs[i]);
		harness_sleep_ms(20);
	}
	TEST_ASSERT_MSG(got == room, "after a disconnect: %d new models accepted, expected %d",
	                got, room);
	for (int i = 0; i < got; i++)
		wsync_sub_close(subs[i]);
	wsync_close(c);
}

int main(void)
{
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	views();
	model_table();
	harness_broker_finish(&B);
	return 0;
}
