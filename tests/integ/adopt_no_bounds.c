/*
 * adopt_no_bounds — a broker adopts the control segment of a broker built
 * before the session bounds table (shm/layout.h bounds_offset): a segment
 * that ends with the session table, bounds_offset 0. The model and its
 * latest version survive the restart as with a segment of this build, and
 * the tools read the new segment, bounds included.
 */
#include "tests/lib/harness.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm/layout.h"

#define MODEL "adopt.nobounds"

static struct broker B;

int main(void)
{
	const off_t old_bytes = (off_t)(sizeof(struct wsync_ctl_header) +
	                                WSYNC_MAX_MODELS * sizeof(struct wsync_ctl_model) +
	                                WSYNC_MAX_SESSIONS * sizeof(struct wsync_ctl_session));
	const uint64_t total = (uint64_t)old_bytes;
	const uint32_t none = 0;
	char path[512], out[16384], ctl[256];
	const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
	char *argv[] = { ctl, "--endpoint", B.sock, "--json", "sessions", NULL };
	wsync_client *c;
	wsync_pub *p;
	wsync_sub *s;
	wsync_view v;
	uint64_t ver;
	struct stat st;
	int fd;

	if (harness_broker_start(&B, NULL))
		return 1;
	TEST_OK(harness_connect(&B, "trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	TEST_OK(harness_publish(p, 7, HARNESS_S, &ver));
	wsync_pub_close(p);
	wsync_close(c);

	/* the broker dies; its segment is made one of an older build */
	TEST_OK(harness_seg_path(&B, "ctl", path, sizeof(path)));
	harness_broker_kill(&B);
	fd = open(path, O_RDWR | O_CLOEXEC);
	TEST_ASSERT_MSG(fd >= 0, "open %s: %s", path, strerror(errno));
	TEST_ASSERT(fstat(fd, &st) == 0);
	TEST_ASSERT_MSG(st.st_size > old_bytes, "ctl is %lld bytes", (long long)st.st_size);
	TEST_ASSERT(pwrite(fd, &none, sizeof(none),
	                   offsetof(struct wsync_ctl_header, bounds_offset)) == sizeof(none));
	TEST_ASSERT(pwrite(fd, &total, sizeof(total),
	                   offsetof(struct wsync_ctl_header, total_bytes)) == sizeof(total));
	TEST_ASSERT(ftruncate(fd, old_bytes) == 0);
	close(fd);

	/* adopted: the version is there to take */
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	TEST_OK(harness_connect(&B, "collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_ASSERT(v.version >= ver);            /* a new generation may number it anew */
	TEST_EQ_U64(v.step, 7);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);

	/* the new generation has the table again: a bound is shown */
	TEST_OK(wsync_sub_declare_max_lag(s, 4, 0));
	snprintf(ctl, sizeof(ctl), "%s/bin/wsyncctl", build);
	for (int64_t deadline = harness_mono_ns() + 8 * HARNESS_S;;) {
		int rc = harness_run(argv, out, sizeof(out), 10000);

		TEST_ASSERT_MSG(rc == 0, "wsyncctl: %s: %s", harness_status_str(rc), out);
		if (strstr(out, "\"max_lag_versions\":4"))
			break;
		TEST_ASSERT_MSG(harness_mono_ns() < deadline, "no bound shown: %s", out);
		harness_sleep_ms(100);
	}

	wsync_sub_close(s);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
