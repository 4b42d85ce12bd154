/*
 * tools/bench/publish.c — scenario "publish": a 256 MiB model of 64 tensors,
 * timed from wsync_pub_begin to wsync_pub_commit returning, with the tensors
 * copied from the trainer's own (warm) memory into the slab.
 *
 * References, same process, same run: one memcpy of 256 MiB between warm
 * buffers on one thread (the target's reference), the same bytes copied
 * tensor by tensor, and one memcpy split across two threads. The first
 * publishes into a fresh model of 4 slots (each lands in a slot no publish
 * wrote yet; open maps and writes them) are rows of their own, the first
 * and the slowest of the 4 (target 2x memcpy); so is begin+commit without any copy, which is
 * the library's own cost. The copy itself is the library's
 * wsync_slab_copy_tensors (1 or 2 threads, or as many as the library
 * measured to pay), with and without the opt-in write guard
 * (WSYNC_PUB_GUARDED), and a plain memcpy per tensor for what a trainer
 * gets without the helper.
 *
 * Checksums are on by default, formed while the copy runs: each library
 * copy is timed into a model with default options and into one with
 * WSYNC_PUB_NO_CHECKSUM, back to back, and the ratio of the two is the
 * checksum's cost (target 1.05); so is a publish that copies with memcpy
 * per tensor, whose checksum its publisher's hashing thread forms after
 * the commit, while the version is already visible (target 1.1). That
 * pass is not on the timed path of one publish, but it reads memory while
 * the next runs: so every timed publish here first lets the previous
 * version's hash end (wsync_pub_sum_settle, untimed), and two rows time
 * the shapes a trainer has: 8 publishes back to back (the hash of each
 * overlaps the copy of the next; the last one's hash is timed too) and 4
 * publishes 200 ms apart (a trainer's cadence: the hash runs in the gap).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "libclient/pub.h"

#define PUB_BYTES    (256 * MIB)
#define PUB_TENSORS  64
#define PUB_FRESH_MAX 3             /* fresh models (1 GiB of shm each) */
#define PUB_BURST    8              /* publishes back to back */
#define PUB_PACED    4              /* publishes PUB_GAP_MS apart */
#define PUB_GAP_MS   200

struct pub_run {
	struct bench *b;
	void *src, *dst;
	struct pcopy *pc;
	wsync_tensor_desc *flat;        /* the layout, offsets contiguous */
	wsync_client *c;
	wsync_pub *p;
	uint64_t step;
	char error[400];
	/* samples, one per repeat */
	double *memcpy1, *memcpy_tensors, *memcpy2;
	double *pub_memcpy, *lib1, *lib2, *lib2_ug, *overhead, *overhead_ug, *fresh;
	double *libd, *libd_ns, *lib1_ns, *overhead_sum, *fresh_worst, *pub_memcpy_ns;
	double *burst, *burst_ns, *paced, *paced_ns;
	int n_fresh;
	wsync_pub *p_ug;                /* the same model, WSYNC_PUB_GUARDED */
	wsync_pub *p_ns;                /* the same model, WSYNC_PUB_NO_CHECKSUM */
};

#define PUB_SERIES 20               /* sample arrays above */

static int pub_fail(struct pub_run *r, const char *what, int err)
{
	wsync_error_text(r->error, sizeof r->error, what, err);
	return -1;
}

static double ms_since(int64_t t0)
{
	return (double)(mono_ns() - t0) / (double)NS_PER_MS;
}

/* begin, copy (from src unless NULL) as how says, commit: ms. */
static int pub_timed(struct pub_run *r, wsync_pub *p, const void *src,
                     const struct copier *how, double *ms)
{
	const char *what = "";
	int64_t t0;
	int err;

	wsync_pub_sum_settle(p, WSYNC_SLOT_NONE);
	t0 = mono_ns();
	err = publish_once(p, src, how, ++r->step, NULL, &what);
	*ms = ms_since(t0);
	return err ? pub_fail(r, what, err) : 0;
}

/* PUB_BURST publishes with memcpy per tensor, back to back, until the last
 * one's checksum is stored: ms per publish. */
