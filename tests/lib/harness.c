/*
 * tests/lib/harness.c — see harness.h.
 *
 * Cleanup is the part that must not fail: a test that dies (assertion,
 * timeout, signal) must not leave a broker running or segments in /dev/shm.
 * Everything needed for it is copied into a static registry (a struct broker
 * usually lives in main's frame, gone by the time atexit handlers run), and
 * the cleanup itself uses only system calls so the signal handler may run it.
 */
#include "harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REG_MAX       8
#define CHILDREN_MAX  128

struct reg_entry {
	int   used;
	pid_t pid;
	char  prefix[128];   /* "wsync.<uid>.<name>." */
	char  dir[128];
	char  log[192];
};

static pid_t owner_pid;
static int inited;
static struct reg_entry reg[REG_MAX];
static pid_t children[CHILDREN_MAX];
static int instance_counter;

/* ---- time ------------------------------------------------------------------ */

int64_t harness_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t harness_real_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void harness_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- signal-safe cleanup ------------------------------------------------------ */

struct dirent64_raw {
	uint64_t       d_ino;
	int64_t        d_off;
	unsigned short d_reclen;
	unsigned char  d_type;
	char           d_name[];
};

static size_t s_len(const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}

static int s_prefix(const char *s, const char *prefix)
{
	while (*prefix)
		if (*s++ != *prefix++)
			return 0;
	return 1;
}

static int s_dot(const char *n)
{
	return n[0] == '.' && (n[1] == 0 || (n[1] == '.' && n[2] == 0));
}

/* Unlinks entries of dirfd whose name starts with prefix (NULL: every entry,
 * recursing into directories up to depth). Returns how many it removed. */
