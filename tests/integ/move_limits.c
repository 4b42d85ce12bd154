/*
 * move_limits — what a publisher of another uid can make the broker do
 * when it leaves (DESIGN invariants 10 and 11). With --group:
 *
 * 1. The move budget. Each time such a publisher leaves, the model moves
 *    to new memory, its latest slab copied (on the broker's mover thread);
 *    its first open moves it too (it follows the trainer, whose latest it
 *    must not be handed). A uid that opens, commits and leaves in a loop
 *    makes 2 + 1 + 1 moves in three rounds and gets its 4th PUB_OPEN
 *    within a second refused with -EBUSY ("moved to new memory 4 times in
 *    the last second"); a second later it may open again. The trainer (the
 *    broker's uid) is never refused.
 * 2. A move that fails (its new page cannot be created: WSYNC_FAULT_SEG on
 *    the broker with fault injection, tried at each creation until a move
 *    is the one that fails) withdraws the latest version: the departed uid
 *    may still write its memory, so collectors get -ENODATA instead of it,
 *    until the trainer publishes the next version in new memory.
 * 3. A stop that removes the weights (--no-keep) makes no move when the
 *    publisher of the other uid is let go: its memory is unlinked anyway.
 * 4. Moves take a tenth of the broker's time, in bursts of 250 ms: the
 *    other uid moves two 64 MiB models in turn (each move copies 64 MiB,
 *    about 100 ms here) until its PUB_OPEN is refused with -EBUSY ("a
 *    tenth of the broker's time"), within 30 moves; the trainer's is not.
 *    Small moves (the other parts, about 0.2 ms each) never are.
 *
 * Needs root (to become another uid) and the fault broker; skipped
 * otherwise.
 */
#include "tests/lib/harness.h"

#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MODEL "moves.limited"

static struct broker B;
static uid_t other_uid;
static gid_t other_gid;
static struct chan up, down;

static void become_other(void)
{
	TEST_ASSERT(setgroups(0, NULL) == 0);
	TEST_ASSERT(setgid(other_gid) == 0);
	TEST_ASSERT(setuid(other_uid) == 0);
}

/* One publisher of the other uid: open, commit step, leave. */
static int publish_once(uint64_t step)
{
	wsync_client *c;
	wsync_pub *p;
	int err = harness_connect(&B, "other-uid", &c);

	if (err)
		return err;
	err = harness_pub_open_2t(c, MODEL, 4, &p);
	if (!err) {
		err = harness_publish(p, step, HARNESS_S, NULL);
		wsync_pub_close(p);
	}
	wsync_close(c);
	return err;
}

static int looping_publisher(void *arg)
{
	int err;

	(void)arg;
	become_other();
	for (uint64_t i = 0; i < 3; i++) {
		/* the time share (4.) may ask for a few ms after a move */
		while ((err = publish_once(10 + i)) == -EBUSY && strstr(wsync_errmsg(), "tenth"))
			harness_sleep_ms(5);
		TEST_OK(err);
	}
	err = publish_once(14);
	TEST_ASSERT_MSG(err == -EBUSY && strstr(wsync_errmsg(), "moved to new memory 4 times "
	                "in the last second"), "4th open within a second: %d %s", err,
	                wsync_errmsg());
	chan_send(&up, 1);
	chan_recv(&down, getppid());
	harness_sleep_ms(1100);
	TEST_OK(publish_once(20));
	return 0;
}

