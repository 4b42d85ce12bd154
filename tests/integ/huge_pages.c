/*
 * huge_pages — slabs on 2 MiB hugetlb pages, and the fallback without them
 * (docs/HUGEPAGES.md).
 *
 * Without free hugetlb pages and without shmem transparent huge pages:
 * `wsyncd --huge-pages on` exits 1 naming huge pages and the line that
 * reserves them; `auto` starts on 4 KiB pages, says so, and publishes.
 *
 * Then, as root, the test reserves 32 more hugetlb pages (the old
 * nr_hugepages is written back when it ends, however it ends) and with
 * `--huge-pages on`: a model of 6 MiB + 4 KiB slabs takes exactly 4 pages
 * per slab; versions read back bit-exact; the write guard on by default there
 * (a committed slab is read-only in the trainer); a guarded publisher (mprotect of
 * whole huge pages) publishes; a model needing more pages than are free is
 * refused with -ENOSPC naming huge pages (where shmem THP is on, it goes
 * there instead); wsyncctl models --json says the pages. After a SIGKILL of the broker a
 * held view stays intact; the restarted broker keeps the version number but
 * not the data (huge-page slabs are memfds) and the next version goes above
 * it. With `auto`, a model too big for the free pages lands on other pages
 * and publishes, and so does one whose hugetlb slab creation fails with
 * ENOSPC (injected: pages taken between the count and the allocation). After each clean stop nothing is left in /dev/shm and, once
 * every client is gone, every huge page is free again.
 *
 * Skips (77), saying why, where pages cannot be reserved (not root, a
 * read-only /proc/sys, the kernel found no memory for them), and where
 * a count of free pages is off because of another process: nr_hugepages
 * moved underneath the test, or a process that is not this test's maps
 * hugetlb pages (a broker with the default --huge-pages auto takes them). Runs of this test
 * on one machine (other checkouts, other builds) take turns on a lock file;
 * at the end the test takes back only the pages it added.
 */
#include "tests/lib/faults.h"
#include "tests/lib/harness.h"
#include "shm/hugepages.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#define NR_PATH   WSYNC_NR_HUGEPAGES
#define FREE_PATH WSYNC_HUGETLB_FREE
#define EXTRA     32

/* Machine-wide: runs of this test from any checkout take turns on it. */
#define LOCK_PATH "/tmp/wsync-test-huge-pages.lock"
#define LOCK_WAIT_S 120

static long old_nr = -1;         /* what NR_PATH held before the test */
static long our_nr = -1;         /* what it holds with the test's pages added */

/* decimal of v >= 0 into buf (async-signal-safe, unlike snprintf) */
static void long_str(long v, char *buf)
{
	char tmp[24];
	int n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v > 0);
	while (n > 0)
		*buf++ = tmp[--n];
	*buf = '\0';
}

/* harness cleanup hook, on every exit (signals too): async-signal-safe.
 * Takes back only the pages the test added: if another process set
 * nr_hugepages meanwhile, its change stays. */
static void restore_nr(void)
{
	char s[24];
	long now, want;

	if (old_nr < 0)
		return;
	now = wsync_file_long(NR_PATH);
	if (now < 0 || now >= our_nr)
		want = now < 0 ? old_nr : now - EXTRA;
	else                     /* fewer made than asked, or lowered by another */
		want = now < old_nr ? now : old_nr;
	if (want == now)
		return;
	long_str(want, s);
	(void)wsync_file_write(NR_PATH, s);
}

/* A process other than this test and its children (its brokers) that maps
 * hugetlb pages (HugetlbPages in /proc/<pid>/status): its pid and kB, or 0. */
static pid_t other_holder(long *kb)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = 0;

	while (d && !found && (e = readdir(d)) != NULL) {
		char path[64], line[256];
		long ppid = -1, pages = 0;
		pid_t pid = (pid_t)atol(e->d_name);
		FILE *f;

		if (pid <= 0 || pid == getpid())
			continue;
		snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
		if (!(f = fopen(path, "r")))
			continue;
		while (fgets(line, sizeof line, f)) {
			sscanf(line, "PPid: %ld", &ppid);
			sscanf(line, "HugetlbPages: %ld", &pages);
		}
		fclose(f);
		if (pages > 0 && ppid != (long)getpid()) {
			found = pid;
			*kb = pages;
		}
	}
	if (d)
		closedir(d);
	return found;
}

/* nr_hugepages and the free pages are machine-wide: where another process
 * changed the one or holds some of the other, the counts of free pages
 * below mean nothing; skip, saying so (the cleanup hook restores). */