static int unlink_in(int dirfd, const char *prefix, int depth)
{
	char buf[4096] __attribute__((aligned(8)));
	int removed = 0, pass_removed;

	do {   /* unlinking while reading a directory may skip entries: repeat */
		pass_removed = 0;
		lseek(dirfd, 0, SEEK_SET);
		for (;;) {
			long n = syscall(SYS_getdents64, dirfd, buf, sizeof buf);
			if (n <= 0)
				break;
			for (long pos = 0; pos < n;) {
				struct dirent64_raw *d = (struct dirent64_raw *)(buf + pos);
				pos += d->d_reclen;
				if (s_dot(d->d_name))
					continue;
				if (prefix && !s_prefix(d->d_name, prefix))
					continue;
				if (d->d_type == DT_DIR) {
					if (depth <= 0)
						continue;
					int sub = openat(dirfd, d->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
					if (sub >= 0) {
						unlink_in(sub, NULL, depth - 1);
						close(sub);
					}
					if (unlinkat(dirfd, d->d_name, AT_REMOVEDIR) == 0)
						pass_removed++;
				} else if (unlinkat(dirfd, d->d_name, 0) == 0) {
					pass_removed++;
				}
			}
		}
		removed += pass_removed;
	} while (pass_removed > 0);
	return removed;
}

static void reg_kill_and_clean(struct reg_entry *r)
{
	if (r->pid > 0) {
		kill(r->pid, SIGKILL);
		waitpid(r->pid, NULL, 0);
		r->pid = 0;
	}
	int shm = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (shm >= 0) {
		unlink_in(shm, r->prefix, 1);    /* the instance's private directories */
		close(shm);
	}
	if (r->dir[0]) {
		int d = open(r->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (d >= 0) {
			unlink_in(d, NULL, 4);
			close(d);
		}
		rmdir(r->dir);
	}
	r->used = 0;
}

static void (*cleanup_hook)(void);
static void harness_init(void);

void harness_at_cleanup(void (*fn)(void))
{
	harness_init();          /* the exit and signal handlers that run it */
	cleanup_hook = fn;
}

static void cleanup_all(void)
{
	if (!inited || getpid() != owner_pid)
		return;
	for (int i = 0; i < CHILDREN_MAX; i++) {
		if (children[i] > 0) {
			kill(children[i], SIGKILL);
			waitpid(children[i], NULL, 0);
			children[i] = 0;
		}
	}
	for (int i = 0; i < REG_MAX; i++)
		if (reg[i].used)
			reg_kill_and_clean(&reg[i]);
	if (cleanup_hook) {
		void (*fn)(void) = cleanup_hook;

		cleanup_hook = NULL;
		fn();
	}
}

static void write_str(const char *s)
{
	ssize_t r = write(2, s, s_len(s));
	(void)r;
}

static void on_signal(int sig)
{
	if (getpid() != owner_pid) {
		if (sig == SIGPIPE) {
			write_str("harness: child killed by SIGPIPE (a write to a closed socket "
			          "without MSG_NOSIGNAL?)\n");
			_exit(1);
		}
		signal(sig, SIG_DFL);
		raise(sig);
		_exit(1);
	}
	switch (sig) {
	case SIGALRM:
		write_str("harness: FAIL: test ran out of time (harness alarm)\n");
		break;
	case SIGPIPE:
		write_str("harness: FAIL: SIGPIPE (a write to a closed socket without "
		          "MSG_NOSIGNAL?)\n");
		break;
	default:
		write_str("harness: terminated by a signal; cleaning up\n");
		break;
	}
	cleanup_all();
	_exit(1);
}

static void harness_init(void)
{
	if (inited && getpid() == owner_pid)
		return;
	inited = 1;
	owner_pid = getpid();
	atexit(cleanup_all);

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	int sigs[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGALRM, SIGPIPE };
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaction(sigs[i], &sa, NULL);

	/* A backstop for runs without tests/run.sh: give up before its limit. */
	unsigned limit = 55;
	const char *t = getenv("WSYNC_TEST_TIMEOUT");
	if (t && atoi(t) > 10)
		limit = (unsigned)atoi(t) - 5;
	alarm(limit);

	setvbuf(stdout, NULL, _IOLBF, 0);
}

/* ---- messages ------------------------------------------------------------------- */

void harness_log(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "[%d] ", (int)getpid());
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static void dump_file_tail(const char *path, int lines)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	static char buf[65536];
	off_t size = lseek(fd, 0, SEEK_END);
	off_t from = size > (off_t)sizeof buf - 1 ? size - (off_t)sizeof buf + 1 : 0;
	ssize_t n = pread(fd, buf, sizeof buf - 1, from);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = 0;
	char *p = buf + n;
	if (p[-1] == '\n')
		p--;
	int seen = 0;
	while (p > buf) {
		if (p[-1] == '\n' && ++seen >= lines)
			break;
		p--;
	}
	fprintf(stderr, "---- last lines of %s ----\n%s", path, p);
	if (buf[n - 1] != '\n')
		fputc('\n', stderr);
	fprintf(stderr, "----\n");
}

void harness_fail(const char *file, int line, const char *fmt, ...)
{
	/* the brokers' logs first, the failure last: a runner shows the tail */
	if (inited && getpid() == owner_pid) {
		for (int i = 0; i < REG_MAX; i++)
			if (reg[i].used)
				dump_file_tail(reg[i].log, 40);
	}
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s:%d: FAIL: ", file, line);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (!inited || getpid() != owner_pid)
		fprintf(stderr, " (in child process %d)", (int)getpid());
	fputc('\n', stderr);
	fflush(NULL);
	exit(1);
}

const char *harness_status_str(int status)
{
	static char buf[64];
	if (status == -1)
		snprintf(buf, sizeof buf, "killed after timing out");
	else if (WIFEXITED(status))
		snprintf(buf, sizeof buf, "exit %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, sizeof buf, "signal %d (%s)", WTERMSIG(status),
		         strsignal(WTERMSIG(status)));
	else
		snprintf(buf, sizeof buf, "status 0x%x", status);
	return buf;
}

/* ---- processes ---------------------------------------------------------------------- */

static void children_add(pid_t pid)
{
	for (int i = 0; i < CHILDREN_MAX; i++)
		if (children[i] == 0) {
			children[i] = pid;
			return;
		}
}

static void children_remove(pid_t pid)
{
	for (int i = 0; i < CHILDREN_MAX; i++)
		if (children[i] == pid)
			children[i] = 0;
}

/* Waits for pid to exit, up to timeout_ms (< 0: forever). 0 and *status
 * when it was reaped, -1 on timeout (not reaped). */
static int reap_within(pid_t pid, int timeout_ms, int *status)
{
	int64_t deadline = harness_mono_ns() + (int64_t)timeout_ms * HARNESS_MS;
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);
		if (r == pid)
			break;
		if (r < 0 && errno != EINTR) {
			if (pfd >= 0)
				close(pfd);
			*status = 0;
			return 0;   /* not our child (already reaped): nothing to wait for */
		}
		int64_t left = deadline - harness_mono_ns();
		if (timeout_ms >= 0 && left <= 0) {
			if (pfd >= 0)
				close(pfd);
			return -1;
		}
		int slice = timeout_ms < 0 || left > 100 * HARNESS_MS ? 100 : (int)(left / HARNESS_MS) + 1;
		if (pfd >= 0) {
			struct pollfd p = { .fd = pfd, .events = POLLIN };
			poll(&p, 1, slice);
		} else {
			harness_sleep_ms(slice < 5 ? slice : 5);
		}
	}
	if (pfd >= 0)
		close(pfd);
	return 0;
}

