/*
 * tools/bench/gpu.c — scenario "gpu": device slabs (docs/GPU.md) against
 * the bare CUDA driver copies they are built on, taken in the same run on
 * the same GPUs (docs/BENCHMARKS.md, "GPU rows"):
 *
 *   device publish     begin_gpu + cuMemcpyDtoDAsync of the slab from the
 *                      trainer's device buffer + commit_gpu, model on 1 GPU,
 *                      against the same cuMemcpyDtoDAsync + sync; for a
 *                      1 GiB and an 8 GiB model (publish and copy rows)
 *   peer fan-out       the same publish with the model on 2 GPUs that have
 *                      peer access, against DtoD + the peer copy
 *   staged fan-out     2 GPUs without peer access (through pinned host
 *                      memory), against DtoD + DtoH + HtoD
 *   wake               commit_gpu -> wsync_sub_wait_gpu returning in another
 *                      process, on the publisher's GPU and on a 2nd one,
 *                      against the same with a host model
 *   acquire_gpu        acquire + release of a device view, against host
 *                      acquire + release (target: at most 100 ns)
 *   copy_to_device     wsync_view_copy_to_device of the model against
 *                      cuMemcpyHtoDAsync from pinned memory;
 *                      wsync_dview_copy_to_device against cuMemcpyDtoDAsync
 *
 * Rows that cannot run here are skipped with the reason, which never fails
 * the bench: no driver, no GPU, no GPU that exports VMM memory as an fd, a
 * single GPU (fan-out, 2nd-GPU wake), no pair without peer access (staged).
 * The tests' fake driver (WSYNC_LIBCUDA=.../fakecuda/libcuda.so.1) counts as
 * no GPU unless WSYNC_BENCH_GPU_FAKE=1: then every row runs against it, at
 * 4 MiB, so tests prove the code path; its figures say nothing about GPUs.
 *
 * The bench process never loads the driver (see bench_gpu.h): a probe
 * child lists the GPUs, measuring children make their own contexts.
 * torch's zero-copy use of a device view is measured by
 * tools/bench/gpu_torch.py (make bench-gpu runs both).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gpu.h"
#include "shm/cuda_discover.h"

/* The model sizes of the publish and copy rows: 1 GiB and 8 GiB (the
 * second only on GPUs with room for 3 slots and the reference buffers, 6
 * times the model); --quick 64 MiB; the fake 4 MiB. */
static const size_t gpu_sizes[] = { 1024 * MIB, 8192 * MIB };
#define GPU_BYTES_QUICK (64 * MIB)
#define GPU_BYTES_FAKE  (4 * MIB)
#define GPU_ROOM        6
#define GPU_TENSORS     64
#define SC              "gpu"

/* ---- what is there ------------------------------------------------------ */

int gb_probe_child(void *arg)
{
	struct gb_probe *pr = &((struct gb_shared *)arg)->probe;
	struct wsync_gpu_inventory inv;
	struct wsync_cuda cu;

	if (wsync_cuda_load(&cu, pr->why, sizeof pr->why))
		return 0;
	pr->fake = dlsym(cu.lib, "fakecuda_live") != NULL;
	pr->driver_version = cu.driver_version;
	if (wsync_cuda_discover(&cu, &inv, pr->why, sizeof pr->why)) {
		wsync_cuda_unload(&cu);
		return 0;
	}
	pr->loaded = true;
	pr->count = inv.count < GB_MAX_GPUS ? inv.count : GB_MAX_GPUS;
	for (int i = 0; i < pr->count; i++) {
		pr->usable[i] = inv.dev[i].vmm && inv.dev[i].posix_fd;
		pr->mem[i] = inv.dev[i].total_mem;
		snprintf(pr->name[i], sizeof pr->name[i], "%s", inv.dev[i].name);
		snprintf(pr->uuid[i], sizeof pr->uuid[i], "%s", inv.dev[i].uuid_text);
		for (int j = 0; j < pr->count; j++)
			pr->peer[i][j] = inv.peer[i][j];
	}
	wsync_cuda_unload(&cu);
	return 0;
}

static bool fake_opt_in(void)
{
	const char *v = getenv("WSYNC_BENCH_GPU_FAKE");

	return v && !strcmp(v, "1");
}

/* Why no row can run here, into buf; NULL when they can. */
static const char *no_gpu_reason(const struct gb_probe *pr, char *buf, size_t len)
{
	bool any = false;

	for (int i = 0; i < pr->count; i++)
		any |= pr->usable[i];
	if (!pr->loaded)
		snprintf(buf, len, "no GPU: %s", pr->why);
	else if (pr->fake && !fake_opt_in())
		snprintf(buf, len, "no GPU: the driver is the tests' fake "
		         "(WSYNC_BENCH_GPU_FAKE=1 runs the rows on it)");
	else if (pr->count == 0)
		snprintf(buf, len, "no GPU: the CUDA driver shows no device");
	else if (!any)
		snprintf(buf, len, "no GPU here can export VMM memory as a file descriptor");
	else
		return NULL;
	return buf;
}

