/*
 * tools/bench/e2e.c — scenario "e2e": an update of 256 MiB reaching 4
 * collectors, against the fastest copy this machine can do.
 *
 * wsync: a model of 64 float32 tensors (4 slots), 4 collector processes
 * blocked in wsync_sub_wait; the trainer (this process) begins, copies its
 * warm buffers into the slab with wsync_slab_copy_tensors(threads = 0: as
 * many as pay, which the library measured) and commits, with default
 * options: a checksum with every version, formed during the copy. The
 * figure runs from the start of the copy until the last collector holds
 * the version (fanout.c), each sample after 1-2 ms of idleness, as between
 * two updates. The same with WSYNC_PUB_NO_CHECKSUM is a row of its own.
 *
 * Reference: the fastest copy of 256 MiB: memcpy between warm buffers
 * split evenly over t threads (the helpers started beforehand) for t = 1 ..
 * the online CPUs (16 at most); the best t's median. It is measured
 * between the samples (every t once before each sample, collectors armed
 * and asleep), so both see the same traffic from the rest of the machine.
 * Slabs are written once by warm-up samples first: this VM's first write
 * of memory some time after it was last written costs the host's work,
 * not the copy's (docs/BENCHMARKS.md, "scale"). --quick: 64 MiB, 4
 * warm-up samples, 3 per repeat.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"
#include "copy_engine.h"

#define E2E_BYTES      (256 * MIB)
#define E2E_QUICK_BYTES (64 * MIB)    /* --quick: a smaller model, fewer samples */
#define E2E_TENSORS    64
#define E2E_COLLECTORS 4
#define E2E_MAX_T      16
#define E2E_WARMUP     8             /* two writes of each of the 4 slots */
#define E2E_QUICK_WARMUP 4

struct e2e_ref {
	size_t bytes;
	int warmup;
	int n_t;                         /* thread counts 1 .. n_t */
	struct pcopy *pc[E2E_MAX_T + 1];
	bool ran[E2E_MAX_T + 1];         /* pc[t] started and measured */
	void *src, *dst;
	double *ms[E2E_MAX_T + 1];       /* [samples] per thread count */
	int n, cap;
};

/* Every thread count once, before a sample (fan_cfg.between). */
static void e2e_ref_between(void *arg, int sample)
{
	struct e2e_ref *r = arg;

	for (int t = 1; t <= r->n_t; t++) {
		int64_t t0;

		if (!r->pc[t])
			continue;
		r->ran[t] = true;
		t0 = mono_ns();
		pcopy_flat(r->pc[t], r->dst, r->src, r->bytes);
		if (sample >= r->warmup && r->n < r->cap)
			r->ms[t][r->n] = (double)(mono_ns() - t0) / (double)NS_PER_MS;
	}
	if (sample >= r->warmup && r->n < r->cap)
		r->n++;
}

/* Stops the copy threads (before the next scenario forks). */
static void e2e_ref_stop(struct e2e_ref *r)
{
	for (int t = 1; t <= r->n_t; t++) {
		pcopy_free(r->pc[t]);
		r->pc[t] = NULL;
	}
}

static void e2e_ref_free(struct e2e_ref *r)
{
	e2e_ref_stop(r);
	for (int t = 1; t <= r->n_t; t++)
		free(r->ms[t]);
	warm_free(r->src, r->bytes);
	warm_free(r->dst, r->bytes);
}

static int e2e_ref_init(struct e2e_ref *r, int samples, size_t bytes, int warmup)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	r->bytes = bytes;
	r->warmup = warmup;
	r->n_t = cpus < 1 ? 1 : cpus > E2E_MAX_T ? E2E_MAX_T : (int)cpus;
	r->cap = samples;
	r->src = warm_alloc(bytes);
	r->dst = warm_alloc(bytes);
	if (!r->src || !r->dst)
		return -1;
	for (int t = 1; t <= r->n_t; t++)
		if (!(r->ms[t] = calloc((size_t)samples, sizeof(double))))
			return -1;
	return 0;
}

/* The pcopy helpers start after the collectors are forked (fan_run forks
 * first): started lazily by the first call. */
static void e2e_ref_between_lazy(void *arg, int sample)
{
	struct e2e_ref *r = arg;

	if (!r->pc[1])
		for (int t = 1; t <= r->n_t; t++)
			r->pc[t] = pcopy_new(t);
	e2e_ref_between(arg, sample);
}

/* Last-collector latencies of one configuration, from the start of the
 * copy, ms, into out[samples]. */
