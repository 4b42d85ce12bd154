/*
 * tools/demo/main.c — wsync-demo: main, and the driver, which starts a private
 * wsyncd, one trainer and N collectors, stops them in order (trainer,
 * collectors, broker) and prints a summary. demo.h describes the pieces.
 */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "demo.h"

static const char usage_text[] =
	"usage: wsync-demo [--wsyncd PATH] [--seconds N] [--collectors N] [--mib N]\n"
	"                  [--hz N] [--tensors N] [--model M] [--timeout S]\n"
	"       wsync-demo trainer [--name NAME] [--model M] [--mib N] [--hz N] [--tensors N]\n"
	"                          [--timeout S]\n"
	"       wsync-demo collector [--name NAME] [--model M] [--id K] [--timeout S]\n"
	"       wsync-demo --version\n"
	"\n"
	"Without a role, starts a private wsyncd, one trainer and N collectors, lets\n"
	"them run, stops them in order (trainer, collectors, broker) and prints a\n"
	"summary. Exits 0 only if every collector saw a version, every byte of every\n"
	"view matched, and every process exited cleanly.\n"
	"\n"
	"  --wsyncd PATH     broker to run (default: wsyncd next to this program,\n"
	"                    else the one in PATH)\n"
	"  --seconds N       how long the trainer publishes (default 10)\n"
	"  --collectors N    collector processes, 1..64 (default 4)\n"
	"  --mib N           model size in MiB (default 32)\n"
	"  --hz N            versions published per second (default 10)\n"
	"  --tensors N       tensors in the model (default 8)\n"
	"  --model M         the model's name (default " MODEL_NAME ")\n"
	"  --timeout S       the roles' --timeout: how long the broker gets to answer\n"
	"                    each connect and round trip (default 2)\n"
	"  -h, --help        this text\n"
	"\n"
	"Run 'wsync-demo trainer --help' or 'wsync-demo collector --help' for the\n"
	"roles, which also work on their own against any broker.\n";

/* ---- the event pump ---- */

static size_t demo_children(struct demo *d, struct child **out)
{
	size_t n = 0;

	out[n++] = &d->broker;
	out[n++] = &d->trainer;
	for (size_t i = 0; i < d->o.collectors; i++)
		out[n++] = &d->collectors[i];
	return n;
}

static void demo_reap(struct demo *d)
{
	struct child *all[2 + MAX_COLLECTORS];
	size_t n = demo_children(d, all);
	char status[96];

	for (size_t i = 0; i < n; i++) {
		struct child *ch = all[i];

		if (!ch->running || waitpid(ch->pid, &ch->status, WNOHANG) != ch->pid)
			continue;
		ch->running = false;
		if (ch->stopping)
			continue;
		d->unexpected_exit = true;
		child_describe_status(ch, status, sizeof status);
		say_error("%s ended before it was stopped: %s", ch->label, status);
	}
}

static void demo_kill_all(struct demo *d, int sig)
{
	struct child *all[2 + MAX_COLLECTORS];
	size_t n = demo_children(d, all);

	for (size_t i = 0; i < n; i++) {
		if (all[i]->running) {
			all[i]->stopping = true;
			kill(all[i]->pid, sig);
		}
	}
}

