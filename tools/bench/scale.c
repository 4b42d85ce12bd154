/*
 * tools/bench/scale.c — scenario "scale": how wsync's costs grow with the
 * model, on 4 KiB pages and on 2 MiB huge pages (docs/HUGEPAGES.md).
 *
 * For 256 MiB, 1 GiB and 2 GiB models of 64 tensors (4 slots; 2 for 2 GiB;
 * --quick: 256 MiB only), each against one single-thread memcpy of the same
 * bytes between warm buffers, measured in the same run:
 *
 *   open          wsync_pub_open, which maps and populates every slot
 *   first publish begin, wsync_slab_copy_tensors (1 thread), commit, into
 *                 the freshly opened model
 *   publish       the same, steady state (median)
 *   first acquire 4 collector processes subscribed before the model
 *                 existed: from the publisher's first begin until the last
 *                 of them holds the view (mapping its slabs included)
 *   end-to-end    the same for the next versions (median), the publisher
 *                 copying with a memcpy per tensor
 *
 * Each size runs in a fresh broker (a clean stop frees the slabs), started
 * with --huge-pages off, then --huge-pages on. Huge pages: the hugetlb pages
 * free, topped up when the bench runs as root (the old nr_hugepages is
 * written back when the scenario ends, or the bench is interrupted) and
 * touched once (pages_touch); otherwise those rows are skipped, saying why.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_common.h"
#include "shm/hugepages.h"

#define SCALE_TENSORS    64
#define SCALE_COLLECTORS 4
#define NR_PATH   WSYNC_NR_HUGEPAGES
#define FREE_PATH WSYNC_HUGETLB_FREE
#define HUGE      (2 * MIB)

static char old_nr[32];          /* written back by scale_restore_pages */

struct scale_size {
	size_t bytes;
	uint32_t slots;
	const char *name;
};

static const struct scale_size sizes[] = {
	{ 256 * MIB, 4, "256 MiB" },
	{ 1024 * MIB, 4, "1 GiB" },
	{ 2048 * MIB, 2, "2 GiB" },
};

void scale_restore_pages(void)
{
	if (old_nr[0]) {
		(void)wsync_file_write(NR_PATH, old_nr);
		old_nr[0] = '\0';
	}
}

/* On a virtual machine the first touch of a page the guest never used makes
 * the host back it (seconds per GiB here), once. Freshly reserved huge
 * pages are touched here, so the rows show wsync's costs and not that. */
static void pages_touch(long n)
{
	int fd = memfd_create("bench-touch", MFD_CLOEXEC | MFD_HUGETLB);

	if (fd < 0)
		return;
	if (ftruncate(fd, (off_t)n * (off_t)HUGE) == 0)
		while (fallocate(fd, 0, 0, (off_t)n * (off_t)HUGE) < 0 && errno == EINTR)
			;
	close(fd);
}

/* Makes `want` hugetlb pages free if it can: 0, or -1 with the reason. */
static int pages_reserve(long want, char *why, size_t len)
{
	long nr = wsync_file_long(NR_PATH), have = wsync_file_long(FREE_PATH);
	char buf[32];

	if (nr < 0 || have < 0) {
		snprintf(why, len, "this kernel has no 2 MiB hugetlb pages");
		return -1;
	}
	if (have >= want)
		return 0;
	if (geteuid() != 0) {
		snprintf(why, len, "%ld hugetlb pages free, %ld needed; run as root to reserve "
		         "them, or: echo %ld > %s", have, want, nr + want - have, NR_PATH);
		return -1;
	}
	if (!old_nr[0])
		snprintf(old_nr, sizeof old_nr, "%ld", nr);
	snprintf(buf, sizeof buf, "%ld", nr + want - have);
	if (wsync_file_write(NR_PATH, buf) < 0 || wsync_file_long(FREE_PATH) < want) {
		snprintf(why, len, "asked the kernel for %s hugetlb pages, %ld are free (%s)",
		         buf, wsync_file_long(FREE_PATH), strerror(errno));
		return -1;
	}
	pages_touch(want);
	return 0;
}

struct scale_run {
	struct bench *b;
	const struct scale_size *sz;
	const char *pages;              /* "4 KiB pages", "2 MiB pages" */
	void *src, *dst;
	char error[400];
};

static double ms_of(int64_t ns)
{
	return (double)ns / (double)NS_PER_MS;
}

static int scale_fail(struct scale_run *r, const char *what, int err)
{
	wsync_error_text(r->error, sizeof r->error, what, err);
	return -1;
}

static struct bench_row *scale_row(const struct scale_run *r, const char *what,
                                   double ms, double ref)
{
	char fig[160];
	struct bench_row *row;

	snprintf(fig, sizeof fig, "%s, %s: %s", r->sz->name, r->pages, what);
	row = row_add("scale", fig, "ms", ms);
	if (ref > 0)
		row_ref(row, "memcpy, 1 thread, same bytes", ref);
	return row;
}

static double memcpy_ref(struct scale_run *r)
{
	int R = r->b->repeats;
	double v[64];

	for (int i = 0; i < R && i < 64; i++) {
		int64_t t0 = mono_ns();

		memcpy(r->dst, r->src, r->sz->bytes);
		v[i] = ms_of(mono_ns() - t0);
	}
	return stat_median(v, (size_t)(R < 64 ? R : 64));
}

