/*
 * budget_work — a huge layout is cheap to ask and expensive to serve, so
 * another uid's layouts are bounded and its opens and closes of models get
 * a share of the broker's time (DESIGN invariant 10). Needs root (skipped
 * otherwise): the burst comes from another uid admitted through --group.
 *
 *  1. The other uid's PUB_OPEN of 65,536 tensors is refused at once with
 *     -E2BIG naming the limit (16,384 tensors and parts per layout).
 *  2. It opens a model of 16,384 tensors and closes it (the model goes:
 *     no version) as fast as it can for about 2 s; past its share of the
 *     broker's time its PUB_OPENs get -EBUSY saying when to try again,
 *     while an honest trainer's commit round trip stays near its idle
 *     figure.
 *  3. It goes; the broker's fds and memory come back.
 */
#include "tests/lib/harness.h"
#include "tests/lib/hostile.h"
#include "tests/lib/raw.h"

#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/segment.h"
#include "shm/tensor_layout.h"

#define BIG   16384                      /* the broker's UIDS_MAX_LAYOUT */
#define HUGE  65536

static struct broker G;
static uid_t other_uid;
static gid_t other_gid;
static struct chan up, down;

/* A memfd holding the canonical layout of n small tensors, and its figures
 * for a PUB_OPEN. */
static int layout_of(uint32_t n, union wsync_msg_any *m)
{
	wsync_tensor_desc *d = calloc(n, sizeof(*d)), *canon = calloc(n, sizeof(*canon));
	uint64_t shape[1] = { 4 }, bytes = 0;
	char why[256] = "";
	int fd;

	TEST_ASSERT(d && canon);
	for (uint32_t i = 0; i < n; i++) {
		char name[32];

		snprintf(name, sizeof name, "t%05u", i);
		harness_desc(&d[i], name, WSYNC_F32, 1, shape);
	}
	TEST_ASSERT_MSG(wsync_layout_compute(d, n, canon, &bytes, why, sizeof why) == 0, "%s", why);
	fd = wsync_memfd_create("big-layout", n * sizeof(*canon));
	TEST_ASSERT(fd >= 0);
	TEST_ASSERT(pwrite(fd, canon, n * sizeof(*canon), 0) == (ssize_t)(n * sizeof(*canon)));
	m->pub_open.n_tensors = n;
	m->pub_open.slots = 2;
	m->pub_open.bytes = bytes;
	m->pub_open.layout_hash = wsync_layout_hash(canon, n);
	free(d);
	free(canon);
	return fd;
}

/* PUB_OPEN of model with the layout in fd (figures in tmpl): the answer. */
static void pub_open(struct raw *r, const char *model, const union wsync_msg_any *tmpl, int fd,
                     union wsync_msg_any *m)
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

static bool told_to_stop(void)
{
	struct pollfd pfd = { down.rd, POLLIN, 0 };

	return poll(&pfd, 1, 0) > 0;
}

static int other_user(void *arg)
{
	union wsync_msg_any big, huge, m;
	int big_fd, huge_fd, opened = 0, busy = 0;
	struct raw r;

	(void)arg;
	TEST_ASSERT(setgroups(0, NULL) == 0);
	TEST_ASSERT(setgid(other_gid) == 0);
	TEST_ASSERT(setuid(other_uid) == 0);
	memset(&big, 0, sizeof big);
	memset(&huge, 0, sizeof huge);
	big_fd = layout_of(BIG, &big);
	huge_fd = layout_of(HUGE, &huge);
	raw_hello(&r, &G, "layouts");

	/* 1. */
	pub_open(&r, "work.huge", &huge, huge_fd, &m);
	TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_ERROR && m.error.err == -E2BIG,
	                "a layout of %d tensors of another uid answered %s %s", HUGE,
	                wsync_msg_name(m.hdr.type), m.hdr.type == WSYNC_MSG_ERROR ? m.error.msg : "");
	harness_log("refused: %s", m.error.msg);
	TEST_CONTAINS(m.error.msg, "16384");
	close(huge_fd);

	/* 2. */
	chan_send(&up, 1);
	while (!told_to_stop()) {
		pub_open(&r, "work.big", &big, big_fd, &m);
		if (m.hdr.type == WSYNC_MSG_ERROR) {
			TEST_ASSERT_MSG(m.error.err == -EBUSY, "PUB_OPEN: %d %s", m.error.err,
			                m.error.msg);
			if (!busy++)
				harness_log("refused: %s", m.error.msg);
			TEST_CONTAINS(m.error.msg, "try again in");
			continue;
		}
		TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_PUB_OPEN_OK, "PUB_OPEN answered %s",
		                wsync_msg_name(m.hdr.type));
		opened++;
		{
			uint32_t id = m.pub_open_ok.model_id;

			raw_init(&r, &m, WSYNC_MSG_CLOSE);
			m.close.m.model_id = id;
			m.close.what = WSYNC_CLOSE_PUB;
			raw_request(r.fd, &m, sizeof m.close, NULL, 0, WSYNC_MSG_CLOSE_OK, NULL, NULL);
		}
	}
	harness_log("uid %u: %d opens of %d tensors, %d refused as over its share",
	            (unsigned)other_uid, opened, BIG, busy);
	chan_send(&up, (uint64_t)busy);
	raw_close(&r);
	close(big_fd);
	return 0;
}

int main(void)
{
	struct hostile_base base;
	wsync_client *c;
	wsync_pub *honest;
	pid_t kid;
	int skip;

	skip = harness_other_user("open huge layouts as another uid", &other_uid, &other_gid);
	if (skip)
		return skip;
	if (harness_broker_start(&G, HARNESS_OTHER_USERS, NULL))
		return 1;
	TEST_OK(harness_connect(&G, "honest-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, "work.honest", 0, &honest));
	hostile_base_take(&G, honest, &base);

	chan_open(&up);
	chan_open(&down);
	kid = harness_fork(other_user, NULL);
	TEST_EQ_U64(chan_recv(&up, kid), 1);
	harness_sleep_ms(300);
	hostile_check_rtt(&G, honest, &base, "while another uid opens and closes huge layouts");
	harness_sleep_ms(500);
	hostile_check_rtt(&G, honest, &base, "while another uid opens and closes huge layouts");
	chan_send(&down, 1);
	TEST_GT_U64(chan_recv(&up, kid), 0);
	harness_expect_exit0(kid, "the other uid");
	harness_sleep_ms(1200);           /* the tick gives the freed heap back */
	hostile_check_settled(&G, &base, 2 * 1024, "the other uid went");
	hostile_check_rtt(&G, honest, &base, "after the other uid went");
	wsync_pub_close(honest);
	wsync_close(c);
	harness_broker_finish(&G);
	return 0;
}
