/*
 * budget_pace — a uid past its share of the broker's time for opening and
 * closing models is read at the pace its bucket refills, not refused as
 * fast as it asks (DESIGN invariant 10, docs/RELIABILITY.md "Budgets per
 * uid"). Needs root (skipped otherwise): the requests come from other
 * uids admitted through --group.
 *
 *  1. Two sessions of uid nobody empty its bucket (opens of a 16,384-tensor
 *     layout, until a PUB_OPEN is refused -EBUSY), then each sends 32
 *     DELETEs without reading: every one is answered, in order, nothing
 *     lost, but no faster than the bucket refills (the broker counts the
 *     sessions it paused in its control segment).
 *  2. Another uid sends as many beside: never paused.
 *  3. A session of nobody paused with a request unread is SIGKILLed: its
 *     sessions, sockets and fds go at once, while the bucket is still empty
 *     (another session of nobody is refused -EBUSY after they went), and
 *     that session, paused by its refusal, is answered after the refill.
 *  4. The broker stops cleanly, at once, with a session paused.
 */
#include "tests/lib/faults.h"
#include "tests/lib/harness.h"
#include "tests/lib/hostile.h"
#include "tests/lib/raw.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG      16384                   /* the broker's UIDS_MAX_LAYOUT */
#define PER      32                      /* requests each session sends unread */
/* The broker's UIDS_WORK_SHARE and UIDS_WORK_MIN_NS: each paced request
 * costs its uid at least 50 us, refilled at 1/20 of real time. */
#define SHARE    20
#define MIN_NS   (50 * (HARNESS_MS / 1000))

static struct broker G;
static uid_t other_uid;
static gid_t other_gid;
static struct chan up, down;

/* Opens and closes a model of BIG tensors of elems f32 on a, each time
 * trying a small PUB_OPEN on b too, until b's is refused: the uid's bucket
 * is empty then, and b is paused. */
static void empty_bucket(struct raw *a, struct raw *b, uint64_t elems)
{
	union wsync_msg_any big, small, m;
	int big_fd = hostile_layout(BIG, elems, &big), small_fd = hostile_layout(2, 4, &small);

	for (int i = 0;; i++) {
		uint32_t id;

		TEST_ASSERT_MSG(i < 1000, "%d opens of %d tensors and the bucket is not empty", i,
		                BIG);
		hostile_pub_open(a, "pace.big", &big, big_fd, &m);
		if (m.hdr.type == WSYNC_MSG_PUB_OPEN_OK) {
			id = m.pub_open_ok.model_id;
			raw_init(a, &m, WSYNC_MSG_CLOSE);
			m.close.m.model_id = id;
			m.close.what = WSYNC_CLOSE_PUB;
			raw_request(a->fd, &m, sizeof m.close, NULL, 0, WSYNC_MSG_CLOSE_OK, NULL, NULL);
		}
		hostile_pub_open(b, "pace.small", &small, small_fd, &m);
		if (m.hdr.type == WSYNC_MSG_ERROR) {
			TEST_ASSERT_MSG(m.error.err == -EBUSY, "PUB_OPEN: %d %s", m.error.err,
			                m.error.msg);
			TEST_CONTAINS(m.error.msg, "try again in");
			harness_log("after %d opens: %s", i + 1, m.error.msg);
			break;
		}
		TEST_ASSERT(m.hdr.type == WSYNC_MSG_PUB_OPEN_OK);
		id = m.pub_open_ok.model_id;
		raw_init(b, &m, WSYNC_MSG_CLOSE);
		m.close.m.model_id = id;
		m.close.what = WSYNC_CLOSE_PUB;
		raw_request(b->fd, &m, sizeof m.close, NULL, 0, WSYNC_MSG_CLOSE_OK, NULL, NULL);
	}
	close(big_fd);
	close(small_fd);
}

/* Sends PER DELETEs of names nobody has on r, unread: the first seq. */
static uint32_t post_deletes(struct raw *r, const char *tag)
{
	union wsync_msg_any m;
	uint32_t first = 0;

	for (int i = 0; i < PER; i++) {
		uint32_t seq = raw_init(r, &m, WSYNC_MSG_DELETE);

		if (!i)
			first = seq;
		snprintf(m.delete_.model, sizeof m.delete_.model, "pace.none.%s.%d", tag, i);
		TEST_OK(raw_post(r, &m, NULL, 0));
	}
	return first;
}

/* Reads the answers to n requests from seq on, which must come in order
 * (each refusing a name nobody has), within 20 s in all. */