/* open, first publish, steady publishes: the publisher's rows. */
static int scale_publish(struct scale_run *r, double ref)
{
	struct copier one = { .lib_threads = 1 };
	const char *what = "";
	double v[64];
	int R = r->b->repeats < 64 ? r->b->repeats : 64, err;
	wsync_client *c;
	wsync_pub *p;
	int64_t t0;
	uint64_t step = 0;

	if ((err = wsync_connect(r->b->endpoint, "bench-scale", &c)))
		return scale_fail(r, "wsync_connect", err);
	t0 = mono_ns();
	err = model_open(c, "scale", r->sz->bytes, SCALE_TENSORS, r->sz->slots, &p);
	if (err) {
		wsync_close(c);
		return scale_fail(r, "wsync_pub_open", err);
	}
	scale_row(r, "wsync_pub_open (maps and populates every slot)", ms_of(mono_ns() - t0),
	          ref);
	t0 = mono_ns();
	err = publish_once(p, r->src, &one, ++step, NULL, &what);
	if (!err)
		row_target_ratio(scale_row(r, "first publish after open (copy helper, 1 thread)",
		                           ms_of(mono_ns() - t0), ref), 2.0);
	/* every slot once more before the steady figures */
	for (uint32_t i = 0; !err && i < r->sz->slots; i++)
		err = publish_once(p, r->src, &one, ++step, NULL, &what);
	for (int i = 0; !err && i < R; i++) {
		t0 = mono_ns();
		err = publish_once(p, r->src, &one, ++step, NULL, &what);
		v[i] = ms_of(mono_ns() - t0);
	}
	if (!err)
		row_target_ratio(scale_row(r, "publish, steady (copy helper, 1 thread)",
		                           stat_median(v, (size_t)R), ref), 1.0);
	wsync_pub_close(p);
	wsync_close(c);
	return err ? scale_fail(r, what, err) : 0;
}

/* Collectors waiting before the model exists: first acquire, then steady. */
static int scale_fanout(struct scale_run *r, double ref)
{
	struct fan_cfg cfg = {
		.mode = FAN_WSYNC, .endpoint = r->b->endpoint, .model = "scale-fan",
		.bytes = r->sz->bytes, .n_tensors = SCALE_TENSORS,
		.collectors = SCALE_COLLECTORS, .slots = r->sz->slots,
		.warmup = 0, .samples = 1 + r->b->repeats,
		.pause_min_ns = NS_PER_MS, .pause_max_ns = 2 * NS_PER_MS,
	};
	struct fan_result res;
	double *lat;
	char what[96];

	memset(&res, 0, sizeof res);
	if (fan_run(&cfg, &res)) {
		snprintf(r->error, sizeof r->error, "%s", res.error);
		fan_result_free(&res);
		return -1;
	}
	lat = calloc((size_t)cfg.samples, sizeof *lat);
	if (!lat) {
		fan_result_free(&res);
		snprintf(r->error, sizeof r->error, "out of memory");
		return -1;
	}
	fan_latencies(&res, FAN_FROM_BEGIN, true, lat);
	snprintf(what, sizeof what, "%d collectors' first acquire (begin to the last "
	         "holding v1)", SCALE_COLLECTORS);
	scale_row(r, what, lat[0] / (double)NS_PER_MS, ref);
	snprintf(what, sizeof what, "end-to-end to %d collectors, steady (begin to the "
	         "last holding it)", SCALE_COLLECTORS);
	scale_row(r, what, stat_median(lat + 1, (size_t)cfg.samples - 1) / (double)NS_PER_MS,
	          ref);
	free(lat);
	fan_result_free(&res);
	return 0;
}

static int scale_one(struct bench *b, const struct scale_size *sz, bool huge)
{
	struct scale_run r = { .b = b, .sz = sz, .pages = huge ? "2 MiB pages" : "4 KiB pages" };
	double ref;
	int rc = -1;

	r.src = warm_alloc(sz->bytes);
	r.dst = warm_alloc(sz->bytes);
	if (!r.src || !r.dst) {
		snprintf(r.error, sizeof r.error, "out of memory for two %s buffers", sz->name);
		goto out;
	}
	ref = memcpy_ref(&r);
	scale_row(&r, "memcpy (reference)", ref, 0);
	if (broker_restart(b, huge ? "on" : "off")) {
		snprintf(r.error, sizeof r.error, "the broker did not restart");
		goto out;
	}
	if (scale_publish(&r, ref))
		goto out;
	/* a fresh broker: the publisher's model is freed */
	if (broker_restart(b, huge ? "on" : "off")) {
		snprintf(r.error, sizeof r.error, "the broker did not restart");
		goto out;
	}
	if (scale_fanout(&r, ref))
		goto out;
	rc = 0;
out:
	if (rc) {
		say_error("scale %s, %s: %s", sz->name, r.pages, r.error);
		row_skip("scale", sz->name, "failed on %s: %s", r.pages, r.error);
	}
	warm_free(r.src, sz->bytes);
	warm_free(r.dst, sz->bytes);
	return rc;
}

int bench_scale(struct bench *b)
{
	size_t n = b->quick ? 1 : sizeof sizes / sizeof sizes[0];
	char why[200], fig[64];
	int rc = 0;

	for (size_t i = 0; i < n; i++)
		rc |= scale_one(b, &sizes[i], false);
	for (size_t i = 0; i < n; i++) {
		long want = (long)(sizes[i].bytes / HUGE) * sizes[i].slots;

		/* the last size's slabs freed before counting free pages */
		if (broker_restart(b, "off")) {
			rc = -1;
			break;
		}
		if (pages_reserve(want, why, sizeof why)) {
			snprintf(fig, sizeof fig, "%s, 2 MiB pages", sizes[i].name);
			row_skip("scale", fig, "%s", why);
			continue;
		}
		rc |= scale_one(b, &sizes[i], true);
	}
	/* back to the broker the other scenarios run against */
	if (broker_restart(b, NULL))
		rc = -1;
	scale_restore_pages();
	return rc;
}
