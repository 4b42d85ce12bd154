/*
 * tools/bench/proc.c — processes of wsync-bench: forked children, the
 * private broker, /proc readings, and cleanup that also runs when the bench
 * is interrupted.
 *
 * The signal path uses only calls that are safe in a signal handler (kill,
 * waitpid, nanosleep, openat, getdents64, unlinkat): it kills the children,
 * stops the broker (SIGTERM, so it unlinks its segments), removes the
 * temporary directory and any segment a broker left behind, then dies of the
 * same signal.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

#define MAX_CHILDREN 256

struct child_rec {
	pid_t pid;          /* 0: free */
	bool  group;        /* leads its own process group: kill the group */
	bool  exited;
	int   status;
};

static struct child_rec children[MAX_CHILDREN];
static struct bench *g_bench;           /* for the signal path */
static char shm_prefix[96];             /* wsync.<uid>.<instance>. */

/* ---- children ---------------------------------------------------------- */

static struct child_rec *child_find(pid_t pid)
{
	for (int i = 0; i < MAX_CHILDREN; i++)
		if (children[i].pid == pid)
			return &children[i];
	return NULL;
}

int child_track(pid_t pid, bool group)
{
	struct child_rec *c = child_find(0);

	if (!c)
		return -1;
	*c = (struct child_rec){ .pid = pid, .group = group };
	return 0;
}

static void child_defaults(pid_t parent)
{
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		_exit(127);
}

pid_t child_spawn(child_fn fn, void *arg)
{
	pid_t parent = getpid();
	pid_t pid;

	fflush(NULL);
	if (!child_find(0)) {
		say_error("too many child processes");
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		say_error("fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		int rc;

		memset(children, 0, sizeof children);   /* not ours to kill */
		child_defaults(parent);
		rc = fn(arg);
		fflush(NULL);
		_exit(rc & 0xff);
	}
	child_track(pid, false);
	return pid;
}

bool child_exited(pid_t pid)
{
	struct child_rec *c = child_find(pid);
	int st;

	if (!c)
		return true;
	if (!c->exited && waitpid(pid, &st, WNOHANG) == pid) {
		c->exited = true;
		c->status = st;
	}
	return c->exited;
}

static void child_kill(struct child_rec *c)
{
	if (c->exited)
		return;
	kill(c->group ? -c->pid : c->pid, SIGKILL);
	if (waitpid(c->pid, &c->status, 0) == c->pid)
		c->exited = true;
}

int child_reap(pid_t pid, int timeout_ms)
{
	struct child_rec *c = child_find(pid);
	int64_t deadline = mono_ns() + timeout_ms * NS_PER_MS;
	int code = -1;

	if (!c || pid <= 0)
		return -1;
	while (!child_exited(pid) && mono_ns() < deadline)
		sleep_ns(NS_PER_MS);
	if (!c->exited)
		child_kill(c);
	else if (c->group)
		kill(-c->pid, SIGKILL);   /* what it left in its group */
	if (c->exited && WIFEXITED(c->status))
		code = WEXITSTATUS(c->status);
	memset(c, 0, sizeof *c);
	return code;
}

void child_kill_all(void)
{
	for (int i = 0; i < MAX_CHILDREN; i++) {
		if (!children[i].pid)
			continue;
		child_kill(&children[i]);
		memset(&children[i], 0, sizeof children[i]);
	}
}

/* ---- /proc ------------------------------------------------------------------ */

static ssize_t read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n >= 0)
		buf[n] = '\0';
	return n;
}

static char proc_state(pid_t pid)
{
	char path[64], buf[512], *paren;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	if (read_small(path, buf, sizeof buf) <= 0)
		return '?';
	paren = strrchr(buf, ')');
	return paren && paren[1] == ' ' ? paren[2] : '?';
}

bool procs_sleeping(const pid_t *pids, int n)
{
	for (int i = 0; i < n; i++)
		if (proc_state(pids[i]) != 'S')
			return false;
	return true;
}

static int counter_wait(_Atomic int *counter, int want, int64_t timeout_ns,
                        const pid_t *pids, int n, bool spin)
{
	int64_t deadline = mono_ns() + timeout_ns;
	unsigned looks = 0;

	while (atomic_load_explicit(counter, memory_order_acquire) < want) {
		if ((++looks & (spin ? 4095 : 63)) == 0) {
			for (int i = 0; i < n; i++)
				if (child_exited(pids[i]))
					return -ECHILD;
			if (mono_ns() > deadline)
				return -ETIMEDOUT;
		}
		if (spin)
			sched_yield();
		else
			sleep_ns(20 * NS_PER_US);
	}
	return 0;
}

int wait_counter(_Atomic int *counter, int want, int64_t timeout_ns,
                 const pid_t *pids, int n)
{
	return counter_wait(counter, want, timeout_ns, pids, n, false);
}

