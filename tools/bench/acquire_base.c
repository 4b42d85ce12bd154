/*
 * tools/bench/acquire_base.c — the acquire scenario against an earlier
 * release's own build: the 1-thread loop (tools/bench/baseline/acquire_loop.c)
 * built against that release's library and against this tree's, each run
 * with its own broker (their layouts may differ), alternately, so both see
 * the same machine.
 *
 * Only from a git checkout of the sources (the binary's ../.. holds .git
 * and the loop's source): the release, $WSYNC_BENCH_BASELINE (a git ref,
 * default ACQ_BASE_REF), is taken with git archive into
 * build/bench-baseline/<commit>/ and built there once (make all, its output
 * in make.log there), then reused. Where git, a compiler or that build is
 * not at hand, or $WSYNC_BENCH_BASELINE is "off" (the test suite's smoke
 * run), the caller falls back to its estimate, saying why.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acquire_base.h"
#include "bench_common.h"

#define BASE_BUILD_LIMIT_S 900     /* a make all of the old tree, once */
#define BASE_RUN_LIMIT_S   60

/* Runs argv (in dir when not NULL) for at most limit_s seconds: stdout into
 * out (NUL-terminated, may be NULL), stderr into the file log (NULL: the
 * same place). 0 when it exited 0. */
static int run_cmd(char *const argv[], const char *dir, const char *log, int limit_s,
                   char *out, size_t len)
{
	int64_t deadline = mono_ns() + (int64_t)limit_s * NS_PER_S;
	int fds[2], status = 0;
	size_t got = 0;
	pid_t pid;

	if (out && len)
		out[0] = '\0';
	if (pipe2(fds, O_CLOEXEC))
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		int lfd = log ? open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;

		setpgid(0, 0);
		dup2(fds[1], 1);
		dup2(lfd >= 0 ? lfd : fds[1], 2);
		if (dir && chdir(dir))
			_exit(126);
		/* the old tree's make must not take this one's */
		unsetenv("MAKEFLAGS");
		unsetenv("MFLAGS");
		unsetenv("MAKELEVEL");
		execvp(argv[0], argv);
		_exit(127);
	}
	close(fds[1]);
	if (pid < 0) {
		close(fds[0]);
		return -1;
	}
	for (;;) {
		struct pollfd pfd = { .fd = fds[0], .events = POLLIN };
		int64_t left = deadline - mono_ns();
		char sink[4096];
		ssize_t n;

		if (left <= 0) {
			kill(-pid, SIGKILL);
			break;
		}
		if (poll(&pfd, 1, (int)(left / NS_PER_MS) + 1) <= 0)
			continue;
		if (out && got + 1 < len)
			n = read(fds[0], out + got, len - 1 - got);
		else
			n = read(fds[0], sink, sizeof sink);
		if (n <= 0)
			break;
		if (out && got + 1 < len) {
			got += (size_t)n;
			out[got] = '\0';
		}
	}
	close(fds[0]);
	if (waitpid(pid, &status, 0) < 0)
		return -1;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static bool is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The source tree this binary was built in: <root>/build/bin/wsync-bench
 * (or another build directory of root). */
static int source_root(char *root, size_t len)
{
	char exe[PATH_MAX], path[PATH_MAX + 64], *slash;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);

	if (n <= 0)
		return -1;
	exe[n] = '\0';
	for (int up = 0; up < 3 && (slash = strrchr(exe, '/')); up++)
		*slash = '\0';
	snprintf(path, sizeof path, "%s/tools/bench/baseline/acquire_loop.c", exe);
	if (!is_file(path))
		return -1;
	snprintf(path, sizeof path, "%s/.git", exe);
	if (access(path, F_OK))
		return -1;
	return snprintf(root, len, "%s", exe) < (int)len ? 0 : -1;
}

/* Builds the loop against the headers in inc and the library in lib. */
static int build_loop(const char *root, const char *inc, const char *lib, const char *exe,
                      const char *log)
{
	char src[PATH_MAX], iflag[PATH_MAX + 4], lflag[PATH_MAX + 4], rpath[PATH_MAX + 16];
	char *argv[] = { "cc", "-O2", "-pthread", iflag, src, "-o", (char *)exe, lflag, "-lwsync",
	                 rpath, NULL };

	snprintf(src, sizeof src, "%s/tools/bench/baseline/acquire_loop.c", root);
	snprintf(iflag, sizeof iflag, "-I%s", inc);
	snprintf(lflag, sizeof lflag, "-L%s", lib);
	snprintf(rpath, sizeof rpath, "-Wl,-rpath,%s", lib);
	return run_cmd(argv, NULL, log, 120, NULL, 0);
}