pid_t harness_fork(harness_child_fn fn, void *arg)
{
	harness_init();
	fflush(NULL);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		harness_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		int rc = fn(arg);
		fflush(NULL);
		exit(rc);
	}
	children_add(pid);
	return pid;
}

int harness_wait_status(pid_t pid, int timeout_ms)
{
	int status = 0;
	if (reap_within(pid, timeout_ms, &status) < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		children_remove(pid);
		return -1;
	}
	children_remove(pid);
	return status;
}

void harness_expect_exit0(pid_t pid, const char *what)
{
	int st = harness_wait_status(pid, HARNESS_WAIT_MS);
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		harness_fail(__FILE__, __LINE__, "%s (pid %d) ended with %s", what, (int)pid,
		             harness_status_str(st));
}

void harness_wait_sleeping(pid_t pid, int timeout_ms)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int64_t deadline = harness_mono_ns() + (int64_t)timeout_ms * HARNESS_MS;
	do {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return;
		ssize_t n = read(fd, buf, sizeof buf - 1);
		close(fd);
		if (n <= 0)
			return;
		buf[n] = 0;
		char *rp = strrchr(buf, ')');
		if (rp && rp[1] == ' ' && rp[2] == 'S')
			return;
		harness_sleep_ms(1);
	} while (harness_mono_ns() < deadline);
}

const char *harness_read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, len - 1);

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

int harness_run(char *const argv[], char *out, size_t outlen, int timeout_ms)
{
	harness_init();
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		harness_fail(__FILE__, __LINE__, "pipe: %s", strerror(errno));
	fflush(NULL);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		harness_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		int devnull = open("/dev/null", O_RDONLY);
		dup2(devnull, 0);
		dup2(p[1], 1);
		dup2(p[1], 2);
		close_range(3, ~0u, 0);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execv(argv[0], argv);
		dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	children_add(pid);
	close(p[1]);
	size_t used = 0;
	int64_t deadline = harness_mono_ns() + (int64_t)timeout_ms * HARNESS_MS;
	for (;;) {
		int64_t left = deadline - harness_mono_ns();
		if (left <= 0)
			break;
		struct pollfd pf = { .fd = p[0], .events = POLLIN };
		int r = poll(&pf, 1, (int)(left / HARNESS_MS) + 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		char tmp[4096];
		ssize_t n = read(p[0], tmp, sizeof tmp);
		if (n <= 0)
			break;
		size_t room = outlen > used + 1 ? outlen - used - 1 : 0;
		size_t take = (size_t)n < room ? (size_t)n : room;
		memcpy(out + used, tmp, take);
		used += take;
	}
	close(p[0]);
	if (outlen)
		out[used < outlen ? used : outlen - 1] = 0;
	int64_t left = deadline - harness_mono_ns();
	return harness_wait_status(pid, left > 0 ? (int)(left / HARNESS_MS) + 1 : 0);
}

/* ---- the broker ------------------------------------------------------------------------ */

const char *harness_wsyncd_path(void)
{
	static char path[PATH_MAX + 32];
	const char *env = getenv("WSYNC_WSYNCD");
	if (env && env[0])
		return env;
	const char *build = getenv("BUILD");
	snprintf(path, sizeof path, "%s/bin/wsyncd", build && build[0] ? build : "build");
	if (access(path, X_OK) == 0)
		return path;
	/* <root>/<BUILD>/tests/integ/<test> -> <root>/<BUILD>/bin/wsyncd */
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = 0;
		for (int up = 0; up < 3; up++) {
			char *slash = strrchr(exe, '/');
			if (!slash)
				break;
			*slash = 0;
		}
		snprintf(path, sizeof path, "%s/bin/wsyncd", exe);
		if (access(path, X_OK) == 0)
			return path;
	}
	return NULL;
}

int harness_use_fault_wsyncd(void)
{
	static char path[PATH_MAX + 32];
	const char *env = getenv("WSYNC_WSYNCD_FAULT");
	const char *build = getenv("BUILD");
	if (env && env[0]) {
		snprintf(path, sizeof path, "%s", env);
	} else {
		snprintf(path, sizeof path, "%s/tests/wsyncd-fault", build && build[0] ? build : "build");
		if (access(path, X_OK) != 0) {
			/* <root>/<BUILD>/tests/integ/<test> -> <root>/<BUILD>/tests/wsyncd-fault */
			char exe[PATH_MAX];
			ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
			if (n > 0) {
				exe[n] = 0;
				for (int up = 0; up < 2; up++) {
					char *slash = strrchr(exe, '/');
					if (slash)
						*slash = 0;
				}
				snprintf(path, sizeof path, "%s/wsyncd-fault", exe);
			}
		}
	}
	if (access(path, X_OK) != 0) {
		printf("SKIP: no broker with fault injection (%s; make tests builds it)\n", path);
		return -1;
	}
	setenv("WSYNC_WSYNCD", path, 1);
	return 0;
}

