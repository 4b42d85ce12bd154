/*
 * bench_smoke — `make bench` works: wsync-bench --quick (publish, acquire,
 * wake and sustained; the torch peers are left to `make bench`) starts its
 * own broker, runs every scenario, stops the broker cleanly, exits 0, and its
 * JSON has no failure, no skipped row, and a row for each scenario with a
 * value. It asserts nothing about speed: figures belong to the bench.
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

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

int main(void)
{
	static const char *const scenarios[] = { "publish", "acquire", "wake", "sustained", "shard" };
	const char *wsyncd = harness_wsyncd_path();
	const char *slash = strrchr(wsyncd, '/');
	char bench[PATH_MAX], json_path[] = "/tmp/wsync-bench-smoke-XXXXXX";
	int fd, st;
	ssize_t n;

	TEST_ASSERT_MSG(slash != NULL, "wsyncd path %s has no directory", wsyncd);
	snprintf(bench, sizeof bench, "%.*s/wsync-bench", (int)(slash - wsyncd), wsyncd);
	fd = mkstemp(json_path);
	TEST_ASSERT(fd >= 0);
	char *argv[] = { bench, "--wsyncd", (char *)wsyncd, "--quick", "--repeats", "1",
	                 "--only", "publish,acquire,wake,sustained,shard", "--json", json_path, NULL };
	st = harness_run(argv, out, sizeof out, 120000);
	harness_log("wsync-bench: %s\n%s", harness_status_str(st), out);
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
	TEST_ASSERT_MSG(count(json, "\"skipped\": null") == count(json, "\"skipped\":"),
	                "a row was skipped");
	TEST_ASSERT_MSG(count(json, "\"value\": null") == 0, "a row has no value");
	for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
		char key[64];

		snprintf(key, sizeof key, "{\"scenario\": \"%s\"", scenarios[i]);
		TEST_ASSERT_MSG(count(json, key) >= 2, "fewer than 2 rows for %s", scenarios[i]);
	}
	return 0;
}
