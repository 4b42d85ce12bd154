/*
 * tools/bench/torchrl.c — scenario "torchrl": weight updates in TorchRL's own
 * loop. tools/bench/torchrl_bench.py drives the source tree's stand-in of
 * TorchRL 0.14.0's multi-process collector (a meta policy sent to 3 workers,
 * started by fork and by spawn) and times update_policy_weights_() — a
 * synchronous send, returning once every worker applied the weights — with
 * wsync's WsyncWeightSyncScheme and with TorchRL's SharedMem and
 * MultiProcess schemes (the stand-in's, written as TorchRL's), at 1 and
 * 64 MiB, an SGD step before each update; every worker's policy is checked
 * bit-exact after each return. Each wsync row has the faster of TorchRL's
 * two as its reference, measured in the same run.
 *
 * The script runs with --python (Debian's python3-torch) and needs the
 * source tree (the stand-in lives in tests/python); a figure it cannot give
 * is a skipped row, never a failure of the bench.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"

#define RL_OUT_MAX 16384

static const char *const rl_starts[] = { "fork", "spawn" };
static const int rl_mibs[] = { 1, 64 };

/* True if the script's line for row says "exact": true. */
static bool rl_exact(const char *out, const char *row)
{
	char pat[96];
	const char *line, *nl, *p;

	snprintf(pat, sizeof pat, "{\"row\": \"%s\"", row);
	if (!(line = strstr(out, pat)))
		return false;
	nl = strchr(line, '\n');
	p = strstr(line, "\"exact\": true");
	return p && (!nl || p < nl);
}

static void rl_rows(const char *out, const char *why_run, const char *start, int mib)
{
	static const struct { const char *key, *name; } schemes[] = {
		{ "sharedmem", "TorchRL SharedMemWeightSyncScheme" },
		{ "multiprocess", "TorchRL MultiProcessWeightSyncScheme" },
		{ "wsync", "wsync WsyncWeightSyncScheme" },
	};
	double best = -1;
	const char *best_name = NULL;

	for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
		char row[64], figure[192], why[256];
		double ms;
		struct bench_row *r;

		snprintf(row, sizeof row, "update %s %s %d", schemes[i].key, start, mib);
		snprintf(figure, sizeof figure, "%s: update_policy_weights_(), 3 workers (%s), "
		         "%d MiB", schemes[i].name, start, mib);
		snprintf(why, sizeof why, "%s", why_run);
		if (!out || bench_py_value(out, row, "ms", &ms, why, sizeof why)) {
			row_skip("torchrl", figure, "%s", why);
			continue;
		}
		if (!rl_exact(out, row)) {
			row_skip("torchrl", figure, "a worker's policy differed from the trainer's "
			         "after the update returned");
			continue;
		}
		r = row_add("torchrl", figure, "ms", ms);
		if (strcmp(schemes[i].key, "wsync")) {
			if (best < 0 || ms < best) {
				best = ms;
				best_name = schemes[i].key;
			}
		} else if (best > 0) {
			row_ref(r, best_name, best);
			row_target_ratio(r, 1.0);
		}
	}
}

int bench_torchrl(struct bench *b)
{
	char why[256] = "", script[PATH_MAX];
	char *out = calloc(1, RL_OUT_MAX);

	if (!out)
		snprintf(why, sizeof why, "out of memory");
	else if (bench_py_find("torchrl_bench.py", script, sizeof script))
		snprintf(why, sizeof why, "torchrl_bench.py not found (%.200s)", script);
	else if (access(b->python, X_OK))
		snprintf(why, sizeof why, "no python at %.200s", b->python);
	else {
		say("torchrl: %s %s", b->python, script);
		bench_py_run(b, script, b->quick ? "--quick" : NULL, b->quick ? 600 : 1500, out,
		             RL_OUT_MAX, why, sizeof why);
	}
	for (size_t s = 0; s < sizeof rl_starts / sizeof rl_starts[0]; s++)
		for (size_t m = 0; m < sizeof rl_mibs / sizeof rl_mibs[0]; m++)
			rl_rows(out, why, rl_starts[s], rl_mibs[m]);
	free(out);
	return 0;
}
