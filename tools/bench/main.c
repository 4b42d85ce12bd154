/*
 * wsync-bench — measures wsync on this machine against references taken in
 * the same run, and prints one table.
 *
 *   wsync-bench [--wsyncd PATH] [--quick] [--only NAME[,NAME]] [--repeats N]
 *               [--json FILE] [--python PATH] [--peers-script PATH]
 *
 * It starts a broker of its own (a temporary directory as XDG_RUNTIME_DIR,
 * instance bench-<pid>), runs the scenarios, stops the broker (which must
 * exit 0) and removes the directory. Scenarios, described in
 * docs/BENCHMARKS.md:
 *
 *   publish    256 MiB / 64 tensors, begin..commit vs one memcpy
 *   acquire    acquire+release with 1..64 reader threads, idle and at 100 Hz
 *   wake       commit -> waiting collectors hold the view, vs a raw futex
 *   sustained  16 MiB published flat out, 8 collectors following
 *   peers      the same update reaching 4 collectors via torch.distributed,
 *              torch RPC and torch.multiprocessing (tools/bench/torch_peers.py)
 *   checksum   the checksum of 256 MiB on 1 and on the measured threads vs memcpy
 *   e2e        256 MiB to 4 collectors with default options vs the fastest
 *              copy the machine can do (best of 1..N threads of memcpy)
 *   gpu        device slabs vs the bare CUDA driver copies (skipped without
 *              a GPU; WSYNC_BENCH_GPU_FAKE=1 runs them on the tests' fake)
 *   scale      publish, first publish, first acquire and end-to-end at 256
 *              MiB, 1 GiB, 2 GiB on 4 KiB and huge pages, vs memcpy
 *   python     the Python binding against the C library: zero-copy views
 *              to 4 collectors, load_into (tools/bench/python_bench.py)
 *   serving    rollout workers acting while a trainer publishes every 200 ms:
 *              LivePolicy against load_into, broadcast, pause-load-resume and
 *              in-place shared tensors (tools/bench/serving_bench.py)
 *   torchrl    update_policy_weights_() of TorchRL's multi-process collector
 *              (the source tree's stand-in) with 3 workers, fork and spawn,
 *              1 and 64 MiB: wsync's scheme vs TorchRL's SharedMem and
 *              MultiProcess schemes (tools/bench/torchrl_bench.py)
 *
 * The bench reports; it never fails because something is slow. It exits 1
 * when a scenario could not run, the broker failed, or it left files behind.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"
#include "shm/layout.h"

static const char usage_text[] =
	"usage: wsync-bench [--wsyncd PATH] [--quick] [--only NAME[,NAME]] [--repeats N]\n"
	"                   [--json FILE] [--python PATH] [--peers-script PATH]\n"
	"\n"
	"Starts a private wsyncd, measures wsync against references taken in the\n"
	"same run, stops the broker and prints one table.\n"
	"\n"
	"  --wsyncd PATH        broker to run (default: wsyncd next to this program)\n"
	"  --quick              smaller sizes and fewer repeats (under a minute;\n"
	"                       scale: 256 MiB only)\n"
	"  --only LIST          scenarios to run, comma-separated: publish, acquire,\n"
	"                       wake, sustained, peers, shard, checksum, e2e, scale,\n"
	"                       gpu, hostile, python, serving, torchrl (default: all)\n"
	"  --repeats N          measured repetitions per figure (default 5, quick 2)\n"
	"  --json FILE          also write the report (machine, mode, rows) as a JSON\n"
	"                       document to FILE; unlike the other tools' --json it\n"
	"                       takes a file and leaves stdout (the table) as it is\n"
	"  --python PATH        interpreter for the torch peers and the python scenario\n"
	"                       (default /usr/bin/python3)\n"
	"  --peers-script PATH  the peers script (default: tools/bench/torch_peers.py\n"
	"                       of the source tree this program was built in, else\n"
	"                       PREFIX/share/wsync/torch_peers.py of an installed one)\n"
	"  -h, --help           this text;  --version  the version\n"
	"\n"
	"exit codes: 0 done, 1 a scenario or the broker failed, 2 usage.\n";

static const struct {
	const char *name;
	unsigned bit;
	int (*run)(struct bench *b);
} scenarios[] = {
	{ "publish",   SC_PUBLISH,   bench_publish },
	{ "acquire",   SC_ACQUIRE,   bench_acquire },
	{ "wake",      SC_WAKE,      bench_wake },
	{ "sustained", SC_SUSTAINED, bench_sustained },
	{ "peers",     SC_PEERS,     bench_peers },
	{ "shard",     SC_SHARD,     bench_shard },
	{ "checksum",  SC_CHECKSUM,  bench_checksum },
	{ "e2e",       SC_E2E,       bench_e2e },
	{ "scale",     SC_SCALE,     bench_scale },
	{ "gpu",       SC_GPU,       bench_gpu },
	{ "hostile",   SC_HOSTILE,   bench_hostile },
	{ "python",    SC_PYTHON,    bench_python },
	{ "serving",   SC_SERVING,   bench_serving },
	{ "torchrl",   SC_TORCHRL,   bench_torchrl },
};

#define N_SCENARIOS (sizeof scenarios / sizeof scenarios[0])

static int parse_only(const char *list, unsigned *out)
{
	char buf[256], *save = NULL;

	snprintf(buf, sizeof buf, "%s", list);
	*out = 0;
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		size_t i;

		for (i = 0; i < N_SCENARIOS; i++)
			if (!strcmp(tok, scenarios[i].name))
				break;
		if (i == N_SCENARIOS) {
			say_error("--only: unknown scenario '%s'", tok);
			return -1;
		}
		*out |= scenarios[i].bit;
	}
	return *out ? 0 : -1;
}

/* wsyncd next to this program, if it is there. */
static const char *default_wsyncd(void)
{
	static char path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", path, sizeof path - 16);
	char *slash;

	if (n <= 0)
		return NULL;
	path[n] = '\0';
	if (!(slash = strrchr(path, '/')))
		return NULL;
	strcpy(slash + 1, "wsyncd");
	return access(path, X_OK) ? NULL : path;
}

