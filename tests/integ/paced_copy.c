/*
 * paced_copy — a copy with wsync_copy_opts.spread_ns trickles instead of
 * bursting, and is still the same copy:
 *  - wsync_copy_with of 32 MiB spread over 0.2 s takes at least 0.2 s of
 *    wall time and a small part of it in CPU time (the thread sleeps between
 *    blocks; the bounds are generous for a loaded machine), and copies every
 *    byte, on one thread or two; a copy with a spread far too short for it
 *    just copies;
 *  - a paced wsync_slab_copy_tensors_with / wsync_slab_copy_with into a
 *    model with checksums publishes the right bytes and a checksum that
 *    wsync_view_verify accepts;
 *  - a negative spread, one above WSYNC_SPREAD_MAX_NS, and flags or
 *    reserved fields not 0 are refused with -EINVAL and a message, before
 *    any byte is copied;
 *  - a trainer killed in the middle of a paced copy publishes nothing: the
 *    version before stays the latest and intact, no newer one appears, and
 *    the next trainer publishes (paced) over it.
 */
#include "tests/lib/harness.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MODEL  "paced.model"
#define BYTES  ((size_t)32 << 20)     /* a multiple of 8 (harness_fill) */
#define SPREAD ((int64_t)200 * 1000000)

static struct broker B;
static struct chan to_parent;

static int64_t process_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void check_copy_paced(void)
{
	uint8_t *src = malloc(BYTES), *dst = malloc(BYTES);
	unsigned threads[] = { 0, 2 };

	TEST_ASSERT(src && dst);
	memset(dst, 0, BYTES);                  /* faults taken before timing */
	for (size_t t = 0; t < 2; t++) {
		wsync_copy_opts o = { .threads = threads[t], .spread_ns = SPREAD };
		int64_t w0, c0, wall, cpu;

		harness_fill(src, BYTES, 7 + t);
		w0 = harness_mono_ns();
		c0 = process_cpu_ns();
		TEST_OK(wsync_copy_with(dst, src, BYTES, &o));
		cpu = process_cpu_ns() - c0;
		wall = harness_mono_ns() - w0;
		harness_log("paced copy of 32 MiB over 200 ms, threads %u: %.1f ms wall, "
		            "%.1f ms CPU", threads[t], wall / 1e6, cpu / 1e6);
		TEST_ASSERT_MSG(wall >= SPREAD, "a copy spread over 200 ms took %.1f ms",
		                wall / 1e6);
		/* a burst copy of 32 MiB is ~10 ms of CPU; sleeping is none */
		TEST_ASSERT_MSG(cpu < SPREAD / 2, "a copy spread over 200 ms used %.1f ms of CPU: "
		                "it spins rather than sleeps", cpu / 1e6);
		TEST_ASSERT(harness_verify(dst, BYTES, 7 + t) == 0);
	}
	/* far too short a spread: it just copies */
	{
		wsync_copy_opts o = { .spread_ns = 1 };

		harness_fill(src, BYTES, 9);
		TEST_OK(wsync_copy_with(dst, src, BYTES, &o));
		TEST_ASSERT(harness_verify(dst, BYTES, 9) == 0);
	}
	free(src);
	free(dst);
}

static void check_bad_opts(wsync_pub *p, const void *src)
{
	wsync_copy_opts bad[] = {
		{ .spread_ns = -1 },
		{ .spread_ns = WSYNC_SPREAD_MAX_NS + 1 },
		{ .spread_ns = INT64_MAX },
		{ .flags = 1 },
		{ .reserved = { 0, 1 } },
	};
	const char *says[] = { "spread_ns", "spread_ns", "spread_ns", "reserved", "reserved" };
	const void *srcs[1] = { src };
	uint8_t dst[64] = { 0 };
	wsync_slab slab;

	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		TEST_RC(wsync_copy_with(dst, src, sizeof dst, &bad[i]), -EINVAL);
		TEST_CONTAINS(wsync_errmsg(), says[i]);
		TEST_ASSERT_MSG(dst[0] == 0, "a refused copy wrote");
		TEST_RC(wsync_slab_copy_tensors_with(&slab, srcs, &bad[i]), -EINVAL);
		TEST_CONTAINS(wsync_errmsg(), says[i]);
		TEST_RC(wsync_slab_copy_with(&slab, 0, src, 64, &bad[i]), -EINVAL);
		TEST_CONTAINS(wsync_errmsg(), says[i]);
	}
	/* NULL options: the defaults */
	TEST_OK(wsync_copy_with(dst, src, sizeof dst, NULL));
	TEST_ASSERT(memcmp(dst, src, sizeof dst) == 0);
	TEST_OK(wsync_pub_abort(p));
}

