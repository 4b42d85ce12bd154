/*
 * readonly_view — collectors cannot change weights: a collector's view is
 * mapped from a read-only fd (mprotect to writable fails with EACCES), and
 * a write through view->base kills the collector with SIGSEGV; another
 * collector then reads the version unchanged. With WSYNC_PUB_GUARDED a
 * trainer's slab is read-only again once committed: a stray write after
 * commit faults in the trainer and the published version stays intact;
 * without it (the default) the slab stays writable.
 */
#include "tests/lib/harness.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define MODEL       "ro.policy"
#define MODEL_STRAY "ro.stray"

static struct broker B;
static struct chan to_parent;

/* Make the coming fault quiet and quick: default action, no core file. */
static void expect_to_fault(void)
{
	struct rlimit no_core = { 0, 0 };
	setrlimit(RLIMIT_CORE, &no_core);
	signal(SIGSEGV, SIG_DFL);
	signal(SIGBUS, SIG_DFL);
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGSEGV);
	sigprocmask(SIG_UNBLOCK, &s, NULL);
}

static int vandal(void *arg)
{
	(void)arg;
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	TEST_OK(harness_connect(&B, "ro-vandal", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_ASSERT(harness_verify_view(&v) == 0);

	/* the fd behind the mapping is read-only: no way to make it writable */
	size_t pagesz = (size_t)sysconf(_SC_PAGESIZE);
	void *page = (void *)((uintptr_t)v.base & ~(uintptr_t)(pagesz - 1));
	if (mprotect(page, pagesz, PROT_READ | PROT_WRITE) == 0) {
		mprotect(page, pagesz, PROT_READ);
		harness_log("mprotect(PROT_WRITE) on a view succeeded: its fd is writable");
		return 3;
	}
	if (errno != EACCES) {
		harness_log("mprotect(PROT_WRITE) on a view: %s, expected EACCES", strerror(errno));
		return 4;
	}

	const void *bias = NULL;
	TEST_OK(wsync_view_tensor(&v, "policy.bias", &bias, NULL));
	chan_send(&to_parent, 1);
	expect_to_fault();
	*(volatile uint32_t *)bias = 0xdeadbeef;    /* must fault */
	*(volatile uint64_t *)v.base = 0;
	harness_log("wrote to a view without a fault");
	return 5;
}

static int verifier(void *arg)
{
	uint64_t want = *(uint64_t *)arg;
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	TEST_OK(harness_connect(&B, "ro-verifier", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, want);
	TEST_EQ_U64(v.step, 1);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

static int stray_trainer(void *arg)
{
	(void)arg;
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	wsync_slab slab;
	wsync_tensor_desc d[2];
	wsync_model_opts o = { .flags = WSYNC_PUB_GUARDED };
	size_t n = harness_model_2t(d);
	TEST_OK(harness_connect(&B, "ro-stray-trainer", &c));
	TEST_OK(wsync_pub_open(c, MODEL_STRAY, d, n, &o, &p));
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	harness_fill(slab.base, slab.bytes, 42);
	uint64_t v = 0;
	TEST_OK(wsync_pub_commit(p, 42, &v));
	chan_send(&to_parent, v);
	expect_to_fault();
	((volatile uint64_t *)slab.base)[1] = 0;    /* after commit: must fault */
	harness_log("wrote to a committed slab without a fault");
	return 5;
}

#define MODEL_UNGUARDED "ro.unguarded"

/* Without WSYNC_PUB_GUARDED (the default; WSYNC_PUB_UNGUARDED says it
 * explicitly) the slab stays writable after commit (no fault). Unknown
 * flags, and both guard flags at once, are refused. */
static int unguarded_trainer(void *arg)
{
	(void)arg;
	wsync_tensor_desc d[2];
	wsync_model_opts o = { .flags = 1u << 7 };
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	wsync_slab slab;
	size_t n = harness_model_2t(d);
	TEST_OK(harness_connect(&B, "ro-unguarded-trainer", &c));
	TEST_RC(wsync_pub_open(c, MODEL_UNGUARDED, d, n, &o, &p), -EINVAL);
	TEST_CONTAINS(wsync_errmsg(), "opts.flags");
	o.flags = WSYNC_PUB_UNGUARDED | WSYNC_PUB_GUARDED;
	TEST_RC(wsync_pub_open(c, MODEL_UNGUARDED, d, n, &o, &p), -EINVAL);
	o.flags = WSYNC_PUB_UNGUARDED;
	TEST_OK(wsync_pub_open(c, MODEL_UNGUARDED, d, n, &o, &p));
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	harness_fill(slab.base, slab.bytes, 7);
	TEST_OK(wsync_pub_commit(p, 7, NULL));
	((volatile uint64_t *)slab.base)[1] = 0;    /* no guard: no fault */
	wsync_pub_close(p);
	wsync_close(c);
	return 0;
}

static void expect_segv(pid_t pid, const char *who)
{
	int st = harness_wait_status(pid, HARNESS_WAIT_MS);
	TEST_ASSERT_MSG(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
	                "%s ended with %s, expected SIGSEGV", who, harness_status_str(st));
}

int main(void)
{
	chan_open(&to_parent);
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);

	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	TEST_OK(harness_connect(&B, "ro-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	uint64_t v1 = 0;
	TEST_OK(harness_publish(p, 1, HARNESS_S, &v1));

	pid_t vp = harness_fork(vandal, NULL);
	chan_recv(&to_parent, vp);
	expect_segv(vp, "the collector writing to its view");

	pid_t ver = harness_fork(verifier, &v1);
	harness_expect_exit0(ver, "verifier");

	pid_t ug = harness_fork(unguarded_trainer, NULL);
	harness_expect_exit0(ug, "the unguarded trainer");

	/* the trainer's own committed slab */
	pid_t st = harness_fork(stray_trainer, NULL);
	uint64_t vs = chan_recv(&to_parent, st);
	expect_segv(st, "the trainer writing to a committed slab");
	wsync_sub *s = NULL;
	wsync_view v;
	TEST_OK(wsync_sub_open(c, MODEL_STRAY, &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, vs);
	TEST_EQ_U64(v.step, 42);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);

	/* and the first model is still intact and publishable */
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, v1);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	uint64_t v2 = 0;
	TEST_OK(harness_publish(p, 2, 5 * HARNESS_S, &v2));
	TEST_GT_U64(v2, v1);
	wsync_sub_close(s);

	wsync_pub_close(p);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