enum { OPT_WSYNCD = 256, OPT_QUICK, OPT_ONLY, OPT_REPEATS, OPT_JSON, OPT_PYTHON,
       OPT_SCRIPT, OPT_HELP, OPT_VERSION };

static int parse_args(struct bench *b, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "wsyncd",       required_argument, NULL, OPT_WSYNCD },
		{ "quick",        no_argument,       NULL, OPT_QUICK },
		{ "only",         required_argument, NULL, OPT_ONLY },
		{ "repeats",      required_argument, NULL, OPT_REPEATS },
		{ "json",         required_argument, NULL, OPT_JSON },
		{ "python",       required_argument, NULL, OPT_PYTHON },
		{ "peers-script", required_argument, NULL, OPT_SCRIPT },
		{ "help",         no_argument,       NULL, OPT_HELP },
		{ "version",      no_argument,       NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	long v;
	int c;

	b->only = SC_ALL;
	b->python = "/usr/bin/python3";
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_WSYNCD: b->wsyncd = optarg; break;
		case OPT_QUICK:  b->quick = true; break;
		case OPT_ONLY:
			if (parse_only(optarg, &b->only))
				return -1;
			break;
		case OPT_REPEATS:
			v = strtol(optarg, &end, 10);
			if (*end || v < 1 || v > 1000) {
				say_error("--repeats: expected 1..1000, got '%s'", optarg);
				return -1;
			}
			b->repeats = (int)v;
			break;
		case OPT_JSON:
			/* `--json --version` must not run the whole bench into a file
			 * named --version */
			if (optarg[0] == '-' && optarg[1]) {
				say_error("--json wants the FILE to write the report to, not the "
				          "option '%s' (a file of that name: ./%s)", optarg, optarg);
				return -1;
			}
			b->json_path = optarg;
			break;
		case OPT_PYTHON: b->python = optarg; break;
		case OPT_SCRIPT: b->peers_script = optarg; break;
		case OPT_HELP:
		case 'h':
			fputs(usage_text, stdout);
			exit(0);
		case OPT_VERSION:
			printf("wsync-bench %s\n", wsync_version_string());
			exit(0);
		default:
			say_error("%s '%.*s' (try 'wsync-bench --help')",
			          c == ':' ? "option needs a value:" : "unknown option",
			          (int)strcspn(argv[optind - 1], "="), argv[optind - 1]);
			return -1;
		}
	}
	if (optind < argc) {
		say_error("unexpected argument '%s'", argv[optind]);
		return -1;
	}
	if (!b->repeats)
		b->repeats = b->quick ? 2 : 5;
	if (!b->wsyncd && !(b->wsyncd = default_wsyncd())) {
		say_error("no wsyncd next to this program; give --wsyncd PATH");
		return -1;
	}
	return 0;
}

