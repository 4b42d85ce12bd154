/*
 * move_queue — a uid that leaves many models at once never has their
 * copies made in the broker's event loop (docs/RELIABILITY.md "Memory
 * handed over", docs/INVARIANTS.md section 11).
 *
 * As root, with --group, a process of uid 65534 publishes several models
 * (fresh ones: their opens need no move), commits a version of each and is
 * SIGKILLed: every model must move to new memory, one on the mover's
 * thread and the others queued for it, where the broker used to copy them
 * in its loop, one after the other.
 *
 * 1. Six models of 32 MiB. Meanwhile the trainer (root) times commit round
 *    trips of a small model: none comes near the copies the loop would
 *    have made in a row (the longest under half their CPU time, which the
 *    broker logs; p50 within 3x idle + 2 ms), and the control segment's
 *    counters say 6 moves, 5 of them queued, none in the loop. Every model
 *    then serves its latest from new memory, every byte right; no ".next"
 *    slab is left; once the models are deleted the broker's fds are back
 *    where they were before the other uid came.
 * 2. A model deleted while its move waits in the queue (a 128 MiB model
 *    moves first): the PUB_OPEN of it that waited for the move (the
 *    trainer's) gets -EIDRM ("deleted while it waited"), the broker logs
 *    the queued move dropped, the other queued model still moves, on the
 *    mover's thread, and the fds come back.
 * 3. The broker stopped while moves wait in the queue: with --no-keep the
 *    stop drops them (one move at most: the one in flight), exits 0 and
 *    leaves no segment; keeping the weights, it applies every move, the
 *    queued ones copied in its loop while it stops (counted:
 *    moves_on_loop; nobody is served any more), and exits 0. (With
 *    --group the next start adopts no slab data, so what it copied is not
 *    read back here.)
 *
 * Needs root (to become another uid); skipped otherwise.
 */
#include "tests/lib/harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/layout.h"

#define MODELS_MAX 8
#define MODEL_BYTES (32u << 20)
#define BIG_BYTES (128u << 20)
#define SMALL "queue.small"
#define MAX_SAMPLES 65536
#define LEFT_MOVED "its publisher of uid 65534 left: new memory"

static struct broker B;
static uid_t other_uid;
static gid_t other_gid;
static struct chan up;

/* What the other uid publishes: n models, the first of first_bytes. */
struct plan {
	int      n;
	uint64_t first_bytes;
};

static void model_name(int i, char *buf, size_t len)
{
	snprintf(buf, len, "queue.m%d", i);
}