static void steady_or_skip(const char *where)
{
	long now = wsync_file_long(NR_PATH), kb = 0;
	pid_t other;

	if (our_nr < 0)
		return;
	if (now != our_nr) {
		harness_log("SKIP: %s moved underneath the test (%ld, want %ld) %s: another "
		            "process changed the machine's hugetlb pages", NR_PATH, now, our_nr,
		            where);
		exit(HARNESS_SKIP);
	}
	if ((other = other_holder(&kb)) != 0) {
		harness_log("SKIP: pid %d, not this test's, maps %ld kB of hugetlb pages %s: the "
		            "free pages are not this test's to count", (int)other, kb, where);
		exit(HARNESS_SKIP);
	}
}

/* Waits its turn behind other runs of this test; 0, or HARNESS_SKIP. */
static int take_turn(void)
{
	int fd = open(LOCK_PATH, O_RDONLY | O_CREAT | O_CLOEXEC, 0666);
	int64_t until = harness_mono_ns() + (int64_t)LOCK_WAIT_S * HARNESS_S;

	if (fd < 0) {
		harness_log("cannot open %s (%s): running without taking turns", LOCK_PATH,
		            strerror(errno));
		return 0;
	}
	while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno != EWOULDBLOCK || harness_mono_ns() >= until) {
			harness_log("SKIP: another run of this test held %s for %d s", LOCK_PATH,
			            LOCK_WAIT_S);
			return HARNESS_SKIP;
		}
		harness_sleep_ms(100);
	}
	return 0;                /* held until the process exits */
}

static int thp_usable(void)
{
	char mode[32];

	wsync_thp_shmem_mode(mode, sizeof mode);
	return wsync_thp_shmem_usable(mode);
}

/* wsyncctl --json models says pages: "<pages>" */
static void ctl_says_pages(const struct broker *b, const char *pages)
{
	char ctl[256], out[16384], want[64];
	const char *build = getenv("BUILD") ? getenv("BUILD") : "build";

	snprintf(ctl, sizeof(ctl), "%s/bin/wsyncctl", build);
	snprintf(want, sizeof(want), "\"pages\":\"%s\"", pages);
	char *argv[] = { ctl, "--endpoint", (char *)b->sock, "--json", "models", NULL };
	int st = harness_run(argv, out, sizeof(out), HARNESS_WAIT_MS);
	TEST_ASSERT_MSG(st == 0, "wsyncctl models: %s: %s", harness_status_str(st), out);
	TEST_CONTAINS(out, want);
}

#define LOG_HAS(b, needle) TEST_ASSERT_MSG(faults_log_contains((b), (needle)), \
	"the broker's log lacks \"%s\"", (needle))

/* w: f32 [1024, 1536] (6 MiB) and b: f32 [1000]: 6 MiB + 4 KiB a slab, so
 * 4 huge pages each. */
static int open_big(wsync_client *c, const char *model, uint32_t slots, uint32_t flags,
                    wsync_pub **p)
{
	wsync_tensor_desc d[2];
	wsync_model_opts o;

	harness_desc(&d[0], "w", WSYNC_F32, 2, (const uint64_t[]){ 1024, 1536 });
	harness_desc(&d[1], "b", WSYNC_F32, 1, (const uint64_t[]){ 1000 });
	memset(&o, 0, sizeof o);
	o.slots = slots;
	o.flags = flags;
	return wsync_pub_open(c, model, d, 2, &o, p);
}
#define PAGES_PER_SLAB 4

/* the free hugetlb pages are `want`, unless nr_hugepages moved underneath */
#define FREE_IS(want) do { \
	long free_ = wsync_file_long(FREE_PATH); \
	if (free_ != (long)(want)) \
		steady_or_skip("while counting free pages"); \
	TEST_EQ_U64(free_, (want)); \
} while (0)

static void wait_free(long want)
{
	int64_t until = harness_mono_ns() + 5 * HARNESS_S;

	while (wsync_file_long(FREE_PATH) != want && harness_mono_ns() < until)
		harness_sleep_ms(20);
	if (wsync_file_long(FREE_PATH) != want)
		steady_or_skip("while the pages were given back");
	TEST_ASSERT_MSG(wsync_file_long(FREE_PATH) == want, "%ld hugetlb pages free, %ld before "
	                "the broker started", wsync_file_long(FREE_PATH), want);
}

