/*
 * budget_pending — connections that have not said HELLO are budgeted per
 * uid, so one user's silent connections lock nobody else out (DESIGN
 * invariant 10). Needs root (skipped otherwise): the burst comes from
 * another uid admitted through --group.
 *
 *  1. The other uid opens 300 connections and never speaks. The broker
 *     keeps at most 32 of them (its oldest go as it opens more), and
 *     meanwhile 20 connects of the broker's uid and 20 of that same other
 *     uid say HELLO and are served; an honest trainer's commit round trip
 *     stays near its idle figure.
 *     One process of the broker's uid connects 64 clients at once, each
 *     sending its HELLO before any is answered: all 64 are answered (a
 *     HELLO waiting in its socket is not silence).
 *  2. The silent ones left are closed by the HELLO deadline (2 s, looked
 *     at every second; the test allows 5 s); the broker's fds and memory
 *     come back.
 */
#include "tests/lib/harness.h"
#include "tests/lib/hostile.h"
#include "tests/lib/raw.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SILENT 300
#define SHARE  32                        /* the broker's EVENTS_PENDING_SHARE */

static struct broker G;
static uid_t other_uid;
static gid_t other_gid;
static struct chan up, down;

static void become_other(void)
{
	hostile_become(other_uid, other_gid);
}

/* How many of fds the broker has not closed yet. */
static int still_open(const int *fds, int n)
{
	int open = 0;

	for (int i = 0; i < n; i++) {
		struct pollfd pfd = { fds[i], POLLIN | POLLRDHUP, 0 };

		if (poll(&pfd, 1, 0) == 0)
			open++;
	}
	return open;
}

/* Opens SILENT connections, says nothing; reports how many stay open,
 * then how many ms until the broker closed them all. */
static int silent_user(void *arg)
{
	static int fds[SILENT];
	int64_t t0;
	int open;

	(void)arg;
	become_other();
	for (int i = 0; i < SILENT; i++) {
		fds[i] = harness_raw_connect(&G);
		TEST_ASSERT_MSG(fds[i] >= 0, "connect %d: %d", i, fds[i]);
	}
	/* the broker closes them as it accepts the next ones: once it caught
	 * up (5 s at most on a loaded machine) no more than its share is left */
	t0 = harness_mono_ns();
	while ((open = still_open(fds, SILENT)) > SHARE && harness_mono_ns() - t0 < 5 * HARNESS_S)
		harness_sleep_ms(50);
	chan_send(&up, (uint64_t)open);
	chan_recv(&down, getppid());
	t0 = harness_mono_ns();
	while ((open = still_open(fds, SILENT)) > 0 && harness_mono_ns() - t0 < 8 * HARNESS_S)
		harness_sleep_ms(50);
	chan_send(&up, open ? UINT64_MAX : (uint64_t)((harness_mono_ns() - t0) / HARNESS_MS));
	pause();
	return 0;
}

/* An honest client of the same uid: 20 connects, each says HELLO. */
static int honest_user(void *arg)
{
	(void)arg;
	become_other();
	for (int i = 0; i < 20; i++) {
		wsync_client *c;

		TEST_OK(harness_connect(&G, "honest-other", &c));
		wsync_close(c);
	}
	return 0;
}

int main(void)
{
	struct hostile_base base;
	wsync_client *c;
	wsync_pub *honest;
	uint64_t left, ms;
	pid_t kid, friend;
	int st, skip;

	skip = hostile_other_start(&G, "open connections as another uid", &other_uid, &other_gid,
	                           "pending.honest", &c, &honest);
	if (skip)
		return skip;
	hostile_base_take(&G, honest, &base);

	/* 1. the silent burst, and honest connects beside it */
	chan_open(&up);
	chan_open(&down);
	kid = harness_fork(silent_user, NULL);
	left = chan_recv(&up, kid);
	harness_log("%d silent connections of uid %u: %llu still open", SILENT,
	            (unsigned)other_uid, (unsigned long long)left);
	TEST_ASSERT_MSG(left <= SHARE, "the broker kept %llu silent connections of one uid",
	                (unsigned long long)left);
	for (int i = 0; i < 20; i++) {
		wsync_client *x;

		TEST_OK(harness_connect(&G, "honest-own-uid", &x));
		wsync_close(x);
	}
	{
		int burst[64], fds[WSYNC_MSG_MAX_FDS], nfds;
		union wsync_msg_any m;

		for (int i = 0; i < 64; i++) {
			burst[i] = harness_raw_connect(&G);
			TEST_ASSERT(burst[i] >= 0);
			memset(&m, 0, sizeof m);
			wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, 1);
			m.hello.layout_version = WSYNC_LAYOUT_VERSION;
			snprintf(m.hello.name, sizeof m.hello.name, "burst-%d", i);
			TEST_OK(harness_raw_send(burst[i], &m, sizeof m.hello, NULL, 0));
		}
		for (int i = 0; i < 64; i++) {
			nfds = WSYNC_MSG_MAX_FDS;
			TEST_ASSERT_MSG(raw_recv(burst[i], &m, fds, &nfds, HARNESS_WAIT_MS) > 0 &&
			                m.hdr.type == WSYNC_MSG_HELLO_OK, "client %d of a burst of "
			                "64 connects got no HELLO_OK", i);
			raw_close_fds(fds, nfds);
			close(burst[i]);
		}
	}
	friend = harness_fork(honest_user, NULL);
	harness_expect_exit0(friend, "connects of the other uid beside its silent ones");
	hostile_check_rtt(&G, honest, &base, "while another uid holds its silent connections");

	/* 2. the deadline closes the rest */
	chan_send(&down, 1);
	ms = chan_recv(&up, kid);
	TEST_ASSERT_MSG(ms != UINT64_MAX, "silent connections still open after 8 s");
	harness_log("the last silent connection was closed after %llu ms", (unsigned long long)ms);
	TEST_ASSERT_MSG(ms <= 5000, "silent connections lived %llu ms", (unsigned long long)ms);
	kill(kid, SIGKILL);
	st = harness_wait_status(kid, 5000);
	TEST_ASSERT(WIFSIGNALED(st));
	hostile_check_settled(&G, &base, 4 * 1024, "the silent connections went");
	hostile_check_rtt(&G, honest, &base, "after the silent connections went");
	hostile_other_finish(&G, c, honest);
	return 0;
}