static wsync_pub *open_publisher(wsync_client *c)
{
	uint64_t shape[1] = { BYTES };
	int64_t deadline = harness_mono_ns() + 10 * HARNESS_S;
	wsync_tensor_desc d;
	wsync_pub *p = NULL;

	harness_desc(&d, "blob", WSYNC_U8, 1, shape);
	for (;;) {
		int rc = wsync_pub_open(c, MODEL, &d, 1, NULL, &p);

		if (rc == 0)
			return p;
		TEST_ASSERT_MSG(rc == -EBUSY, "pub_open: %d (%s): %s", rc, wsync_strerror(rc),
		                wsync_errmsg());
		TEST_ASSERT_MSG(harness_mono_ns() < deadline,
		                "the dead publisher still holds the model after 10 s");
		harness_sleep_ms(10);
	}
}

/* begin, a paced copy of the pattern of step, commit; returns the version. */
static uint64_t publish_paced(wsync_pub *p, const void *src, uint64_t step,
                              const wsync_copy_opts *o, int whole)
{
	const void *srcs[1] = { src };
	wsync_slab slab;
	uint64_t v = 0;

	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	if (whole)
		TEST_OK(wsync_slab_copy_tensors_with(&slab, srcs, o));
	else
		TEST_OK(wsync_slab_copy_with(&slab, slab.tensors[0].offset, src, BYTES, o));
	TEST_OK(wsync_pub_commit(p, step, &v));
	return v;
}

static void expect_latest(wsync_sub *s, uint64_t version, uint64_t step)
{
	wsync_view v;
	const void *data;

	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, version);
	TEST_EQ_U64(v.step, step);
	TEST_OK(wsync_view_tensor(&v, "blob", &data, NULL));
	TEST_ASSERT(harness_verify(data, BYTES, step) == 0);
	TEST_OK(wsync_view_verify(&v));
	wsync_sub_release(s, &v);
}

static int trainer_killed_in_copy(void *arg)
{
	uint8_t *src = malloc(BYTES);
	wsync_copy_opts o = { .spread_ns = 60 * HARNESS_S };
	const void *srcs[1] = { src };
	wsync_client *c = NULL;
	wsync_slab slab;
	wsync_pub *p;
	uint64_t v;

	(void)arg;
	TEST_ASSERT(src != NULL);
	TEST_OK(harness_connect(&B, "paced-trainer-1", &c));
	p = open_publisher(c);
	harness_fill(src, BYTES, 20);
	v = publish_paced(p, src, 20, NULL, 1);
	harness_fill(src, BYTES, 21);
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	chan_send(&to_parent, v);
	TEST_OK(wsync_slab_copy_tensors_with(&slab, srcs, &o));   /* a minute: killed in it */
	TEST_ASSERT_MSG(0, "the paced copy returned before the kill");
	return 1;
}

int main(void)
{
	wsync_copy_opts two = { .threads = 2, .spread_ns = 100 * 1000000 };
	wsync_copy_opts one = { .spread_ns = 50 * 1000000 };
	wsync_client *c = NULL, *tc = NULL;
	uint8_t *src = malloc(BYTES);
	wsync_sub *s = NULL;
	wsync_pub *p;
	uint64_t v;
	pid_t t1;
	wsync_view view;
	int st;

	TEST_ASSERT(src != NULL);
	check_copy_paced();
	chan_open(&to_parent);
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);

	/* killed in the middle of a paced copy */
	t1 = harness_fork(trainer_killed_in_copy, NULL);
	v = chan_recv(&to_parent, t1);
	TEST_OK(harness_connect(&B, "paced-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	expect_latest(s, v, 20);
	harness_wait_sleeping(t1, HARNESS_WAIT_MS);    /* between two blocks */
	harness_sleep_ms(300);
	kill(t1, SIGKILL);
	st = harness_wait_status(t1, HARNESS_WAIT_MS);
	TEST_ASSERT_MSG(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
	                "trainer ended with %s", harness_status_str(st));
	TEST_RC(wsync_sub_wait(s, v, 300 * 1000000, &view), -ETIMEDOUT);
	expect_latest(s, v, 20);

	/* the next trainer publishes paced, its checksums right */
	TEST_OK(harness_connect(&B, "paced-trainer-2", &tc));
	p = open_publisher(tc);
	check_bad_opts(p, src);
	harness_fill(src, BYTES, 30);
	v = publish_paced(p, src, 30, &two, 1);
	expect_latest(s, v, 30);
	harness_fill(src, BYTES, 31);
	v = publish_paced(p, src, 31, &one, 0);
	expect_latest(s, v, 31);

	wsync_pub_close(p);
	wsync_close(tc);
	wsync_sub_close(s);
	wsync_close(c);
	free(src);
	harness_broker_finish(&B);
	return 0;
}