static void demo_read_signals(struct demo *d)
{
	struct signalfd_siginfo si;

	while (read(d->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
		if (si.ssi_signo == SIGCHLD) {
			demo_reap(d);
			continue;
		}
		if (++d->interrupts == 1) {
			say_error("interrupted: stopping (again to kill everything)");
		} else {
			say_error("interrupted again: killing everything");
			demo_kill_all(d, SIGKILL);
		}
	}
}

/* Waits up to timeout_ms for child output or a signal, and handles both. */
static void demo_pump(struct demo *d, int timeout_ms)
{
	struct child *all[2 + MAX_COLLECTORS], *owner[3 + MAX_COLLECTORS];
	struct pollfd pfd[3 + MAX_COLLECTORS];
	size_t n_all = demo_children(d, all), n = 0;
	int r;

	pfd[n++] = (struct pollfd){ .fd = d->sigfd, .events = POLLIN };
	for (size_t i = 0; i < n_all; i++) {
		if (all[i]->out_fd < 0)
			continue;
		owner[n] = all[i];
		pfd[n++] = (struct pollfd){ .fd = all[i]->out_fd, .events = POLLIN };
	}
	r = poll(pfd, n, timeout_ms);
	if (r < 0 && errno != EINTR)
		say_sys_error("poll");
	if (r <= 0)
		return;
	if (pfd[0].revents)
		demo_read_signals(d);
	for (size_t i = 1; i < n; i++)
		if (pfd[i].revents)
			child_read_output(owner[i]);
}

static bool children_done(struct child *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (list[i]->running || list[i]->out_fd >= 0)
			return false;
	return true;
}

/* SIGTERM to every listed child, then waits (reading their output) until
 * all have exited, SIGKILL for those still running after grace_ms. */
static void demo_stop(struct demo *d, struct child *const *list, size_t n, int64_t grace_ms)
{
	int64_t deadline = now_ns(CLOCK_MONOTONIC) + grace_ms * NS_PER_MS;

	for (size_t i = 0; i < n; i++) {
		if (list[i]->running) {
			list[i]->stopping = true;
			kill(list[i]->pid, SIGTERM);
		}
	}
	while (!children_done(list, n) && now_ns(CLOCK_MONOTONIC) < deadline)
		demo_pump(d, 50);
	for (size_t i = 0; i < n; i++) {
		struct child *ch = list[i];

		if (ch->running) {
			say_error("%s did not stop within %" PRId64 " ms: killing it",
			          ch->label, grace_ms);
			kill(ch->pid, SIGKILL);
			waitpid(ch->pid, &ch->status, 0);
			ch->running = false;
		}
	}
	deadline = now_ns(CLOCK_MONOTONIC) + NS_PER_S;
	while (!children_done(list, n) && now_ns(CLOCK_MONOTONIC) < deadline)
		demo_pump(d, 50);
	for (size_t i = 0; i < n; i++) {
		if (list[i]->out_fd >= 0) {
			close(list[i]->out_fd);
			list[i]->out_fd = -1;
		}
	}
}

/* ---- setup, run, cleanup ---- */

static int block_signals(void)
{
	sigset_t set;
	int fd;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &set, NULL)) {
		say_sys_error("block signals");
		return -1;
	}
	fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (fd < 0)
		say_sys_error("signalfd");
	return fd;
}

static int self_path(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);

	if (n < 0) {
		say_sys_error("readlink /proc/self/exe");
		return -1;
	}
	buf[n] = '\0';
	return 0;
}

/* --wsyncd, else wsyncd next to this program, else "wsyncd" from PATH. */
static void broker_path(struct demo *d)
{
	char *slash;

	if (d->o.wsyncd) {
		snprintf(d->wsyncd, sizeof d->wsyncd, "%s", d->o.wsyncd);
		return;
	}
	snprintf(d->wsyncd, sizeof d->wsyncd, "%s", d->self);
	slash = strrchr(d->wsyncd, '/');
	if (slash && (size_t)(slash - d->wsyncd) + sizeof "/wsyncd" <= sizeof d->wsyncd) {
		strcpy(slash + 1, "wsyncd");
		if (access(d->wsyncd, X_OK) == 0)
			return;
	}
	snprintf(d->wsyncd, sizeof d->wsyncd, "wsyncd");
}

/* A private directory, also the children's XDG_RUNTIME_DIR, so the broker's
 * run directory, lock and socket never meet another broker's. */