static void without_pages(void)
{
	struct broker A;
	char out[4096];

	if (wsync_file_long(FREE_PATH) > 0 || thp_usable()) {
		harness_log("huge pages already available (hugetlb free or shmem THP): "
		            "the without-pages part is left out");
		return;
	}
	TEST_ASSERT(harness_broker_prepare(&A, NULL) == 0);
	char *argv[] = { (char *)harness_wsyncd_path(), "--name", A.name, "--socket", A.sock,
	                 "--huge-pages", "on", NULL };
	int st = harness_run(argv, out, sizeof out, 10000);
	TEST_ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1,
	                "--huge-pages on without pages: %s; output: %s",
	                harness_status_str(st), out);
	TEST_CONTAINS(out, "--huge-pages on: no huge pages");
	TEST_CONTAINS(out, "echo 512 > /proc/sys/vm/nr_hugepages");

	TEST_ASSERT(harness_broker_start(&A, "--huge-pages", "auto", NULL) == 0);
	LOG_HAS(&A, "slabs on 4 KiB pages");
	LOG_HAS(&A, "echo 512 > /proc/sys/vm/nr_hugepages");
	harness_publish_and_read(&A, "hp.small", 1);
	LOG_HAS(&A, "on 4 KiB pages");
	ctl_says_pages(&A, "4k");
	harness_broker_finish(&A);
}

/* Reserves EXTRA more pages; 0, or HARNESS_SKIP after saying why. */
static int reserve(long *free0)
{
	long nr = wsync_file_long(NR_PATH);
	char want[32];

	if (geteuid() != 0) {
		harness_log("SKIP: reserving hugetlb pages needs root");
		return HARNESS_SKIP;
	}
	if (nr < 0 || wsync_file_long(FREE_PATH) < 0) {
		harness_log("SKIP: no %s or %s: no 2 MiB hugetlb pages here", NR_PATH, FREE_PATH);
		return HARNESS_SKIP;
	}
	old_nr = nr;
	our_nr = nr + EXTRA;
	harness_at_cleanup(restore_nr);
	snprintf(want, sizeof want, "%ld", our_nr);
	if (wsync_file_write(NR_PATH, want) < 0) {
		harness_log("SKIP: cannot write %s to %s: %s", want, NR_PATH, strerror(errno));
		return HARNESS_SKIP;
	}
	*free0 = wsync_file_long(FREE_PATH);
	if (wsync_file_long(NR_PATH) < our_nr || *free0 < EXTRA) {
		harness_log("SKIP: asked for %s hugetlb pages, the kernel made %ld (%ld free)",
		            want, wsync_file_long(NR_PATH), *free0);
		return HARNESS_SKIP;
	}
	harness_log("reserved %d hugetlb pages: %ld free", EXTRA, *free0);
	return 0;
}

static void on_hugetlb(long free0)
{
	struct broker H;
	wsync_client *c, *c2;
	wsync_pub *p, *pg, *big;
	wsync_sub *s, *sg;
	wsync_view held, v;
	uint64_t version = 0;

	TEST_ASSERT(harness_broker_start(&H, "--huge-pages", "on", NULL) == 0);
	LOG_HAS(&H, "slabs on 2 MiB hugetlb pages");
	TEST_OK(harness_connect(&H, "hp", &c));
	TEST_OK(open_big(c, "hp.model", 2, 0, &p));
	LOG_HAS(&H, "on 2 MiB hugetlb pages");
	ctl_says_pages(&H, "hugetlb");
	/* fallocated, all of them, before any client touched one */
	FREE_IS(free0 - 2 * PAGES_PER_SLAB);
	TEST_OK(wsync_sub_open(c, "hp.model", &s));
	harness_publish_verify(p, s, 1);
	harness_publish_verify(p, s, 2);
	harness_publish_verify(p, s, 3);       /* every slot written and read */
	/* on hugetlb pages the write guard is the default: the slab is
	 * read-only in the trainer outside begin..commit */
	{
		char perms[5], path[256];
		wsync_slab slab;

		TEST_OK(wsync_pub_begin(p, HARNESS_S, &slab));
		TEST_ASSERT(harness_mapping_of(slab.base, perms, path, sizeof path) == 0);
		TEST_ASSERT_MSG(perms[1] == 'w', "a begun slab is mapped %s", perms);
		harness_fill(slab.base, slab.bytes, 4);
		TEST_OK(wsync_pub_commit(p, 4, NULL));
		TEST_ASSERT(harness_mapping_of(slab.base, perms, path, sizeof path) == 0);
		TEST_ASSERT_MSG(perms[0] == 'r' && perms[1] == '-',
		                "a committed hugetlb slab is mapped %s, want read-only", perms);
	}

	/* the write guard's mprotect, on whole huge pages */
	TEST_OK(open_big(c, "hp.guarded", 2, WSYNC_PUB_GUARDED, &pg));
	TEST_OK(wsync_sub_open(c, "hp.guarded", &sg));
	harness_publish_verify(pg, sg, 7);
	harness_publish_verify(pg, sg, 8);
	FREE_IS(free0 - 4 * PAGES_PER_SLAB);

	/* 20 pages wanted, 16 free, --huge-pages on: refused, naming them
	 * (where shmem THP is on, the model goes there instead) */
	if (thp_usable()) {
		TEST_OK(open_big(c, "hp.big", 5, 0, &big));
		wsync_pub_close(big);
	} else {
		TEST_RC(open_big(c, "hp.big", 5, 0, &big), -ENOSPC);
		TEST_CONTAINS(wsync_errmsg(), "huge pages");
	}

	/* A crash: the held view stays (its 8 pages with it), the restarted
	 * broker makes both models' slabs anew, the data does not carry over. */
	wsync_sub_close(sg);
	wsync_pub_close(pg);
	wsync_pub_close(p);
	TEST_OK(wsync_sub_acquire(s, &held));
	harness_broker_kill(&H);
	TEST_ASSERT(harness_verify_view(&held) == 0);
	TEST_ASSERT(harness_broker_restart(&H) == 0);
	LOG_HAS(&H, "not adopted: its slabs were memfds (on huge pages)");
	TEST_ASSERT(harness_verify_view(&held) == 0);
	wsync_sub_release(s, &held);
	wsync_sub_close(s);
	wsync_close(c);

	TEST_OK(harness_connect(&H, "hp-2", &c2));
	TEST_OK(open_big(c2, "hp.model", 2, 0, &p));
	TEST_OK(wsync_sub_open(c2, "hp.model", &s));
	TEST_RC(wsync_sub_acquire(s, &v), -ENODATA);   /* no version adopted */
	version = harness_publish_verify(p, s, 4);
	TEST_GT_U64(version, held.version);
	wsync_sub_close(s);
	wsync_pub_close(p);
	wsync_close(c2);
	harness_broker_finish(&H);
	wait_free(free0);
}

