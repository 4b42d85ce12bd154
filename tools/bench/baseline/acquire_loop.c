/*
 * tools/bench/baseline/acquire_loop.c — the acquire scenario's 1-thread loop
 * (tools/bench/acquire.c), standing alone so that wsync-bench can build it
 * against an earlier release's headers and library as well as against this
 * tree's, and run each against its own broker (their layouts may differ).
 *
 *   acquire_loop WSYNCD SOCKET MS REPEATS
 *
 * Starts WSYNCD on SOCKET, publishes one version of a 64 KiB model, and
 * runs wsync_sub_acquire + wsync_sub_release of it in one thread, batches
 * of 64, for MS milliseconds REPEATS times; prints
 * "ns_per_pair MEDIAN MIN" (thread CPU time per pair). Uses only the API
 * every release since 2026-11 has. Not part of wsync-bench itself: the
 * bench compiles it with the C compiler on PATH.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wsync.h"

#define BATCH     64
#define MAX_REPS  64

static int64_t clock_of(clockid_t id)
{
	struct timespec t;

	clock_gettime(id, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static pid_t broker_start(const char *wsyncd, const char *sock)
{
	char name[48];
	pid_t pid;

	snprintf(name, sizeof name, "acq-loop-%d", (int)getpid());
	unlink(sock);
	pid = fork();
	if (pid == 0) {
		execl(wsyncd, wsyncd, "--socket", sock, "--name", name, "--log-level", "error",
		      "--no-keep", "--fresh", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; pid > 0 && i < 500; i++) {
		struct stat st;

		if (stat(sock, &st) == 0 && S_ISSOCK(st.st_mode))
			return pid;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return -1;
		usleep(10000);
	}
	return -1;
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "acquire_loop: %s: %s: %s\n", what, strerror(-err), wsync_errmsg());
	return 1;
}

int main(int argc, char **argv)
{
	wsync_client *pc = NULL, *c = NULL;
	wsync_tensor_desc d;
	wsync_pub *p = NULL;
	wsync_sub *s = NULL;
	wsync_slab slab;
	wsync_view v;
	double ns[MAX_REPS], sorted[MAX_REPS];
	uint64_t sink = 0;
	int reps, ms, rc = 1, err;
	pid_t broker;

	if (argc != 5 || (ms = atoi(argv[3])) <= 0 || (reps = atoi(argv[4])) <= 0) {
		fprintf(stderr, "usage: acquire_loop WSYNCD SOCKET MS REPEATS\n");
		return 2;
	}
	if (reps > MAX_REPS)
		reps = MAX_REPS;
	broker = broker_start(argv[1], argv[2]);
	if (broker < 0) {
		fprintf(stderr, "acquire_loop: %s did not start on %s\n", argv[1], argv[2]);
		return 1;
	}
	memset(&d, 0, sizeof d);
	snprintf(d.name, sizeof d.name, "w");
	d.dtype = WSYNC_F32;
	d.ndim = 1;
	d.shape[0] = 64 * 1024 / 4;
	if ((err = wsync_connect(argv[2], "acq-loop-pub", &pc)) ||
	    (err = wsync_pub_open(pc, "acq-loop", &d, 1, NULL, &p)) ||
	    (err = wsync_pub_begin(p, 5000000000ll, &slab)) ||
	    (err = wsync_pub_commit(p, 1, NULL))) {
		rc = fail("publish", err);
		goto out;
	}
	if ((err = wsync_connect(argv[2], "acq-loop", &c)) ||
	    (err = wsync_sub_open(c, "acq-loop", &s))) {
		rc = fail("subscribe", err);
		goto out;
	}
	for (int i = 0; i < 1000; i++) {                 /* warm: slab mapped */
		if ((err = wsync_sub_acquire(s, &v))) {
			rc = fail("wsync_sub_acquire", err);
			goto out;
		}
		wsync_sub_release(s, &v);
	}
	for (int r = 0; r < reps; r++) {
		int64_t end = clock_of(CLOCK_MONOTONIC) + (int64_t)ms * 1000000;
		int64_t cpu0 = clock_of(CLOCK_THREAD_CPUTIME_ID);
		uint64_t pairs = 0;

		while (clock_of(CLOCK_MONOTONIC) < end) {
			for (int k = 0; k < BATCH; k++) {
				if ((err = wsync_sub_acquire(s, &v))) {
					rc = fail("wsync_sub_acquire", err);
					goto out;
				}
				sink += v.version;
				wsync_sub_release(s, &v);
			}
			pairs += BATCH;
		}
		ns[r] = (double)(clock_of(CLOCK_THREAD_CPUTIME_ID) - cpu0) / (double)pairs;
	}
	memcpy(sorted, ns, sizeof(double) * (size_t)reps);
	qsort(sorted, (size_t)reps, sizeof(double), cmp_double);
	printf("ns_per_pair %.2f %.2f%s\n", sorted[reps / 2], sorted[0], sink == 1 ? " " : "");
	rc = 0;
out:
	wsync_sub_close(s);
	wsync_close(c);
	wsync_pub_close(p);
	wsync_close(pc);
	kill(broker, SIGTERM);
	waitpid(broker, NULL, 0);
	unlink(argv[2]);
	return rc;
}
