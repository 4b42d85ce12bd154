/*
 * planted_generation — nothing another uid puts in /dev/shm or names in a
 * state file is adopted, and planted names block nothing.
 *
 * A real generation with weights of step 666 is made by a broker of another
 * instance (--keep) and copied, as uid 65534, to every place the instance
 * under test could look for a previous generation: the old predictable
 * names (/dev/shm/wsync.<uid>.<name>.ctl, .1.m0.layout, .1.m0.s<k>, and
 * .ctl.new) and a private-looking directory wsync.<uid>.<name>.<16 hex>/
 * of uid 65534. Then:
 * 1. the state file (ours) names that directory: the broker starts, logs
 *    that the directory is owned by uid 65534, adopts nothing (a
 *    subscriber gets -ENODATA, never step 666), and publishing works;
 * 2. the state file itself belongs to uid 65534: the same;
 * 3. a clean stop leaves the planted objects alone (not ours to delete)
 *    and nothing of its own.
 * Root only (skipped otherwise): the planter is another uid.
 */
#include "tests/lib/faults.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define MODEL   "planted.policy"
#define PLANTER 65534
#define FAKE_TAG "00000000000000aa"

static struct broker N;                 /* the instance under test */

struct object {
	char   name[64];                    /* in the private directory: ctl, m0.s1 */
	char  *data;
	size_t len;
};
static struct object objs[16];
static int n_objs;

static void slurp(const char *path, const char *name)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	TEST_ASSERT_MSG(fd >= 0, "%s: %s", path, strerror(errno));
	TEST_ASSERT(fstat(fd, &st) == 0 && n_objs < 16);
	struct object *o = &objs[n_objs++];
	TEST_ASSERT(snprintf(o->name, sizeof o->name, "%s", name) < (int)sizeof o->name);
	o->len = (size_t)st.st_size;
	o->data = malloc(o->len);
	TEST_ASSERT(o->data && read(fd, o->data, o->len) == (ssize_t)o->len);
	close(fd);
}

/* A generation of another instance with step 666 in it, read into objs. */
static void make_forgery(void)
{
	struct broker M;
	wsync_client *c;
	wsync_pub *p;
	uint64_t v;
	char dir[512];
	TEST_ASSERT(harness_broker_start(&M, "--keep", NULL) == 0);
	TEST_OK(harness_connect(&M, "forger", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 2, &p));
	TEST_OK(harness_publish(p, 666, 5 * HARNESS_S, &v));
	wsync_pub_close(p);
	wsync_close(c);
	TEST_ASSERT(harness_broker_stop(&M) == 0);
	if (harness_seg_path(&M, "", dir, sizeof dir) != 0) {
		/* a broker of the flat-name days: its objects by their old names */
		static const char *const flat[] = { "ctl", "1.m0.layout", "1.m0.s0", "1.m0.s1" };
		for (size_t i = 0; i < sizeof flat / sizeof flat[0]; i++) {
			char path[256];
			snprintf(path, sizeof path, "/dev/shm/wsync.0.%s.%s", M.name, flat[i]);
			slurp(path, i ? flat[i] + 2 : flat[i]);
		}
		return;
	}
	DIR *d = opendir(dir);
	struct dirent *e;
	TEST_ASSERT(d != NULL);
	while ((e = readdir(d))) {
		char path[1024];
		if (e->d_name[0] == '.')
			continue;
		TEST_ASSERT(snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path);
		slurp(path, e->d_name);
	}
	closedir(d);
	TEST_ASSERT(n_objs >= 3);
}

static void plant_file(const char *path, const struct object *o)
{
	int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
	TEST_ASSERT_MSG(fd >= 0, "%s: %s", path, strerror(errno));
	TEST_ASSERT(write(fd, o->data, o->len) == (ssize_t)o->len);
	close(fd);
}

/* As uid 65534: the forged objects under the old flat names and in a
 * directory that looks like a private one of N. */