/* GPU a publishes; b is one it reaches peer to peer, c one it does not. */
static void plan_gpus(const struct gb_probe *pr, struct gb_plan *pl)
{
	pl->a = pl->b = pl->c = pl->second = -1;
	for (int i = 0; i < pr->count && pl->a < 0; i++)
		if (pr->usable[i])
			pl->a = i;
	for (int i = 0; i < pr->count; i++) {
		if (i == pl->a || !pr->usable[i])
			continue;
		if (pl->second < 0)
			pl->second = i;
		if (pr->peer[pl->a][i] && pl->b < 0)
			pl->b = i;
		if (!pr->peer[pl->a][i] && pl->c < 0)
			pl->c = i;
	}
}

static void plan_sizes(const struct bench *b, bool fake, struct gb_plan *pl)
{
	pl->fake = fake;
	pl->bytes = fake ? GPU_BYTES_FAKE : b->quick ? GPU_BYTES_QUICK : gpu_sizes[0];
	pl->n_tensors = GPU_TENSORS;
	pl->repeats = b->repeats < GB_MAX_REPEATS ? b->repeats : GB_MAX_REPEATS;
	pl->acquire_pairs = fake ? 2000 : b->quick ? 20000 : 200000;
	pl->warmup = fake ? 2 : 5;
	pl->samples = fake ? 20 : b->quick ? 50 : 200;
	snprintf(pl->endpoint, sizeof pl->endpoint, "%s", b->endpoint);
}

/* ---- rows ------------------------------------------------------------------ */

struct gpu_rows {
	const struct gb_shared *sh;
	char size[24];                  /* "1024 MiB" */
	bool later_size;                /* not the first size: no acquire rows again */
	const char *why_all;            /* every row skipped: why */
	char why_copy[GB_ERR_LEN + 16]; /* the copy child failed */
	char why_wake[GB_ERR_LEN + 16]; /* a wake phase failed */
};

/* The median of n figures (copied: stat_median sorts). */
static double med(const double *v, int n)
{
	double tmp[GB_MAX_REPEATS];

	memcpy(tmp, v, (size_t)n * sizeof *tmp);
	return stat_median(tmp, (size_t)n);
}

/* The figure's name with the model's size in it. */
static const char *named(const struct gpu_rows *g, const char *fmt, char *buf, size_t len)
{
	snprintf(buf, len, fmt, g->size);
	return buf;
}

static struct bench_row *add(const struct gpu_rows *g, const char *fmt, const char *unit,
                             double v, const char *ref_name, double ref)
{
	char name[96];
	struct bench_row *r = row_add(SC, named(g, fmt, name, sizeof name), unit, v);

	if (ref_name)
		row_ref(r, ref_name, ref);
	return r;
}

/* A target on the ratio; against the fake driver none: its copies are
 * memcpy on the host and say nothing about what a GPU meets. */
static void target(const struct gpu_rows *g, struct bench_row *r, double max_ratio)
{
	if (g->sh->plan.fake)
		row_target_text(r, "fake driver");
	else
		row_target_ratio(r, max_ratio);
}

static void skip(const struct gpu_rows *g, const char *fmt, const char *why)
{
	char name[96];

	row_skip(SC, named(g, fmt, name, sizeof name), "%s", why);
}

#define F_PUB1    "device publish %s: begin_gpu, cuMemcpyDtoDAsync, commit_gpu (1 GPU)"
#define F_PEER    "device publish %s, model on 2 GPUs, peer fan-out in commit"
#define F_STAGED  "device publish %s, model on 2 GPUs without peer access (staged)"
#define F_ACQ     "acquire_gpu + release_gpu of a device view"
#define F_VIEW    "wsync_view_copy_to_device %s (host view) + sync"
#define F_DVIEW   "wsync_dview_copy_to_device %s (device view) + sync"
#define F_WAKE_A  "commit_gpu -> wsync_sub_wait_gpu holds it, publisher's GPU, p50"
#define F_WAKE_B  "commit_gpu -> wsync_sub_wait_gpu holds it, a 2nd GPU, p50"

