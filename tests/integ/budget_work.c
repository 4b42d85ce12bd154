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
 *     broker's time its session is not read until its bucket refills (the
 *     broker counts the pauses), and a PUB_OPEN that still comes while the
 *     bucket is empty gets -EBUSY saying when to try again, while an
 *     honest trainer's commit round trip stays near its idle figure.
 *  3. It goes; the broker's fds and memory come back.
 */
#include "tests/lib/harness.h"
#include "tests/lib/hostile.h"
#include "tests/lib/raw.h"

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG   16384                      /* the broker's UIDS_MAX_LAYOUT */
#define HUGE  65536

static struct broker G;
static uid_t other_uid;
static gid_t other_gid;
static struct chan up, down;

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
	hostile_become(other_uid, other_gid);
	big_fd = hostile_layout(BIG, 4, &big);
	huge_fd = hostile_layout(HUGE, 4, &huge);
	raw_hello(&r, &G, "layouts");

	/* 1. */
	hostile_pub_open(&r, "work.huge", &huge, huge_fd, &m);
	TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_ERROR && m.error.err == -E2BIG,
	                "a layout of %d tensors of another uid answered %s %s", HUGE,
	                wsync_msg_name(m.hdr.type), m.hdr.type == WSYNC_MSG_ERROR ? m.error.msg : "");
	harness_log("refused: %s", m.error.msg);
	TEST_CONTAINS(m.error.msg, "16384");
	close(huge_fd);

	/* 2. */
	chan_send(&up, 1);
	while (!told_to_stop()) {
		hostile_pub_open(&r, "work.big", &big, big_fd, &m);
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
	chan_send(&up, (uint64_t)opened);
	raw_close(&r);
	close(big_fd);
	return 0;
}

int main(void)
{
	struct hostile_base base;
	wsync_client *c;
	wsync_pub *honest;
	uint64_t mutes0, mutes;
	uint32_t muted;
	pid_t kid;
	int skip;

	skip = hostile_other_start(&G, "open huge layouts as another uid", &other_uid, &other_gid,
	                           "work.honest", &c, &honest);
	if (skip)
		return skip;
	hostile_base_take(&G, honest, &base);
	hostile_ctl_mutes(&G, &mutes0, &muted);

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
	hostile_ctl_mutes(&G, &mutes, &muted);
	harness_log("the other uid's session was paused %llu times",
	            (unsigned long long)(mutes - mutes0));
	TEST_ASSERT_MSG(mutes > mutes0, "the other uid asked past its share and was never paused");
	harness_sleep_ms(1200);           /* the tick gives the freed heap back */
	hostile_check_settled(&G, &base, 2 * 1024, "the other uid went");
	hostile_check_rtt(&G, honest, &base, "after the other uid went");
	hostile_other_finish(&G, c, honest);
	return 0;
}
