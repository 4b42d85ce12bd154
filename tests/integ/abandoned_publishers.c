/*
 * abandoned_publishers — a client cannot make the broker keep table entries
 * or slab memory after it is gone by opening publishers it never commits.
 *
 * A client opens publishers of WSYNC_MAX_MODELS (64) models, the whole
 * table, takes a grant on one of them, commits nothing, and disconnects.
 * Afterwards the instance's /dev/shm directory holds only the control
 * segment again, another client can open a new model, publish and read it,
 * and a model the first client had a grant on publishes above that grant's
 * version (its version floor was kept).
 *
 * On a broker that keeps every model with a layout until it stops, the
 * second client's PUB_OPEN fails with -ENOSPC (table full).
 */
#include "tests/lib/harness.h"

#include <stdio.h>
#include <unistd.h>

#include "shm/layout.h"

static struct broker B;

static int leaver(void *arg)
{
	wsync_client *c;
	wsync_pub *p[WSYNC_MAX_MODELS];
	wsync_slab slab;
	(void)arg;
	TEST_OK(harness_connect(&B, "leaver", &c));
	for (int i = 0; i < WSYNC_MAX_MODELS; i++) {
		char name[32];
		snprintf(name, sizeof name, "left.m%d", i);
		TEST_OK(harness_pub_open_2t(c, name, 2, &p[i]));
	}
	TEST_OK(wsync_pub_begin(p[0], 5 * HARNESS_S, &slab));   /* a grant, never committed */
	_exit(0);                        /* gone without closing anything (no leak report) */
}

int main(void)
{
	wsync_client *c;
	wsync_pub *p;
	uint64_t v;
	if (harness_broker_start(&B, NULL))
		return 1;
	harness_expect_exit0(harness_fork(leaver, NULL), "the client that left");
	/* the broker reaps the session when it sees the socket close */
	int64_t end = harness_mono_ns() + 10 * HARNESS_S;
	int left;
	while ((left = harness_shm_leftovers(&B, 0)) > 2 && harness_mono_ns() < end)
		harness_sleep_ms(20);
	TEST_ASSERT_MSG(left == 2, "%d entries of the instance in /dev/shm after the client "
	                "left (its directory and ctl expected)", left);
	harness_publish_and_read(&B, "fresh", 1);
	TEST_OK(harness_connect(&B, "after", &c));
	TEST_OK(harness_pub_open_2t(c, "left.m0", 2, &p));
	TEST_OK(harness_publish(p, 2, 5 * HARNESS_S, &v));
	TEST_GT_U64(v, 1);                            /* above the abandoned grant (v1) */
	wsync_pub_close(p);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