static int pub_burst(struct pub_run *r, wsync_pub *p, double *ms)
{
	const char *what = "";
	int64_t t0;
	int err = 0;

	wsync_pub_sum_settle(p, WSYNC_SLOT_NONE);
	t0 = mono_ns();
	for (int i = 0; i < PUB_BURST && !err; i++)
		err = publish_once(p, r->src, NULL, ++r->step, NULL, &what);
	wsync_pub_sum_settle(p, WSYNC_SLOT_NONE);
	*ms = ms_since(t0) / PUB_BURST;
	return err ? pub_fail(r, what, err) : 0;
}

/* PUB_PACED publishes with memcpy per tensor, PUB_GAP_MS apart (nothing
 * settled): the median ms of one. */
static int pub_paced(struct pub_run *r, wsync_pub *p, double *ms)
{
	double one[PUB_PACED];
	const char *what = "";
	int err = 0;

	for (int i = 0; i < PUB_PACED && !err; i++) {
		int64_t t0;

		sleep_ns((int64_t)PUB_GAP_MS * NS_PER_MS);
		t0 = mono_ns();
		err = publish_once(p, r->src, NULL, ++r->step, NULL, &what);
		one[i] = ms_since(t0);
	}
	*ms = err ? 0 : stat_median(one, PUB_PACED);
	return err ? pub_fail(r, what, err) : 0;
}

