/*
 * tools/bench/python.c — scenario "python": what the Python binding costs
 * over the C library, each Python figure against its C reference taken in
 * the same run.
 *
 *  - Zero-copy views, 16 MiB of 64 f32 tensors, 4 collector processes. C
 *    (here): the trainer begins, copies the model from its own memory (a
 *    buffer per tensor, as a torch module's parameters are) with
 *    wsync_slab_copy_tensors (threads 0, as Python's copy_from), commits;
 *    each collector blocked in wsync_sub_wait looks every tensor up by name
 *    (wsync_view_tensor) once its wait returns. Python
 *    (tools/bench/python_bench.py): Publisher.publish(), and each
 *    collector's Subscriber.wait + View.state_dict("torch"), a zero-copy
 *    torch tensor per tensor. Both: before each sample the trainer waits
 *    until every collector armed its wait, stays idle 1-2 ms and checks in
 *    /proc that the collectors sleep; the figure runs from just before the
 *    publish to the last collector holding every tensor; median.
 *  - View.load_into of 256 MiB (64 tensors) into an nn.Module, against one
 *    single-thread memcpy of 256 MiB between warm buffers (and the
 *    library's own threaded copy, wsync_copy with threads 0, for the floor).
 *  - a trainer's publish() of 64 MiB right after an SGD step, against a
 *    torch copy_ of the same tensors right after another, in the same
 *    process, torch's intra-op threads at one per CPU (target 1.0).
 *
 * The script runs with --python (Debian's python3-torch); a figure it
 * cannot give is a skipped row, never a failure of the bench.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "bench_common.h"

#define PY_COLLECTORS  4
#define PY_TENSORS     64
#define PY_VIEWS_MIB   16
#define PY_LOAD_MIB    256
#define PY_WARMUP      5
#define PY_MAX_SAMPLES 256
#define PY_OUT_MAX     8192
#define PY_WAIT_NS     (60 * NS_PER_S)

/* ---- C reference: 4 collectors hold every tensor of a 16 MiB version ------------- */

struct pyv_shared {
	_Atomic int failed;
	char error[320];
	_Alignas(64) _Atomic int armed[PY_COLLECTORS];
	int64_t held[];                  /* [total * PY_COLLECTORS] */
};

struct pyv_collector {
	struct bench *b;
	struct pyv_shared *sh;
	const char *model;
	int index, total;
};

static void pyv_fail(struct pyv_shared *sh, const char *what, int err)
{
	int expected = 0;

	if (atomic_compare_exchange_strong(&sh->failed, &expected, err ? err : -1))
		wsync_error_text(sh->error, sizeof sh->error, what, err);
}

static int pyv_collector_main(void *arg)
{
	struct pyv_collector *pc = arg;
	volatile uintptr_t sink = 0;
	wsync_client *c = NULL;
	wsync_sub *sub = NULL;
	uint64_t after = 0;
	int err, rc = 1;

	if ((err = wsync_connect(pc->b->endpoint, "bench-py-ref-collector", &c))) {
		pyv_fail(pc->sh, "wsync_connect", err);
		goto out;
	}
	if ((err = wsync_sub_open(c, pc->model, &sub))) {
		pyv_fail(pc->sh, "wsync_sub_open", err);
		goto out;
	}
	for (int s = 0; s < pc->total; s++) {
		wsync_view v;

		atomic_store(&pc->sh->armed[pc->index], s + 1);
		if ((err = wsync_sub_wait(sub, after, PY_WAIT_NS, &v))) {
			pyv_fail(pc->sh, "wsync_sub_wait", err);
			goto out;
		}
		/* what a consumer of the tensors does first: find each by name */
		for (size_t i = 0; i < v.n_tensors; i++) {
			const void *data;

			if ((err = wsync_view_tensor(&v, v.tensors[i].name, &data, NULL))) {
				pyv_fail(pc->sh, "wsync_view_tensor", err);
				goto out;
			}
			sink += (uintptr_t)data;
		}
		pc->sh->held[(size_t)s * PY_COLLECTORS + (size_t)pc->index] = mono_ns();
		after = v.version;
		wsync_sub_release(sub, &v);
	}
	rc = 0;
out:
	(void)sink;
	wsync_sub_close(sub);
	wsync_close(c);
	return rc;
}