static void rows_copy(const struct gpu_rows *g)
{
	const struct gb_copy_res *x = &g->sh->copy;
	const struct gb_plan *pl = &g->sh->plan;
	int n = pl->repeats;
	double dtod = med(x->dtod, n), pub1 = med(x->pub1, n), acq_host = med(x->acq_host, n);
	double htod = med(x->htod, n);

	add(g, "cuMemcpyDtoDAsync %s on one GPU + sync (reference)", "ms", dtod, NULL, 0);
	target(g, add(g, F_PUB1, "ms", pub1, "cuMemcpyDtoDAsync + sync", dtod), 1.1);
	if (pl->b >= 0) {
		double peer = med(x->peer_ref, n), pub = med(x->pub_peer, n);

		add(g, "peer copy %s to a 2nd GPU + sync (reference)", "ms", peer, NULL, 0);
		add(g, F_PEER, "ms", pub, "DtoD + peer copy", dtod + peer);
		/* the fan-out's share: >= 80% of the peer copy's bandwidth */
		target(g, add(g, "peer fan-out alone: 2-GPU publish - 1-GPU publish", "ms",
		              pub - pub1, "peer copy + sync", peer), 1.25);
	}
	if (pl->c >= 0) {
		double staged = med(x->staged_ref, n), pub = med(x->pub_staged, n);

		add(g, "staged copy %s: DtoH + HtoD via pinned memory (reference)", "ms", staged,
		    NULL, 0);
		add(g, F_STAGED, "ms", pub, "DtoD + staged copy", dtod + staged);
		add(g, "staged fan-out alone: 2-GPU publish - 1-GPU publish", "ms", pub - pub1,
		    "staged copy", staged);
	}
	if (!g->later_size) {
		add(g, "host acquire + release (reference)", "ns", acq_host, NULL, 0);
		struct bench_row *r = add(g, F_ACQ, "ns", med(x->acq_gpu, n),
		                          "host acquire + release", acq_host);

		if (pl->fake)
			row_target_text(r, "fake driver");
		else
			row_target_value(r, 100);            /* ns, issue 26 */
	}
	add(g, "cuMemcpyHtoDAsync %s from pinned memory + sync (reference)", "ms", htod, NULL, 0);
	add(g, F_VIEW, "ms", med(x->view_copy, n), "HtoD from pinned memory", htod);
	add(g, F_DVIEW, "ms", med(x->dview_copy, n), "cuMemcpyDtoDAsync + sync", dtod);
}

static void skip_copy(const struct gpu_rows *g, const char *why)
{
	static const char *const figs[] = { F_PUB1, F_PEER, F_STAGED, F_VIEW, F_DVIEW, F_ACQ };
	size_t n = sizeof figs / sizeof figs[0] - (g->later_size ? 1 : 0);

	for (size_t i = 0; i < n; i++)
		skip(g, figs[i], why);
}

/* Collector k's latencies of the last phase, in us, into out. */
static void wake_lat(const struct gb_wake *w, int k, int n, double *out)
{
	for (int i = 0; i < n; i++)
		out[i] = (double)(w->t_held[k][i] - w->t_commit[i]) / (double)NS_PER_US;
}

/* The device phase: collectors on a (and the 2nd GPU), then the host
 * phase: host p50 and p99 into host[2]. Latencies into dev[k][]. */
static int wake_run(struct gb_shared *sh, double dev[2][GB_MAX_SAMPLES], int *n_dev,
                    double host[GB_MAX_SAMPLES])
{
	struct gb_wake *w = &sh->wake;
	int n = sh->plan.samples;

	w->pub_gpu = sh->plan.a;
	w->collector_gpu[0] = sh->plan.a;
	w->collector_gpu[1] = sh->plan.second;
	w->n_collectors = *n_dev = sh->plan.second >= 0 ? 2 : 1;
	snprintf(w->model, sizeof w->model, "gpu-wake");
	if (gb_wake_phase(sh))
		return -1;
	for (int k = 0; k < *n_dev; k++)
		wake_lat(w, k, n, dev[k]);
	w->pub_gpu = -1;
	w->collector_gpu[0] = -1;
	w->n_collectors = 1;
	snprintf(w->model, sizeof w->model, "gpu-wake-host");
	if (gb_wake_phase(sh))
		return -1;
	wake_lat(w, 0, n, host);
	return 0;
}

static void rows_wake(struct gpu_rows *g, struct gb_shared *sh)
{
	static double dev[2][GB_MAX_SAMPLES], host[GB_MAX_SAMPLES];
	static const char *const fig[2] = { F_WAKE_A, F_WAKE_B };
	int n = sh->plan.samples, n_dev;
	double h50, h99;

	if (wake_run(sh, dev, &n_dev, host)) {
		snprintf(g->why_wake, sizeof g->why_wake, "failed: %s", sh->wake.error);
		say_error("gpu: wake: %s", sh->wake.error);
		skip(g, F_WAKE_A, g->why_wake);
		skip(g, F_WAKE_B, g->why_wake);
		return;
	}
	h50 = stat_pct(host, (size_t)n, 0.5);
	h99 = stat_pct(host, (size_t)n, 0.99);
	add(g, "host model: commit -> wsync_sub_wait holds it, p50 (reference)", "us", h50,
	    NULL, 0);
	add(g, "host model: commit -> wsync_sub_wait holds it, p99 (reference)", "us", h99,
	    NULL, 0);
	for (int k = 0; k < n_dev; k++) {
		char p99[96];

		add(g, fig[k], "us", stat_pct(dev[k], (size_t)n, 0.5), "host, p50", h50);
		snprintf(p99, sizeof p99, "%.*sp99", (int)strlen(fig[k]) - 3, fig[k]);
		add(g, p99, "us", stat_pct(dev[k], (size_t)n, 0.99), "host, p99", h99);
	}
	if (n_dev < 2)
		skip(g, F_WAKE_B, "a single GPU");
}

