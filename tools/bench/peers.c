/*
 * tools/bench/peers.c — scenario "peers": one update of a 64-tensor model
 * (48 MiB and 256 MiB; --quick: 48 MiB) reaching 4 collector processes, with
 * wsync and with what PyTorch users run today.
 *
 * wsync side (here): the trainer begins, copies the update from its own
 * memory into the slab, commits; 4 collector processes are blocked in
 * wsync_sub_wait. The figure runs from just before wsync_pub_begin until the
 * last collector holds the view (bench_fanout.c), median over repeats.
 *
 * Peer side: tools/bench/torch_peers.py, run with --python (Debian's
 * python3-torch), prints one JSON line per method and size with the same
 * figure. Rows show the peer's time with wsync's as the reference, so the
 * ratio is wsync's speed-up. A peer that cannot run is a skipped row with
 * the reason; it never fails the bench.
 *
 * The script also runs wsync's Python binding against this bench's broker
 * (--wsync-endpoint), with default options, next to the torch pattern it
 * competes with (shared-memory tensors + Queue): these rows have no
 * reference; compare them with each other (same run, same machine).
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

#define PEERS_COLLECTORS 4
#define PEERS_TENSORS    64
#define PEERS_MAX_SIZES  2
#define PEERS_OUT_MAX    (64 * 1024)

static const struct {
	const char *method, *label;
	bool ref;                            /* compared with wsync's C figure */
} peer_methods[] = {
	{ "gloo_flat",    "torch.distributed gloo broadcast, 1 flat tensor", true },
	{ "gloo_tensors", "torch.distributed gloo broadcast, per tensor", true },
	{ "gloo_isend",   "torch.distributed isend of each tensor to each collector", true },
	{ "rpc_async",    "torch RPC rpc_async of the state_dict to all", true },
	{ "rpc_sync",     "torch RPC rpc_sync to each in turn", true },
	{ "rpc_fetch",    "torch RPC: notify, each collector fetches (rpc_sync)", true },
	{ "mp_queue",     "torch.multiprocessing shm tensors + Queue each", true },
	{ "torchrl_inplace_unsafe", "UNSAFE, torn reads: TorchRL in-place shared tensors",
	  true },
	{ "py_wsync_views", "Python wsync: 4 collectors hold zero-copy views", false },
	{ "mp_queue_load", "torch shm + Queue: 4 collectors loaded own module", false },
	{ "py_wsync_load", "Python wsync: 4 collectors loaded own module", false },
	{ "torch_shm_copy", "torch copy_ into new shm tensors, 1 process", false },
	{ "py_wsync_publish", "Python wsync begin+copy_from+commit", false },
	{ "py_wsync_publish_unguarded", "Python wsync publish, guard=False, 1 process",
	  false },
	{ "torch_copy_slab", "torch copy_ into slab.torch() views, 1 process", false },
	{ "py_wsync_copy_from", "Python wsync slab.copy_from, 1 process", false },
	{ "py_wsync_rl_send", "Python wsync.rl send(): 4 collectors applied it", false },
};

#define N_PEER_METHODS (sizeof peer_methods / sizeof peer_methods[0])

struct peers_run {
	struct bench *b;
	int sizes[PEERS_MAX_SIZES];          /* MiB */
	int n_sizes;
	double wsync_ms[PEERS_MAX_SIZES];    /* <= 0: not measured */
	char script[PATH_MAX];
	char log[128];
	char *out;                           /* the script's stdout */
	size_t out_len;
	char reason[256];                    /* why the script gave nothing */
};

/* ---- wsync ------------------------------------------------------------------- */

static int peers_wsync(struct peers_run *r, int i)
{
	char model[32];
	int mib = r->sizes[i];
	struct fan_cfg cfg = {
		.mode = FAN_WSYNC, .endpoint = r->b->endpoint, .model = model,
		.bytes = (size_t)mib * MIB, .n_tensors = PEERS_TENSORS,
		.collectors = PEERS_COLLECTORS, .warmup = 5,
		.samples = mib > 64 ? r->b->repeats : 2 * r->b->repeats + 1,
		.pause_min_ns = NS_PER_MS, .pause_max_ns = 2 * NS_PER_MS,
	};
	struct fan_result res;
	double *lat;
	char fig[96];
	int rc;

	snprintf(model, sizeof model, "peers-%d", mib);
	snprintf(fig, sizeof fig, "wsync: copy + commit, last of 4 collectors holds, %d MiB", mib);
	rc = fan_run(&cfg, &res);
	if (!rc && (lat = calloc((size_t)res.samples, sizeof *lat))) {
		fan_latencies(&res, FAN_FROM_BEGIN, true, lat);
		r->wsync_ms[i] = stat_median(lat, (size_t)res.samples) / (double)NS_PER_MS;
		row_add("peers", fig, "ms", r->wsync_ms[i]);
		free(lat);
	} else {
		say_error("peers: %s", rc ? res.error : "out of memory");
		row_skip("peers", fig, "failed: %s", rc ? res.error : "out of memory");
		rc = -1;
	}
	fan_result_free(&res);
	return rc;
}