void harness_broker_dump_log(const struct broker *b, int lines)
{
	dump_file_tail(b->log, lines);
}

int harness_connect(const struct broker *b, const char *client_name, wsync_client **out)
{
	return wsync_connect(b->sock, client_name, out);
}

void harness_fakecuda_path(char *out, size_t len)
{
	const char *build = getenv("BUILD");
	char path[PATH_MAX], real[PATH_MAX];

	snprintf(path, sizeof path, "%s/tests/fakecuda/libcuda.so.1",
	         build && build[0] ? build : "build");
	TEST_ASSERT_MSG(realpath(path, real) != NULL, "no fake driver at %s", path);
	TEST_ASSERT_MSG(strlen(real) < len, "fake driver path %s too long", real);
	snprintf(out, len, "%s", real);
}

static int broker_spawn(struct broker *b)
{
	const char *path = harness_wsyncd_path();
	if (!path) {
		fprintf(stderr, "harness: no wsyncd binary (set WSYNC_WSYNCD or BUILD)\n");
		return -1;
	}
	char *argv[10 + HARNESS_MAX_ARGS];
	int n = 0;
	argv[n++] = (char *)path;
	argv[n++] = "--name";
	argv[n++] = b->name;
	if (!b->default_socket) {
		argv[n++] = "--socket";
		argv[n++] = b->sock;
	}
	int pages_given = 0, keep_given = 0;
	for (int i = 0; i < b->n_args; i++) {
		pages_given |= !strcmp(b->args[i], "--huge-pages");
		keep_given |= !strcmp(b->args[i], "--keep") || !strcmp(b->args[i], "--no-keep") ||
		              !strcmp(b->args[i], HARNESS_KEEP_DEFAULT);
		if (strcmp(b->args[i], HARNESS_KEEP_DEFAULT))
			argv[n++] = b->args[i];
	}
	/* A clean stop keeps each model's latest version for the next start
	 * by default; tests that do not test that stop clean (and check that
	 * nothing is left). */
	if (!keep_given)
		argv[n++] = "--no-keep";
	/* The same pages on every machine: huge-page slabs are not adopted
	 * across a restart, which tests of adoption count on. Tests of huge
	 * pages say --huge-pages themselves. */
	if (!pages_given) {
		argv[n++] = "--huge-pages";
		argv[n++] = "off";
	}
	argv[n] = NULL;

	fflush(NULL);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "harness: fork: %s\n", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		int logfd = open(b->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		int devnull = open("/dev/null", O_RDONLY);
		dup2(devnull, 0);
		dup2(logfd, 1);
		dup2(logfd, 2);
		/* The broker must not hold the test's pipes or client sockets. */
		close_range(3, ~0u, 0);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execv(path, argv);
		dprintf(2, "harness: exec %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	b->pid = pid;
	reg[b->reg].pid = pid;

	int64_t deadline = harness_mono_ns() + 5 * HARNESS_S;
	int last = 0;
	for (;;) {
		int status;
		if (waitpid(pid, &status, WNOHANG) == pid) {
			b->pid = 0;
			reg[b->reg].pid = 0;
			b->last_status = status;
			fprintf(stderr, "harness: wsyncd %s ended during startup with %s\n",
			        b->name, harness_status_str(status));
			harness_broker_dump_log(b, 40);
			return -1;
		}
		wsync_client *c = NULL;
		last = wsync_connect(b->sock, "harness-probe", &c);
		if (last == 0) {
			wsync_close(c);
			return 0;
		}
		if (harness_mono_ns() > deadline)
			break;
		harness_sleep_ms(10);
	}
	fprintf(stderr, "harness: wsyncd %s did not accept a client within 5 s (last: %s: %s)\n",
	        b->name, wsync_strerror(last), wsync_errmsg());
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	b->pid = 0;
	reg[b->reg].pid = 0;
	harness_broker_dump_log(b, 40);
	return -1;
}

static int broker_setup(struct broker *b, va_list ap)
{
	harness_init();
	memset(b, 0, sizeof *b);
	b->reg = -1;
	for (int i = 0; i < REG_MAX; i++)
		if (!reg[i].used) {
			b->reg = i;
			break;
		}
	if (b->reg < 0) {
		fprintf(stderr, "harness: too many brokers in one test\n");
		return -1;
	}

	snprintf(b->name, sizeof b->name, "t%d-%d", (int)getpid(), ++instance_counter);
	snprintf(b->dir, sizeof b->dir, "/tmp/wsync-test-XXXXXX");
	if (!mkdtemp(b->dir)) {
		fprintf(stderr, "harness: mkdtemp: %s\n", strerror(errno));
		return -1;
	}
	snprintf(b->sock, sizeof b->sock, "%s/%s.sock", b->dir, b->name);
	snprintf(b->log, sizeof b->log, "%s/wsyncd.log", b->dir);

	struct reg_entry *r = &reg[b->reg];
	memset(r, 0, sizeof *r);
	r->used = 1;
	snprintf(r->prefix, sizeof r->prefix, "wsync.%u.%s.", (unsigned)getuid(), b->name);
	snprintf(r->dir, sizeof r->dir, "%s", b->dir);
	snprintf(r->log, sizeof r->log, "%s", b->log);

	const char *a;
	while ((a = va_arg(ap, const char *)) != NULL) {
		if (strcmp(a, HARNESS_OTHER_USERS) == 0) {
			if (chmod(b->dir, 0755) || b->n_args + 2 > HARNESS_MAX_ARGS) {
				fprintf(stderr, "harness: cannot admit other users: %s\n",
				        strerror(errno));
				return -1;
			}
			snprintf(b->args[b->n_args++], sizeof b->args[0], "--group");
			snprintf(b->args[b->n_args++], sizeof b->args[0], "nogroup");
			continue;
		}
		if (strcmp(a, HARNESS_DEFAULT_SOCKET) == 0) {
			b->default_socket = 1;
			snprintf(b->sock, sizeof b->sock, "%s/wsync/%s.sock", b->dir, b->name);
			continue;
		}
		if (b->n_args == HARNESS_MAX_ARGS) {
			fprintf(stderr, "harness: too many broker arguments\n");
			return -1;
		}
		snprintf(b->args[b->n_args++], sizeof b->args[0], "%s", a);
	}

	setenv("XDG_RUNTIME_DIR", b->dir, 1);
	setenv("WSYNC_ENDPOINT", b->sock, 1);
	return 0;
}

int harness_broker_prepare(struct broker *b, ...)
{
	va_list ap;
	va_start(ap, b);
	int rc = broker_setup(b, ap);
	va_end(ap);
	return rc;
}

int harness_broker_start(struct broker *b, ...)
{
	va_list ap;
	va_start(ap, b);
	int rc = broker_setup(b, ap);
	va_end(ap);
	return rc ? rc : broker_spawn(b);
}

int harness_broker_stop(struct broker *b)
{
	if (b->pid <= 0) {
		fprintf(stderr, "harness: broker %s is not running\n", b->name);
		return -1;
	}
	kill(b->pid, SIGTERM);
	int status = 0;
	if (reap_within(b->pid, 10000, &status) < 0) {
		fprintf(stderr, "harness: wsyncd %s did not exit within 10 s of SIGTERM\n", b->name);
		kill(b->pid, SIGKILL);
		waitpid(b->pid, NULL, 0);
		b->pid = 0;
		reg[b->reg].pid = 0;
		harness_broker_dump_log(b, 40);
		return -1;
	}
	b->pid = 0;
	reg[b->reg].pid = 0;
	b->last_status = status;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "harness: wsyncd %s ended with %s after SIGTERM (want exit 0)\n",
		        b->name, harness_status_str(status));
		harness_broker_dump_log(b, 40);
		return -1;
	}
	return 0;
}