/* Builds ref's tree under root/build/bench-baseline/<commit> unless done. */
static int build_base(const char *root, const char *ref, char *dir, size_t dlen,
                      char *why, size_t wlen)
{
	char sha[64], cmd[3 * PATH_MAX], stamp[PATH_MAX + 32], log[PATH_MAX + 32];
	char *rev[] = { "git", "-C", (char *)root, "rev-parse", "--verify", "--quiet", sha, NULL };
	char *sh[] = { "sh", "-c", cmd, NULL };
	char *make[] = { "nice", "-n", "10", "make", "-j2", "all", "BUILD=build", "SAN=", NULL };
	char out[128];

	snprintf(sha, sizeof sha, "%.40s^{commit}", ref);
	if (run_cmd(rev, NULL, "/dev/null", 30, out, sizeof out) || strlen(out) < 40) {
		snprintf(why, wlen, "git does not know %s in %s (set WSYNC_BENCH_BASELINE to a "
		         "commit of this repository)", ref, root);
		return -1;
	}
	out[40] = '\0';
	if (snprintf(dir, dlen, "%s/build/bench-baseline/%.12s", root, out) >= (int)dlen ||
	    snprintf(stamp, sizeof stamp, "%s/build.done", dir) >= (int)sizeof stamp ||
	    strchr(dir, '\'')) {
		snprintf(why, wlen, "the source tree's path is too long or has a quote");
		return -1;
	}
	if (is_file(stamp))
		return 0;
	say("acquire: building %s (%.12s) in %s, once", ref, out, dir);
	if (snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && git -C '%s' archive %s | "
	             "tar -x -C '%s'", dir, dir, root, out, dir) >= (int)sizeof cmd ||
	    run_cmd(sh, NULL, "/dev/null", 120, NULL, 0)) {
		snprintf(why, wlen, "git archive of %s into %s failed", ref, dir);
		return -1;
	}
	snprintf(log, sizeof log, "%s/make.log", dir);
	if (run_cmd(make, dir, log, BASE_BUILD_LIMIT_S, NULL, 0)) {
		snprintf(why, wlen, "the build of %s failed or took over %d s (see %s)", ref,
		         BASE_BUILD_LIMIT_S, log);
		return -1;
	}
	if (!is_file(strcat(strcpy(cmd, dir), "/build/bin/wsyncd"))) {
		snprintf(why, wlen, "the build of %s made no build/bin/wsyncd (see %s)", ref, log);
		return -1;
	}
	close(open(stamp, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
	return 0;
}

/* One run of a loop binary; its median ns per pair, or -1. */
static double run_loop(struct bench *b, const char *loop, const char *wsyncd, const char *tag,
                       int ms, char *why, size_t wlen)
{
	char sock[160], msa[16], log[160], out[256];
	char *argv[] = { (char *)loop, (char *)wsyncd, sock, msa, "1", NULL };
	double med = -1, min = -1;

	snprintf(sock, sizeof sock, "%s/acq-%s.sock", b->dir, tag);
	snprintf(msa, sizeof msa, "%d", ms);
	snprintf(log, sizeof log, "%s/acq-%s.log", b->dir, tag);
	if (run_cmd(argv, NULL, log, BASE_RUN_LIMIT_S, out, sizeof out) ||
	    sscanf(out, "ns_per_pair %lf %lf", &med, &min) != 2) {
		snprintf(why, wlen, "the %s loop failed (see %s)", tag, log);
		return -1;
	}
	return med;
}

int acq_against_base(struct bench *b, struct acq_base *res, char *why, size_t wlen)
{
	const char *ref = getenv("WSYNC_BENCH_BASELINE");
	char root[PATH_MAX], dir[PATH_MAX], inc[PATH_MAX + 16], lib[PATH_MAX + 16];
	char base_loop[PATH_MAX + 32], cur_loop[PATH_MAX + 32], base_wsyncd[PATH_MAX + 32];
	char exe[PATH_MAX], log[PATH_MAX + 32], *slash;
	double base[64], cur[64];
	int R = b->repeats < 3 ? 3 : b->repeats > 64 ? 64 : b->repeats, ms = b->quick ? 80 : 200;
	ssize_t n;

	if (!ref || !*ref)
		ref = ACQ_BASE_REF;
	snprintf(res->ref, sizeof res->ref, "%.40s", ref);
	if (!strcmp(ref, "off")) {
		snprintf(why, wlen, "WSYNC_BENCH_BASELINE=off");
		return -1;
	}
	if (source_root(root, sizeof root)) {
		snprintf(why, wlen, "not run from a git checkout of the sources (wsync-bench in "
		         "<checkout>/build/bin)");
		return -1;
	}
	if (build_base(root, ref, dir, sizeof dir, why, wlen))
		return -1;
	/* the old loop, against the old library */
	snprintf(inc, sizeof inc, "%s/libclient", dir);
	snprintf(lib, sizeof lib, "%s/build/lib", dir);
	snprintf(base_loop, sizeof base_loop, "%s/acquire-loop", dir);
	snprintf(log, sizeof log, "%s/acquire-loop.log", dir);
	if (!is_file(base_loop) && build_loop(root, inc, lib, base_loop, log)) {
		snprintf(why, wlen, "cannot build the loop against %s (no cc? see %s)", ref, log);
		return -1;
	}
	/* the same loop against this binary's library, ../lib beside it */
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0 || !(exe[n] = '\0', slash = strrchr(exe, '/'))) {
		snprintf(why, wlen, "cannot tell where this binary is");
		return -1;
	}
	*slash = '\0';
	snprintf(inc, sizeof inc, "%s/libclient", root);
	snprintf(lib, sizeof lib, "%s/../lib", exe);
	snprintf(cur_loop, sizeof cur_loop, "%s/acquire-loop", b->dir);
	snprintf(log, sizeof log, "%s/acquire-loop.log", b->dir);
	if (build_loop(root, inc, lib, cur_loop, log)) {
		snprintf(why, wlen, "cannot build the loop against this tree (see %s)", log);
		return -1;
	}
	snprintf(base_wsyncd, sizeof base_wsyncd, "%s/build/bin/wsyncd", dir);
	for (int i = 0; i < R; i++) {
		if ((base[i] = run_loop(b, base_loop, base_wsyncd, "base", ms, why, wlen)) < 0 ||
		    (cur[i] = run_loop(b, cur_loop, b->wsyncd, "current", ms, why, wlen)) < 0)
			return -1;
	}
	res->base_ns = stat_median(base, (size_t)R);
	res->cur_ns = stat_median(cur, (size_t)R);
	return 0;
}
