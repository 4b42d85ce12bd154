/*
 * fault_shm — shared memory runs out, or cannot be created or mapped.
 *
 *  1. --shm-limit: a model larger than what is left is refused with -ENOSPC
 *     and a message naming the limit; a model that fits still opens.
 *  2. WSYNC_FAULT_SEG=N / WSYNC_FAULT_MAP=N (broker/fault.h): for every N
 *     up to the last segment creation / mapping the scenario makes, the
 *     failing request gets an error with a message (-ENOSPC, -ENOMEM) or a
 *     failed start exits 1, nothing is left half-built: the broker serves a
 *     normal client and stops leaving no segment.
 *  3. A really full /dev/shm: in a private mount namespace (unshare -m) a
 *     2 MiB tmpfs is mounted over /dev/shm and the broker's --shm-limit is
 *     far above it. A model that does not fit in the tmpfs is refused at
 *     wsync_pub_open with -ENOSPC (fallocate), never a SIGBUS later, and a
 *     small one still works. Skipped where mount namespaces are not allowed.
 *
 * Nothing is left in /tmp: the broker of part 3 runs in a forked child,
 * which removes its directory itself.
 */
#include "tests/lib/faults.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

static struct broker B;

/* A model of one f32 tensor of n floats. */
static int open_big(wsync_client *c, const char *model, uint64_t n, wsync_pub **p)
{
	wsync_tensor_desc d;

	harness_desc(&d, "w", WSYNC_F32, 1, &n);
	return wsync_pub_open(c, model, &d, 1, NULL, p);
}

static void shm_limit(void)
{
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	uint64_t v;

	TEST_ASSERT(harness_broker_start(&B, "--shm-limit", "1M", NULL) == 0);
	TEST_OK(harness_connect(&B, "big-trainer", &c));
	/* 4 slots of 512 KiB: 2 MiB > 1 MiB */
	TEST_RC(open_big(c, "big.model", 128 * 1024, &p), -ENOSPC);
	TEST_CONTAINS(wsync_errmsg(), "limit");
	TEST_ASSERT(p == NULL);
	/* 4 slots of 64 KiB fit */
	TEST_OK(open_big(c, "small.model", 16 * 1024, &p));
	TEST_OK(harness_publish(p, 3, HARNESS_S, &v));
	wsync_pub_close(p);
	wsync_close(c);
	faults_normal_client(&B, "a model over --shm-limit");
	harness_broker_finish(&B);
}

/* Every N of one fault kind, on one instance started again each time. */
static void each_fault(const char *var)
{
	int n, failed = 0;

	TEST_ASSERT(harness_broker_prepare(&B, NULL) == 0);
	for (n = 1; n <= 64; n++) {
		char val[16], mark[64];
		wsync_client *c = NULL, *sc = NULL;
		wsync_pub *p = NULL;
		wsync_sub *s = NULL;
		wsync_view v;
		uint64_t ver;
		int rc;

		snprintf(val, sizeof(val), "%d", n);
		snprintf(mark, sizeof(mark), "(%s=%d)", var, n);
		setenv(var, val, 1);
		if (harness_broker_restart(&B) != 0) {
			unsetenv(var);
			TEST_ASSERT_MSG(faults_log_contains(&B, mark) && WIFEXITED(B.last_status) &&
			                WEXITSTATUS(B.last_status) == 1,
			                "%s: the broker failed to start (%s) without the injection",
			                mark, harness_status_str(B.last_status));
			TEST_ASSERT_MSG(harness_shm_leftovers(&B, 1) == 0, "%s: a failed start "
			                "left segments", mark);
			failed++;
			continue;
		}
		unsetenv(var);
		rc = harness_connect(&B, "seg-trainer", &c);
		if (!rc)
			rc = harness_pub_open_2t(c, "seg.model", 0, &p);
		if (!rc)
			rc = harness_publish(p, 5, HARNESS_S, &ver);
		if (!rc)
			rc = harness_connect(&B, "seg-collector", &sc);
		if (!rc)
			rc = wsync_sub_open(sc, "seg.model", &s);
		if (!rc && (rc = wsync_sub_acquire(s, &v)) == 0) {
			TEST_ASSERT(harness_verify_view(&v) == 0);
			wsync_sub_release(s, &v);
		}
		if (rc) {
			TEST_ASSERT_MSG(rc != -ETIMEDOUT && wsync_errmsg()[0], "%s: failed with %s "
			                "and message \"%s\"", mark, wsync_strerror(rc), wsync_errmsg());
			harness_log("%s: %s: %s", mark, wsync_strerror(rc), wsync_errmsg());
			failed++;
		}
		wsync_sub_close(s);
		wsync_pub_close(p);
		wsync_close(sc);
		wsync_close(c);
		faults_broker_alive(&B, mark);
		int injected = faults_log_contains(&B, mark);
		if (injected)
			faults_normal_client(&B, mark);
		harness_broker_finish(&B);
		if (!injected) {
			TEST_ASSERT_MSG(rc == 0, "%s: not injected, yet %s", mark, wsync_strerror(rc));
			break;
		}
	}
	TEST_ASSERT(n <= 64);
	TEST_ASSERT(failed > 0);
	printf("fault_shm: %s: %d points covered, %d failed a start or a request\n", var,
	       n - 1, failed);
}

static int full_tmpfs(void *arg)
{
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	uint64_t v;

	(void)arg;
	TEST_ASSERT(harness_broker_start(&B, "--shm-limit", "1G", NULL) == 0);
	TEST_OK(harness_connect(&B, "full-trainer", &c));
	/* 4 slots of 1 MiB do not fit in 2 MiB of tmpfs */
	TEST_RC(open_big(c, "full.model", 256 * 1024, &p), -ENOSPC);
	harness_log("refused: %s", wsync_errmsg());
	TEST_ASSERT(wsync_errmsg()[0] != 0);
	TEST_OK(open_big(c, "fits.model", 16 * 1024, &p));
	TEST_OK(harness_publish(p, 9, HARNESS_S, &v));
	wsync_pub_close(p);
	wsync_close(c);
	faults_normal_client(&B, "a full /dev/shm");
	harness_broker_finish(&B);
	return 0;
}

int main(void)
{
	if (harness_use_fault_wsyncd())
		return HARNESS_SKIP;
	shm_limit();
	each_fault("WSYNC_FAULT_SEG");
	each_fault("WSYNC_FAULT_MAP");

	/* The namespace part runs in a child, so this process keeps the real
	 * /dev/shm (and its cleanup sees the real one). */
	pid_t pid = fork();
	TEST_ASSERT(pid >= 0);
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) != 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
		    mount("wsync-full", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
		          "size=2m,mode=1777") != 0) {
			printf("no private tmpfs on /dev/shm here (%s): full-tmpfs part skipped\n",
			       strerror(errno));
			_exit(HARNESS_SKIP);
		}
		int rc = full_tmpfs(NULL);

		/* its broker's directory: the cleanup at exit is the parent's */
		harness_broker_forget(&B);
		_exit(rc);
	}
	int st = harness_wait_status(pid, 60000);
	TEST_ASSERT_MSG(st != -1 && WIFEXITED(st) &&
	                (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == HARNESS_SKIP),
	                "the full-tmpfs part ended with %s", harness_status_str(st));
	if (WEXITSTATUS(st) == HARNESS_SKIP)
		printf("fault_shm: passed without the full-tmpfs part (needs unshare -m)\n");
	return 0;
}