static int demo_make_dir(struct demo *d)
{
	const char *tmp = getenv("TMPDIR");

	if (!tmp || !tmp[0] || strlen(tmp) > sizeof d->dir - sizeof "/wsync-demo.XXXXXX")
		tmp = "/tmp";
	snprintf(d->dir, sizeof d->dir, "%s/wsync-demo.XXXXXX", tmp);
	if (!mkdtemp(d->dir)) {
		say_sys_error("create a temporary directory");
		d->dir[0] = '\0';
		return -1;
	}
	snprintf(d->socket, sizeof d->socket, "%s/demo.sock", d->dir);
	snprintf(d->log, sizeof d->log, "%s/wsyncd.log", d->dir);
	if (setenv("XDG_RUNTIME_DIR", d->dir, 1)) {
		say_sys_error("setenv XDG_RUNTIME_DIR");
		return -1;
	}
	return 0;
}

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb;
	(void)type;
	(void)ftw;
	if (remove(path))
		say_error("remove %s: %s", path, strerror(errno));
	return 0;
}

/* Shared-memory objects of our instance that a broker which did not shut
 * down cleanly left behind: its private directories (docs/ARCHITECTURE.md). */
static void remove_stale_segments(const char *instance)
{
	char prefix[96], path[384];
	struct dirent *e;
	DIR *dir;

	snprintf(prefix, sizeof prefix, "wsync.%u.%s.", (unsigned)getuid(), instance);
	dir = opendir("/dev/shm");
	if (!dir)
		return;
	while ((e = readdir(dir))) {
		if (strncmp(e->d_name, prefix, strlen(prefix)))
			continue;
		snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
		if (unlink(path) == 0 || (errno != EISDIR && errno != EPERM))
			continue;
		/* a broker's private directory: the objects in it, then itself */
		DIR *sub = opendir(path);
		struct dirent *f;
		while (sub && (f = readdir(sub)))
			if (f->d_name[0] != '.')
				unlinkat(dirfd(sub), f->d_name, 0);
		if (sub)
			closedir(sub);
		rmdir(path);
	}
	closedir(dir);
}

/* The last lines of the broker's log, for when it failed. */
static void print_log_tail(const char *path)
{
	char buf[4097], *start;
	long size;
	size_t n;
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	fseek(f, size > 4096 ? size - 4096 : 0, SEEK_SET);
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	if (!n) {
		fprintf(stderr, "wsync-demo: the broker's log is empty\n");
		return;
	}
	start = size > 4096 && strchr(buf, '\n') ? strchr(buf, '\n') + 1 : buf;
	fprintf(stderr, "wsync-demo: last lines of the broker's log:\n%s", start);
	if (n && buf[n - 1] != '\n')
		fputc('\n', stderr);
}

static int demo_start_broker(struct demo *d)
{
	/* a private broker: nothing of it stays behind (--no-keep) */
	char *argv[] = { d->wsyncd, "--name", d->name, "--socket", d->socket, "--no-keep",
	                 NULL };
	int err = child_spawn(&d->broker, argv, d->log);

	if (err) {
		say_error("start the broker '%s': %s%s", d->wsyncd, strerror(-err),
		          err == -ENOENT ? " (pass --wsyncd PATH)" : "");
		return err;
	}
	printf("wsync-demo: broker %s (pid %d), socket %s\n", d->wsyncd, (int)d->broker.pid,
	       d->socket);
	return 0;
}

/* Polls with wsync_connect until the broker accepts, for up to 10 s. */
static int demo_wait_broker(struct demo *d)
{
	int64_t deadline = now_ns(CLOCK_MONOTONIC) + 10 * NS_PER_S;
	wsync_client *client;
	int err = -ETIMEDOUT;

	while (!d->interrupts && d->broker.running && now_ns(CLOCK_MONOTONIC) < deadline) {
		err = wsync_connect(d->socket, "wsync-demo", &client);
		if (!err) {
			wsync_close(client);
			d->broker_ready = true;
			return 0;
		}
		if (err != -ENOENT && err != -ECONNREFUSED)
			break;
		demo_pump(d, 20);
	}
	if (d->interrupts)
		return -EINTR;
	if (!d->broker.running)
		say_error("the broker exited while starting");
	else
		say_wsync_error("connect to the broker", err);
	return err;
}