int spin_counter(_Atomic int *counter, int want, int64_t timeout_ns,
                 const pid_t *pids, int n)
{
	return counter_wait(counter, want, timeout_ns, pids, n, true);
}

/* Sum of the CPU time of every thread of pid, from schedstat (ns). */
static int64_t schedstat_ns(pid_t pid)
{
	char path[320], buf[128];
	struct dirent *e;
	int64_t sum = 0;
	bool any = false;
	DIR *d;

	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	if (!(d = opendir(path)))
		return -1;
	while ((e = readdir(d))) {
		long long run;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
		if (read_small(path, buf, sizeof buf) > 0 && sscanf(buf, "%lld", &run) == 1) {
			sum += run;
			any = true;
		}
	}
	closedir(d);
	return any ? sum : -1;
}

/* utime + stime from /proc/<pid>/stat, in clock ticks converted to ns. */
static int64_t stat_cpu_ns(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	if (read_small(path, buf, sizeof buf) <= 0 || !(p = strrchr(buf, ')')))
		return -1;
	/* after ") ": state(3) ppid pgrp session tty tpgid flags minflt cminflt
	 * majflt cmajflt utime(14) stime(15) */
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
	           &ut, &st) != 2)
		return -1;
	return (int64_t)((ut + st) * (NS_PER_S / sysconf(_SC_CLK_TCK)));
}

int64_t broker_cpu_ns(const struct bench *b)
{
	int64_t ns = schedstat_ns(b->broker_pid);

	return ns >= 0 ? ns : stat_cpu_ns(b->broker_pid);
}

/* ---- files: removal that is safe in a signal handler ------------------------- */

/* Removes name (a file or a directory tree) under dirfd. */
static void rm_at(int dirfd, const char *name, int depth)
{
	char buf[4096];
	long n;
	int fd;

	if (!unlinkat(dirfd, name, 0) || (errno != EISDIR && errno != EPERM) || depth > 8)
		return;
	fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	while ((n = getdents64(fd, buf, sizeof buf)) > 0) {
		for (long off = 0; off < n;) {
			struct dirent64 *e = (struct dirent64 *)(buf + off);

			off += e->d_reclen;
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
				rm_at(fd, e->d_name, depth + 1);
		}
	}
	close(fd);
	unlinkat(dirfd, name, AT_REMOVEDIR);
}