void harness_broker_kill(struct broker *b)
{
	if (b->pid <= 0)
		return;
	kill(b->pid, SIGKILL);
	int status = 0;
	waitpid(b->pid, &status, 0);
	b->last_status = status;
	b->pid = 0;
	reg[b->reg].pid = 0;
}

int harness_broker_restart(struct broker *b)
{
	if (b->pid > 0) {
		fprintf(stderr, "harness: restart of %s while it runs\n", b->name);
		return -1;
	}
	int fd = open(b->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd >= 0) {
		dprintf(fd, "---- harness: restarting %s ----\n", b->name);
		close(fd);
	}
	setenv("XDG_RUNTIME_DIR", b->dir, 1);
	setenv("WSYNC_ENDPOINT", b->sock, 1);
	return broker_spawn(b);
}

void harness_broker_finish_at(struct broker *b, const char *file, int line)
{
	if (harness_broker_stop(b) != 0)
		harness_fail(file, line, "broker %s did not stop cleanly", b->name);
	int left = harness_shm_leftovers(b, 1);
	if (left)
		harness_fail(file, line, "%d segment(s) of %s left in /dev/shm after a "
		             "clean stop", left, b->name);
}

void harness_broker_forget(struct broker *b)
{
	if (b->reg >= 0 && b->reg < REG_MAX && reg[b->reg].used)
		reg_kill_and_clean(&reg[b->reg]);
	b->reg = -1;
}

