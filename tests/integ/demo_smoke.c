/*
 * demo_smoke — `make demo` works: wsync-demo starts its own broker, a trainer
 * and collectors, runs for a few seconds, and reports every collector saw
 * versions with no verification failure and a clean broker exit ("wsync-demo:
 * OK", exit 0). A short, small run: this checks the demo, not speed.
 */
#include "tests/lib/harness.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char out[65536];

int main(void)
{
	const char *wsyncd = harness_wsyncd_path();
	char demo[PATH_MAX];
	const char *slash = strrchr(wsyncd, '/');
	int st;

	TEST_ASSERT_MSG(slash != NULL, "wsyncd path %s has no directory", wsyncd);
	snprintf(demo, sizeof demo, "%.*s/wsync-demo", (int)(slash - wsyncd), wsyncd);
	char *argv[] = { demo, "--wsyncd", (char *)wsyncd, "--seconds", "2",
	                 "--collectors", "3", "--mib", "2", "--hz", "20", NULL };
	st = harness_run(argv, out, sizeof out, 30000);
	harness_log("wsync-demo: %s\n%s", harness_status_str(st), out);
	TEST_ASSERT_MSG(st != -1, "wsync-demo still running after 30 s");
	TEST_ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "wsync-demo: %s",
	                harness_status_str(st));
	TEST_ASSERT_MSG(strstr(out, "wsync-demo: OK") != NULL, "no OK verdict in the output");
	TEST_ASSERT_MSG(strstr(out, "wsyncd exit 0") != NULL, "broker did not exit 0");
	return 0;
}
