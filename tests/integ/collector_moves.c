/*
 * collector_moves — a long-lived collector does not keep every memory its
 * model ever had. With --group, a publisher of another uid opens the model,
 * commits a version and leaves, MOVES times over (a trainer that restarts):
 * each leave gives the model new memory (model_rotate), and so does its
 * first open (it follows the trainer). Meanwhile a
 * collector acquires and releases as fast as it can on two threads, and
 * holds one view, taken before the first move, across all of them: that
 * view stays readable with its own bytes. Afterwards the collector maps
 * the model's current memory plus what the held view points into, and once
 * that view is released, only the current memory (counted in
 * /proc/self/maps). Before retired mappings were freed, the collector kept
 * a page and every slab of each of the MOVES memories until it closed its
 * subscription. Needs root (to become another uid); skipped otherwise.
 */
#include "tests/lib/harness.h"

#include <grp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MODEL "moves.policy"
/* Twice the move budget (4 a second), so that some opens are refused and
 * tried again; with a memory kept per move the counts below would be 9x. */
#define MOVES 8
#define SLOTS 4

static struct broker B;
static uid_t other_uid;
static gid_t other_gid;
static atomic_int stop;
static atomic_long views, latests;
static struct chan go;

/* The other uid: MOVES times a publisher that commits once and leaves. A
 * PUB_OPEN refused for the model's move budget (-EBUSY) is tried again. */
static int mover(void *arg)
{
	(void)arg;
	TEST_ASSERT(setgroups(0, NULL) == 0);
	TEST_ASSERT(setgid(other_gid) == 0);
	TEST_ASSERT(setuid(other_uid) == 0);
	chan_recv(&go, getppid());           /* the collectors run */
	for (int i = 0; i < MOVES; i++) {
		wsync_client *c;
		wsync_pub *p;
		int err;

		TEST_OK(harness_connect(&B, "restarting-trainer", &c));
		while ((err = harness_pub_open_2t(c, MODEL, SLOTS, &p)) == -EBUSY)
			harness_sleep_ms(50);
		TEST_OK(err);
		TEST_OK(harness_publish(p, 100 + (uint64_t)i, HARNESS_S, NULL));
		wsync_pub_close(p);
		wsync_close(c);
		harness_sleep_ms(10);        /* the collectors follow each move */
	}
	return 0;
}

/* Lines of /proc/self/maps for the model's segments (pages and slabs). */
static int model_mappings(void)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	int n = 0;

	TEST_ASSERT(f != NULL);
	while (fgets(line, sizeof line, f))
		if (strstr(line, "wsync-slab") || strstr(line, "wsync-page") ||
		    (strstr(line, B.dir) && !strstr(line, ".sock")) || strstr(line, "/wsync."))
			n++;
	fclose(f);
	return n;
}

static void *collector(void *arg)
{
	wsync_sub *s = arg;
	uint64_t seen = 0;

	while (!atomic_load(&stop)) {
		wsync_view v;
		uint64_t version;
		int err = wsync_sub_wait(s, seen, 20 * HARNESS_MS, &v);

		if (err == -ETIMEDOUT)
			err = wsync_sub_acquire(s, &v);
		TEST_ASSERT_MSG(err == 0, "acquire: %d %s", err, wsync_errmsg());
		TEST_ASSERT_MSG(v.version >= seen, "v%llu after v%llu",
		                (unsigned long long)v.version, (unsigned long long)seen);
		TEST_ASSERT_MSG(harness_verify_view(&v) == 0, "v%llu step %llu: foreign bytes",
		                (unsigned long long)v.version, (unsigned long long)v.step);
		seen = v.version;
		wsync_sub_release(s, &v);
		atomic_fetch_add(&views, 1);
		err = wsync_sub_latest(s, &version, NULL, NULL);
		TEST_ASSERT_MSG(err == 0 && version >= seen, "latest: %d v%llu after v%llu", err,
		                (unsigned long long)version, (unsigned long long)seen);
		atomic_fetch_add(&latests, 1);
	}
	return NULL;
}

int main(void)
{
	char log[1 << 17];
	const char *at;
	wsync_client *c, *cc;
	wsync_pub *p;
	wsync_sub *s;
	wsync_view held, v;
	pthread_t th[2];
	int base, during, after, moved = 0;
	pid_t pid;
	int skip = harness_other_user("publish as another uid", &other_uid, &other_gid);

	if (skip)
		return skip;
	TEST_ASSERT(harness_broker_start(&B, HARNESS_OTHER_USERS, NULL) == 0);
	TEST_OK(harness_connect(&B, "trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, SLOTS, &p));
	TEST_OK(harness_publish(p, 1, HARNESS_S, NULL));
	wsync_pub_close(p);

	TEST_OK(harness_connect(&B, "collector", &cc));
	TEST_OK(wsync_sub_open(cc, MODEL, &s));
	TEST_OK(wsync_sub_acquire(s, &held));
	TEST_ASSERT(held.step == 1);
	base = model_mappings();
	TEST_ASSERT_MSG(base >= SLOTS + 1, "%d mappings of the model's segments", base);

	/* forked before the threads start: a child of a process whose other
	 * threads may hold allocator locks could hang in them at exit */
	chan_open(&go);
	pid = harness_fork(mover, NULL);
	for (int i = 0; i < 2; i++)
		TEST_ASSERT(pthread_create(&th[i], NULL, collector, s) == 0);
	chan_send(&go, 1);
	harness_expect_exit0(pid, "the restarting trainer of another uid");
	harness_sleep_ms(100);
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);

	/* the collector follows the last move, then holds two memories at most */
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_ASSERT_MSG(v.step == 100 + MOVES - 1, "step %llu", (unsigned long long)v.step);
	wsync_sub_release(s, &v);
	during = model_mappings();
	TEST_ASSERT_MSG(harness_verify_view(&held) == 0 && held.step == 1,
	                "the view held across %d moves changed", MOVES);
	TEST_ASSERT_MSG(during <= 2 * base, "%d mappings with one view held across %d moves "
	                "(%d for one memory)", during, MOVES, base);
	wsync_sub_release(s, &held);
	after = model_mappings();
	TEST_ASSERT_MSG(after <= base, "%d mappings after %d moves, %d for one memory", after,
	                MOVES, base);

	harness_read_file(B.log, log, sizeof log);
	for (at = log; (at = strstr(at, "new memory for the page")); at++)
		moved++;
	TEST_ASSERT_MSG(moved >= MOVES, "%d moves logged, expected %d", moved, MOVES);
	harness_log("%d moves, %ld views, %ld latest reads; mappings: %d for one memory, %d "
	            "with a view held across the moves, %d after", moved, atomic_load(&views),
	            atomic_load(&latests), base, during, after);
	wsync_sub_close(s);
	wsync_close(cc);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
