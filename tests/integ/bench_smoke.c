/*
 * bench_smoke — `make bench` works: wsync-bench --quick (publish, acquire,
 * wake, sustained, shard, checksum and e2e; the torch peers are left to
 * `make bench`)
 * starts its own broker, runs every scenario, stops the broker cleanly,
 * exits 0, and its JSON has no failure, no skipped row, and a row for each
 * scenario with a value (and the wake scenario's alternated and pinned rows
 * of one collector back to back).
 *
 * Then the gpu scenario against the fake CUDA driver (3 GPUs, peer access
 * 0<->1 only) with WSYNC_BENCH_GPU_FAKE=1: every GPU row runs (publish,
 * peer and staged fan-out, wake on two GPUs, acquire_gpu, both copies to
 * device) and has a positive value, and every measuring process ends with
 * nothing alive in the fake (the bench fails otherwise). Without that
 * opt-in the fake counts as no GPU: every row is skipped, saying so.
 *
 * And the serving scenario's GPU ways alone (WSYNC_BENCH_SERVING_WAYS):
 * where torch has no CUDA or there is no GPU each has its row, skipped with
 * the reason the script found before starting any process; where they can
 * run, each has its throughput row with a value.
 *
 * It asserts nothing about speed: figures belong to the bench.
 */
#include "tests/lib/harness.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[1 << 16];
static char json[1 << 17];
static char bench[PATH_MAX];

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* wsync-bench --quick --repeats 1 --only <only>, its JSON into json[]. */
static void run_bench(const char *only)
{
	char json_path[] = "/tmp/wsync-bench-smoke-XXXXXX";
	const char *wsyncd = harness_wsyncd_path();
	int fd, st;
	ssize_t n;

	fd = mkstemp(json_path);
	TEST_ASSERT(fd >= 0);
	char *argv[] = { bench, "--wsyncd", (char *)wsyncd, "--quick", "--repeats", "1",
	                 "--only", (char *)only, "--json", json_path, NULL };
	st = harness_run(argv, out, sizeof out, 120000);
	harness_log("wsync-bench --only %s: %s\n%s", only, harness_status_str(st), out);
	TEST_ASSERT_MSG(st != -1, "wsync-bench still running after 120 s");
	TEST_ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "wsync-bench: %s",
	                harness_status_str(st));
	TEST_ASSERT_MSG(strstr(out, "broker stopped cleanly (exit 0)") != NULL,
	                "no clean broker stop in the output");

	n = read(fd, json, sizeof json - 1);
	close(fd);
	unlink(json_path);
	TEST_ASSERT_MSG(n > 0 && (size_t)n < sizeof json - 1, "JSON of %zd bytes", n);
	json[n] = '\0';
	TEST_CONTAINS(json, "\"failures\": 0,");
}

static void host_scenarios(void)
{
	static const char *const scenarios[] = { "publish", "acquire", "wake", "sustained", "shard",
	                                          "checksum", "e2e" };

	/* not the build of an earlier release (a minute of make) in the tests */
	setenv("WSYNC_BENCH_BASELINE", "off", 1);
	run_bench("publish,acquire,wake,sustained,shard,checksum,e2e");
	unsetenv("WSYNC_BENCH_BASELINE");
	TEST_ASSERT_MSG(count(json, "\"skipped\": null") == count(json, "\"skipped\":"),
	                "a row was skipped");
	TEST_ASSERT_MSG(count(json, "\"value\": null") == 0, "a row has no value");
	for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
		char key[64];

		snprintf(key, sizeof key, "{\"scenario\": \"%s\"", scenarios[i]);
		TEST_ASSERT_MSG(count(json, key) >= 2, "fewer than 2 rows for %s", scenarios[i]);
	}
	/* one collector back to back: alternated rounds, then pinned both ways */
	TEST_ASSERT(count(json, "vs raw wake-all, back to back, p50, median round") == 1);
	TEST_ASSERT(count(json, "raw futex wake-all after a commit's round trip") == 1);
	TEST_ASSERT(count(json, ", one core, p50, median round") == 2);
	TEST_ASSERT(count(json, ", two cores, p50, median round") == 2);
}

static void serving_gpu_ways(void)
{
	static const char *const ways[] = {
		"GPU: LivePolicy over device views",
		"GPU: load_into a cuda:0 module between passes",
		"GPU: reference, own cuda:0 weights, the trainer publishing",
	};

	setenv("WSYNC_BENCH_SERVING_WAYS", "live_gpu,load_into_gpu,reference_gpu", 1);
	run_bench("serving");
	unsetenv("WSYNC_BENCH_SERVING_WAYS");
	/* the host ways were not asked for, and say so */
	TEST_ASSERT(count(json, "\"skipped\": \"not asked for (--only live_gpu,") == 8);
	/* and neither the host ways again with a core left to the trainer */
	TEST_ASSERT(count(json, "\"skipped\": \"not asked for (--spare-ways ") == 3);
	for (size_t i = 0; i < sizeof ways / sizeof ways[0]; i++) {
		char key[200];
		const char *row, *why;

		snprintf(key, sizeof key, "{\"scenario\": \"serving\", \"figure\": \"%s\"", ways[i]);
		row = strstr(json, key);
		if (!row) {             /* it ran: its rows have values */
			snprintf(key, sizeof key, "{\"scenario\": \"serving\", \"figure\": "
			         "\"%s: forward passes/s", ways[i]);
			row = strstr(json, key);
			TEST_ASSERT_MSG(row != NULL, "no serving row for '%s'", ways[i]);
			TEST_ASSERT_MSG(strncmp(strstr(row, "\"value\": "), "\"value\": null", 15),
			                "'%s' ran without a value", ways[i]);
			continue;
		}
		why = strstr(row, "\"skipped\": \"");
		TEST_ASSERT_MSG(why && why < strchr(row, '}'), "'%s': no value, no reason", ways[i]);
		why += strlen("\"skipped\": \"");
		harness_log("serving %s: skipped: %.*s\n", ways[i], (int)strcspn(why, "\""), why);
		/* the checks the script makes, each reason naming what is missing */
		TEST_ASSERT_MSG(!strncmp(why, "torch ", 6) || !strncmp(why, "no GPU", 6) ||
		                !strncmp(why, "the broker serves no GPU", 24),
		                "'%s' skipped for another reason: %.120s", ways[i], why);
	}
}