static void read_answers(struct raw *r, uint32_t seq, int n)
{
	for (int i = 0; i < n; i++) {
		union wsync_msg_any m;

		TEST_ASSERT_MSG(raw_recv(r->fd, &m, NULL, NULL, 20 * 1000) > 0,
		                "request %d of %d was never answered", i + 1, n);
		TEST_ASSERT_MSG(m.hdr.seq == seq + (uint32_t)i, "answer %d is to seq %u, not %u",
		                i + 1, m.hdr.seq, seq + (uint32_t)i);
		TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_ERROR && m.error.err == -ENOENT,
		                "DELETE of a name nobody has answered %s", wsync_msg_name(m.hdr.type));
	}
}

/* 1: two sessions of the paced uid; sends up the time their answers took. */
static int two_sessions(void *arg)
{
	struct raw a, b;
	uint32_t sa, sb;
	int64_t t0;

	(void)arg;
	hostile_become(other_uid, other_gid);
	raw_hello(&a, &G, "paced-a");
	raw_hello(&b, &G, "paced-b");
	empty_bucket(&a, &b, 4);
	t0 = harness_mono_ns();
	sa = post_deletes(&a, "a");
	sb = post_deletes(&b, "b");
	read_answers(&a, sa, PER);
	read_answers(&b, sb, PER);
	chan_send(&up, (uint64_t)(harness_mono_ns() - t0));
	raw_close(&a);
	raw_close(&b);
	return 0;
}

/* 2: a session of another uid beside. */
static int another_uid(void *arg)
{
	struct raw a;
	uint32_t seq;
	int64_t t0;

	(void)arg;
	hostile_become(other_uid - 1, other_gid);
	raw_hello(&a, &G, "other-uid");
	t0 = harness_mono_ns();
	seq = post_deletes(&a, "x");
	read_answers(&a, seq, PER);
	seq = post_deletes(&a, "y");
	read_answers(&a, seq, PER);
	chan_send(&up, (uint64_t)(harness_mono_ns() - t0));
	raw_close(&a);
	return 0;
}

/* 3: empties the bucket with bigger slabs (a longer refill), leaves a
 * request unread on its paused session, and waits to be killed. */
static int killed(void *arg)
{
	union wsync_msg_any m;
	struct raw a, b;

	(void)arg;
	hostile_become(other_uid, other_gid);
	raw_hello(&a, &G, "killed-a");
	raw_hello(&b, &G, "killed-b");
	empty_bucket(&a, &b, 1024);
	raw_init(&b, &m, WSYNC_MSG_DELETE);
	snprintf(m.delete_.model, sizeof m.delete_.model, "pace.none.killed");
	TEST_OK(raw_post(&b, &m, NULL, 0));
	chan_send(&up, 1);
	pause();
	return 0;
}

/* 4: a session paused with a request unread, left so. */
static int left_paused(void *arg)
{
	union wsync_msg_any m;
	struct raw a, b;

	(void)arg;
	hostile_become(other_uid, other_gid);
	raw_hello(&a, &G, "left-a");
	raw_hello(&b, &G, "left-b");
	empty_bucket(&a, &b, 1024);
	raw_init(&b, &m, WSYNC_MSG_DELETE);
	snprintf(m.delete_.model, sizeof m.delete_.model, "pace.none.left");
	TEST_OK(raw_post(&b, &m, NULL, 0));
	chan_send(&up, 1);
	pause();
	return 0;
}

/* 3: a session of the same uid that stays: its PUB_OPEN once the killed
 * one went (the error, negated, or 0), then the ms a DELETE took. */
static int prober(void *arg)
{
	union wsync_msg_any small, m;
	int small_fd;
	struct raw r;
	uint32_t seq;
	int64_t t0;

	(void)arg;
	hostile_become(other_uid, other_gid);
	small_fd = hostile_layout(2, 4, &small);
	raw_hello(&r, &G, "prober");
	chan_send(&up, 1);
	TEST_EQ_U64(chan_recv(&down, getppid()), 1);
	hostile_pub_open(&r, "pace.probe", &small, small_fd, &m);
	if (m.hdr.type == WSYNC_MSG_ERROR)
		harness_log("after the kill: %s", m.error.msg);
	chan_send(&up, m.hdr.type == WSYNC_MSG_ERROR ? (uint64_t)-m.error.err : 0);
	t0 = harness_mono_ns();
	seq = raw_init(&r, &m, WSYNC_MSG_DELETE);
	snprintf(m.delete_.model, sizeof m.delete_.model, "pace.none.probe");
	TEST_OK(raw_post(&r, &m, NULL, 0));
	read_answers(&r, seq, 1);
	chan_send(&up, (uint64_t)((harness_mono_ns() - t0) / HARNESS_MS) + 1);
	raw_close(&r);
	close(small_fd);
	return 0;
}