/* ---- the scenario ------------------------------------------------------------ */

static int probe(struct gb_shared *sh)
{
	pid_t pid = child_spawn(gb_probe_child, sh);

	return pid < 0 || child_reap(pid, 120 * 1000) != 0 ? -1 : 0;
}

static void say_gpus(const struct gb_probe *pr, const struct gb_plan *pl)
{
	char v[16];

	wsync_cuda_version_text(pr->driver_version, v, sizeof v);
	say("gpu: CUDA driver %s%s, %d GPU%s; GPU %d '%s' publishes%s", v,
	    pr->fake ? " (the tests' fake: figures say nothing about GPUs)" : "", pr->count,
	    pr->count == 1 ? "" : "s", pl->a, pr->name[pl->a], pl->fake ? ", 4 MiB" : "");
	if (pl->b >= 0)
		say("gpu: peer fan-out to GPU %d '%s'", pl->b, pr->name[pl->b]);
	if (pl->c >= 0)
		say("gpu: staged fan-out to GPU %d '%s' (no peer access)", pl->c, pr->name[pl->c]);
}

int bench_gpu(struct bench *b)
{
	struct gb_shared *sh = shared_alloc(sizeof *sh);
	struct gpu_rows g;
	char why[300];
	int rc = 0;
	pid_t pid;

	if (!sh) {
		row_skip(SC, "device publish", "out of memory");
		return -1;
	}
	memset(&g, 0, sizeof g);
	g.sh = sh;
	if (probe(sh)) {
		/* a driver that kills the process loading it is a failure, not "no GPU" */
		snprintf(why, sizeof why, "failed: the process loading the CUDA driver died");
		say_error("gpu: %s", why);
		g.why_all = why;
		rc = -1;
	}
	plan_sizes(b, sh->probe.fake && fake_opt_in(), &sh->plan);
	snprintf(g.size, sizeof g.size, "%zu MiB", sh->plan.bytes / MIB);
	if (g.why_all || (g.why_all = no_gpu_reason(&sh->probe, why, sizeof why))) {
		skip_copy(&g, g.why_all);
		skip(&g, F_WAKE_A, g.why_all);
		skip(&g, F_WAKE_B, g.why_all);
		goto out;
	}
	plan_gpus(&sh->probe, &sh->plan);
	say_gpus(&sh->probe, &sh->plan);

	for (size_t z = 0; z < sizeof gpu_sizes / sizeof gpu_sizes[0]; z++) {
		if (z > 0) {
			if (sh->plan.fake || b->quick)
				break;          /* one small size proves the path */
			sh->plan.bytes = gpu_sizes[z];
			g.later_size = true;
			snprintf(g.size, sizeof g.size, "%zu MiB", sh->plan.bytes / MIB);
			if (sh->probe.mem[sh->plan.a] / GPU_ROOM < sh->plan.bytes) {
				snprintf(why, sizeof why, "GPU %d has %zu MiB, the %s rows need %d "
				         "times the model", sh->plan.a,
				         sh->probe.mem[sh->plan.a] / MIB, g.size, GPU_ROOM);
				skip_copy(&g, why);
				continue;
			}
		}
		memset(&sh->copy, 0, sizeof sh->copy);
		pid = child_spawn(gb_copy_child, sh);
		if (pid < 0 || child_reap(pid, 600 * 1000) != 0) {
			snprintf(g.why_copy, sizeof g.why_copy, "failed: %s",
			         sh->copy.error[0] ? sh->copy.error : "the measuring process died");
			say_error("gpu: %s", g.why_copy);
			skip_copy(&g, g.why_copy);
			rc = -1;
			continue;
		}
		rows_copy(&g);
		if (sh->plan.b < 0)
			skip(&g, F_PEER, sh->plan.second < 0 ? "a single GPU" :
			     "no GPU that the publisher's reaches peer to peer");
		if (sh->plan.c < 0)
			skip(&g, F_STAGED, sh->plan.second < 0 ? "a single GPU" :
			     "the publisher's GPU reaches every other one peer to peer");
	}
	rows_wake(&g, sh);
	if (g.why_wake[0])
		rc = -1;
out:
	shared_free(sh, sizeof *sh);
	return rc;
}
