/*
 * busy — readers are never overwritten and the publisher is told who holds
 * what: on a 2-slot model, a collector in another process holds a view of
 * the older version and one of the latest, so no slot can be granted;
 * wsync_pub_begin with a 200 ms timeout returns -EBUSY after at least 200 ms
 * and its message names the holder; the held views still verify; once the
 * collector releases the old view, begin succeeds.
 */
#include "tests/lib/harness.h"

#include <stdio.h>
#include <string.h>

#define MODEL  "busy.policy"
#define HOLDER "busy-holder-7"

static struct broker B;
static struct chan to_child, to_parent;

static int holder(void *arg)
{
	(void)arg;
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view old, cur;
	TEST_OK(harness_connect(&B, HOLDER, &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	uint64_t v1 = chan_recv(&to_child, 0);
	TEST_OK(wsync_sub_acquire(s, &old));
	TEST_EQ_U64(old.version, v1);
	chan_send(&to_parent, 1);                   /* holding v1 */
	uint64_t v2 = chan_recv(&to_child, 0);
	TEST_OK(wsync_sub_acquire(s, &cur));
	TEST_EQ_U64(cur.version, v2);
	chan_send(&to_parent, 2);                   /* holding v1 and v2 */

	chan_recv(&to_child, 0);                    /* the trainer was refused */
	TEST_ASSERT(harness_verify_view(&old) == 0);
	TEST_ASSERT(harness_verify_view(&cur) == 0);
	TEST_EQ_U64(old.step, 1);
	TEST_EQ_U64(cur.step, 2);
	wsync_sub_release(s, &old);
	chan_send(&to_parent, 3);                   /* released v1 */

	chan_recv(&to_child, 0);
	TEST_ASSERT(harness_verify_view(&cur) == 0);
	wsync_sub_release(s, &cur);
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

int main(void)
{
	chan_open(&to_child);
	chan_open(&to_parent);
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);

	pid_t child = harness_fork(holder, NULL);

	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	TEST_OK(harness_connect(&B, "busy-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 2, &p));

	uint64_t v1 = 0, v2 = 0, v3 = 0;
	TEST_OK(harness_publish(p, 1, HARNESS_S, &v1));
	chan_send(&to_child, v1);
	chan_recv(&to_parent, child);
	TEST_OK(harness_publish(p, 2, HARNESS_S, &v2));
	chan_send(&to_child, v2);
	chan_recv(&to_parent, child);

	/* both slots are read: v1's is pinned, v2's is the latest (and pinned) */
	wsync_slab slab;
	memset(&slab, 0, sizeof slab);
	int64_t t0 = harness_mono_ns();
	TEST_RC(wsync_pub_begin(p, 200 * HARNESS_MS, &slab), -EBUSY);
	int64_t took = harness_mono_ns() - t0;
	TEST_ASSERT_MSG(took >= 200 * HARNESS_MS, "-EBUSY after %lld ms, before the 200 ms timeout",
	                (long long)(took / HARNESS_MS));
	TEST_ASSERT_MSG(took < 5 * HARNESS_S, "-EBUSY only after %lld ms",
	                (long long)(took / HARNESS_MS));
	const char *msg = wsync_errmsg();
	char pid[32];
	snprintf(pid, sizeof pid, "%d", (int)child);
	TEST_ASSERT_MSG(strstr(msg, HOLDER) || strstr(msg, pid),
	                "-EBUSY message names neither '%s' nor pid %s: \"%s\"", HOLDER, pid, msg);
	/* a poll is refused at once, too */
	TEST_RC(wsync_pub_begin(p, 0, &slab), -EBUSY);

	/* the refusal changed nothing for readers */
	chan_send(&to_child, 1);
	chan_recv(&to_parent, child);              /* v1 released */

	/* the broker sees the pin go away: begin succeeds (within its timeout) */
	memset(&slab, 0, sizeof slab);
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	harness_fill(slab.base, slab.bytes, 3);
	TEST_OK(wsync_pub_commit(p, 3, &v3));
	TEST_GT_U64(v3, v2);

	chan_send(&to_child, 1);
	harness_expect_exit0(child, "holder");

	/* with no reader left, the two slots cycle freely */
	uint64_t last = v3;
	for (int i = 0; i < 6; i++) {
		uint64_t v = 0;
		TEST_OK(harness_publish(p, 10 + (uint64_t)i, 5 * HARNESS_S, &v));
		TEST_GT_U64(v, last);
		last = v;
	}

	wsync_pub_close(p);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