/* ---- running the script -------------------------------------------------------- */

/* tools/bench/torch_peers.py of the tree this binary was built in
 * (build/bin/wsync-bench -> ../../tools/bench), else the one make install
 * put beside it (PREFIX/bin/wsync-bench -> PREFIX/share/wsync), else of the
 * current directory. */
static int peers_find_script(struct peers_run *r)
{
	char exe[PATH_MAX];
	ssize_t n;
	char *slash;

	if (r->b->peers_script) {
		snprintf(r->script, sizeof r->script, "%s", r->b->peers_script);
		return access(r->script, R_OK);
	}
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = '\0';
		for (int up = 0; up < 3 && (slash = strrchr(exe, '/')); up++) {
			*slash = '\0';
			if (up == 1 && snprintf(r->script, sizeof r->script,
			                        "%s/share/wsync/torch_peers.py", exe) <
			               (int)sizeof r->script && !access(r->script, R_OK))
				return 0;
		}
		if (snprintf(r->script, sizeof r->script, "%s/tools/bench/torch_peers.py",
		             exe) < (int)sizeof r->script && !access(r->script, R_OK))
			return 0;
	}
	snprintf(r->script, sizeof r->script, "tools/bench/torch_peers.py");
	return access(r->script, R_OK);
}

static _Noreturn void peers_exec(struct peers_run *r, int out_fd, pid_t parent,
                                 char *const argv[])
{
	int log_fd;

	setpgid(0, 0);              /* the group is killed with it */
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		_exit(127);
	log_fd = open(r->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (log_fd < 0 || dup2(out_fd, STDOUT_FILENO) < 0 || dup2(log_fd, STDERR_FILENO) < 0)
		_exit(127);
	/* Python's temporary files (multiprocessing's sockets) go with the
	 * bench's directory, even when the script has to be killed. */
	if (setenv("TMPDIR", r->b->dir, 1))
		_exit(127);
	execv(argv[0], argv);
	fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

/* Reads the child's stdout until EOF or the deadline. */
static int peers_read(struct peers_run *r, int fd, int64_t deadline)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	for (;;) {
		int64_t left = deadline - mono_ns();
		ssize_t n;

		if (left <= 0)
			return -ETIMEDOUT;
		pfd.revents = 0;
		if (poll(&pfd, 1, (int)(left / NS_PER_MS) + 1) < 0 && errno != EINTR)
			return -errno;
		if (!(pfd.revents & (POLLIN | POLLHUP)))
			continue;
		n = read(fd, r->out + r->out_len, PEERS_OUT_MAX - 1 - r->out_len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : 0;
		r->out_len += (size_t)n;
		r->out[r->out_len] = '\0';
		if (r->out_len >= PEERS_OUT_MAX - 1)
			return 0;
	}
}

/* The last line of the script's stderr (the reason of a failure). */
static void peers_log_last(const struct peers_run *r, char *buf, size_t len)
{
	char tail[1024], *end, *start;
	ssize_t n = file_tail(r->log, tail, sizeof tail);

	snprintf(buf, len, "no message");
	if (n <= 0)
		return;
	for (end = tail + n; end > tail && (end[-1] == '\n' || end[-1] == ' '); end--)
		*(end - 1) = '\0';
	start = strrchr(tail, '\n');
	start = start ? start + 1 : tail;
	n = (ssize_t)strlen(start) < (ssize_t)len ? (ssize_t)strlen(start) : (ssize_t)len - 1;
	memcpy(buf, start, (size_t)n);
	buf[n] = '\0';
}

static void peers_args(struct peers_run *r, char *sizes, size_t len, char *repeats,
                       char *timeout, int timeout_s)
{
	size_t off = 0;

	sizes[0] = '\0';
	for (int i = 0; i < r->n_sizes; i++)
		off += (size_t)snprintf(sizes + off, len - off, "%s%d", i ? "," : "", r->sizes[i]);
	snprintf(repeats, 16, "%d", r->b->repeats);
	snprintf(timeout, 16, "%d", timeout_s);
}

static void peers_run_script(struct peers_run *r)
{
	int timeout_s = r->b->quick ? 150 : 600;
	char sizes[32], repeats[16], timeout[16], collectors[16];
	char *argv[] = { (char *)r->b->python, r->script, "--sizes", sizes,
	                 "--collectors", collectors, "--repeats", repeats,
	                 "--timeout", timeout, "--wsync-endpoint", r->b->endpoint, NULL };
	pid_t parent = getpid(), pid;
	int fds[2], err, code;

	peers_args(r, sizes, sizeof sizes, repeats, timeout, timeout_s);
	snprintf(collectors, sizeof collectors, "%d", PEERS_COLLECTORS);
	snprintf(r->log, sizeof r->log, "%s/torch_peers.log", r->b->dir);
	if (pipe2(fds, O_CLOEXEC)) {
		snprintf(r->reason, sizeof r->reason, "pipe: %s", strerror(errno));
		return;
	}
	fflush(NULL);
	if ((pid = fork()) == 0)
		peers_exec(r, fds[1], parent, argv);
	close(fds[1]);
	if (pid < 0) {
		snprintf(r->reason, sizeof r->reason, "fork: %s", strerror(errno));
		close(fds[0]);
		return;
	}
	child_track(pid, true);
	err = peers_read(r, fds[0], mono_ns() + (timeout_s + 30) * NS_PER_S);
	close(fds[0]);
	code = child_reap(pid, err ? 0 : 15000);
	if (err == -ETIMEDOUT) {
		snprintf(r->reason, sizeof r->reason, "the peers script timed out");
	} else if (code != 0) {
		char last[160];

		peers_log_last(r, last, sizeof last);
		snprintf(r->reason, sizeof r->reason, "the peers script exited with %d: %s",
		         code, last);
	}
}

/* ---- parsing its lines ------------------------------------------------------------ */

/* The string value of "key" in a flat JSON object line; false if absent. */
static bool json_get_str(const char *line, const char *key, char *buf, size_t len)
{
	char pat[48];
	const char *p;
	size_t n = 0;

	snprintf(pat, sizeof pat, "\"%s\": \"", key);
	if (!(p = strstr(line, pat)))
		return false;
	for (p += strlen(pat); *p && *p != '"' && n + 1 < len; p++) {
		if (*p == '\\' && p[1])
			p++;
		buf[n++] = *p;
	}
	buf[n] = '\0';
	return true;
}

static bool json_get_num(const char *line, const char *key, double *v)
{
	char pat[48], *end;
	const char *p;

	snprintf(pat, sizeof pat, "\"%s\": ", key);
	if (!(p = strstr(line, pat)))
		return false;
	*v = strtod(p + strlen(pat), &end);
	return end != p + strlen(pat);
}

/* The script's line for method and size, or NULL. Copies it into buf. */
static const char *peers_line(const struct peers_run *r, const char *method, int mib,
                              char *buf, size_t len)
{
	const char *line = r->out;

	while (line && *line) {
		const char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) : strlen(line);
		char m[32];
		double size;

		snprintf(buf, len, "%.*s", (int)n, line);
		if (json_get_str(buf, "method", m, sizeof m) && !strcmp(m, method) &&
		    json_get_num(buf, "mib", &size) && (int)size == mib)
			return buf;
		line = nl ? nl + 1 : NULL;
	}
	return NULL;
}

static void peers_row(const struct peers_run *r, size_t m, int i)
{
	char fig[112], line[1024], reason[256], ref[32];
	struct bench_row *row;
	double ms;

	snprintf(fig, sizeof fig, "%s, %d MiB", peer_methods[m].label, r->sizes[i]);
	if (!peers_line(r, peer_methods[m].method, r->sizes[i], line, sizeof line)) {
		row_skip("peers", fig, "%s", r->reason[0] ? r->reason : "no result from the script");
		return;
	}
	if (json_get_str(line, "skipped", reason, sizeof reason)) {
		row_skip("peers", fig, "%s", reason);
		return;
	}
	if (!json_get_num(line, "ms", &ms)) {
		row_skip("peers", fig, "unreadable result: %s", line);
		return;
	}
	row = row_add("peers", fig, "ms", ms);
	snprintf(ref, sizeof ref, "wsync %d MiB", r->sizes[i]);
	if (peer_methods[m].ref && r->wsync_ms[i] > 0) {
		row_ref(row, ref, r->wsync_ms[i]);
		row_target_text(row, "ratio = speed-up");
	}
}

int bench_peers(struct bench *b)
{
	struct peers_run r = { .b = b, .sizes = { 48, 256 }, .n_sizes = b->quick ? 1 : 2 };
	int rc = 0;

	for (int i = 0; i < r.n_sizes; i++)
		if (peers_wsync(&r, i))
			rc = -1;
	if (!(r.out = calloc(1, PEERS_OUT_MAX))) {
		snprintf(r.reason, sizeof r.reason, "out of memory");
	} else if (peers_find_script(&r)) {
		snprintf(r.reason, sizeof r.reason, "peers script not found (%.200s)", r.script);
	} else if (access(b->python, X_OK)) {
		snprintf(r.reason, sizeof r.reason, "no python at %.200s", b->python);
	} else {
		say("peers: %s %s (up to %d s)", b->python, r.script, b->quick ? 180 : 630);
		peers_run_script(&r);
	}
	for (int i = 0; i < r.n_sizes; i++)
		for (size_t m = 0; m < N_PEER_METHODS; m++)
			peers_row(&r, m, i);
	free(r.out);
	return rc;
}
