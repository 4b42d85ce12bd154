/*
 * fault_crash_cleanup — what a crash leaves, a restart adopts or removes:
 *  1. SIGKILL the broker with a model published and a collector holding a
 *     view: its segments stay (nothing cleaned them); a restart adopts them
 *     (the collector reconnects to the same version and bytes), and a clean
 *     stop then leaves nothing of the instance in /dev/shm.
 *  2. Debris of starts that crashed half-way (private directories of the
 *     instance that no state file names, with objects in them) is removed
 *     by the next start.
 *  3. By default a clean stop keeps what the next start needs — the
 *     directory, the control segment, and each model's layout and latest
 *     slab, nothing more — and the next start adopts it at the same
 *     version; --no-keep then removes everything.
 *  4. --fresh starts without the weights a clean stop kept: nothing to
 *     acquire, and the next version is above every earlier one.
 */
#include "tests/lib/faults.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#define MODEL "crash.policy"

static struct broker B;

static uint64_t publish(uint64_t step)
{
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	uint64_t v;

	TEST_OK(harness_connect(&B, "crash-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	TEST_OK(harness_publish(p, step, HARNESS_S, &v));
	wsync_pub_close(p);
	wsync_close(c);
	return v;
}

static void expect_latest(uint64_t version, uint64_t step)
{
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;

	TEST_OK(harness_connect(&B, "crash-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_ASSERT_MSG(v.version >= version && v.step == step, "after the restart: v%llu "
	                "step %llu, before v%llu step %llu", (unsigned long long)v.version,
	                (unsigned long long)v.step, (unsigned long long)version,
	                (unsigned long long)step);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_close(c);
}

/* A private directory of this instance that no state file names (what a
 * start that crashed half-way leaves), with an object in it. */
static void debris(const char *tag, const char *seg)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "/dev/shm/wsync.%u.%s.%s", (unsigned)geteuid(), B.name,
	         tag);
	TEST_ASSERT_MSG(mkdir(path, 0700) == 0 || errno == EEXIST, "%s: %s", path,
	                strerror(errno));
	snprintf(path + strlen(path), sizeof(path) - strlen(path), "/%s", seg);
	fd = open(path, O_CREAT | O_RDWR | O_EXCL | O_CLOEXEC, 0600);
	TEST_ASSERT_MSG(fd >= 0, "%s: %s", path, strerror(errno));
	TEST_ASSERT(ftruncate(fd, 4096) == 0);
	close(fd);
}

int main(void)
{
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view held;

	/* 1 */
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	uint64_t v1 = publish(11);
	TEST_OK(harness_connect(&B, "crash-holder", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire(s, &held));
	harness_broker_kill(&B);
	int left = harness_shm_leftovers(&B, 0);
	TEST_ASSERT_MSG(left >= 1 + 2 + 4, "only %d segments after the crash", left);
	TEST_ASSERT(harness_verify_view(&held) == 0);     /* still readable */
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	expect_latest(v1, 11);
	TEST_ASSERT(harness_verify_view(&held) == 0 && held.step == 11);
	wsync_sub_release(s, &held);
	wsync_sub_close(s);
	wsync_close(c);
	uint64_t v2 = publish(12);
	TEST_GT_U64(v2, v1);
	harness_broker_finish(&B);

	/* 2 */
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	uint64_t v3 = publish(13);
	harness_broker_kill(&B);
	debris("00000000deadbeef", "ctl");
	debris("00000000deadbeef", "m7.s0");
	debris("0123456789abcdef", "m7.layout");
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	expect_latest(v3, 13);
	harness_broker_finish(&B);

	/* 3 */
	TEST_ASSERT(harness_broker_start(&B, HARNESS_KEEP_DEFAULT, NULL) == 0);
	publish(13);
	uint64_t v4 = publish(14);
	TEST_ASSERT(harness_broker_stop(&B) == 0);
	left = harness_shm_leftovers(&B, 1);
	TEST_ASSERT_MSG(left == 1 + 1 + 1 + 1, "a clean stop kept %d entries, not the "
	                "directory, ctl, the layout and the latest slab", left);
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	expect_latest(v4, 14);
	TEST_ASSERT(harness_broker_stop(&B) == 0);

	/* 4 */
	snprintf(B.args[0], sizeof B.args[0], "--fresh");
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	TEST_OK(harness_connect(&B, "crash-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_RC(wsync_sub_acquire(s, &held), -ENODATA);
	wsync_sub_close(s);
	wsync_close(c);
	TEST_GT_U64(publish(15), v4);
	B.n_args = 0;                    /* the harness's --no-keep again */
	TEST_ASSERT(harness_broker_stop(&B) == 0);
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	harness_broker_finish(&B);
	return 0;
}
