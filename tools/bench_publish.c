/*
 * tools/bench_publish.c — scenario "publish": a 256 MiB model of 64 tensors,
 * timed from wsync_pub_begin to wsync_pub_commit returning, with the tensors
 * copied from the trainer's own (warm) memory into the slab.
 *
 * References, same process, same run: one memcpy of 256 MiB between warm
 * buffers on one thread (the target's reference), the same bytes copied
 * tensor by tensor, and one memcpy split across two threads. The first
 * publish into a fresh model (its slabs never touched by this process: page
 * faults) is a row of its own; so is begin+commit without any copy, which is
 * the library's own cost. Two more rows copy with non-temporal stores (on
 * one and on two threads): what a copy helper in the library could give.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

#define PUB_BYTES    (256 * MIB)
#define PUB_TENSORS  64
#define PUB_FRESH_MAX 3             /* fresh models (512 MiB of shm each) */

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
	double *pub1, *pub2, *pub_nt, *pub_nt2, *overhead, *fresh;
	int n_fresh;
};

#define PUB_SERIES 9                /* sample arrays above */

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
	int64_t t0 = mono_ns();
	int err = publish_once(p, src, how, ++r->step, NULL, &what);

	*ms = ms_since(t0);
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
	r->pub1 = all + 3 * R;
	r->pub2 = all + 4 * R;
	r->pub_nt = all + 5 * R;
	r->pub_nt2 = all + 6 * R;
	r->overhead = all + 7 * R;
	r->fresh = all + 8 * R;
	err = wsync_connect(r->b->endpoint, "bench-publish", &r->c);
	if (err)
		return pub_fail(r, "wsync_connect", err);
	err = model_open(r->c, "pub-warm", PUB_BYTES, PUB_TENSORS, 0, &r->p);
	if (err)
		return pub_fail(r, "wsync_pub_open", err);
	return 0;
}

static void pub_teardown(struct pub_run *r)
{
	wsync_pub_close(r->p);
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
	struct copier two = { r->pc, false };
	double ms;

	for (int i = 0; i < 6; i++)
		if (pub_timed(r, r->p, r->src, i & 1 ? &two : NULL, &ms))
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

	if (pub_timed(r, r->p, r->src, NULL, &r->pub1[i]) ||
	    pub_timed(r, r->p, r->src, &(struct copier){ r->pc, false }, &r->pub2[i]) ||
	    pub_timed(r, r->p, r->src, &(struct copier){ NULL, true }, &r->pub_nt[i]) ||
	    pub_timed(r, r->p, r->src, &(struct copier){ r->pc, true }, &r->pub_nt2[i]) ||
	    pub_timed(r, r->p, NULL, NULL, &r->overhead[i]))
		return -1;
	return 0;
}

/* The first publish into a model this process never wrote: its slabs are
 * allocated by the broker but not yet mapped here. */
static int pub_fresh(struct pub_run *r, int i)
{
	char name[32];
	wsync_pub *p;
	int err;

	snprintf(name, sizeof name, "pub-fresh-%d", i);
	err = model_open(r->c, name, PUB_BYTES, PUB_TENSORS, 2, &p);
	if (err)
		return pub_fail(r, "wsync_pub_open (fresh model)", err);
	err = pub_timed(r, p, r->src, NULL, &r->fresh[i]);
	wsync_pub_close(p);
	return err;
}

static void pub_rows(struct pub_run *r)
{
	int R = r->b->repeats;
	double m1 = stat_median(r->memcpy1, (size_t)R);
	const char *ref = "memcpy, 1 thread";
	struct bench_row *row;

	row_add("publish", "memcpy 256 MiB, 1 thread, warm buffers (reference)", "ms", m1);
	row = row_add("publish", "256 MiB / 64 tensors: begin, copy, commit", "ms",
	              stat_median(r->pub1, (size_t)R));
	row_ref(row, ref, m1);
	row_target_ratio(row, 1.2);
	row = row_add("publish", "same, copy split across 2 threads", "ms",
	              stat_median(r->pub2, (size_t)R));
	row_ref(row, ref, m1);
	row_target_ratio(row, 1.0);
	row = row_add("publish", "same, non-temporal stores (a copy helper), 1 thread", "ms",
	              stat_median(r->pub_nt, (size_t)R));
	row_ref(row, ref, m1);
	row = row_add("publish", "same, non-temporal stores, 2 threads", "ms",
	              stat_median(r->pub_nt2, (size_t)R));
	row_ref(row, ref, m1);
	row = row_add("publish", "first publish into fresh slabs (page faults)", "ms",
	              stat_median(r->fresh, (size_t)r->n_fresh));
	row_ref(row, ref, m1);
	row = row_add("publish", "begin + commit without copying (library cost)", "ms",
	              stat_median(r->overhead, (size_t)R));
	row_ref(row, ref, m1);
	row = row_add("publish", "memcpy 64 tensors one by one, warm (no wsync)", "ms",
	              stat_median(r->memcpy_tensors, (size_t)R));
	row_ref(row, ref, m1);
	row = row_add("publish", "memcpy 256 MiB split across 2 threads (no wsync)", "ms",
	              stat_median(r->memcpy2, (size_t)R));
	row_ref(row, ref, m1);
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