#ifdef WSYNC_HAVE_CUDA_H
/* The row whose figure starts with `figure`: its value, which must be there. */
static double gpu_value(const char *figure)
{
	char key[160];
	const char *row, *v;

	snprintf(key, sizeof key, "{\"scenario\": \"gpu\", \"figure\": \"%s", figure);
	row = strstr(json, key);
	TEST_ASSERT_MSG(row != NULL, "no gpu row '%s'", figure);
	v = strstr(row, "\"value\": ");
	TEST_ASSERT(v != NULL);
	v += strlen("\"value\": ");
	TEST_ASSERT_MSG(strncmp(v, "null", 4) != 0, "gpu row '%s' has no value", figure);
	return strtod(v, NULL);
}

static void gpu_on_fake(void)
{
	/* every row that measures something, and its reference */
	static const char *const rows[] = {
		"cuMemcpyDtoDAsync 4 MiB on one GPU",
		"device publish 4 MiB: begin_gpu",
		"peer copy 4 MiB to a 2nd GPU",
		"device publish 4 MiB, model on 2 GPUs, peer fan-out",
		"staged copy 4 MiB",
		"device publish 4 MiB, model on 2 GPUs without peer access",
		"host acquire + release",
		"acquire_gpu + release_gpu",
		"cuMemcpyHtoDAsync 4 MiB from pinned memory",
		"wsync_view_copy_to_device 4 MiB",
		"wsync_dview_copy_to_device 4 MiB",
		"host model: commit -> wsync_sub_wait holds it, p50",
		"host model: commit -> wsync_sub_wait holds it, p99",
		"commit_gpu -> wsync_sub_wait_gpu holds it, publisher's GPU, p50",
		"commit_gpu -> wsync_sub_wait_gpu holds it, publisher's GPU, p99",
		"commit_gpu -> wsync_sub_wait_gpu holds it, a 2nd GPU, p50",
		"commit_gpu -> wsync_sub_wait_gpu holds it, a 2nd GPU, p99",
	};
	char fake[PATH_MAX];

	harness_fakecuda_path(fake, sizeof fake);
	setenv("WSYNC_LIBCUDA", fake, 1);
	setenv("FAKECUDA_DEVICES", "3", 1);
	setenv("FAKECUDA_PEERS", "01,10", 1);
	unsetenv("CUDA_VISIBLE_DEVICES");

	/* by default the fake is no GPU */
	unsetenv("WSYNC_BENCH_GPU_FAKE");
	run_bench("gpu");
	TEST_ASSERT_MSG(count(json, "\"skipped\": \"no GPU: the driver is the tests' fake") ==
	                count(json, "{\"scenario\": \"gpu\""), "a gpu row ran on the fake");
	TEST_ASSERT(count(json, "{\"scenario\": \"gpu\"") >= 6);

	setenv("WSYNC_BENCH_GPU_FAKE", "1", 1);
	run_bench("gpu");
	unsetenv("WSYNC_BENCH_GPU_FAKE");
	TEST_CONTAINS(out, "staged fan-out to GPU 2");
	TEST_ASSERT_MSG(count(json, "\"skipped\": null") == count(json, "\"skipped\":"),
	                "a gpu row was skipped on 3 fake GPUs");
	TEST_ASSERT_MSG(count(json, "\"value\": null") == 0, "a gpu row has no value");
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		double v = gpu_value(rows[i]);

		TEST_ASSERT_MSG(v > 0, "gpu row '%s': %g", rows[i], v);
	}
	/* the differences of two medians exist; their sign is noise on a host */
	gpu_value("peer fan-out alone");
	gpu_value("staged fan-out alone");
}
#endif

int main(void)
{
	const char *wsyncd = harness_wsyncd_path();
	const char *slash = strrchr(wsyncd, '/');

	TEST_ASSERT_MSG(slash != NULL, "wsyncd path %s has no directory", wsyncd);
	snprintf(bench, sizeof bench, "%.*s/wsync-bench", (int)(slash - wsyncd), wsyncd);
	host_scenarios();
	serving_gpu_ways();
#ifdef WSYNC_HAVE_CUDA_H
	gpu_on_fake();
#endif
	return 0;
}
