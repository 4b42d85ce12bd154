/*
 * deadlines — every call given a timeout returns by it when it needs the
 * broker and the broker has stopped answering (SIGSTOP), and a timeout
 * never makes the client unusable: after SIGCONT the same handles go on,
 * the late answers being recognised (a late GRANT is used by the next
 * begin). Cases: the first wait of a subscription opened before the model
 * was published (it must ATTACH), begin with timeout 0 and with 100 ms
 * without a prefetched grant. Also: an extreme WSYNC_REPLY_TIMEOUT_MS does
 * not overflow into an immediate timeout.
 */
#include "tests/lib/harness.h"

#include <signal.h>
#include <stdlib.h>

static struct broker B;

/* Bounds are generous (a loaded 2-core CI machine); what they catch is the
 * old behaviour, which waited for the whole reply limit (20 s here). */
#define LATE_NS (3 * HARNESS_S)

static int64_t elapsed_since(int64_t t0)
{
	return harness_mono_ns() - t0;
}

int main(void)
{
	wsync_client *t = NULL, *t2 = NULL, *c = NULL;
	wsync_pub *p = NULL, *p2 = NULL;
	wsync_sub *s = NULL;
	wsync_slab slab;
	wsync_view v;
	uint64_t version = 0;
	int64_t t0;
	int rc;

	setenv("WSYNC_REPLY_TIMEOUT_MS", "20000", 1);
	if (harness_broker_start(&B, NULL))
		return 1;
	TEST_OK(harness_connect(&B, "collector", &c));
	TEST_OK(wsync_sub_open(c, "dl.a", &s));          /* not published yet */
	TEST_OK(harness_connect(&B, "trainer", &t));
	TEST_OK(harness_pub_open_2t(t, "dl.a", 2, &p));
	TEST_OK(harness_publish(p, 1, HARNESS_S, &version));
	TEST_OK(harness_connect(&B, "trainer-2", &t2));
	TEST_OK(harness_pub_open_2t(t2, "dl.b", 2, &p2)); /* no grant yet */

	TEST_ASSERT(kill(B.pid, SIGSTOP) == 0);

	t0 = harness_mono_ns();
	rc = wsync_sub_wait(s, 0, 100 * HARNESS_MS, &v);
	TEST_RC(rc, -ETIMEDOUT);
	TEST_ASSERT_MSG(elapsed_since(t0) < LATE_NS, "wait(100 ms) needing an ATTACH took "
	                "%lld ms", (long long)(elapsed_since(t0) / HARNESS_MS));

	t0 = harness_mono_ns();
	TEST_RC(wsync_pub_begin(p2, 0, &slab), -ETIMEDOUT);
	TEST_ASSERT_MSG(elapsed_since(t0) < LATE_NS, "begin(0) without a grant took %lld ms",
	                (long long)(elapsed_since(t0) / HARNESS_MS));
	t0 = harness_mono_ns();
	TEST_RC(wsync_pub_begin(p2, 100 * HARNESS_MS, &slab), -ETIMEDOUT);
	TEST_ASSERT_MSG(elapsed_since(t0) < LATE_NS, "begin(100 ms) without a grant took %lld ms",
	                (long long)(elapsed_since(t0) / HARNESS_MS));

	TEST_ASSERT(kill(B.pid, SIGCONT) == 0);

	/* nobody was given up */
	TEST_OK(wsync_sub_wait(s, 0, 5 * HARNESS_S, &v));
	TEST_EQ_U64(v.version, version);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	TEST_OK(wsync_pub_begin(p2, 5 * HARNESS_S, &slab));
	harness_fill(slab.base, slab.bytes, 7);
	TEST_OK(wsync_pub_commit(p2, 7, &version));
	TEST_OK(harness_publish(p, 2, HARNESS_S, &version));
	TEST_OK(wsync_sub_wait(s, 1, 5 * HARNESS_S, &v));
	TEST_EQ_U64(v.version, version);
	wsync_sub_release(s, &v);
	wsync_close(c);
	wsync_close(t);
	wsync_close(t2);

	/* a reply limit near INT64_MAX ns must not wrap into the past */
	setenv("WSYNC_REPLY_TIMEOUT_MS", "9223372036854775807", 1);
	TEST_OK(harness_connect(&B, "huge-limit", &c));
	TEST_OK(wsync_sub_open(c, "dl.a", &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	wsync_sub_release(s, &v);
	wsync_close(c);

	harness_broker_finish(&B);
	return 0;
}