int harness_shm_leftovers(const struct broker *b, int print)
{
	char prefix[128];
	snprintf(prefix, sizeof prefix, "wsync.%u.%s.", (unsigned)getuid(), b->name);
	DIR *d = opendir("/dev/shm");
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		n++;
		if (print)
			fprintf(stderr, "left in /dev/shm: %s\n", e->d_name);
		/* a private directory: what is in it counts too */
		int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		DIR *sd = sub >= 0 ? fdopendir(sub) : NULL;
		if (!sd) {
			if (sub >= 0)
				close(sub);
			continue;
		}
		struct dirent *f;
		while ((f = readdir(sd)) != NULL) {
			if (f->d_name[0] == '.')
				continue;
			n++;
			if (print)
				fprintf(stderr, "left in /dev/shm: %s/%s\n", e->d_name, f->d_name);
		}
		closedir(sd);
	}
	closedir(d);
	return n;
}

int harness_seg_path(const struct broker *b, const char *seg, char *buf, size_t len)
{
	char state[sizeof b->dir + 96], dir[256];
	snprintf(state, sizeof state, "%s/wsync/%s.state", b->dir, b->name);
	int fd = open(state, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, dir, sizeof dir - 1);
	close(fd);
	if (n <= 0)
		return -1;
	dir[n] = 0;
	dir[strcspn(dir, "\n")] = 0;
	n = snprintf(buf, len, "/dev/shm/%s%s%s", dir, seg[0] ? "/" : "", seg);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int harness_broker_fd_count(const struct broker *b)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd", (int)b->pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

long harness_broker_rss_kb(const struct broker *b)
{
	char path[64], buf[4096];
	const char *at;

	snprintf(path, sizeof path, "/proc/%d/status", (int)b->pid);
	harness_read_file(path, buf, sizeof buf);
	at = strstr(buf, "VmRSS:");
	return at ? strtol(at + 6, NULL, 10) : -1;
}

long harness_broker_cpu_ticks(const struct broker *b)
{
	char path[64], buf[1024];
	const char *at;
	unsigned long ut = 0, st = 0;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)b->pid);
	harness_read_file(path, buf, sizeof buf);
	/* the fields after the command name, which may hold spaces and ')' */
	at = strrchr(buf, ')');
	if (!at || sscanf(at + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
	                  &ut, &st) != 2)
		return -1;
	return (long)(ut + st);
}

int harness_broker_fd_settle(const struct broker *b, int want, int timeout_ms)
{
	int64_t end = harness_mono_ns() + (int64_t)timeout_ms * HARNESS_MS;
	int n = harness_broker_fd_count(b);
	while (n > want && harness_mono_ns() < end) {
		harness_sleep_ms(50);
		n = harness_broker_fd_count(b);
	}
	return n;
}

int harness_raw_connect(const struct broker *b)
{
	struct sockaddr_un a;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memset(&a, 0, sizeof a);
	a.sun_family = AF_UNIX;
	if (strlen(b->sock) >= sizeof a.sun_path) {
		close(fd);
		return -ENAMETOOLONG;
	}
	memcpy(a.sun_path, b->sock, strlen(b->sock) + 1);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

int harness_raw_send(int fd, const void *buf, size_t len, const int *fds, int nfds)
{
	struct iovec iov = { (void *)buf, len };
	union {
		char buf[CMSG_SPACE(sizeof(int) * 64)];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh;
	if (nfds < 0 || nfds > 64)
		return -EINVAL;
	memset(&mh, 0, sizeof mh);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (nfds > 0) {
		memset(&ctl, 0, sizeof ctl);
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
	if (n < 0)
		return -errno;
	return n == (ssize_t)len ? 0 : -EMSGSIZE;
}

uint64_t harness_publish_verify(wsync_pub *p, wsync_sub *s, uint64_t step)
{
	uint64_t version = 0;
	wsync_view v;

	TEST_OK(harness_publish(p, step, 5 * HARNESS_S, &version));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, version);
	TEST_EQ_U64(v.step, step);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	return version;
}

void harness_publish_and_read(const struct broker *b, const char *model, uint64_t step)
{
	wsync_client *c;
	wsync_pub *p;
	wsync_sub *s;
	int rc;
	TEST_OK(harness_connect(b, "publish-and-read", &c));
	int64_t deadline = harness_mono_ns() + 5 * HARNESS_S;
	while ((rc = harness_pub_open_2t(c, model, 2, &p)) == -EBUSY &&
	       harness_mono_ns() < deadline)
		harness_sleep_ms(10);
	TEST_RC(rc, 0);
	TEST_OK(wsync_sub_open(c, model, &s));
	harness_publish_verify(p, s, step);
	wsync_sub_close(s);
	wsync_pub_close(p);
	wsync_close(c);
}

/* ---- handshakes -------------------------------------------------------------------------- */

void chan_open(struct chan *c)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		harness_fail(__FILE__, __LINE__, "pipe: %s", strerror(errno));
	c->rd = p[0];
	c->wr = p[1];
}

void chan_close(struct chan *c)
{
	if (c->rd >= 0)
		close(c->rd);
	if (c->wr >= 0)
		close(c->wr);
	c->rd = c->wr = -1;
}

void chan_send(struct chan *c, uint64_t v)
{
	ssize_t n;
	do
		n = write(c->wr, &v, sizeof v);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof v)
		harness_fail(__FILE__, __LINE__, "chan_send: %s", n < 0 ? strerror(errno) : "short write");
}

