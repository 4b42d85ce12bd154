/*
 * dead_broker_short_waits — a collector that waits with timeouts shorter
 * than the library's 200 ms hang-up check still notices a SIGKILLed broker:
 * its loop of 50 ms waits turns from -ETIMEDOUT into -ENOTCONN within a
 * couple of seconds, and a trainer holding a prefetched grant that has not
 * used its socket since cannot commit (-ENOTCONN) and leaves the collector's
 * latest version where it was. The broker's liveness word in the control
 * segment, which commits read instead of polling the socket, holds its
 * thread id while it lives and the kernel's owner-died mark after it.
 */
#include "tests/lib/harness.h"

#include <stdatomic.h>

#include "libclient/client.h"

#define MODEL "short.waits"

static struct broker B;

int main(void)
{
	wsync_client *tc = NULL, *cc = NULL;
	wsync_pub *p = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	wsync_slab slab;
	uint64_t v1 = 0;
	int64_t t0, waited_ms;
	int rc, n = 0;

	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	TEST_OK(harness_connect(&B, "short-trainer", &tc));
	TEST_OK(harness_connect(&B, "short-collector", &cc));
	TEST_OK(harness_pub_open_2t(tc, MODEL, 0, &p));
	TEST_OK(harness_publish(p, 1, 5 * HARNESS_S, &v1));   /* prefetches a grant */
	TEST_OK(wsync_sub_open(cc, MODEL, &s));
	TEST_RC(wsync_sub_wait(s, v1, 50 * HARNESS_MS, &v), -ETIMEDOUT);

	{
		const _Atomic uint32_t *alive = (const _Atomic uint32_t *)(const void *)
		                                tc->ctl->broker_alive;
		uint32_t w = atomic_load(alive);

		TEST_ASSERT_MSG(w && !(w & WSYNC_BROKER_DIED), "liveness word %#x", w);
		harness_broker_kill(&B);
		TEST_ASSERT_MSG(atomic_load(alive) & WSYNC_BROKER_DIED, "liveness word %#x after "
		                "the kill", atomic_load(alive));
	}
	t0 = harness_mono_ns();
	do {
		rc = wsync_sub_wait(s, v1, 50 * HARNESS_MS, &v);
		n++;
	} while (rc == -ETIMEDOUT && harness_mono_ns() - t0 < 5 * HARNESS_S);
	waited_ms = (harness_mono_ns() - t0) / 1000000;
	harness_log("%d waits of 50 ms, %lld ms until %d", n, (long long)waited_ms, rc);
	TEST_RC(rc, -ENOTCONN);
	TEST_ASSERT_MSG(waited_ms < 2000, "broker death noticed only after %lld ms",
	                (long long)waited_ms);

	/* begin uses the prefetched grant without the socket; commit must not
	 * move latest in the dead generation */
	rc = wsync_pub_begin(p, HARNESS_S, &slab);
	if (rc == 0) {
		harness_fill(slab.base, slab.bytes, 2);
		TEST_RC(wsync_pub_commit(p, 2, NULL), -ENOTCONN);
	} else {
		TEST_RC(rc, -ENOTCONN);
	}
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, v1);
	TEST_EQ_U64(v.step, 1);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);

	wsync_sub_close(s);
	wsync_pub_close(p);
	wsync_close(cc);
	wsync_close(tc);
	return 0;
}
