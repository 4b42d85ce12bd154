/*
 * move_off_loop — a takeover's move copies on the mover's thread, not in
 * the broker's event loop (issue 32 item 8, docs/RELIABILITY.md "Memory
 * handed over").
 *
 * As root, with --group: the trainer (the broker's uid) publishes a model
 * of 128 MiB in 2 slots, then a process of uid 65534 opens it as publisher,
 * which moves it to new memory (2 new slabs of 128 MiB, the latest copied).
 *
 * 1. While it moves, the trainer's commit round trip on a small model
 *    (BEGIN + COMMIT) stays near its idle figure: p50 within 3x idle + 2 ms
 *    (the machine is shared), and several commits complete during the
 *    move. The other uid's PUB_OPEN is answered once the move is done; a
 *    collector then reads the trainer's latest with every byte right, and
 *    the other uid's own commit after it. Its leave moves the model again,
 *    on the mover's thread too: the same bound holds until the log says
 *    it is done, and the collector reads its last version, every byte
 *    right.
 * 2. An open of the same model while it moves is refused -EBUSY ("is
 *    moving to new memory"), tried from the trainer's side.
 * 3. The requester killed mid-move (on a broker of its own, as the moves
 *    above spent the time share of moves): the move is dropped when the worker is
 *    done ("its move is dropped"), no ".next" slab is left in the
 *    generation's directory, the broker's fds and RSS return to their
 *    baseline, and the model still serves its latest, verified.
 *
 * 4. The model deleted mid-move (before 3., on the same broker): the
 *    requester's PUB_OPEN gets -EIDRM ("deleted while it moved").
 *
 * Needs root (to become another uid); skipped otherwise.
 */
#include "tests/lib/harness.h"

#include <dirent.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG "moves.big"
#define SMALL "moves.small"
#define BIG_BYTES (128u << 20)
#define MID "moves.mid"
#define MID_BYTES (32u << 20)
#define MAX_SAMPLES 65536

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

static int model_open(wsync_client *c, const char *model, uint64_t bytes, wsync_pub **p)
{
	wsync_model_opts o;
	wsync_tensor_desc d;

	harness_desc(&d, "w", WSYNC_U8, 1, &bytes);
	memset(&o, 0, sizeof o);
	o.slots = 2;
	return wsync_pub_open(c, model, &d, 1, &o, p);
}

static int big_open(wsync_client *c, wsync_pub **p)
{
	return model_open(c, BIG, BIG_BYTES, p);
}

static int big_commit(wsync_pub *p, uint64_t step)
{
	wsync_slab s;
	int err = wsync_pub_begin(p, HARNESS_S, &s);

	if (err)
		return err;
	harness_fill(s.base, s.bytes, step);
	return wsync_pub_commit(p, step, NULL);
}

/* The other uid takes the model over, commits step 8, leaves when told. */
static int taker(void *arg)
{
	wsync_client *c;
	wsync_pub *p;

	(void)arg;
	become_other();
	TEST_OK(harness_connect(&B, "other-uid", &c));
	chan_send(&up, 1);
	TEST_OK(big_open(c, &p));
	chan_send(&up, 2);
	chan_recv(&down, getppid());
	TEST_OK(big_commit(p, 8));
	chan_send(&up, 3);
	chan_recv(&down, getppid());
	chan_send(&up, 4);
	wsync_pub_close(p);                  /* its leave moves the model again */
	chan_send(&up, 5);
	wsync_close(c);
	return 0;
}

/* The other uid asks for MID, deleted while it moves. */
static int orphan_taker(void *arg)
{
	wsync_client *c;
	wsync_pub *p;
	int err;

	(void)arg;
	become_other();
	TEST_OK(harness_connect(&B, "orphan", &c));
	chan_send(&up, 1);
	err = model_open(c, MID, MID_BYTES, &p);
	TEST_ASSERT_MSG(err == -EIDRM && strstr(wsync_errmsg(), "deleted while it moved"),
	                "open of a model deleted while it moved: %d %s", err, wsync_errmsg());
	wsync_close(c);
	return 0;
}

/* The other uid asks for the model and is killed while it moves. */
static int doomed_taker(void *arg)
{
	wsync_client *c;
	wsync_pub *p;

	(void)arg;
	become_other();
	TEST_OK(harness_connect(&B, "doomed", &c));
	chan_send(&up, 1);
	/* the move of 4. may have spent the time share for a while */
	while (big_open(c, &p) == -EBUSY && strstr(wsync_errmsg(), "tenth"))
		harness_sleep_ms(20);
	pause();
	return 0;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static int64_t p50(int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_i64);
	return n ? v[n / 2] : 0;
}