/* Deletes every model the scenario left in the bench's own broker: a
 * published model outlives its publisher (a finished run's policy stays
 * readable), so without this the scenarios' slabs add up until a later
 * one finds the broker's shared-memory limit full. */
static void delete_models(struct bench *b, const char *scenario)
{
	wsync_model_info info[WSYNC_MAX_MODELS];
	wsync_client *c;
	size_t n = 0;
	int err = wsync_connect(b->endpoint, "bench-cleanup", &c);

	if (!err)
		err = wsync_models(c, info, WSYNC_MAX_MODELS, &n);
	for (size_t i = 0; !err && i < n && i < WSYNC_MAX_MODELS; i++) {
		int rc = wsync_model_delete(c, info[i].name);

		if (rc && rc != -ENOENT)
			say("after %s: model '%s' left in the broker: %s", scenario,
			    info[i].name, wsync_errmsg());
	}
	if (err)
		say("after %s: its models could not be listed: %s", scenario, wsync_errmsg());
	if (c)
		wsync_close(c);
}

static void run_scenarios(struct bench *b)
{
	for (size_t i = 0; i < N_SCENARIOS; i++) {
		int64_t t0 = mono_ns();

		if (!(b->only & scenarios[i].bit))
			continue;
		say("%s ...", scenarios[i].name);
		if (scenarios[i].run(b)) {
			b->failures++;
			child_kill_all();
		}
		delete_models(b, scenarios[i].name);
		say("%s done in %.1f s", scenarios[i].name,
		    (double)(mono_ns() - t0) / (double)NS_PER_S);
	}
}

static void print_footer(const struct bench *b, int64_t elapsed_ns, int rc)
{
	printf("\ntotal %.0f s; broker %s", (double)elapsed_ns / (double)NS_PER_S,
	       rc ? "stopped with errors" : "stopped cleanly (exit 0)");
	if (b->others_pct >= 0)
		printf("; other processes used %.1f%% of the machine meanwhile, "
		       "hypervisor steal %.1f%%%s", b->others_pct, b->steal_pct,
		       b->others_pct > 5 ? " (a busy machine: figures are not reliable)" : "");
	putchar('\n');
}

int main(int argc, char **argv)
{
	struct bench b;
	struct cpu_mark start, end;
	int64_t t0 = mono_ns();
	int leftovers, rc = 0, marks;

	memset(&b, 0, sizeof b);
	if (parse_args(&b, argc, argv))
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	cleanup_install(&b);
	table_print_header(&b);
	marks = cpu_mark_take(&start);
	if (broker_start(&b)) {
		broker_stop(&b);
		cleanup_files(&b);
		return 1;
	}
	run_scenarios(&b);
	if (broker_stop(&b))
		rc = 1;
	leftovers = cleanup_files(&b);
	if (leftovers) {
		say_error("%d shared-memory objects of the broker were left behind", leftovers);
		rc = 1;
	}
	b.others_pct = b.steal_pct = -1;
	if (!marks && !cpu_mark_take(&end))
		cpu_marks_compare(&b, &start, &end);
	table_print();
	print_footer(&b, mono_ns() - t0, rc);
	if (b.json_path && table_write_json(&b, b.json_path)) {
		say_error("write %s: %s", b.json_path, strerror(errno));
		rc = 1;
	}
	if (b.failures)
		rc = 1;
	table_free();
	return rc;
}