static void auto_too_few(long free0)
{
	struct broker A;
	wsync_client *c;
	wsync_pub *p;
	wsync_sub *s;

	/* one slot of 4 pages more than are free */
	uint32_t slots = (uint32_t)(free0 / PAGES_PER_SLAB) + 1;

	if (slots > 32) {
		harness_log("%ld hugetlb pages free: the too-few part is left out", free0);
		return;
	}
	TEST_ASSERT(harness_broker_start(&A, "--huge-pages", "auto", "--max-slots", "32",
	                                 NULL) == 0);
	LOG_HAS(&A, "slabs on 2 MiB hugetlb pages");
	TEST_OK(harness_connect(&A, "hp-auto", &c));
	TEST_OK(open_big(c, "hp.auto", slots, 0, &p));
	TEST_OK(wsync_sub_open(c, "hp.auto", &s));
	FREE_IS(free0);
	harness_publish_verify(p, s, 11);
	harness_publish_verify(p, s, 12);
	wsync_sub_close(s);
	wsync_pub_close(p);
	wsync_close(c);
	harness_broker_finish(&A);
	wait_free(free0);
}

/* Pages counted free, then gone when the slab is made (another process
 * took them): the broker with fault injection fails the first slab's
 * creation with ENOSPC, and under auto the model goes on other pages. */
static void auto_runs_out(long free0)
{
	struct broker F;
	wsync_client *c;
	wsync_pub *p;
	wsync_sub *s;

	if (harness_use_fault_wsyncd()) {
		harness_log("no wsyncd with fault injection: the run-out part is left out");
		return;
	}
	/* slab 0 is the broker's 6th segment creation here, after the layout */
	setenv("WSYNC_FAULT_SEG", "6", 1);
	TEST_ASSERT(harness_broker_start(&F, "--huge-pages", "auto", NULL) == 0);
	TEST_OK(harness_connect(&F, "hp-out", &c));
	TEST_OK(open_big(c, "hp.out", 2, 0, &p));
	LOG_HAS(&F, "fault injection: failing segment creation #6 (WSYNC_FAULT_SEG=6) at "
	        "wsync-slab");
	LOG_HAS(&F, "hugetlb pages ran out while making its slabs");
	FREE_IS(free0);
	TEST_OK(wsync_sub_open(c, "hp.out", &s));
	harness_publish_verify(p, s, 21);
	wsync_sub_close(s);
	wsync_pub_close(p);
	wsync_close(c);
	harness_broker_finish(&F);
	unsetenv("WSYNC_FAULT_SEG");
	wait_free(free0);
}

int main(void)
{
	long free0 = 0;
	int rc;

	rc = take_turn();
	if (rc)
		return rc;
	without_pages();
	rc = reserve(&free0);
	if (rc)
		return rc;
	on_hugetlb(free0);
	auto_too_few(free0);
	auto_runs_out(free0);
	harness_log("PASS");
	return 0;
}