static int e2e_measure(struct bench *b, struct e2e_ref *ref, uint32_t flags, int samples,
                       size_t bytes, int warmup, double *out, char *error, size_t errlen)
{
	static int serial;
	char model[32];
	struct fan_cfg cfg = {
		.mode = FAN_WSYNC, .endpoint = b->endpoint, .model = model,
		.bytes = bytes, .n_tensors = E2E_TENSORS, .collectors = E2E_COLLECTORS,
		.warmup = warmup, .samples = samples,
		.pause_min_ns = 1 * NS_PER_MS, .pause_max_ns = 2 * NS_PER_MS,
		.lib_copy = true, .model_flags = flags,
		.between = ref ? e2e_ref_between_lazy : NULL, .between_arg = ref,
	};
	struct fan_result res;
	int rc;

	snprintf(model, sizeof model, "e2e-%d", ++serial);
	rc = fan_run(&cfg, &res);
	if (rc) {
		snprintf(error, errlen, "%s", res.error);
	} else {
		fan_latencies(&res, FAN_FROM_COPY, true, out);
		for (int s = 0; s < samples; s++)
			out[s] /= (double)NS_PER_MS;
	}
	fan_result_free(&res);
	return rc;
}

static void e2e_rows(struct e2e_ref *ref, double *sum, double *bare, int samples)
{
	double best = 0, one = 0;
	int best_t = 1;
	struct copy_tuning tu;
	char fig[160];
	struct bench_row *row;

	for (int t = 1; t <= ref->n_t; t++) {
		double m;

		if (!ref->ran[t] || !ref->n)
			continue;
		m = stat_median(ref->ms[t], (size_t)ref->n);
		if (t == 1)
			one = m;
		if (!best || m < best) {
			best = m;
			best_t = t;
		}
		snprintf(fig, sizeof fig, "memcpy %zu MiB, %d thread%s, warm buffers",
		         ref->bytes / MIB, t, t > 1 ? "s" : "");
		row = row_add("e2e", fig, "ms", m);
		if (t > 1)
			row_ref(row, "memcpy, 1 thread", one);
	}
	snprintf(fig, sizeof fig, "fastest copy the machine can do: best of 1..%d threads of "
	         "memcpy %zu MiB (%d)", ref->n_t, ref->bytes / MIB, best_t);
	row_add("e2e", fig, "ms", best);
	snprintf(fig, sizeof fig, "%zu MiB to 4 collectors: copy start to the last holding it, "
	         "default options, p50", ref->bytes / MIB);
	row = row_add("e2e", fig, "ms", stat_median(sum, (size_t)samples));
	row_ref(row, "fastest copy", best);
	row_target_ratio(row, 1.05);
	row = row_add("e2e", "same, p90", "ms", stat_pct(sum, (size_t)samples, 0.90));
	row_ref(row, "fastest copy", best);
	row = row_add("e2e", "same, WSYNC_PUB_NO_CHECKSUM, p50", "ms",
	              stat_median(bare, (size_t)samples));
	row_ref(row, "fastest copy", best);
	copy_tuning_get(&tu);
	snprintf(fig, sizeof fig, "copy threads the library measured as paying (stores: %s "
	         "hashed, %s plain)", !tu.hashed_decided ? "undecided" :
	         tu.hashed_streams ? "streaming" : "ordinary",
	         !tu.plain_decided ? "undecided" : tu.plain_streams ? "streaming" : "memcpy");
	row_add("e2e", fig, "", tu.threads);
}

int bench_e2e(struct bench *b)
{
	int samples = (b->quick ? 3 : 4) * b->repeats;
	size_t bytes = b->quick ? E2E_QUICK_BYTES : E2E_BYTES;
	int warmup = b->quick ? E2E_QUICK_WARMUP : E2E_WARMUP;
	double *sum = calloc((size_t)samples, sizeof *sum);
	double *bare = calloc((size_t)samples, sizeof *bare);
	char error[400] = "out of memory";
	struct e2e_ref ref;
	int rc = -1;

	memset(&ref, 0, sizeof ref);
	if (!sum || !bare || e2e_ref_init(&ref, samples, bytes, warmup))
		goto out;
	if (e2e_measure(b, &ref, 0, samples, bytes, warmup, sum, error, sizeof error))
		goto out;
	e2e_ref_stop(&ref);
	if (e2e_measure(b, NULL, WSYNC_PUB_NO_CHECKSUM, samples, bytes, warmup, bare, error,
	                sizeof error))
		goto out;
	e2e_rows(&ref, sum, bare, samples);
	rc = 0;
out:
	if (rc) {
		say_error("e2e: %s", error);
		row_skip("e2e", "to 4 collectors", "failed: %s", error);
	}
	e2e_ref_free(&ref);
	free(sum);
	free(bare);
	return rc;
}