static int shm_leftovers_remove(void)
{
	size_t plen = strlen(shm_prefix);
	char buf[4096];
	int fd, found = 0;
	long n;

	if (!plen || (fd = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return 0;
	while ((n = getdents64(fd, buf, sizeof buf)) > 0) {
		for (long off = 0; off < n;) {
			struct dirent64 *e = (struct dirent64 *)(buf + off);

			off += e->d_reclen;
			if (strncmp(e->d_name, shm_prefix, plen))
				continue;
			found++;
			rm_at(fd, e->d_name, 0);     /* the broker's private directory */
		}
	}
	close(fd);
	return found;
}

int cleanup_files(struct bench *b)
{
	int found;

	if (b->dir[0]) {
		rm_at(AT_FDCWD, b->dir, 0);
		b->dir[0] = '\0';
	}
	found = shm_leftovers_remove();
	return found;
}

/* ---- the broker ------------------------------------------------------------------ */

static void broker_log_tail(const struct bench *b)
{
	char buf[2048];
	ssize_t n = file_tail(b->broker_log, buf, sizeof buf);

	if (n <= 0)
		return;
	fprintf(stderr, "wsync-bench: the broker's log ends with:\n%s%s", buf,
	        buf[n - 1] == '\n' ? "" : "\n");
}

static int make_dir(struct bench *b)
{
	const char *tmp = getenv("TMPDIR");

	if (!tmp || !tmp[0] || strlen(tmp) > sizeof b->dir - sizeof "/wsync-bench.XXXXXX")
		tmp = "/tmp";
	snprintf(b->dir, sizeof b->dir, "%s/wsync-bench.XXXXXX", tmp);
	if (!mkdtemp(b->dir)) {
		say_error("create a temporary directory: %s", strerror(errno));
		b->dir[0] = '\0';
		return -1;
	}
	snprintf(b->endpoint, sizeof b->endpoint, "%s/bench.sock", b->dir);
	snprintf(b->broker_log, sizeof b->broker_log, "%s/wsyncd.log", b->dir);
	if (setenv("XDG_RUNTIME_DIR", b->dir, 1)) {
		say_error("setenv: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* Generous: three quarters of /dev/shm, at most 12 GiB. */
static unsigned long long shm_limit_bytes(void)
{
	unsigned long long lim = 12ull << 30;
	struct statvfs sv;

	if (!statvfs("/dev/shm", &sv)) {
		unsigned long long size = (unsigned long long)sv.f_blocks * sv.f_frsize;

		if (size / 4 * 3 < lim)
			lim = size / 4 * 3;
	}
	return lim;
}

static _Noreturn void broker_exec(const struct bench *b, pid_t parent)
{
	char limit[32];
	/* a private broker: nothing of it stays behind (--no-keep) */
	char *argv[] = { (char *)b->wsyncd, "--name", (char *)b->instance,
	                 "--socket", (char *)b->endpoint, "--shm-limit", limit,
	                 "--log-level", "warn", "--no-keep", NULL, NULL, NULL };
	int fd;

	snprintf(limit, sizeof limit, "%llu", shm_limit_bytes());
	if (b->huge_pages) {
		argv[10] = "--huge-pages";
		argv[11] = (char *)b->huge_pages;
	}
	setpgid(0, 0);          /* Ctrl-C reaches the bench, which stops it */
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) || getppid() != parent)
		_exit(127);
	fd = open(b->broker_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
		_exit(127);
	execv(b->wsyncd, argv);
	fprintf(stderr, "exec %s: %s\n", b->wsyncd, strerror(errno));
	_exit(127);
}

static int broker_wait_ready(struct bench *b)
{
	int64_t deadline = mono_ns() + 10 * NS_PER_S;
	wsync_client *c;
	char msg[512];
	int err;

	for (;;) {
		int st;

		err = wsync_connect(b->endpoint, "wsync-bench", &c);
		if (!err) {
			wsync_close(c);
			return 0;
		}
		if (waitpid(b->broker_pid, &st, WNOHANG) == b->broker_pid) {
			say_error("the broker exited while starting (status 0x%x)", st);
			b->broker_pid = 0;
			broker_log_tail(b);
			return -1;
		}
		if (mono_ns() > deadline)
			break;
		sleep_ns(10 * NS_PER_MS);
	}
	wsync_error_text(msg, sizeof msg, "connect to the broker", err);
	say_error("%s", msg);
	broker_log_tail(b);
	return -1;
}

static int broker_spawn(struct bench *b, pid_t parent)
{
	fflush(NULL);
	b->broker_pid = fork();
	if (b->broker_pid < 0) {
		say_error("fork: %s", strerror(errno));
		b->broker_pid = 0;
		return -1;
	}
	if (b->broker_pid == 0)
		broker_exec(b, parent);
	return broker_wait_ready(b);
}

int broker_start(struct bench *b)
{
	pid_t parent = getpid();

	snprintf(b->instance, sizeof b->instance, "bench-%d", (int)parent);
	snprintf(shm_prefix, sizeof shm_prefix, "wsync.%u.%s.", (unsigned)getuid(),
	         b->instance);
	if (make_dir(b))
		return -1;
	return broker_spawn(b, parent);
}

int broker_restart(struct bench *b, const char *huge_pages)
{
	if (broker_stop(b))
		return -1;
	b->huge_pages = huge_pages;
	return broker_spawn(b, getpid());
}

/* SIGTERM, then waits up to timeout; SIGKILL after. Returns the wait status
 * or -1 if it had to be killed. Safe in a signal handler. */
static int broker_terminate(pid_t pid, int64_t timeout_ns)
{
	struct timespec step = { 0, 5 * NS_PER_MS };
	int st;

	kill(pid, SIGTERM);
	for (int64_t waited = 0; waited < timeout_ns; waited += 5 * NS_PER_MS) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return st;
		nanosleep(&step, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return -1;
}

int broker_stop(struct bench *b)
{
	int st;

	if (b->broker_pid <= 0)
		return -1;
	st = broker_terminate(b->broker_pid, 15 * NS_PER_S);
	b->broker_pid = 0;
	if (st == -1) {
		say_error("the broker did not stop within 15 s of SIGTERM; killed");
		broker_log_tail(b);
		return -1;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		if (WIFSIGNALED(st))
			say_error("the broker died of signal %d", WTERMSIG(st));
		else
			say_error("the broker exited with status %d", WEXITSTATUS(st));
		broker_log_tail(b);
		return -1;
	}
	return 0;
}

/* ---- interruption ------------------------------------------------------------------- */

static void on_fatal_signal(int sig)
{
	struct bench *b = g_bench;

	for (int i = 0; i < MAX_CHILDREN; i++)
		if (children[i].pid > 0 && !children[i].exited)
			kill(children[i].group ? -children[i].pid : children[i].pid, SIGKILL);
	for (int i = 0; i < MAX_CHILDREN; i++)
		if (children[i].pid > 0 && !children[i].exited)
			waitpid(children[i].pid, NULL, 0);
	if (b && b->broker_pid > 0)
		broker_terminate(b->broker_pid, 5 * NS_PER_S);
	if (b && b->dir[0])
		rm_at(AT_FDCWD, b->dir, 0);
	shm_leftovers_remove();
	scale_restore_pages();
	signal(sig, SIG_DFL);
	raise(sig);
}

void cleanup_install(struct bench *b)
{
	struct sigaction sa;

	g_bench = b;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_fatal_signal;
	sigfillset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}