static int demo_start_trainer(struct demo *d)
{
	char mib[24], hz[24], tensors[24];
	char *argv[] = { d->self, "trainer", "--endpoint", d->socket, "--mib", mib,
	                 "--hz", hz, "--tensors", tensors, "--model", (char *)d->o.model,
	                 d->o.timeout ? "--timeout" : NULL, (char *)d->o.timeout, NULL };
	int err;

	snprintf(mib, sizeof mib, "%" PRIu64, d->o.mib);
	snprintf(hz, sizeof hz, "%" PRIu64, d->o.hz);
	snprintf(tensors, sizeof tensors, "%" PRIu64, d->o.tensors);
	err = child_spawn(&d->trainer, argv, NULL);
	if (err)
		say_error("start the trainer: %s", strerror(-err));
	return err;
}

static int demo_start_collector(struct demo *d, struct child *ch, unsigned id)
{
	char ids[16];
	char *argv[] = { d->self, "collector", "--endpoint", d->socket, "--id", ids,
	                 "--model", (char *)d->o.model,
	                 d->o.timeout ? "--timeout" : NULL, (char *)d->o.timeout, NULL };
	int err;

	snprintf(ids, sizeof ids, "%u", id);
	err = child_spawn(ch, argv, NULL);
	if (err)
		say_error("start collector %u: %s", id, strerror(-err));
	return err;
}

/* Collectors first: they wait for a model that does not exist yet. */
static int demo_start_clients(struct demo *d)
{
	for (size_t i = 0; i < d->o.collectors; i++)
		if (demo_start_collector(d, &d->collectors[i], (unsigned)i))
			return -1;
	return demo_start_trainer(d) ? -1 : 0;
}

static void demo_wait_run(struct demo *d)
{
	int64_t deadline = now_ns(CLOCK_MONOTONIC) + (int64_t)d->o.seconds * NS_PER_S;

	printf("wsync-demo: 1 trainer and %" PRIu64 " collectors, %" PRIu64 " s\n",
	       d->o.collectors, d->o.seconds);
	d->started_ns = now_ns(CLOCK_MONOTONIC);
	while (!d->interrupts && !d->unexpected_exit) {
		int64_t left = deadline - now_ns(CLOCK_MONOTONIC);
		if (left <= 0)
			break;
		demo_pump(d, (int)(left / NS_PER_MS < 1000 ? left / NS_PER_MS + 1 : 1000));
	}
	d->stopped_ns = now_ns(CLOCK_MONOTONIC);
}

/* Trainer, then (after a moment to take the last version) the collectors,
 * then the broker. */
static void demo_stop_all(struct demo *d)
{
	struct child *list[MAX_COLLECTORS];
	struct child *trainer = &d->trainer, *broker = &d->broker;
	int64_t grace_end;

	demo_stop(d, &trainer, 1, 5000);
	grace_end = now_ns(CLOCK_MONOTONIC) + 300 * NS_PER_MS;
	while (!d->interrupts && now_ns(CLOCK_MONOTONIC) < grace_end)
		demo_pump(d, 50);
	for (size_t i = 0; i < d->o.collectors; i++)
		list[i] = &d->collectors[i];
	demo_stop(d, list, d->o.collectors, 5000);
	demo_stop(d, &broker, 1, 10000);
}

static void demo_cleanup(struct demo *d)
{
	if (d->broker.pid && !child_exited_cleanly(&d->broker))
		remove_stale_segments(d->name);
	if (d->dir[0] && nftw(d->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS))
		say_error("remove %s: %s", d->dir, strerror(errno));
	if (d->sigfd >= 0)
		close(d->sigfd);
	free(d->collectors);
}