static uint64_t model_bytes(const struct plan *pl, int i)
{
	return i == 0 ? pl->first_bytes : MODEL_BYTES;
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

/* The other uid: opens and commits step 10 + i of each model, says so,
 * and waits for its SIGKILL. */
static int leaver(void *arg)
{
	const struct plan *pl = arg;
	wsync_client *c;
	wsync_pub *p[MODELS_MAX];
	char name[32];

	TEST_ASSERT(setgroups(0, NULL) == 0);
	TEST_ASSERT(setgid(other_gid) == 0);
	TEST_ASSERT(setuid(other_uid) == 0);
	TEST_OK(harness_connect(&B, "leaver", &c));
	for (int i = 0; i < pl->n; i++) {
		model_name(i, name, sizeof name);
		TEST_OK(model_open(c, name, model_bytes(pl, i), &p[i]));
		TEST_OK(harness_publish(p[i], 10 + (uint64_t)i, HARNESS_S, NULL));
	}
	chan_send(&up, 1);
	for (;;)
		pause();
	return 0;
}

/* Starts the other uid's publisher and SIGKILLs it once it published. */
static void publish_and_kill(struct plan *pl)
{
	pid_t pid = harness_fork(leaver, pl);
	int st;

	TEST_ASSERT(chan_recv(&up, pid) == 1);
	TEST_ASSERT(kill(pid, SIGKILL) == 0);
	st = harness_wait_status(pid, 5000);
	TEST_ASSERT_MSG(WIFSIGNALED(st), "the other uid's publisher: %s",
	                harness_status_str(st));
}

static void ctl_read(struct wsync_ctl_header *h)
{
	char path[PATH_MAX];
	int fd;

	TEST_OK(harness_seg_path(&B, "ctl", path, sizeof path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	TEST_ASSERT(fd >= 0);
	TEST_ASSERT(pread(fd, h, sizeof *h, 0) == (ssize_t)sizeof *h);
	close(fd);
}

static uint64_t ctl_moves(void)
{
	struct wsync_ctl_header h;

	ctl_read(&h);
	return atomic_load(&h.moves);
}

static const char *log_text(void)
{
	static char log[1 << 19];

	return harness_read_file(B.log, log, sizeof log);
}

static int log_count(const char *what)
{
	const char *log = log_text();
	int n = 0;

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
		harness_broker_dump_log(&B, 30);
	TEST_ASSERT_MSG(log_count(what) >= count, "no '%s' (x%d) in the log", what, count);
}

/* The CPU time the moves logged as applied took, ms, and the longest. */
static double moves_cpu_ms(double *longest)
{
	const char *log = log_text();
	double sum = 0;

	*longest = 0;
	for (const char *at = log; (at = strstr(at, "copied, in ")); at++) {
		double ms = strtod(at + strlen("copied, in "), NULL);

		sum += ms;
		*longest = ms > *longest ? ms : *longest;
	}
	return sum;
}

/* The latest of model i, read as a collector: its step, every byte. */
static void read_model(wsync_client *c, int i)
{
	char name[32];
	wsync_sub *s;
	wsync_view v;

	model_name(i, name, sizeof name);
	TEST_OK(wsync_sub_open(c, name, &s));
	TEST_OK(wsync_sub_wait(s, 0, 5 * HARNESS_S, &v));
	TEST_ASSERT_MSG(v.step == 10 + (uint64_t)i, "%s: step %llu, not %d", name,
	                (unsigned long long)v.step, 10 + i);
	TEST_OK(harness_verify_view(&v));
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
}

static void delete_models(wsync_client *c, int n)
{
	char name[32];

	for (int i = 0; i < n; i++) {
		model_name(i, name, sizeof name);
		TEST_OK(wsync_model_delete(c, name));
	}
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

/* 1. Six models left at once: round trips meanwhile, counters, bytes. */
static void many_leave(void)
{
	static int64_t idle[MAX_SAMPLES], busy[MAX_SAMPLES];
	struct plan pl = { .n = 6, .first_bytes = MODEL_BYTES };
	int64_t idle50, busy50, busy_max = 0, end;
	struct wsync_ctl_header h;
	double cpu, longest;
	int n_idle = 0, n_busy = 0, fds0;
	uint64_t step = 100;
	wsync_client *c;
	wsync_pub *small;

	TEST_ASSERT(harness_broker_start(&B, HARNESS_OTHER_USERS, NULL) == 0);
	TEST_OK(harness_connect(&B, "trainer", &c));
	TEST_OK(harness_pub_open_2t(c, SMALL, 0, &small));
	for (int i = 0; i < 200; i++)
		idle[n_idle++] = timed_publish(small, ++step);
	fds0 = harness_broker_fd_count(&B);

	publish_and_kill(&pl);
	/* round trips until every model moved */
	end = harness_mono_ns() + 30 * HARNESS_S;
	while (ctl_moves() < (uint64_t)pl.n && harness_mono_ns() < end) {
		int64_t ns = timed_publish(small, ++step);

		if (n_busy < MAX_SAMPLES)
			busy[n_busy++] = ns;
		busy_max = ns > busy_max ? ns : busy_max;
	}
	ctl_read(&h);
	idle50 = p50(idle, n_idle);
	busy50 = p50(busy, n_busy);
	cpu = moves_cpu_ms(&longest);
	harness_log("6 x 32 MiB left at once: %llu moves, %llu queued, %llu in the loop; "
	            "their CPU %.1f ms (longest %.1f ms); commit round trip idle p50 %.3f ms, "
	            "meanwhile %d commits, p50 %.3f ms, max %.3f ms (loaded 2-vCPU machine)",
	            (unsigned long long)atomic_load(&h.moves),
	            (unsigned long long)atomic_load(&h.moves_queued),
	            (unsigned long long)atomic_load(&h.moves_on_loop), cpu, longest,
	            idle50 / 1e6, n_busy, busy50 / 1e6, busy_max / 1e6);
	TEST_EQ_U64(atomic_load(&h.moves), (uint64_t)pl.n);
	TEST_EQ_U64(atomic_load(&h.moves_queued), (uint64_t)pl.n - 1);
	TEST_EQ_U64(atomic_load(&h.moves_on_loop), 0);
	TEST_ASSERT_MSG(log_count(LEFT_MOVED) == pl.n, "%d moves logged, not %d",
	                log_count(LEFT_MOVED), pl.n);
	/* the loop would have copied five of them in a row: no round trip
	 * comes near that */
	TEST_ASSERT_MSG(n_busy >= 5, "only %d commits while the models moved", n_busy);
	TEST_ASSERT_MSG(busy_max < (int64_t)((cpu - longest) / 2 * 1e6),
	                "a round trip of %.3f ms while the models moved; the queued copies "
	                "took %.1f ms of CPU", busy_max / 1e6, cpu - longest);
	TEST_ASSERT_MSG(busy50 <= 3 * idle50 + 2000000, "p50 %.3f ms while the models moved, "
	                "idle %.3f ms", busy50 / 1e6, idle50 / 1e6);

	for (int i = 0; i < pl.n; i++)
		read_model(c, i);
	TEST_ASSERT_MSG(next_files() == 0, "new slabs left behind");
	delete_models(c, pl.n);
	TEST_ASSERT_MSG(harness_broker_fd_settle(&B, fds0, 5000) <= fds0,
	                "broker fds %d, before the other uid came %d",
	                harness_broker_fd_count(&B), fds0);
	wsync_pub_close(small);
	wsync_close(c);
	harness_broker_finish(&B);
}

struct opener {
	int err;
	char msg[512];
	atomic_int done;
};

/* The trainer's open of the queued model: it waits for the move. */
static void *open_queued(void *arg)
{
	struct opener *o = arg;
	wsync_client *c;
	wsync_pub *p;
	char name[32];

	model_name(2, name, sizeof name);
	TEST_OK(harness_connect(&B, "waiting-opener", &c));
	o->err = model_open(c, name, MODEL_BYTES, &p);
	snprintf(o->msg, sizeof o->msg, "%s", wsync_errmsg());
	if (!o->err)
		wsync_pub_close(p);
	wsync_close(c);
	atomic_store(&o->done, 1);
	return NULL;
}

/* 2. A queued model deleted. */
static void delete_queued(void)
{
	struct plan pl = { .n = 3, .first_bytes = BIG_BYTES };
	struct opener o = { .err = 1 };
	struct wsync_ctl_header h;
	int64_t end;
	wsync_client *c;
	pthread_t t;
	char name[32];
	int fds0;

	TEST_ASSERT(harness_broker_start(&B, HARNESS_OTHER_USERS, NULL) == 0);
	TEST_OK(harness_connect(&B, "trainer", &c));
	fds0 = harness_broker_fd_count(&B);
	publish_and_kill(&pl);
	wait_log("waits for the mover's thread", 2, 5000);
	TEST_ASSERT(pthread_create(&t, NULL, open_queued, &o) == 0);
	harness_sleep_ms(100);           /* its PUB_OPEN waits for the move */
	TEST_ASSERT_MSG(!atomic_load(&o.done), "the open of a queued model was answered "
	                "before its move: %d %s", o.err, o.msg);
	model_name(2, name, sizeof name);
	TEST_OK(wsync_model_delete(c, name));
	TEST_ASSERT(pthread_join(t, NULL) == 0);
	TEST_ASSERT_MSG(o.err == -EIDRM && strstr(o.msg, "deleted while it waited"),
	                "the open of a model deleted while queued: %d %s", o.err, o.msg);
	wait_log("its queued move to new memory is dropped", 1, 1000);
	end = harness_mono_ns() + 20 * HARNESS_S;
	while (ctl_moves() < 2 && harness_mono_ns() < end)
		harness_sleep_ms(5);
	ctl_read(&h);
	TEST_EQ_U64(atomic_load(&h.moves), 2);
	TEST_EQ_U64(atomic_load(&h.moves_queued), 2);
	TEST_EQ_U64(atomic_load(&h.moves_on_loop), 0);
	read_model(c, 0);
	read_model(c, 1);
	TEST_ASSERT_MSG(next_files() == 0, "new slabs left behind");
	delete_models(c, 2);
	TEST_ASSERT_MSG(harness_broker_fd_settle(&B, fds0, 5000) <= fds0,
	                "broker fds %d, before the other uid came %d",
	                harness_broker_fd_count(&B), fds0);
	wsync_close(c);
	harness_broker_finish(&B);
}

/* 3. Stops with moves queued: dropped (--no-keep), or copied in the loop
 * and adopted by the next start (the weights kept). */
static void stop_queued(bool keep)
{
	struct plan pl = { .n = 4, .first_bytes = BIG_BYTES };
	struct wsync_ctl_header h;

	TEST_ASSERT(harness_broker_start(&B, HARNESS_OTHER_USERS,
	                                 keep ? HARNESS_KEEP_DEFAULT : NULL, NULL) == 0);
	publish_and_kill(&pl);
	wait_log("waits for the mover's thread", pl.n - 1, 5000);
	if (!keep) {
		harness_broker_finish(&B);
		TEST_ASSERT_MSG(log_count(LEFT_MOVED) <= 1, "%d moves at a --no-keep stop",
		                log_count(LEFT_MOVED));
		TEST_ASSERT_MSG(!strstr(log_text(), "withdrawn"), "a stop withdrew a latest");
		TEST_CONTAINS(log_text(), "stopped");
		return;
	}
	TEST_ASSERT(harness_broker_stop(&B) == 0);
	TEST_ASSERT_MSG(log_count(LEFT_MOVED) == pl.n, "%d moves at the stop, not %d",
	                log_count(LEFT_MOVED), pl.n);
	ctl_read(&h);                    /* kept for the next start */
	harness_log("stopped with moves queued: %llu moves, %llu queued, %llu in the loop",
	            (unsigned long long)atomic_load(&h.moves),
	            (unsigned long long)atomic_load(&h.moves_queued),
	            (unsigned long long)atomic_load(&h.moves_on_loop));
	TEST_EQ_U64(atomic_load(&h.moves), (uint64_t)pl.n);
	TEST_EQ_U64(atomic_load(&h.moves_queued), (uint64_t)pl.n - 1);
	TEST_ASSERT(atomic_load(&h.moves_on_loop) >= 1 &&
	            atomic_load(&h.moves_on_loop) <= (uint64_t)pl.n - 1);
	TEST_ASSERT_MSG(next_files() == 0, "new slabs left behind");
	TEST_ASSERT_MSG(!strstr(log_text(), "withdrawn"), "a stop withdrew a latest");
	harness_broker_forget(&B);
}

int main(void)
{
	int skip = harness_other_user("leave models as another uid", &other_uid, &other_gid);

	if (skip)
		return skip;
	chan_open(&up);
	many_leave();
	delete_queued();
	stop_queued(false);
	stop_queued(true);
	return 0;
}