static int64_t timed_publish(wsync_pub *p, uint64_t step)
{
	int64_t t0 = harness_mono_ns();

	TEST_OK(harness_publish(p, step, HARNESS_S, NULL));
	return harness_mono_ns() - t0;
}

static bool chan_ready(const struct chan *c)
{
	struct pollfd pfd = { .fd = c->rd, .events = POLLIN };

	return poll(&pfd, 1, 0) == 1;
}

static int log_count(const char *what);

/* Commits of p, timed, until the child sends on up (until_log NULL) or the
 * broker's log says until_log: how many, p50 in *mid, max in *max. */
static int measure(wsync_pub *p, uint64_t *step, const char *until_log, int64_t *mid,
                   int64_t *max)
{
	static int64_t busy[MAX_SAMPLES];
	int64_t end = harness_mono_ns() + 20 * HARNESS_S, look = 0;
	int n = 0;

	*max = 0;
	while (harness_mono_ns() < end) {
		int64_t ns;

		if (!until_log && chan_ready(&up))
			break;
		if (until_log && harness_mono_ns() > look) {
			if (log_count(until_log))
				break;
			look = harness_mono_ns() + 2000000;
		}
		ns = timed_publish(p, ++*step);
		if (n < MAX_SAMPLES)
			busy[n++] = ns;
		*max = ns > *max ? ns : *max;
	}
	*mid = p50(busy, n);
	return n;
}

static int log_count(const char *what)
{
	static char log[1 << 18];
	int n = 0;

	harness_read_file(B.log, log, sizeof log);
	for (const char *at = log; (at = strstr(at, what)); at++)
		n++;
	return n;
}

static void wait_log(const char *what, int count, int timeout_ms)
{
	int64_t end = harness_mono_ns() + (int64_t)timeout_ms * 1000000;

	while (log_count(what) < count && harness_mono_ns() < end)
		harness_sleep_ms(2);
	if (log_count(what) < count)
		harness_broker_dump_log(&B, 20);
	TEST_ASSERT_MSG(log_count(what) >= count, "no '%s' (x%d) in the log", what, count);
}

/* The latest of BIG, read as a collector: step and every byte. */
static void read_big(wsync_client *c, uint64_t step)
{
	wsync_sub *s;
	wsync_view v;

	TEST_OK(wsync_sub_open(c, BIG, &s));
	TEST_OK(wsync_sub_wait(s, 0, 5 * HARNESS_S, &v));
	TEST_ASSERT_MSG(v.step == step, "step %llu, not %llu", (unsigned long long)v.step,
	                (unsigned long long)step);
	TEST_OK(harness_verify_view(&v));
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
}

static int next_files(void)
{
	char dir[PATH_MAX];
	struct dirent *e;
	DIR *d;
	int n = 0;

	TEST_ASSERT(harness_seg_path(&B, "", dir, sizeof dir) == 0);
	d = opendir(dir);
	TEST_ASSERT(d);
	while ((e = readdir(d)))
		n += strstr(e->d_name, ".next") != NULL;
	closedir(d);
	return n;
}