/* One sample: waits for every collector, idles, times one publish. */
static int pyv_sample(struct bench *b, struct pyv_shared *sh, const pid_t *pids,
                      wsync_pub *p, const void *const *srcs, int s, int64_t *t0,
                      const char **what)
{
	int64_t deadline;
	wsync_slab slab;
	int err;

	for (int c = 0; c < PY_COLLECTORS; c++)
		if (wait_counter(&sh->armed[c], s + 1, PY_WAIT_NS, pids, PY_COLLECTORS)) {
			*what = "a collector did not arm its wait";
			return -1;
		}
	sleep_ns(rand_range(NS_PER_MS, 2 * NS_PER_MS));
	deadline = mono_ns() + 5 * NS_PER_MS;
	while (!procs_sleeping(pids, PY_COLLECTORS) && mono_ns() < deadline)
		sleep_ns(200 * NS_PER_US);
	(void)b;
	*t0 = mono_ns();
	if ((err = wsync_pub_begin(p, 10 * NS_PER_S, &slab))) {
		*what = "wsync_pub_begin";
		return err;
	}
	if ((err = wsync_slab_copy_tensors(&slab, srcs, 0))) {
		wsync_pub_abort(p);
		*what = "wsync_slab_copy_tensors";
		return err;
	}
	if ((err = wsync_pub_commit(p, (uint64_t)s + 1, NULL))) {
		*what = "wsync_pub_commit";
		return err;
	}
	return 0;
}

/* The C figure of the views row in ms (median), or -1 with why. */
static double pyv_reference(struct bench *b, char *why, size_t len)
{
	int samples = 2 * b->repeats + 1 > PY_MAX_SAMPLES ? PY_MAX_SAMPLES : 2 * b->repeats + 1;
	int total = PY_WARMUP + samples, spawned = 0, bad = 0;
	size_t bytes = (size_t)PY_VIEWS_MIB * MIB;
	size_t shm = sizeof(struct pyv_shared) + (size_t)total * PY_COLLECTORS * sizeof(int64_t);
	struct pyv_collector pcs[PY_COLLECTORS];
	const void *srcs[PY_TENSORS];
	void *bufs[PY_TENSORS] = { NULL };
	int64_t t0[PY_WARMUP + PY_MAX_SAMPLES];
	double lat[PY_MAX_SAMPLES], ms = -1;
	pid_t pids[PY_COLLECTORS];
	struct pyv_shared *sh;
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	const char *what = NULL;
	char model[48];
	size_t per = bytes / PY_TENSORS;
	int err = 0;

	snprintf(model, sizeof model, "py-ref-%d", (int)getpid());
	if (!(sh = shared_alloc(shm))) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	for (int i = 0; i < PY_COLLECTORS; i++) {
		pcs[i] = (struct pyv_collector){ b, sh, model, i, total };
		if ((pids[i] = child_spawn(pyv_collector_main, &pcs[i])) < 0) {
			snprintf(why, len, "fork failed");
			goto out_reap;
		}
		spawned++;
	}
	/* each tensor in memory of its own, as a torch module's parameters are */
	for (int i = 0; i < PY_TENSORS; i++)
		if (!(srcs[i] = bufs[i] = warm_alloc(per))) {
			snprintf(why, len, "out of memory");
			goto out_reap;
		}
	if ((err = wsync_connect(b->endpoint, "bench-py-ref-trainer", &c)) ||
	    (err = model_open(c, model, bytes, PY_TENSORS, 0, &p))) {
		wsync_error_text(why, len, "connect/open", err);
		goto out_reap;
	}
	for (int s = 0; s < total; s++) {
		if ((err = pyv_sample(b, sh, pids, p, srcs, s, &t0[s], &what))) {
			if (atomic_load(&sh->failed))
				snprintf(why, len, "collector: %.200s", sh->error);
			else if (err < 0 && what && !strstr(what, "wsync_"))
				snprintf(why, len, "%s", what);
			else
				wsync_error_text(why, len, what, err);
			goto out_reap;
		}
	}
	ms = 0;
out_reap:
	for (int i = 0; i < spawned; i++)
		bad |= child_reap(pids[i], ms == 0 ? 10000 : 0) != 0;
	if (ms == 0 && bad) {
		snprintf(why, len, "a collector failed: %.200s", sh->error);
		ms = -1;
	}
	if (ms == 0) {
		for (int s = 0; s < samples; s++) {
			int64_t last = 0;

			for (int i = 0; i < PY_COLLECTORS; i++) {
				int64_t h = sh->held[(size_t)(s + PY_WARMUP) * PY_COLLECTORS + (size_t)i];

				if (h > last)
					last = h;
			}
			lat[s] = (double)(last - t0[s + PY_WARMUP]) / 1e6;
		}
		ms = stat_median(lat, (size_t)samples);
	}
	wsync_pub_close(p);
	wsync_close(c);
	for (int i = 0; i < PY_TENSORS; i++)
		warm_free(bufs[i], per);
	shared_free(sh, shm);
	return ms;
}