static int pub_setup(struct pub_run *r)
{
	int R = r->b->repeats, err;
	double *all;

	r->src = warm_alloc(PUB_BYTES);
	r->dst = warm_alloc(PUB_BYTES);
	r->pc = pcopy_new(2);
	r->flat = model_layout(PUB_BYTES, PUB_TENSORS);
	all = calloc((size_t)R * PUB_SERIES, sizeof *all);
	if (!r->src || !r->dst || !r->pc || !r->flat || !all) {
		free(all);
		snprintf(r->error, sizeof r->error, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < PUB_TENSORS; i++)
		r->flat[i].offset = i * (PUB_BYTES / PUB_TENSORS);
	r->memcpy1 = all;
	r->memcpy_tensors = all + R;
	r->memcpy2 = all + 2 * R;
	r->pub_memcpy = all + 3 * R;
	r->lib1 = all + 4 * R;
	r->lib2 = all + 5 * R;
	r->lib2_ug = all + 6 * R;
	r->overhead = all + 7 * R;
	r->overhead_ug = all + 8 * R;
	r->fresh = all + 9 * R;
	r->libd = all + 10 * R;
	r->libd_ns = all + 11 * R;
	r->lib1_ns = all + 12 * R;
	r->overhead_sum = all + 13 * R;
	r->fresh_worst = all + 14 * R;
	r->pub_memcpy_ns = all + 15 * R;
	r->burst = all + 16 * R;
	r->burst_ns = all + 17 * R;
	r->paced = all + 18 * R;
	r->paced_ns = all + 19 * R;
	err = wsync_connect(r->b->endpoint, "bench-publish", &r->c);
	if (err)
		return pub_fail(r, "wsync_connect", err);
	err = model_open(r->c, "pub-warm", PUB_BYTES, PUB_TENSORS, 0, &r->p);
	if (err)
		return pub_fail(r, "wsync_pub_open", err);
	err = model_open_flags(r->c, "pub-warm-guarded", PUB_BYTES, PUB_TENSORS, 0,
	                       WSYNC_PUB_GUARDED, &r->p_ug);
	if (err)
		return pub_fail(r, "wsync_pub_open (guarded)", err);
	err = model_open_flags(r->c, "pub-warm-nosum", PUB_BYTES, PUB_TENSORS, 0,
	                       WSYNC_PUB_NO_CHECKSUM, &r->p_ns);
	if (err)
		return pub_fail(r, "wsync_pub_open (no checksum)", err);
	return 0;
}

static void pub_teardown(struct pub_run *r)
{
	wsync_pub_close(r->p);
	wsync_pub_close(r->p_ug);
	wsync_pub_close(r->p_ns);
	wsync_close(r->c);
	pcopy_free(r->pc);
	warm_free(r->src, PUB_BYTES);
	warm_free(r->dst, PUB_BYTES);
	free(r->flat);
	free(r->memcpy1);
}

/* Every slot of the warm model written once by this process, and the copy
 * threads started: later publishes fault nothing in. */
static int pub_warm_up(struct pub_run *r)
{
	struct copier two = { .lib_threads = 2 };
	double ms;

	struct copier dflt = { .lib_default = true };

	for (int i = 0; i < 6; i++)
		if (pub_timed(r, r->p, r->src, i & 1 ? &two : &dflt, &ms) ||
		    pub_timed(r, r->p_ug, r->src, &two, &ms) ||
		    pub_timed(r, r->p_ns, r->src, i & 1 ? &two : &dflt, &ms))
			return -1;
	return 0;
}

static int pub_repeat(struct pub_run *r, int i)
{
	int64_t t0;

	t0 = mono_ns();
	memcpy(r->dst, r->src, PUB_BYTES);
	r->memcpy1[i] = ms_since(t0);

	t0 = mono_ns();
	copy_tensors(r->dst, r->src, r->flat, PUB_TENSORS);
	r->memcpy_tensors[i] = ms_since(t0);

	t0 = mono_ns();
	pcopy_flat(r->pc, r->dst, r->src, PUB_BYTES);
	r->memcpy2[i] = ms_since(t0);

	if (pub_timed(r, r->p, r->src, NULL, &r->pub_memcpy[i]) ||
	    pub_timed(r, r->p_ns, r->src, NULL, &r->pub_memcpy_ns[i]) ||
	    pub_timed(r, r->p, r->src, &(struct copier){ .lib_threads = 1 }, &r->lib1[i]) ||
	    pub_timed(r, r->p_ns, r->src, &(struct copier){ .lib_threads = 1 }, &r->lib1_ns[i]) ||
	    pub_timed(r, r->p, r->src, &(struct copier){ .lib_threads = 2 }, &r->lib2[i]) ||
	    pub_timed(r, r->p, r->src, &(struct copier){ .lib_default = true }, &r->libd[i]) ||
	    pub_timed(r, r->p_ns, r->src, &(struct copier){ .lib_default = true },
	              &r->libd_ns[i]) ||
	    pub_timed(r, r->p_ug, r->src, &(struct copier){ .lib_threads = 2 }, &r->lib2_ug[i]) ||
	    pub_timed(r, r->p_ns, NULL, NULL, &r->overhead[i]) ||
	    pub_timed(r, r->p, NULL, NULL, &r->overhead_sum[i]) ||
	    pub_timed(r, r->p_ug, NULL, NULL, &r->overhead_ug[i]) ||
	    pub_burst(r, r->p, &r->burst[i]) || pub_burst(r, r->p_ns, &r->burst_ns[i]) ||
	    pub_paced(r, r->p, &r->paced[i]) || pub_paced(r, r->p_ns, &r->paced_ns[i]))
		return -1;
	return 0;
}

/* The first publishes into a model this process never wrote: its slabs are
 * allocated by the broker and mapped (and written once) at open. Each of
 * the first PUB_FRESH_SLOTS publishes lands in a slot not written before by
 * a publish; fresh[i] is the first, fresh_worst[i] the slowest of them.
 * Without checksums, so that the rows show what fresh slots cost (the
 * checksum's second pass has rows of its own). */
#define PUB_FRESH_SLOTS 4

static int pub_fresh(struct pub_run *r, int i)
{
	char name[32];
	wsync_pub *p;
	double ms;
	int err = 0;

	snprintf(name, sizeof name, "pub-fresh-%d", i);
	err = model_open_flags(r->c, name, PUB_BYTES, PUB_TENSORS, PUB_FRESH_SLOTS,
	                       WSYNC_PUB_NO_CHECKSUM, &p);
	if (err)
		return pub_fail(r, "wsync_pub_open (fresh model)", err);
	r->fresh_worst[i] = 0;
	for (int k = 0; k < PUB_FRESH_SLOTS && !err; k++) {
		err = pub_timed(r, p, r->src, NULL, &ms);
		if (!k)
			r->fresh[i] = ms;
		if (ms > r->fresh_worst[i])
			r->fresh_worst[i] = ms;
	}
	wsync_pub_close(p);
	return err;
}

/* One row against the single-thread memcpy reference. */
static struct bench_row *pub_row(struct pub_run *r, const char *what, double *v,
                                 size_t n, double m1)
{
	struct bench_row *row = row_add("publish", what, "ms", stat_median(v, n));

	(void)r;
	row_ref(row, "memcpy, 1 thread", m1);
	return row;
}

static void pub_rows(struct pub_run *r)
{
	size_t R = (size_t)r->b->repeats;
	double m1 = stat_median(r->memcpy1, R);

	row_add("publish", "memcpy 256 MiB, 1 thread, warm buffers (reference)", "ms", m1);
	row_target_ratio(pub_row(r, "256 MiB / 64 tensors: begin, wsync_slab_copy_tensors "
	                         "(1 thread), commit", r->lib1, R, m1), 1.2);
	row_target_ratio(pub_row(r, "same, wsync_slab_copy_tensors with 2 threads",
	                         r->lib2, R, m1), 1.0);
	pub_row(r, "same, threads the library measured (threads 0), default options",
	        r->libd, R, m1);
	pub_row(r, "same, threads 0, WSYNC_PUB_NO_CHECKSUM", r->libd_ns, R, m1);
	{
		struct bench_row *row;
		double ns = stat_median(r->libd_ns, R), ns1 = stat_median(r->lib1_ns, R);

		row = row_add("publish", "checksum's cost: threads 0, checksummed vs "
		              "WSYNC_PUB_NO_CHECKSUM", "ms", stat_median(r->libd, R));
		row_ref(row, "no checksum", ns);
		row_target_ratio(row, 1.05);
		row = row_add("publish", "checksum's cost: 1 thread, checksummed vs "
		              "WSYNC_PUB_NO_CHECKSUM", "ms", stat_median(r->lib1, R));
		row_ref(row, "no checksum", ns1);
	}
	pub_row(r, "same, 2 threads, WSYNC_PUB_GUARDED (opt-in write guard)", r->lib2_ug, R, m1);
	pub_row(r, "begin, memcpy each tensor, commit (no copy helper)", r->pub_memcpy, R, m1);
	pub_row(r, "same, WSYNC_PUB_NO_CHECKSUM", r->pub_memcpy_ns, R, m1);
	{
		struct bench_row *row;

		row = row_add("publish", "checksum's cost: memcpy each tensor, checksummed vs "
		              "WSYNC_PUB_NO_CHECKSUM", "ms", stat_median(r->pub_memcpy, R));
		row_ref(row, "no checksum", stat_median(r->pub_memcpy_ns, R));
		row_target_ratio(row, 1.1);
		row = row_add("publish", "same, 8 back to back (the hash overlaps the next "
		              "copy; the last hash timed), ms per publish", "ms",
		              stat_median(r->burst, R));
		row_ref(row, "no checksum", stat_median(r->burst_ns, R));
		row_target_ratio(row, 1.1);
		row = row_add("publish", "same, 200 ms apart (a trainer's cadence: the hash "
		              "runs in the gap)", "ms", stat_median(r->paced, R));
		row_ref(row, "no checksum", stat_median(r->paced_ns, R));
		row_target_ratio(row, 1.1);
	}
	pub_row(r, "first publish after wsync_pub_open (slabs mapped at open), no checksum",
	        r->fresh, (size_t)r->n_fresh, m1);
	row_target_ratio(pub_row(r, "slowest of the first 4 publishes after open, 4 slots, "
	                         "no checksum", r->fresh_worst, (size_t)r->n_fresh, m1), 2.0);
	pub_row(r, "begin + commit without copying (library cost), WSYNC_PUB_NO_CHECKSUM",
	        r->overhead, R, m1);
	pub_row(r, "same, checksummed: the commit hands the whole slab to the hashing thread",
	        r->overhead_sum, R, m1);
	pub_row(r, "same, WSYNC_PUB_GUARDED (checksummed)", r->overhead_ug, R, m1);
	pub_row(r, "memcpy 64 tensors one by one, warm (no wsync)", r->memcpy_tensors, R, m1);
	pub_row(r, "memcpy 256 MiB split across 2 threads (no wsync)", r->memcpy2, R, m1);
}

int bench_publish(struct bench *b)
{
	struct pub_run r;
	int rc = -1;

	memset(&r, 0, sizeof r);
	r.b = b;
	if (pub_setup(&r) || pub_warm_up(&r))
		goto out;
	for (int i = 0; i < b->repeats; i++)
		if (pub_repeat(&r, i))
			goto out;
	r.n_fresh = b->repeats < PUB_FRESH_MAX ? b->repeats : PUB_FRESH_MAX;
	for (int i = 0; i < r.n_fresh; i++)
		if (pub_fresh(&r, i))
			goto out;
	pub_rows(&r);
	rc = 0;
out:
	if (rc) {
		say_error("publish: %s", r.error);
		row_skip("publish", "publish 256 MiB", "failed: %s", r.error);
	}
	pub_teardown(&r);
	return rc;
}