int main(void)
{
	static int64_t idle[MAX_SAMPLES];
	int skip = harness_other_user("take a model over as another uid", &other_uid,
	                              &other_gid);
	int n_idle = 0, n_busy = 0, fds0, err;
	int64_t idle50, busy50, busy_max;
	wsync_client *c, *c2;
	wsync_pub *big, *small, *p2;
	long rss0, rss;
	uint64_t step = 100;
	pid_t pid;

	if (skip)
		return skip;
	chan_open(&up);
	chan_open(&down);
	TEST_ASSERT(harness_broker_start(&B, HARNESS_OTHER_USERS, NULL) == 0);
	TEST_OK(harness_connect(&B, "trainer", &c));
	TEST_OK(big_open(c, &big));
	TEST_OK(big_commit(big, 7));
	wsync_pub_close(big);
	TEST_OK(harness_pub_open_2t(c, SMALL, 0, &small));
	for (int i = 0; i < 200; i++)
		idle[n_idle++] = timed_publish(small, ++step);

	/* 1. round trips while it moves */
	pid = harness_fork(taker, NULL);
	chan_recv(&up, pid);
	n_busy = measure(small, &step, NULL, &busy50, &busy_max);
	TEST_ASSERT_MSG(chan_recv(&up, pid) == 2, "the other uid's open");
	idle50 = p50(idle, n_idle);
	harness_log("commit round trip: idle p50 %.3f ms; during the move %d commits, p50 "
	            "%.3f ms, max %.3f ms (loaded 2-vCPU machine)", idle50 / 1e6, n_busy,
	            busy50 / 1e6, busy_max / 1e6);
	TEST_ASSERT_MSG(n_busy >= 5, "only %d commits during the move: the loop stalled",
	                n_busy);
	TEST_ASSERT_MSG(busy50 <= 3 * idle50 + 2000000, "p50 %.3f ms during the move, "
	                "idle %.3f ms", busy50 / 1e6, idle50 / 1e6);
	wait_log("moving it to new memory", 1, 1000);
	read_big(c, 7);
	chan_send(&down, 1);
	TEST_ASSERT(chan_recv(&up, pid) == 3);
	read_big(c, 8);
	chan_send(&down, 1);
	/* its leave: the same on the mover's thread (the library does not
	 * wait for CLOSE_OK: the log says when the move is done) */
	TEST_ASSERT(chan_recv(&up, pid) == 4);
	n_busy = measure(small, &step, "its publisher of uid 65534 left: new memory", &busy50,
	                 &busy_max);
	TEST_ASSERT(chan_recv(&up, pid) == 5);
	harness_log("during the leave's move %d commits, p50 %.3f ms, max %.3f ms", n_busy,
	            busy50 / 1e6, busy_max / 1e6);
	TEST_ASSERT_MSG(n_busy >= 5, "only %d commits during the leave's move", n_busy);
	TEST_ASSERT_MSG(busy50 <= 3 * idle50 + 2000000, "p50 %.3f ms during the leave's "
	                "move, idle %.3f ms", busy50 / 1e6, idle50 / 1e6);
	wait_log("its publisher of uid 65534 left: new memory", 1, 1000);
	harness_expect_exit0(pid, "the publisher of another uid");
	{
		static char log[1 << 18];

		harness_read_file(B.log, log, sizeof log);
		for (const char *at = log; (at = strstr(at, "copied, in")); at++)
			harness_log("broker: ...%.*s", (int)strcspn(at, "\n"), at);
	}
	read_big(c, 8);

	wsync_pub_close(small);
	wsync_close(c);
	harness_broker_finish(&B);

	/* A broker of its own (the moves above spent the time share of
	 * moves: a tenth of the broker's time): the trainer publishes. */
	TEST_ASSERT(harness_broker_start(&B, HARNESS_OTHER_USERS, NULL) == 0);
	TEST_OK(harness_connect(&B, "trainer", &c));
	TEST_OK(big_open(c, &big));
	TEST_OK(big_commit(big, 9));
	wsync_pub_close(big);
	read_big(c, 9);

	/* 4. the model deleted while it moves: the requester hears -EIDRM */
	TEST_OK(model_open(c, MID, MID_BYTES, &big));
	TEST_OK(big_commit(big, 5));
	wsync_pub_close(big);
	pid = harness_fork(orphan_taker, NULL);
	chan_recv(&up, pid);
	wait_log("moving it to new memory", 1, 5000);
	TEST_OK(wsync_model_delete(c, MID));
	harness_expect_exit0(pid, "the requester of a deleted model");

	fds0 = harness_broker_fd_count(&B);
	rss0 = harness_broker_rss_kb(&B);

	/* 2 and 3: a second open while it moves; the requester killed */
	pid = harness_fork(doomed_taker, NULL);
	chan_recv(&up, pid);
	wait_log("moving it to new memory", 2, 10000);
	TEST_OK(harness_connect(&B, "second", &c2));
	err = big_open(c2, &p2);
	TEST_ASSERT_MSG(err == -EBUSY && strstr(wsync_errmsg(), "is moving to new memory"),
	                "a second open while it moves: %d %s", err, wsync_errmsg());
	wsync_close(c2);
	TEST_ASSERT(kill(pid, SIGKILL) == 0);
	harness_wait_status(pid, 5000);
	wait_log("its move is dropped", 1, 10000);
	TEST_ASSERT_MSG(next_files() == 0, "new slabs of the dropped move left behind");
	TEST_ASSERT_MSG(harness_broker_fd_settle(&B, fds0, 5000) <= fds0,
	                "broker fds %d, baseline %d", harness_broker_fd_count(&B), fds0);
	rss = harness_broker_rss_kb(&B);
	harness_log("broker RSS %ld KiB, baseline %ld KiB", rss, rss0);
	TEST_ASSERT_MSG(rss <= rss0 + 8192, "broker RSS %ld KiB, baseline %ld KiB", rss, rss0);
	read_big(c, 9);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