int main(void)
{
	uint64_t mutes0, mutes, took;
	uint32_t muted;
	int fds, sessions, st, skip;
	int64_t t0;
	pid_t kid, probe;

	skip = hostile_other_start(&G, "pace other uids", &other_uid, &other_gid, NULL, NULL,
	                           NULL);
	if (skip)
		return skip;
	chan_open(&up);
	chan_open(&down);

	/* 1. */
	hostile_ctl_mutes(&G, &mutes0, &muted);
	kid = harness_fork(two_sessions, NULL);
	took = chan_recv(&up, kid);
	harness_expect_exit0(kid, "the paced uid's two sessions");
	hostile_ctl_mutes(&G, &mutes, &muted);
	harness_log("2 x %d DELETEs of a uid past its share answered in %.1f ms, %llu pauses",
	            PER, took / 1e6, (unsigned long long)(mutes - mutes0));
	/* each costs MIN_NS at least, and the bucket was empty: the refill of
	 * half of them is a floor no broker that reads on could beat */
	TEST_ASSERT_MSG((int64_t)took >= PER * MIN_NS * SHARE, "2 x %d requests of a uid past "
	                "its share were answered in %.1f ms: it was not paced", PER, took / 1e6);
	TEST_ASSERT_MSG(mutes - mutes0 >= PER / 2, "only %llu pauses for %d requests past the "
	                "share", (unsigned long long)(mutes - mutes0), 2 * PER);

	/* 2. */
	kid = harness_fork(another_uid, NULL);
	took = chan_recv(&up, kid);
	harness_expect_exit0(kid, "another uid");
	mutes0 = mutes;
	hostile_ctl_mutes(&G, &mutes, &muted);
	harness_log("2 x %d DELETEs of another uid answered in %.1f ms, %llu pauses", PER,
	            took / 1e6, (unsigned long long)(mutes - mutes0));
	TEST_EQ_U64(mutes - mutes0, 0);
	{
		static char log[1 << 20];
		char line[64];

		harness_read_file(G.log, log, sizeof log);
		snprintf(line, sizeof line, "uid %u asks for more work", (unsigned)(other_uid - 1));
		TEST_ASSERT_MSG(!strstr(log, line), "another uid was paused");
		snprintf(line, sizeof line, "uid %u asks for more work", (unsigned)other_uid);
		TEST_ASSERT_MSG(strstr(log, line), "no line in the log about the paced uid");
	}

	/* 3. */
	probe = harness_fork(prober, NULL);
	TEST_EQ_U64(chan_recv(&up, probe), 1);
	fds = harness_broker_fd_settle(&G, 0, 500);
	sessions = faults_ctl_sessions(&G);
	kid = harness_fork(killed, NULL);
	TEST_EQ_U64(chan_recv(&up, kid), 1);
	hostile_ctl_mutes(&G, &mutes, &muted);
	TEST_ASSERT_MSG(muted >= 1, "no session paused after the bucket was emptied");
	t0 = harness_mono_ns();
	kill(kid, SIGKILL);
	st = harness_wait_status(kid, 5000);
	TEST_ASSERT(WIFSIGNALED(st));
	TEST_EQ_U64((uint64_t)harness_broker_fd_settle(&G, fds, 5000), (uint64_t)fds);
	hostile_ctl_mutes(&G, &mutes, &muted);
	harness_log("a paused session SIGKILLed: the broker back to %d fds in %.1f ms, %u paused",
	            fds, (harness_mono_ns() - t0) / 1e6, muted);
	TEST_EQ_U64(muted, 0);
	TEST_EQ_U64((uint64_t)faults_ctl_sessions(&G), (uint64_t)sessions);
	chan_send(&down, 1);
	TEST_ASSERT_MSG(chan_recv(&up, probe) == EBUSY, "the uid's bucket refilled before its "
	                "paused sessions were torn down: a hangup waited for the refill");
	took = chan_recv(&up, probe);
	harness_log("the prober, paused by its refusal, answered after %llu ms",
	            (unsigned long long)took - 1);
	harness_expect_exit0(probe, "the prober");
	hostile_ctl_mutes(&G, &mutes, &muted);
	TEST_EQ_U64(muted, 0);

	/* 4. */
	kid = harness_fork(left_paused, NULL);
	TEST_EQ_U64(chan_recv(&up, kid), 1);
	hostile_ctl_mutes(&G, &mutes, &muted);
	TEST_ASSERT_MSG(muted >= 1, "no session paused after the bucket was emptied");
	t0 = harness_mono_ns();
	hostile_other_finish(&G, NULL, NULL);
	harness_log("the broker stopped in %.1f ms with %u sessions paused",
	            (harness_mono_ns() - t0) / 1e6, muted);
	kill(kid, SIGKILL);
	st = harness_wait_status(kid, 5000);
	TEST_ASSERT(WIFSIGNALED(st));
	return 0;
}