uint64_t chan_recv(struct chan *c, pid_t peer)
{
	int64_t deadline = harness_mono_ns() + (int64_t)HARNESS_WAIT_MS * HARNESS_MS;
	for (;;) {
		struct pollfd p = { .fd = c->rd, .events = POLLIN };
		int r = poll(&p, 1, 50);
		if (r > 0) {
			uint64_t v;
			ssize_t n = read(c->rd, &v, sizeof v);
			if (n == (ssize_t)sizeof v)
				return v;
			if (n < 0 && errno == EINTR)
				continue;
			harness_fail(__FILE__, __LINE__, "chan_recv: %s",
			             n == 0 ? "the other side closed the pipe" :
			             n < 0 ? strerror(errno) : "short read");
		}
		if (peer > 0) {
			siginfo_t si;
			memset(&si, 0, sizeof si);
			if (waitid(P_PID, (id_t)peer, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
			    si.si_pid == peer) {
				p.revents = 0;
				if (poll(&p, 1, 0) > 0)
					continue;   /* it wrote before it exited: read that */
				harness_fail(__FILE__, __LINE__,
				             "child %d ended (%s %d) before answering", (int)peer,
				             si.si_code == CLD_EXITED ? "exit" : "signal", si.si_status);
			}
		}
		if (harness_mono_ns() > deadline)
			harness_fail(__FILE__, __LINE__, "no handshake from %s within %d ms",
			             peer > 0 ? "child" : "parent", HARNESS_WAIT_MS);
	}
}

/* ---- contents ------------------------------------------------------------------------------ */

void harness_fill(void *base, size_t bytes, uint64_t step)
{
	uint64_t *w = base;
	size_t n = bytes / 8;
	for (size_t i = 0; i < n; i++)
		w[i] = harness_word(step, i);
}

int harness_verify(const void *base, size_t bytes, uint64_t step)
{
	if (!base) {
		fprintf(stderr, "verify: base is NULL\n");
		return -1;
	}
	if (bytes == 0 || bytes % 8) {
		fprintf(stderr, "verify: bad size %zu\n", bytes);
		return -1;
	}
	const volatile uint64_t *w = base;
	size_t n = bytes / 8, bad = 0, first = 0;
	uint64_t got = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t v = w[i];
		if (v != harness_word(step, i)) {
			if (!bad++) {
				first = i;
				got = v;
			}
		}
	}
	if (bad) {
		fprintf(stderr, "verify: %zu of %zu words differ from the pattern of step %llu; "
		        "first at word %zu: %#llx, expected %#llx\n", bad, n,
		        (unsigned long long)step, first, (unsigned long long)got,
		        (unsigned long long)harness_word(step, first));
		return -1;
	}
	return 0;
}

int harness_verify_view(const wsync_view *v)
{
	return harness_verify(v->base, v->bytes, v->step);
}

