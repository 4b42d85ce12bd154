/*
 * name_collisions — tensor names chosen to collide cost no more than plain
 * ones, and a publisher cannot make the broker do that work for free.
 *
 * 1. 65,536 names built to fall into one cluster of the name index under
 *    the old fixed hash seed (xxh64 seed 0, low 17 bits below 4096: every
 *    insert probed the whole cluster, 8.7 s for one PUB_OPEN) against 65,536
 *    plain names: wsync_pub_open of the first takes at most 10 times as
 *    long as of the second, measured twice each in the same run (the
 *    faster of the two counts), never against a clock.
 * 2. A raw session sends PUB_OPENs whose layout the broker refuses (two
 *    tensors with one name): each is answered with an ERROR, and the 16th
 *    refusal ends the session like any 16 invalid messages.
 */
#include "tests/lib/harness.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xxhash.h>

#include "shm/proto.h"
#include "shm/segment.h"
#include "shm/tensor_layout.h"

#define N        65536
#define OLD_MASK 0x1ffffu               /* the old index: 2n slots */

static struct broker B;

static wsync_tensor_desc *names_plain(void)
{
	wsync_tensor_desc *d = calloc(N, sizeof(*d));
	uint64_t one = 1;
	TEST_ASSERT(d);
	for (uint32_t i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof name, "layer%u.w", i);
		harness_desc(&d[i], name, WSYNC_F32, 1, &one);
	}
	return d;
}

static wsync_tensor_desc *names_colliding(void)
{
	wsync_tensor_desc *d = calloc(N, sizeof(*d));
	uint64_t one = 1, k = 0;
	TEST_ASSERT(d);
	for (uint32_t i = 0; i < N; k++) {
		char name[32];
		int len = snprintf(name, sizeof name, "c%llx", (unsigned long long)k);
		if ((XXH64(name, (size_t)len, 0) & OLD_MASK) >= 4096)
			continue;
		harness_desc(&d[i++], name, WSYNC_F32, 1, &one);
	}
	harness_log("%d colliding names out of %llu candidates", N, (unsigned long long)k);
	return d;
}

static int64_t time_pub_open(wsync_client *c, const char *model, wsync_tensor_desc *d)
{
	wsync_pub *p;
	int64_t t0 = harness_mono_ns();
	TEST_OK(wsync_pub_open(c, model, d, N, NULL, &p));
	int64_t dt = harness_mono_ns() - t0;
	wsync_pub_close(p);
	return dt;
}

static void collisions_cost_no_more(void)
{
	wsync_tensor_desc *plain = names_plain(), *coll = names_colliding();
	wsync_client *c;
	int64_t tp = INT64_MAX, tc = INT64_MAX;
	TEST_OK(harness_connect(&B, "collide", &c));
	for (int round = 0; round < 2; round++) {
		char a[32], b[32];
		snprintf(a, sizeof a, "plain%d", round);
		snprintf(b, sizeof b, "collide%d", round);
		int64_t x = time_pub_open(c, a, plain);
		int64_t y = time_pub_open(c, b, coll);
		tp = x < tp ? x : tp;
		tc = y < tc ? y : tc;
	}
	harness_log("PUB_OPEN of %d tensors: plain names %.1f ms, colliding names %.1f ms",
	            N, tp / 1e6, tc / 1e6);
	TEST_ASSERT_MSG(tc <= 10 * tp, "colliding names took %.1f ms, plain ones %.1f ms",
	                tc / 1e6, tp / 1e6);
	wsync_close(c);
	free(plain);
	free(coll);
}

/* The next datagram: its type, 0 at end of connection, -1 on timeout. Fds
 * that come with it are closed. */
static int next_reply(int fd, union wsync_msg_any *m)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	if (poll(&p, 1, HARNESS_WAIT_MS) <= 0)
		return -1;
	union {
		char buf[CMSG_SPACE(sizeof(int) * WSYNC_MSG_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { m, sizeof *m };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
	                     .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf };
	ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	if (n <= 0)
		return 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		int *in = (int *)CMSG_DATA(cm);
		for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
			close(in[i]);
	}
	return m->hdr.type;
}

static void refusals_count(void)
{
	union wsync_msg_any m;
	wsync_tensor_desc d[2];
	int fd = harness_raw_connect(&B);
	TEST_ASSERT(fd >= 0);
	memset(&m, 0, sizeof m);
	wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, 1);
	m.hello.layout_version = WSYNC_LAYOUT_VERSION;
	m.hello.pid = (uint32_t)getpid();
	snprintf(m.hello.name, sizeof m.hello.name, "refused-layouts");
	TEST_OK(harness_raw_send(fd, &m, sizeof m.hello, NULL, 0));
	TEST_ASSERT(next_reply(fd, &m) == WSYNC_MSG_HELLO_OK);

	harness_model_2t(d);
	snprintf(d[1].name, sizeof d[1].name, "%s", d[0].name);   /* one name twice */
	int lfd = wsync_memfd_create("dup-layout", sizeof d);
	TEST_ASSERT(lfd >= 0);
	TEST_ASSERT(pwrite(lfd, d, sizeof d, 0) == (ssize_t)sizeof d);
	int errors = 0, type;
	for (uint32_t i = 0; i < 17; i++) {
		memset(&m, 0, sizeof m);
		wsync_msg_init(&m.hdr, WSYNC_MSG_PUB_OPEN, 2 + i);
		snprintf(m.pub_open.model, sizeof m.pub_open.model, "dup");
		m.pub_open.n_tensors = 2;
		m.pub_open.bytes = 4 * WSYNC_PAGE;
		harness_raw_send(fd, &m, sizeof m.pub_open, &lfd, 1);
	}
	while ((type = next_reply(fd, &m)) == WSYNC_MSG_ERROR)
		errors++;
	TEST_ASSERT_MSG(type == 0, "the session is still open after %d refused PUB_OPENs "
	                "(then got %d)", errors, type);
	TEST_ASSERT_MSG(errors == 16, "%d ERRORs before the end, expected 16", errors);
	close(lfd);
	close(fd);
}

int main(void)
{
	if (harness_broker_start(&B, NULL))
		return 1;
	collisions_cost_no_more();
	refusals_count();
	harness_broker_finish(&B);
	return 0;
}