/* ---- C reference: copies of 256 MiB ------------------------------------------------- */

/* Median ms of a single-thread memcpy and of wsync_copy(threads 0). */
static int py_copies(struct bench *b, double *memcpy_ms, double *lib_ms)
{
	size_t bytes = (size_t)PY_LOAD_MIB * MIB;
	double mc[PY_MAX_SAMPLES], lc[PY_MAX_SAMPLES];
	int n = b->repeats < PY_MAX_SAMPLES ? b->repeats : PY_MAX_SAMPLES;
	void *src = warm_alloc(bytes), *dst = warm_alloc(bytes);
	int rc = -1;

	if (!src || !dst)
		goto out;
	memcpy(dst, src, bytes);
	if (wsync_copy(dst, src, bytes, 0))
		goto out;
	for (int i = 0; i < n; i++) {
		int64_t t0 = mono_ns();

		memcpy(dst, src, bytes);
		mc[i] = (double)(mono_ns() - t0) / 1e6;
		t0 = mono_ns();
		if (wsync_copy(dst, src, bytes, 0))
			goto out;
		lc[i] = (double)(mono_ns() - t0) / 1e6;
	}
	*memcpy_ms = stat_median(mc, (size_t)n);
	*lib_ms = stat_median(lc, (size_t)n);
	rc = 0;
out:
	warm_free(src, bytes);
	warm_free(dst, bytes);
	return rc;
}

/* ---- the Python side ---------------------------------------------------------------- */

/* tools/bench/<name> of the tree this binary was built in, else
 * PREFIX/share/wsync/<name> beside an installed one. */
int bench_py_find(const char *name, char *path, size_t len)
{
	char exe[PATH_MAX], *slash;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);

	if (n > 0) {
		exe[n] = '\0';
		for (int up = 0; up < 3 && (slash = strrchr(exe, '/')); up++) {
			*slash = '\0';
			if (up == 1 && snprintf(path, len, "%s/share/wsync/%s", exe, name) <
			               (int)len && !access(path, R_OK))
				return 0;
		}
		if (snprintf(path, len, "%s/tools/bench/%s", exe, name) < (int)len &&
		    !access(path, R_OK))
			return 0;
	}
	snprintf(path, len, "tools/bench/%s", name);
	return access(path, R_OK);
}

/* Runs the script for at most limit_s seconds (its stderr into
 * <dir>/<script>.log); its stdout into out (NUL-terminated). 0, or -1 with why. */
