/* tests/lib/hostile.c — baselines for hostile-client tests; see hostile.h. */
#include "tests/lib/hostile.h"

#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/layout.h"
#include "shm/segment.h"
#include "shm/tensor_layout.h"

/* Sanitizers keep freed memory in quarantine: the broker's resident size
 * says nothing about leaks there (LeakSanitizer does that job). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HOSTILE_RSS_MEANINGFUL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HOSTILE_RSS_MEANINGFUL 0
#endif
#endif
#ifndef HOSTILE_RSS_MEANINGFUL
#define HOSTILE_RSS_MEANINGFUL 1
#endif

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

int64_t hostile_commit_rtt(wsync_pub *p, int n, int64_t *p99)
{
	int64_t *t = calloc((size_t)n, sizeof(*t)), mid;

	TEST_ASSERT(t && n > 0);
	for (int i = 0; i < n; i++) {
		wsync_slab slab;
		int64_t t0 = harness_mono_ns();

		TEST_OK(wsync_pub_begin(p, 2 * HARNESS_S, &slab));
		TEST_OK(wsync_pub_commit(p, (uint64_t)i + 1, NULL));
		t[i] = harness_mono_ns() - t0;
	}
	qsort(t, (size_t)n, sizeof(*t), cmp_i64);
	mid = t[n / 2];
	if (p99)
		*p99 = t[(n * 99) / 100];
	free(t);
	return mid;
}

int64_t hostile_commit_p50(wsync_pub *p, int n)
{
	return hostile_commit_rtt(p, n, NULL);
}

static void alive(const struct broker *b, const char *what)
{
	int st;

	if (waitpid(b->pid, &st, WNOHANG) == b->pid)
		harness_fail(__FILE__, __LINE__, "the broker died (%s) %s",
		             harness_status_str(st), what);
}

void hostile_base_take(const struct broker *b, wsync_pub *p, struct hostile_base *base)
{
	int64_t p99;

	hostile_commit_p50(p, 50);                 /* warm */
	base->rtt_ns = hostile_commit_rtt(p, 200, &p99);
	base->fds = harness_broker_fd_settle(b, 0, 200);
	base->rss_kb = harness_broker_rss_kb(b);
	harness_log("baseline: commit round trip p50 %.1f us p99 %.1f us, broker fds %d, "
	            "rss %ld KiB", base->rtt_ns / 1e3, p99 / 1e3, base->fds, base->rss_kb);
}

void hostile_check_rtt(const struct broker *b, wsync_pub *p, const struct hostile_base *base,
                       const char *during)
{
	int64_t now = 0, now99 = 0, bound = HOSTILE_RTT_FACTOR * base->rtt_ns + HOSTILE_RTT_SLACK_NS;

	alive(b, during);
	/* A hostile session's cost lasts; a neighbour's burst of CPU on a
	 * shared 2-core machine does not: a try that is over the bound is
	 * taken again, up to three, and the best one counts. */
	for (int i = 0; i < 3; i++) {
		int64_t t99, t = hostile_commit_rtt(p, 100, &t99);

		if (i == 0 || t < now) {
			now = t;
			now99 = t99;
		}
		if (now <= bound)
			break;
		harness_log("commit round trip p50 %.1f us %s, over %.1f us: again", t / 1e3,
		            during, bound / 1e3);
	}
	harness_log("commit round trip p50 %.1f us p99 %.1f us %s (baseline %.1f us, bound "
	            "%.1f us)", now / 1e3, now99 / 1e3, during, base->rtt_ns / 1e3, bound / 1e3);
	TEST_ASSERT_MSG(now <= bound, "an honest commit round trip took %.1f us (p50, best of "
	                "3) %s, %.1f us on an idle broker: over %d x + %d us", now / 1e3, during,
	                base->rtt_ns / 1e3, HOSTILE_RTT_FACTOR,
	                (int)(HOSTILE_RTT_SLACK_NS / 1000));
}