static int demo_init(struct demo *d)
{
	d->sigfd = -1;
	d->broker = (struct child){ .kind = CHILD_BROKER, .label = "wsyncd", .out_fd = -1 };
	d->trainer = (struct child){ .kind = CHILD_TRAINER, .label = "trainer", .out_fd = -1 };
	d->collectors = calloc(d->o.collectors, sizeof *d->collectors);
	if (!d->collectors) {
		say_sys_error("allocate collectors");
		d->o.collectors = 0;
		return -1;
	}
	for (size_t i = 0; i < d->o.collectors; i++) {
		struct child *ch = &d->collectors[i];

		ch->kind = CHILD_COLLECTOR;
		ch->out_fd = -1;
		snprintf(ch->label, sizeof ch->label, "collector %u", (unsigned)i);
	}
	snprintf(d->name, sizeof d->name, "demo-%d", (int)getpid());
	/* A closed stdout (the reader of a pipe gone) must not stop the cleanup. */
	signal(SIGPIPE, SIG_IGN);
	d->sigfd = block_signals();
	if (d->sigfd < 0 || self_path(d->self, sizeof d->self))
		return -1;
	broker_path(d);
	return demo_make_dir(d);
}

static int demo_run(struct demo *d)
{
	unsigned problems;

	if (demo_init(d)) {
		demo_cleanup(d);
		return 1;
	}
	if (demo_start_broker(d) == 0 && demo_wait_broker(d) == 0 &&
	    demo_start_clients(d) == 0)
		demo_wait_run(d);
	demo_stop_all(d);
	if (d->broker_ready)
		summary_print(d);
	problems = summary_judge(d);
	if (d->broker.pid && !child_exited_cleanly(&d->broker))
		print_log_tail(d->log);
	if (!problems)
		printf("wsync-demo: OK\n");
	demo_cleanup(d);
	if (d->interrupts)
		return 130;
	return problems ? 1 : 0;
}

static int driver_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "wsyncd",     required_argument, NULL, 'w' },
		{ "seconds",    required_argument, NULL, 's' },
		{ "collectors", required_argument, NULL, 'c' },
		{ "mib",        required_argument, NULL, 'm' },
		{ "hz",         required_argument, NULL, 'z' },
		{ "tensors",    required_argument, NULL, 't' },
		{ "model",      required_argument, NULL, 'M' },
		{ "timeout",    required_argument, NULL, 'T' },
		{ "help",       no_argument,       NULL, 'h' },
		{ 0 },
	};
	struct demo d = {
		.o = { .model = MODEL_NAME, .seconds = 10, .collectors = 4, .mib = 32, .hz = 10,
		       .tensors = 8 },
	};
	double timeout_s = -1;
	int c, bad = 0;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'w': d.o.wsyncd = optarg; break;
		case 'T':
			bad |= parse_seconds("timeout", optarg, &timeout_s);
			d.o.timeout = optarg;
			break;
		case 's': bad |= parse_count("seconds", optarg, 1, 86400, &d.o.seconds); break;
		case 'c': bad |= parse_count("collectors", optarg, 1, MAX_COLLECTORS,
		                             &d.o.collectors); break;
		case 'm': bad |= parse_count("mib", optarg, 1, 65536, &d.o.mib); break;
		case 'z': bad |= parse_count("hz", optarg, 1, 10000, &d.o.hz); break;
		case 't': bad |= parse_count("tensors", optarg, 1, 1024, &d.o.tensors); break;
		case 'M': bad |= !model_name_ok(optarg); d.o.model = optarg; break;
		case 'h': fputs(usage_text, stdout); return 0;
		default:  bad = say_bad_option(argv); break;
		}
	}
	if (bad || optind < argc)
		return say_usage_error(bad ? NULL : argv[optind], "wsync-demo");
	bound_round_trips(timeout_s);   /* the driver's own connects too */
	setvbuf(stdout, NULL, _IOLBF, 0);
	return demo_run(&d);
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--version")) {
		printf("wsync-demo %s\n", wsync_version_string());
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "trainer"))
		return trainer_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "collector"))
		return collector_main(argc - 1, argv + 1);
	return driver_main(argc, argv);
}