int bench_py_run(struct bench *b, const char *script, const char *extra, int limit_s,
                 char *out, size_t len, char *why, size_t whylen)
{
	char repeats[16], log[160];
	const char *base = strrchr(script, '/') ? strrchr(script, '/') + 1 : script;
	char *argv[] = { (char *)b->python, (char *)script, "--endpoint", b->endpoint,
	                 "--repeats", repeats, (char *)extra, NULL };
	int64_t deadline = mono_ns() + (int64_t)limit_s * NS_PER_S;
	struct pollfd pfd;
	size_t got = 0;
	pid_t parent = getpid(), pid;
	int fds[2], code;

	snprintf(repeats, sizeof repeats, "%d", b->repeats);
	snprintf(log, sizeof log, "%s/%.60s.log", b->dir, base);
	if (pipe2(fds, O_CLOEXEC)) {
		snprintf(why, whylen, "pipe: %s", strerror(errno));
		return -1;
	}
	fflush(NULL);
	if ((pid = fork()) == 0) {
		int log_fd;

		setpgid(0, 0);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
			_exit(127);
		log_fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (log_fd < 0 || dup2(fds[1], STDOUT_FILENO) < 0 ||
		    dup2(log_fd, STDERR_FILENO) < 0 || setenv("TMPDIR", b->dir, 1))
			_exit(127);
		execv(argv[0], argv);
		_exit(127);
	}
	close(fds[1]);
	if (pid < 0) {
		close(fds[0]);
		snprintf(why, whylen, "fork: %s", strerror(errno));
		return -1;
	}
	child_track(pid, true);
	pfd = (struct pollfd){ .fd = fds[0], .events = POLLIN };
	for (;;) {
		int64_t left = deadline - mono_ns();
		ssize_t n;

		if (left <= 0) {
			snprintf(why, whylen, "the script timed out");
			break;
		}
		if (poll(&pfd, 1, (int)(left / NS_PER_MS) + 1) < 0 && errno != EINTR)
			break;
		if (!(pfd.revents & (POLLIN | POLLHUP)))
			continue;
		n = read(fds[0], out + got, len - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
		out[got] = '\0';
		if (got >= len - 1)
			break;
	}
	close(fds[0]);
	code = child_reap(pid, mono_ns() < deadline ? 15000 : 0);
	if (code != 0 && !why[0]) {
		char tail[160] = "";
		ssize_t n = file_tail(log, tail, sizeof tail);
		const char *last;

		while (n > 0 && tail[n - 1] == '\n')
			tail[--n] = '\0';
		last = strrchr(tail, '\n');

		snprintf(why, whylen, "the script exited with %d: %.180s", code,
		         last && last[1] ? last + 1 : tail);
	}
	return got ? 0 : -1;
}

/* The number after "key": in the script's line for row, or a skip reason. */
int bench_py_value(const char *out, const char *row, const char *key, double *v,
                   char *why, size_t whylen)
{
	char pat[64];
	const char *line, *p, *nl;

	snprintf(pat, sizeof pat, "{\"row\": \"%s\"", row);
	if (!(line = strstr(out, pat))) {
		if (!why[0])
			snprintf(why, whylen, "no result from the script");
		return -1;
	}
	nl = strchr(line, '\n');
	snprintf(pat, sizeof pat, "\"skipped\": \"");
	if ((p = strstr(line, pat)) && (!nl || p < nl)) {
		p += strlen(pat);
		snprintf(why, whylen, "%.*s", (int)strcspn(p, "\"\n"), p);
		return -1;
	}
	snprintf(pat, sizeof pat, "\"%s\": ", key);
	if (!(p = strstr(line, pat)) || (nl && p > nl)) {
		snprintf(why, whylen, "unreadable result");
		return -1;
	}
	*v = strtod(p + strlen(pat), NULL);
	return 0;
}

int bench_python(struct bench *b)
{
	char why_c[256] = "", why_py[256] = "", why[256], script[PATH_MAX];
	char *out = calloc(1, PY_OUT_MAX);
	double c_views, py, ref, memcpy_ms = -1, lib_ms = -1;
	struct bench_row *row;
	int rc = 0;

	c_views = pyv_reference(b, why_c, sizeof why_c);
	if (c_views < 0) {
		say_error("python: %s", why_c);
		rc = -1;
	}
	if (py_copies(b, &memcpy_ms, &lib_ms))
		memcpy_ms = lib_ms = -1;
	if (!out)
		snprintf(why_py, sizeof why_py, "out of memory");
	else if (bench_py_find("python_bench.py", script, sizeof script))
		snprintf(why_py, sizeof why_py, "python_bench.py not found (%.200s)", script);
	else if (access(b->python, X_OK))
		snprintf(why_py, sizeof why_py, "no python at %.200s", b->python);
	else {
		say("python: %s %s", b->python, script);
		bench_py_run(b, script, NULL, b->quick ? 180 : 600, out, PY_OUT_MAX, why_py,
		             sizeof why_py);
	}

	if (c_views >= 0)
		row_add("python", "C: 16 MiB / 64 tensors, begin + copy_tensors + commit -> 4 "
		        "collectors wait + wsync_view_tensor x64", "ms", c_views);
	else
		row_skip("python", "C: 16 MiB / 64 tensors to 4 collectors", "%s", why_c);
	snprintf(why, sizeof why, "%s", why_py);
	if (out && !bench_py_value(out, "views", "ms", &py, why, sizeof why)) {
		row = row_add("python", "Python: same, publish() -> 4 collectors wait + "
		              "state_dict(\"torch\")", "ms", py);
		if (c_views > 0) {
			row_ref(row, "C, same run", c_views);
			row_target_ratio(row, 1.2);
		}
	} else {
		row_skip("python", "Python: 16 MiB / 64 tensors to 4 collectors", "%s", why);
	}
	snprintf(why, sizeof why, "%s", why_py);
	if (out && !bench_py_value(out, "views_call", "us", &py, why, sizeof why))
		row_add("python", "Python: acquire + state_dict(\"torch\") + release, 64 tensors "
		        "(one call, no wake)", "us", py);
	else
		row_skip("python", "Python: acquire + state_dict + release", "%s", why);

	if (memcpy_ms > 0) {
		row_add("python", "memcpy 256 MiB, 1 thread, warm buffers (reference)", "ms",
		        memcpy_ms);
		row = row_add("python", "C: wsync_copy 256 MiB, threads 0 (one per CPU)", "ms",
		              lib_ms);
		row_ref(row, "memcpy, 1 thread", memcpy_ms);
	} else {
		row_skip("python", "memcpy 256 MiB", "out of memory");
	}
	snprintf(why, sizeof why, "%s", why_py);
	if (out && !bench_py_value(out, "load_into", "ms", &py, why, sizeof why)) {
		row = row_add("python", "Python: View.load_into(nn.Module), 256 MiB / 64 tensors",
		              "ms", py);
		if (memcpy_ms > 0) {
			row_ref(row, "memcpy, 1 thread", memcpy_ms);
			row_target_ratio(row, 0.6);
		}
	} else {
		row_skip("python", "Python: View.load_into, 256 MiB", "%s", why);
	}
	snprintf(why, sizeof why, "%s", why_py);
	if (out && !bench_py_value(out, "after_step", "publish_ms", &py, why, sizeof why) &&
	    !bench_py_value(out, "after_step", "copy_ms", &ref, why, sizeof why)) {
		row = row_add("python", "Python: publish() 64 MiB right after an SGD step (torch "
		              "threads: one per CPU)", "ms", py);
		row_ref(row, "torch copy_, same tensors, after a step", ref);
		row_target_ratio(row, 1.0);
	} else {
		row_skip("python", "Python: publish right after an SGD step", "%s", why);
	}
	free(out);
	return rc;
}