static void move_budget(void)
{
	wsync_client *c;
	wsync_pub *p;
	pid_t pid;

	TEST_ASSERT(harness_broker_start(&B, HARNESS_OTHER_USERS, NULL) == 0);
	TEST_OK(harness_connect(&B, "trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 4, &p));
	TEST_OK(harness_publish(p, 1, HARNESS_S, NULL));
	wsync_pub_close(p);
	pid = harness_fork(looping_publisher, NULL);
	chan_recv(&up, pid);
	/* the budget is spent, but not for the trainer */
	TEST_OK(harness_pub_open_2t(c, MODEL, 4, &p));
	TEST_OK(harness_publish(p, 15, HARNESS_S, NULL));
	wsync_pub_close(p);
	chan_send(&down, 1);
	harness_expect_exit0(pid, "the publisher of another uid");
	wsync_close(c);
	harness_broker_finish(&B);
}

static int leave_once(void *arg)
{
	(void)arg;
	become_other();
	return publish_once(2) ? 3 : 0;
}

/* Runs the trainer and a leaving publisher of the other uid on a broker
 * whose n-th segment creation fails: 1 if a move was what failed. */
static int failed_move_at(int n)
{
	char val[16], log[1 << 16];
	wsync_client *c;
	wsync_pub *p;
	int st;

	snprintf(val, sizeof(val), "%d", n);
	setenv("WSYNC_FAULT_SEG", val, 1);
	st = harness_broker_restart(&B);
	unsetenv("WSYNC_FAULT_SEG");
	if (st)
		return 0;                        /* the start itself failed */
	if (harness_connect(&B, "trainer", &c))
		goto out_stop;
	if (!harness_pub_open_2t(c, MODEL, 4, &p)) {
		st = harness_publish(p, 1, HARNESS_S, NULL);
		wsync_pub_close(p);
		if (!st) {
			st = harness_wait_status(harness_fork(leave_once, NULL), 5000);
			harness_read_file(B.log, log, sizeof log);
			if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(log, "withdrawn")) {
				wsync_close(c);
				return 1;        /* the broker stays for the checks */
			}
		}
	}
	wsync_close(c);
out_stop:
	harness_broker_stop(&B);
	return 0;
}

static void failed_move(void)
{
	wsync_client *c, *cc;
	wsync_pub *p;
	wsync_sub *s;
	wsync_view v;
	uint64_t version, ver2;
	char log[1 << 16];
	int n, err;

	TEST_ASSERT(harness_broker_prepare(&B, HARNESS_OTHER_USERS, "--no-keep", NULL) == 0);
	for (n = 1; n <= 40 && !failed_move_at(n); n++)
		;
	TEST_ASSERT_MSG(n <= 40, "no segment creation up to 40 was a move's");
	harness_log("segment creation %d failed a move", n);
	TEST_OK(harness_connect(&B, "collector", &cc));
	TEST_OK(wsync_sub_open(cc, MODEL, &s));
	err = wsync_sub_acquire(s, &v);
	TEST_ASSERT_MSG(err == -ENODATA, "a view of the withdrawn latest: %d %s", err,
	                wsync_errmsg());
	err = wsync_sub_latest(s, &version, NULL, NULL);
	TEST_ASSERT_MSG(err == -ENODATA, "the withdrawn latest read: %d", err);
	TEST_ASSERT(wsync_sub_wait(s, 0, 200 * HARNESS_MS, &v) == -ETIMEDOUT);
	/* the trainer gets new memory (nothing copied) and publishes on */
	TEST_OK(harness_connect(&B, "trainer-again", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 4, &p));
	TEST_OK(harness_publish(p, 3, HARNESS_S, &ver2));
	TEST_ASSERT(ver2 >= 3);
	TEST_OK(wsync_sub_wait(s, 0, HARNESS_S, &v));
	TEST_ASSERT_MSG(v.step == 3 && v.version == ver2 && harness_verify_view(&v) == 0,
	                "v%llu step %llu", (unsigned long long)v.version,
	                (unsigned long long)v.step);
	wsync_sub_release(s, &v);
	wsync_pub_close(p);
	wsync_sub_close(s);
	wsync_close(cc);
	wsync_close(c);
	TEST_ASSERT(harness_broker_stop(&B) == 0);
	/* withdrawn, not forgotten: its owner and versions stay */
	harness_read_file(B.log, log, sizeof log);
	TEST_ASSERT_MSG(!strstr(log, "no version was ever committed"), "the model with a "
	                "withdrawn latest was removed");
}

static int stays(void *arg)
{
	wsync_client *c;
	wsync_pub *p;

	(void)arg;
	become_other();
	TEST_OK(harness_connect(&B, "other-uid", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 4, &p));
	TEST_OK(harness_publish(p, 1, HARNESS_S, NULL));
	chan_send(&up, 1);
	chan_recv(&down, getppid());
	wsync_pub_close(p);                  /* the broker is gone by now */
	wsync_close(c);
	return 0;
}

static void no_move_at_stop(void)
{
	char log[1 << 16];
	pid_t pid;

	TEST_ASSERT(harness_broker_start(&B, HARNESS_OTHER_USERS, "--no-keep", NULL) == 0);
	pid = harness_fork(stays, NULL);
	chan_recv(&up, pid);
	TEST_ASSERT(harness_broker_stop(&B) == 0);
	chan_send(&down, 1);
	harness_expect_exit0(pid, "the publisher of another uid");
	harness_read_file(B.log, log, sizeof log);
	TEST_CONTAINS(log, "stopped");
	TEST_ASSERT_MSG(!strstr(log, "new memory"), "a stop with --no-keep moved the model");
}

/* A model of one 64 MiB tensor in 2 slots, step written into every byte. */
static int big_publish(wsync_client *c, const char *model, uint64_t step)
{
	wsync_model_opts o;
	wsync_tensor_desc d;
	wsync_pub *p;
	wsync_slab s;
	int err;

	memset(&d, 0, sizeof d);
	snprintf(d.name, sizeof d.name, "w");
	d.dtype = WSYNC_U8;
	d.ndim = 1;
	d.shape[0] = 64u << 20;
	memset(&o, 0, sizeof o);
	o.slots = 2;
	err = wsync_pub_open(c, model, &d, 1, &o, &p);
	if (err)
		return err;
	err = wsync_pub_begin(p, HARNESS_S, &s);
	if (!err) {
		memset(s.base, (int)step, s.bytes);
		err = wsync_pub_commit(p, step, NULL);
	}
	wsync_pub_close(p);
	return err;
}

static int long_mover(void *arg)
{
	wsync_client *c;
	int err;

	(void)arg;
	become_other();
	TEST_OK(harness_connect(&B, "other-uid", &c));
	for (int i = 0;; i++) {
		/* each leaves: a long move */
		err = big_publish(c, i % 2 ? "moves.big1" : "moves.big2", (uint64_t)i + 1);
		if (err == -EBUSY && strstr(wsync_errmsg(), "4 times")) {
			harness_sleep_ms(100);       /* the per-model budget: not this */
			continue;
		}
		if (err == -EBUSY)
			break;
		TEST_OK(err);
		TEST_ASSERT_MSG(i < 30, "30 moves of 64 MiB and no open refused");
	}
	TEST_ASSERT_MSG(strstr(wsync_errmsg(), "a tenth of the broker's time"),
	                "refused for another reason: %s", wsync_errmsg());
	harness_log("%s", wsync_errmsg());
	chan_send(&up, 1);
	chan_recv(&down, getppid());
	wsync_close(c);
	return 0;
}

static void move_time_share(void)
{
	char log[1 << 16];
	wsync_client *c;
	pid_t pid;

	TEST_ASSERT(harness_broker_start(&B, HARNESS_OTHER_USERS, "--no-keep", NULL) == 0);
	pid = harness_fork(long_mover, NULL);
	chan_recv(&up, pid);
	TEST_OK(harness_connect(&B, "trainer", &c));
	TEST_OK(big_publish(c, "moves.big1", 100));        /* not refused */
	chan_send(&down, 1);
	harness_expect_exit0(pid, "the publisher of another uid");
	wsync_close(c);
	harness_read_file(B.log, log, sizeof log);
	for (const char *at = log; (at = strstr(at, "new memory")); at++)
		harness_log("%.110s", at);
	harness_broker_finish(&B);
}

int main(void)
{
	int skip = harness_other_user("publish as another uid", &other_uid, &other_gid);

	if (skip)
		return skip;
	if (harness_use_fault_wsyncd())
		return 77;
	chan_open(&up);
	chan_open(&down);
	move_budget();
	failed_move();
	no_move_at_stop();
	move_time_share();
	return 0;
}