void hostile_check_settled(const struct broker *b, const struct hostile_base *base,
                           long slack_kb, const char *after)
{
	int fds;
	long rss;

	alive(b, after);
	fds = harness_broker_fd_settle(b, base->fds, 10000);
	rss = harness_broker_rss_kb(b);
	harness_log("after %s: broker fds %d (baseline %d), rss %ld KiB (baseline %ld)", after,
	            fds, base->fds, rss, base->rss_kb);
	TEST_ASSERT_MSG(fds <= base->fds, "the broker holds %d fds after %s, %d before", fds,
	                after, base->fds);
	TEST_ASSERT_MSG(!HOSTILE_RSS_MEANINGFUL || rss <= base->rss_kb + slack_kb,
	                "the broker's memory grew from %ld to %ld KiB after %s", base->rss_kb,
	                rss, after);
}

int hostile_other_start(struct broker *b, const char *what, uid_t *uid, gid_t *gid,
                        const char *model, wsync_client **c, wsync_pub **honest)
{
	int skip = harness_other_user(what, uid, gid);

	if (skip)
		return skip;
	if (harness_broker_start(b, HARNESS_OTHER_USERS, NULL))
		return 1;
	if (model) {
		TEST_OK(harness_connect(b, "honest-trainer", c));
		TEST_OK(harness_pub_open_2t(*c, model, 0, honest));
	}
	return 0;
}

void hostile_other_finish(struct broker *b, wsync_client *c, wsync_pub *honest)
{
	if (c) {
		wsync_pub_close(honest);
		wsync_close(c);
	}
	harness_broker_finish(b);
}

void hostile_become(uid_t uid, gid_t gid)
{
	TEST_ASSERT(setgroups(0, NULL) == 0);
	TEST_ASSERT(setgid(gid) == 0);
	TEST_ASSERT(setuid(uid) == 0);
}

int hostile_layout(uint32_t n, uint64_t elems, union wsync_msg_any *tmpl)
{
	wsync_tensor_desc *d = calloc(n, sizeof(*d)), *canon = calloc(n, sizeof(*canon));
	uint64_t shape[1] = { elems }, bytes = 0;
	size_t size = (size_t)n * sizeof(*canon);
	char why[256] = "";
	int fd;

	TEST_ASSERT(d && canon);
	for (uint32_t i = 0; i < n; i++) {
		char name[32];

		snprintf(name, sizeof name, "t%05u", i);
		harness_desc(&d[i], name, WSYNC_F32, 1, shape);
	}
	TEST_ASSERT_MSG(wsync_layout_compute(d, n, canon, &bytes, why, sizeof why) == 0, "%s", why);
	fd = wsync_memfd_create("hostile-layout", size);
	TEST_ASSERT(fd >= 0);
	TEST_ASSERT(pwrite(fd, canon, size, 0) == (ssize_t)size);
	memset(tmpl, 0, sizeof(*tmpl));
	tmpl->pub_open.n_tensors = n;
	tmpl->pub_open.slots = 2;
	tmpl->pub_open.bytes = bytes;
	tmpl->pub_open.layout_hash = wsync_layout_hash(canon, n);
	free(d);
	free(canon);
	return fd;
}

void hostile_pub_open(struct raw *r, const char *model, const union wsync_msg_any *tmpl,
                      int fd, union wsync_msg_any *m)
{
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;

	raw_init(r, m, WSYNC_MSG_PUB_OPEN);
	m->pub_open.n_tensors = tmpl->pub_open.n_tensors;
	m->pub_open.slots = tmpl->pub_open.slots;
	m->pub_open.bytes = tmpl->pub_open.bytes;
	m->pub_open.layout_hash = tmpl->pub_open.layout_hash;
	snprintf(m->pub_open.model, sizeof m->pub_open.model, "%s", model);
	TEST_OK(raw_post(r, m, &fd, 1));
	TEST_ASSERT(raw_recv(r->fd, m, fds, &nfds, HARNESS_WAIT_MS) > 0);
	raw_close_fds(fds, nfds);
}

void hostile_ctl_mutes(const struct broker *b, uint64_t *mutes, uint32_t *muted)
{
	struct wsync_ctl_header h;
	char path[PATH_MAX];
	int fd;

	TEST_OK(harness_seg_path(b, "ctl", path, sizeof path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	TEST_ASSERT(fd >= 0);
	TEST_ASSERT(pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h);
	close(fd);
	*mutes = atomic_load(&h.work_mutes);
	*muted = atomic_load(&h.sessions_muted);
}
