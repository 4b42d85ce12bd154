/*
 * tools/bench/serving.c — scenario "serving": rollout workers that keep
 * acting while a trainer publishes, for each way of moving the weights, in
 * the same run (tools/bench/serving_bench.py measures; this file makes the
 * rows).
 *
 * Collector processes, one per core, run forward passes of a
 * transformer-shaped policy (>= 128 MiB of float32 weights; --quick a
 * smaller one) back to back, first without updates, then while the trainer
 * makes a version every 200 ms. Ways: wsync.LivePolicy; View.load_into
 * between passes; torch.distributed broadcast (gloo) into the live module;
 * pause-load-resume through a shared CPU buffer and a queue; TorchRL-style
 * in-place shared tensors ("torn"). Per way: passes/s with updates against
 * the same loop without; the longest gap between two passes of a collector
 * against a normal pass, and its p99; the policy lag at each pass; passes
 * that read a mixture of two versions (the weights carry their version in
 * places each pass reads). LivePolicy's targets (docs/BENCHMARKS.md):
 * >= 0.95x the passes without updates, a longest gap <= 1.2x a normal pass,
 * no mixed pass. A reference way shows the machine's share of the gaps:
 * the trainer publishes as for LivePolicy while the collectors run their
 * own weights, never updated. Thread CPU times, which a descheduled
 * collector does not inflate, give each way's cost per update and
 * LivePolicy's cost per pass against the plain module. LivePolicy and the
 * reference run once more with the trainer's publish paced
 * (Publisher.publish(spread=), 0.75 of the period): the gaps a trainer
 * sharing the collectors' cores costs them that way, and how much later
 * each version reaches them. Then LivePolicy, the reference and paced
 * LivePolicy run with one collector fewer than cores: with a core left to
 * the trainer, as on a machine with more cores than collectors, the gaps
 * are what the updates cost the collectors, not what the trainer's copy
 * costs the cores they share. Where torch has CUDA and the broker serves a
 * GPU, LivePolicy over device views, load_into a cuda:0 module and the
 * reference run once more on GPU 0 (the trainer publishing into the
 * model's device slabs); elsewhere their rows are skipped with the reason,
 * which the script finds before starting any process.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"

#define SERVING_OUT_MAX 16384

/* indices in ways[] of the references a way's CPU time per pass is set against */
#define WAY_REFERENCE 5
#define WAY_REFERENCE_GPU 10

static const struct {
	const char *row, *name;
	bool paced;                     /* the trainer publishes paced */
	bool live, ref;                 /* LivePolicy (its targets); a reference way */
	int base;                       /* the reference way of its CPU time per pass, or -1 */
	bool spare;                     /* one collector fewer than cores: a core to the trainer */
} ways[] = {
	{ "serving_live",      "LivePolicy", false, true, false, WAY_REFERENCE, false },
	{ "serving_load_into", "load_into between passes", false, false, false, -1, false },
	{ "serving_broadcast", "torch.distributed broadcast (gloo)", false, false, false, -1,
	  false },
	{ "serving_pause",     "pause-load-resume (shared buffer + queue)", false, false, false,
	  -1, false },
	{ "serving_torn",      "in-place shared tensors (torn)", false, false, false, -1, false },
	{ "serving_reference", "reference: own weights, the trainer publishing", false, false,
	  true, -1, false },
	{ "serving_live_paced", "LivePolicy", true, true, false, -1, false },
	{ "serving_reference_paced", "reference", true, false, true, -1, false },
	/* GPU 0: the trainer publishes into the device slabs (publish_gpu) */
	{ "serving_live_gpu", "GPU: LivePolicy over device views", false, true, false,
	  WAY_REFERENCE_GPU, false },
	{ "serving_load_into_gpu", "GPU: load_into a cuda:0 module between passes", false, false,
	  false, -1, false },
	{ "serving_reference_gpu", "GPU: reference, own cuda:0 weights, the trainer publishing",
	  false, false, true, -1, false },
	{ "serving_spare_live", "LivePolicy", false, true, false, -1, true },
	{ "serving_spare_reference", "reference", false, false, true, -1, true },
	{ "serving_spare_live_paced", "LivePolicy", true, true, false, -1, true },
};