static int planter(void *arg)
{
	char path[512];
	(void)arg;
	TEST_ASSERT(setresgid(PLANTER, PLANTER, PLANTER) == 0);
	TEST_ASSERT(setresuid(PLANTER, PLANTER, PLANTER) == 0);
	for (int i = 0; i < n_objs; i++) {
		const char *flat = objs[i].name;
		char name[64];
		if (!strcmp(flat, "ctl")) {
			snprintf(path, sizeof path, "/dev/shm/wsync.0.%s.ctl.new", N.name);
			plant_file(path, &objs[i]);
		} else {
			TEST_ASSERT(snprintf(name, sizeof name, "1.%s", flat) < (int)sizeof name);
			flat = name;
		}
		TEST_ASSERT(snprintf(path, sizeof path, "/dev/shm/wsync.0.%s.%s", N.name, flat) <
		            (int)sizeof path);
		plant_file(path, &objs[i]);
	}
	snprintf(path, sizeof path, "/dev/shm/wsync.0.%s.%s", N.name, FAKE_TAG);
	TEST_ASSERT(mkdir(path, 0700) == 0);
	for (int i = 0; i < n_objs; i++) {
		char p2[600];
		TEST_ASSERT(snprintf(p2, sizeof p2, "%s/%s", path, objs[i].name) < (int)sizeof p2);
		plant_file(p2, &objs[i]);
	}
	return 0;
}

static void write_state(uid_t owner)
{
	char rundir[sizeof N.dir + 8], path[sizeof N.dir + 96], text[128];
	snprintf(rundir, sizeof rundir, "%s/wsync", N.dir);
	TEST_ASSERT(mkdir(rundir, 0700) == 0 || errno == EEXIST);
	snprintf(path, sizeof path, "%s/%s.state", rundir, N.name);
	unlink(path);
	int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
	TEST_ASSERT(fd >= 0);
	int len = snprintf(text, sizeof text, "wsync.0.%s.%s\n", N.name, FAKE_TAG);
	TEST_ASSERT(write(fd, text, (size_t)len) == len);
	close(fd);
	TEST_ASSERT(chown(path, owner, owner) == 0);
}

static void nothing_adopted(const char *what, const char *logged)
{
	wsync_client *c;
	wsync_sub *s;
	wsync_view v;
	TEST_ASSERT_MSG(harness_broker_restart(&N) == 0, "%s: the broker did not start", what);
	TEST_OK(harness_connect(&N, "planted-check", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	int rc = wsync_sub_acquire(s, &v);
	TEST_ASSERT_MSG(rc == -ENODATA, "%s: acquire gave %d, step %llu: planted weights were "
	                "adopted", what, rc, rc ? 0ull : (unsigned long long)v.step);
	wsync_sub_close(s);
	wsync_close(c);
	TEST_ASSERT_MSG(faults_log_contains(&N, logged), "%s: the log does not say \"%s\"",
	                what, logged);
	harness_publish_and_read(&N, "planted.after", 3);
	TEST_ASSERT(harness_broker_stop(&N) == 0);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("SKIP: needs root to plant files as uid %d\n", PLANTER);
		return HARNESS_SKIP;
	}
	make_forgery();
	TEST_ASSERT(harness_broker_prepare(&N, NULL) == 0);
	harness_expect_exit0(harness_fork(planter, NULL), "the planter");
	int planted = harness_shm_leftovers(&N, 0);

	write_state(0);
	nothing_adopted("a state file naming a directory of uid 65534", "owned by uid 65534");
	write_state(PLANTER);
	nothing_adopted("a state file of uid 65534", "not a private file");

	/* the planted objects are still there (not ours), nothing else is */
	int left = harness_shm_leftovers(&N, 1);
	TEST_ASSERT_MSG(left == planted, "%d entries of the instance in /dev/shm, %d planted",
	                left, planted);
	return 0;
}