int harness_fill_parts(const wsync_slab *slab, const wsync_shard *parts, size_t n,
                       uint64_t step)
{
	for (size_t i = 0; i < n; i++) {
		const wsync_tensor_desc *d = &slab->tensors[parts[i].tensor];
		uint64_t cols = d->ndim == 2 ? d->shape[1] : 1, k = 0;
		wsync_slice s;
		uint32_t *buf;
		int rc = wsync_slab_part(slab, i, &s);

		if (rc)
			return rc;
		buf = malloc(s.rows * s.row_bytes + 4);
		if (!buf)
			return -ENOMEM;
		/* element index in the whole tensor of word j of run r */
		for (uint64_t r = 0; r < s.rows; r++)
			for (uint64_t j = 0; j < s.row_bytes / 4; j++) {
				uint64_t e = j;

				if (parts[i].dim == 1)
					e = r * cols + parts[i].start + j;
				else if (parts[i].dim == 0)
					e = parts[i].start * cols + r * (s.row_bytes / 4) + j;
				buf[k++] = harness_elem_word(step, parts[i].tensor, e);
			}
		wsync_slice_write(slab->base, buf, &s);
		free(buf);
	}
	return 0;
}

int harness_verify_tensors(const wsync_view *v)
{
	for (uint32_t t = 0; t < v->n_tensors; t++) {
		const wsync_tensor_desc *d = &v->tensors[t];
		const volatile uint32_t *w = (const uint32_t *)((const char *)v->base + d->offset);
		uint64_t n = wsync_tensor_bytes(d) / 4;

		for (uint64_t e = 0; e < n; e++)
			if (w[e] != harness_elem_word(v->step, t, e)) {
				harness_log("v%llu step %llu: tensor %u element %llu is 0x%08x",
				            (unsigned long long)v->version,
				            (unsigned long long)v->step, t, (unsigned long long)e,
				            w[e]);
				return -1;
			}
	}
	return 0;
}

/* ---- models ----------------------------------------------------------------------------------- */

void harness_desc(wsync_tensor_desc *d, const char *name, uint32_t dtype,
                  uint32_t ndim, const uint64_t *shape)
{
	memset(d, 0, sizeof *d);
	snprintf(d->name, sizeof d->name, "%s", name);
	d->dtype = dtype;
	d->ndim = ndim;
	for (uint32_t i = 0; i < ndim && i < WSYNC_MAX_DIMS; i++)
		d->shape[i] = shape[i];
}

size_t harness_model_2t(wsync_tensor_desc d[2])
{
	harness_desc(&d[0], "policy.weight", WSYNC_F32, 2, (const uint64_t[]){ 64, 129 });
	harness_desc(&d[1], "policy.bias", WSYNC_F32, 1, (const uint64_t[]){ 129 });
	return 2;
}

int harness_pub_open_2t(wsync_client *c, const char *model, uint32_t slots, wsync_pub **out)
{
	wsync_tensor_desc d[2];
	size_t n = harness_model_2t(d);
	wsync_model_opts o;
	memset(&o, 0, sizeof o);
	o.slots = slots;
	return wsync_pub_open(c, model, d, n, &o, out);
}

int harness_publish(wsync_pub *p, uint64_t step, int64_t begin_timeout_ns, uint64_t *version)
{
	wsync_slab s;
	memset(&s, 0, sizeof s);
	int rc = wsync_pub_begin(p, begin_timeout_ns, &s);
	if (rc != 0)
		return rc;
	if (!s.base || s.bytes == 0 || s.bytes % 8) {
		fprintf(stderr, "harness_publish: begin gave base %p bytes %zu\n", s.base, s.bytes);
		return -EFAULT;
	}
	harness_fill(s.base, s.bytes, step);
	return wsync_pub_commit(p, step, version);
}

/* ---- odds and ends ------------------------------------------------------------------------------- */

int harness_mapping_of(const void *addr, char perms[5], char *path, size_t pathlen)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -1;
	char line[1024];
	uintptr_t a = (uintptr_t)addr;
	int found = -1;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		char p[8];
		int off = 0;
		if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &lo, &hi, p, &off) < 3)
			continue;
		if (a < lo || a >= hi)
			continue;
		memcpy(perms, p, 4);
		perms[4] = 0;
		const char *rest = off > 0 ? line + off : "";
		snprintf(path, pathlen, "%s", rest);
		size_t l = strlen(path);
		while (l && (path[l - 1] == '\n' || path[l - 1] == ' '))
			path[--l] = 0;
		found = 0;
		break;
	}
	fclose(f);
	return found;
}

int harness_other_user(const char *what, uid_t *uid, gid_t *gid)
{
	struct passwd *pw;
	struct group *gr;

	if (geteuid() != 0) {
		printf("SKIP: needs root to %s under another uid\n", what);
		return HARNESS_SKIP;
	}
	pw = getpwnam("nobody");
	gr = getgrnam("nogroup");
	if (!pw || !gr) {
		printf("SKIP: no user 'nobody' or group 'nogroup'\n");
		return HARNESS_SKIP;
	}
	*uid = pw->pw_uid;
	*gid = gr->gr_gid;
	return 0;
}
