/*
 * fault_alloc — the broker survives running out of memory anywhere.
 *
 * For N = 1, 2, ... a broker starts with WSYNC_FAULT_ALLOC=N (broker/fault.h:
 * its N-th heap allocation fails) and a victim workload runs against it
 * (connect, PUB_OPEN, publish, a second client subscribes, acquires,
 * registers an eventfd, waits for the next version). Whichever allocation
 * fails: a failed start exits 1 with a message and leaves nothing in
 * /dev/shm; a failed request is answered with an error that says why (or
 * the connection is closed), never with silence or a crash. Afterwards the
 * same broker serves a normal client (publish + acquire, verified), and
 * stops cleanly leaving no segment. Ends when an N is past every
 * allocation the scenario makes (no injection logged).
 *
 * The injection is in the test broker only (tests/wsyncd-fault): the real
 * wsyncd started with WSYNC_FAULT_ALLOC=1 runs normally and logs no
 * injection.
 */
#include "tests/lib/faults.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#define MAX_N 300

static struct broker B;

/* The victim: returns 0 when everything succeeded, else the first error
 * (which must come with a message and not be a timeout). */
static int victim(int n)
{
	wsync_client *pc = NULL, *sc = NULL;
	wsync_pub *p = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	uint64_t ver = 0;
	int rc;
	char model[32];

	snprintf(model, sizeof(model), "victim.m%d", n);
#define STEP(expr) do { rc = (expr); if (rc) { \
	TEST_ASSERT_MSG(rc != -ETIMEDOUT, "N=%d: %s timed out: the broker went silent", n, #expr); \
	TEST_ASSERT_MSG(wsync_errmsg()[0] != 0, "N=%d: %s failed (%s) without a message", n, \
	                #expr, wsync_strerror(rc)); \
	harness_log("N=%d: %s: %s: %s", n, #expr, wsync_strerror(rc), wsync_errmsg()); \
	goto out; } } while (0)
	STEP(harness_connect(&B, "victim-trainer", &pc));
	STEP(harness_pub_open_2t(pc, model, 0, &p));
	STEP(harness_publish(p, 1, HARNESS_S, &ver));
	STEP(harness_connect(&B, "victim-collector", &sc));
	STEP(wsync_sub_open(sc, model, &s));
	STEP(wsync_sub_acquire(s, &v));
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	rc = wsync_sub_fd(s);
	if (rc < 0)
		STEP(rc);
	STEP(harness_publish(p, 2, HARNESS_S, &ver));
	STEP(wsync_sub_wait(s, ver - 1, 5 * HARNESS_S, &v));
	TEST_ASSERT(harness_verify_view(&v) == 0 && v.step == 2);
	wsync_sub_release(s, &v);
	rc = 0;
#undef STEP
out:
	wsync_sub_close(s);
	wsync_pub_close(p);
	wsync_close(sc);
	wsync_close(pc);
	return rc;
}

int main(void)
{
	char val[16], versions[256];
	int n, start_failures = 0, request_failures = 0;

	/* the production broker ignores the variable */
	setenv("WSYNC_FAULT_ALLOC", "1", 1);
	TEST_ASSERT_MSG(harness_broker_start(&B, NULL) == 0,
	                "wsyncd obeyed WSYNC_FAULT_ALLOC: fault injection is compiled in");
	unsetenv("WSYNC_FAULT_ALLOC");
	TEST_ASSERT(!faults_log_contains(&B, "fault injection"));
	faults_normal_client(&B, "the real wsyncd with WSYNC_FAULT_ALLOC=1");
	harness_broker_finish(&B);

	if (harness_use_fault_wsyncd())
		return HARNESS_SKIP;

	setenv("WSYNC_REPLY_TIMEOUT_MS", "10000", 1);
	/* One instance, started again for each N (same name and directory). */
	TEST_ASSERT(harness_broker_prepare(&B, NULL) == 0);
	for (n = 1; n <= MAX_N; n++) {
		char mark[48];

		snprintf(val, sizeof(val), "%d", n);
		snprintf(mark, sizeof(mark), "(WSYNC_FAULT_ALLOC=%d)", n);
		/* Each round leaves the version floors of its new names, which
		 * the next start reads, one allocation each: without a fresh
		 * versions file the start's allocations would grow with N. */
		snprintf(versions, sizeof(versions), "%s/wsync/%s.versions", B.dir, B.name);
		unlink(versions);
		setenv("WSYNC_FAULT_ALLOC", val, 1);
		if (harness_broker_restart(&B) != 0) {
			unsetenv("WSYNC_FAULT_ALLOC");
			TEST_ASSERT_MSG(faults_log_contains(&B, mark),
			                "N=%d: the broker did not start, and not because of "
			                "the injected failure", n);
			TEST_ASSERT_MSG(WIFEXITED(B.last_status) && WEXITSTATUS(B.last_status) == 1,
			                "N=%d: a failed start ended with %s, not exit 1", n,
			                harness_status_str(B.last_status));
			TEST_ASSERT_MSG(harness_shm_leftovers(&B, 1) == 0,
			                "N=%d: a failed start left segments", n);
			start_failures++;
			continue;
		}
		unsetenv("WSYNC_FAULT_ALLOC");
		int rc = victim(n);
		int injected = faults_log_contains(&B, mark);
		faults_broker_alive(&B, "an injected allocation failure");
		if (injected) {
			faults_normal_client(&B, "an injected allocation failure");
			if (rc)
				request_failures++;
		}
		harness_broker_finish(&B);
		harness_log("N=%d: %s", n, !injected ? "past the last allocation" :
		            rc ? "a request failed cleanly" : "absorbed");
		if (!injected) {
			TEST_ASSERT_MSG(rc == 0, "N=%d: no fault injected, yet the victim failed: %s",
			                n, wsync_strerror(rc));
			break;
		}
	}
	TEST_ASSERT_MSG(n <= MAX_N, "more than %d allocations: raise MAX_N", MAX_N);
	TEST_ASSERT(start_failures > 0);
	printf("fault_alloc: %d allocations covered: %d failed the start, %d failed a request, "
	       "%d were absorbed\n", n - 1, start_failures, request_failures,
	       n - 1 - start_failures - request_failures);
	return 0;
}