static void serving_way(const char *out, int w, const char *why_run)
{
	double pps_base, pps_upd, fwd, gap, p99, lag_mean, lag_max, mixed, passes;
	double swap_cpu, upd_cpu, fwd_cpu, ref_cpu, spread, reach, reach_max, pub;
	const char *row = ways[w].row;
	bool live = ways[w].live, ref = ways[w].ref;
	struct bench_row *r;
	char why[256], fig[240], name[160];

	snprintf(why, sizeof why, "%s", why_run);
	snprintf(name, sizeof name, "%s", ways[w].name);
	if (ways[w].paced) {
		if (!out || bench_py_value(out, "serving_setup", "spread_ms", &spread, why,
		                           sizeof why))
			spread = 150;
		snprintf(name, sizeof name, "%s, trainer paced over %.0f ms", ways[w].name, spread);
	}
	if (ways[w].spare) {
		double n;
		size_t len = strlen(name);

		if (!out || bench_py_value(out, "serving_spare_setup", "collectors", &n, why,
		                           sizeof why))
			snprintf(name + len, sizeof name - len, " (a core left to the trainer)");
		else
			snprintf(name + len, sizeof name - len,
			         " (%.0f collector%s, a core left to the trainer)", n,
			         n == 1 ? "" : "s");
	}
	if (!out || bench_py_value(out, row, "pps_upd", &pps_upd, why, sizeof why) ||
	    bench_py_value(out, row, "pps_base", &pps_base, why, sizeof why) ||
	    bench_py_value(out, row, "fwd_ms", &fwd, why, sizeof why) ||
	    bench_py_value(out, row, "gap_max_ms", &gap, why, sizeof why) ||
	    bench_py_value(out, row, "gap_p99_ms", &p99, why, sizeof why) ||
	    bench_py_value(out, row, "lag_mean", &lag_mean, why, sizeof why) ||
	    bench_py_value(out, row, "lag_max", &lag_max, why, sizeof why) ||
	    bench_py_value(out, row, "mixed", &mixed, why, sizeof why) ||
	    bench_py_value(out, row, "passes", &passes, why, sizeof why) ||
	    bench_py_value(out, row, "swap_cpu_ms", &swap_cpu, why, sizeof why) ||
	    bench_py_value(out, row, "upd_cpu_ms", &upd_cpu, why, sizeof why) ||
	    bench_py_value(out, row, "fwd_cpu_ms", &fwd_cpu, why, sizeof why)) {
		row_skip("serving", name, "%s", why);
		return;
	}
	snprintf(fig, sizeof fig, "%s: forward passes/s with updates every 200 ms", name);
	r = row_add("serving", fig, "/s", pps_upd);
	row_ref(r, "same loop, no updates", pps_base);
	if (live)
		row_target_text(r, ">= 0.95x");
	snprintf(fig, sizeof fig, "%s: longest gap between two passes", name);
	r = row_add("serving", fig, "ms", gap);
	row_ref(r, "a forward pass, no updates", fwd);
	if (live)
		row_target_ratio(r, 1.2);
	snprintf(fig, sizeof fig, "%s: p99 gap between two passes", name);
	r = row_add("serving", fig, "ms", p99);
	row_ref(r, "a forward pass, no updates", fwd);
	if (ways[w].paced && !bench_py_value(out, row, "pub_ms", &pub, why, sizeof why)) {
		snprintf(fig, sizeof fig, "%s: the trainer's publish", name);
		r = row_add("serving", fig, "ms", pub);
		row_ref(r, "the spread asked for", spread);
	}
	if (ref)
		return;
	snprintf(fig, sizeof fig, "%s: CPU time per update in a collector", name);
	r = row_add("serving", fig, "ms", swap_cpu);
	row_ref(r, "a pass's CPU time, with updates", upd_cpu);
	if (ways[w].base >= 0 && !bench_py_value(out, ways[ways[w].base].row, "fwd_cpu_ms",
	                                         &ref_cpu, why, sizeof why)) {
		snprintf(fig, sizeof fig, "%s: CPU time of a pass, no updates", name);
		r = row_add("serving", fig, "ms", fwd_cpu);
		row_ref(r, "the module's own weights", ref_cpu);
	}
	snprintf(fig, sizeof fig, "%s: policy lag at a pass, mean (max %.0f)", name, lag_max);
	row_add("serving", fig, "", lag_mean);
	if (!bench_py_value(out, row, "reach_mean_ms", &reach, why, sizeof why) &&
	    !bench_py_value(out, row, "reach_max_ms", &reach_max, why, sizeof why) &&
	    !bench_py_value(out, row, "pub_ms", &pub, why, sizeof why)) {
		snprintf(fig, sizeof fig, "%s: time to reach a collector, mean (max %.0f ms)", name,
		         reach_max);
		r = row_add("serving", fig, "ms", reach);
		row_ref(r, "the trainer's update call", pub);
	}
	snprintf(fig, sizeof fig, "%s: passes that read two versions (of %.0f)", name, passes);
	r = row_add("serving", fig, "", mixed);
	if (live)
		row_target_value(r, 0);
}

int bench_serving(struct bench *b)
{
	char why[256] = "", script[PATH_MAX];
	char *out = calloc(1, SERVING_OUT_MAX);
	double mib, n;

	if (!out)
		snprintf(why, sizeof why, "out of memory");
	else if (bench_py_find("serving_bench.py", script, sizeof script))
		snprintf(why, sizeof why, "serving_bench.py not found (%.200s)", script);
	else if (access(b->python, X_OK))
		snprintf(why, sizeof why, "no python at %.200s", b->python);
	else {
		say("serving: %s %s", b->python, script);
		if (bench_py_run(b, script, b->quick ? "--quick" : NULL, b->quick ? 300 : 900, out,
		                 SERVING_OUT_MAX, why, sizeof why)) {
			free(out);
			out = NULL;
		}
	}
	if (out && !bench_py_value(out, "serving_setup", "mib", &mib, why, sizeof why) &&
	    !bench_py_value(out, "serving_setup", "collectors", &n, why, sizeof why))
		say("serving: %.0f MiB policy, %.0f collector processes", mib, n);
	for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++)
		serving_way(out, (int)w, why);
	free(out);
	return 0;
}
