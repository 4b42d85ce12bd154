/*
 * tools/bench/sustained.c — scenario "sustained": a 16 MiB model of 64
 * tensors published as fast as the publisher can (begin, copy, commit, in a
 * loop) for one-second windows, while 8 collector processes follow it with
 * wsync_sub_wait (acquire, read a few bytes, release).
 *
 * Figures per window, median over windows: versions per second (reference:
 * the rate of the publisher's copy alone, the 64 memcpy calls without wsync
 * and without collectors, measured just before each window), the fraction
 * of the window's versions each collector saw (min and median collector; a
 * collector that wakes late skips to the newest, by design), and the
 * broker's CPU time per commit (all its threads, from
 * /proc/<pid>/task/<tid>/schedstat, before and after).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

#define SUS_BYTES      (16 * MIB)
#define SUS_TENSORS    64
#define SUS_COLLECTORS 8
#define SUS_WINDOW_NS  NS_PER_S

struct sus_shared {
	_Atomic int ready, go, stop, failed;
	char error[320];
	uint64_t base_version;           /* the last warm-up version */
	_Atomic uint64_t final_version;  /* set before stop */
	uint64_t seen[SUS_COLLECTORS];
};

struct sus_collector {
	struct bench *b;
	struct sus_shared *sh;
	const char *model;
	int index;
};

static void sus_set_error(struct sus_shared *sh, const char *what, int err)
{
	int expected = 0;

	if (atomic_compare_exchange_strong(&sh->failed, &expected, err ? err : -1))
		wsync_error_text(sh->error, sizeof sh->error, what, err);
}

/* ---- collectors ---------------------------------------------------------- */

static bool sus_done(struct sus_shared *sh, uint64_t after)
{
	return atomic_load(&sh->stop) && after >= atomic_load(&sh->final_version);
}

static int sus_follow(struct sus_collector *sc, wsync_sub *sub)
{
	struct sus_shared *sh = sc->sh;
	uint64_t after = sh->base_version;
	volatile unsigned char sink;
	wsync_view v;

	while (!sus_done(sh, after)) {
		int err = wsync_sub_wait(sub, after, 100 * NS_PER_MS, &v);

		if (err == -ETIMEDOUT) {
			if (atomic_load(&sh->stop))
				break;
			continue;
		}
		if (err) {
			sus_set_error(sh, "wsync_sub_wait", err);
			return -1;
		}
		for (size_t i = 0; i < v.n_tensors && i < 4; i++)
			sink = ((const unsigned char *)v.base)[v.tensors[i].offset];
		(void)sink;
		sh->seen[sc->index]++;
		after = v.version;
		wsync_sub_release(sub, &v);
	}
	return 0;
}

static int sus_collector_main(void *arg)
{
	struct sus_collector *sc = arg;
	wsync_client *c = NULL;
	wsync_sub *sub = NULL;
	int err, rc = 1;

	if ((err = wsync_connect(sc->b->endpoint, "bench-collector", &c))) {
		sus_set_error(sc->sh, "wsync_connect", err);
		goto out;
	}
	if ((err = wsync_sub_open(c, sc->model, &sub))) {
		sus_set_error(sc->sh, "wsync_sub_open", err);
		goto out;
	}
	atomic_fetch_add(&sc->sh->ready, 1);
	while (!atomic_load(&sc->sh->go) && !atomic_load(&sc->sh->stop))
		sleep_ns(100 * NS_PER_US);
	rc = sus_follow(sc, sub) ? 1 : 0;
out:
	wsync_sub_close(sub);
	wsync_close(c);
	return rc;
}

/* ---- the publisher -------------------------------------------------------------- */

struct sus_window {
	double copy_ns;                  /* the copy alone, just before */
	uint64_t commits;
	double rate;                     /* versions per second */
	double seen_min, seen_median;    /* % of the window's versions */
	double broker_us;                /* broker CPU per commit, < 0 unknown */
};

struct sus_run {
	struct bench *b;
	void *src, *dst;                 /* the trainer's weights; a scratch copy */
	wsync_tensor_desc *flat;         /* the layout, offsets contiguous */
	char error[400];
};

static int sus_fail(struct sus_run *r, struct sus_shared *sh, const char *what, int err)
{
	if (sh && atomic_load(&sh->failed))
		snprintf(r->error, sizeof r->error, "%s (collector)", sh->error);
	else if (err)
		wsync_error_text(r->error, sizeof r->error, what, err);
	else
		snprintf(r->error, sizeof r->error, "%s", what);
	return -1;
}

/* Opens the model and writes every slot once; returns the last version. */
static int sus_open(struct sus_run *r, struct sus_shared *sh, const char *model,
                    wsync_client **c, wsync_pub **p)
{
	const char *what = "wsync_connect";
	uint64_t version = 0;
	int err;

	if ((err = wsync_connect(r->b->endpoint, "bench-publisher", c)))
		return sus_fail(r, sh, what, err);
	if ((err = model_open(*c, model, SUS_BYTES, SUS_TENSORS, 0, p)))
		return sus_fail(r, sh, "wsync_pub_open", err);
	for (uint64_t step = 1; step <= 5; step++)
		if ((err = publish_once(*p, r->src, NULL, step, &version, &what)))
			return sus_fail(r, sh, what, err);
	sh->base_version = version;
	return 0;
}

/* Publishes flat out for one window. */
static int sus_publish(struct sus_run *r, struct sus_shared *sh, wsync_pub *p,
                       struct sus_window *w)
{
	const char *what = "";
	uint64_t version = 0;
	int64_t t0, t1, cpu0, cpu1;
	int err;

	cpu0 = broker_cpu_ns(r->b);
	t0 = mono_ns();
	atomic_store(&sh->go, 1);
	do {
		if ((err = publish_once(p, r->src, NULL, w->commits + 1, &version, &what)))
			return sus_fail(r, sh, what, err);
		w->commits++;
	} while ((t1 = mono_ns()) - t0 < SUS_WINDOW_NS);
	cpu1 = broker_cpu_ns(r->b);
	atomic_store(&sh->final_version, version);
	atomic_store(&sh->stop, 1);
	w->rate = (double)w->commits * (double)NS_PER_S / (double)(t1 - t0);
	w->broker_us = cpu0 >= 0 && cpu1 >= cpu0
	               ? (double)(cpu1 - cpu0) / (double)w->commits / 1000 : -1;
	return 0;
}

static void sus_seen(const struct sus_shared *sh, struct sus_window *w)
{
	double seen[SUS_COLLECTORS];

	for (int i = 0; i < SUS_COLLECTORS; i++)
		seen[i] = 100.0 * (double)sh->seen[i] / (double)w->commits;
	w->seen_median = stat_median(seen, SUS_COLLECTORS);
	w->seen_min = seen[0];              /* sorted by stat_median */
}

/* The publisher's copy alone: the 64 tensors, one memcpy each, between
 * warm buffers on one thread; median of 5, ns. */
static double sus_copy_ns(struct sus_run *r)
{
	double v[5];

	for (int i = 0; i < 5; i++) {
		int64_t t0 = mono_ns();

		copy_tensors(r->dst, r->src, r->flat, SUS_TENSORS);
		v[i] = (double)(mono_ns() - t0);
	}
	return stat_median(v, 5);
}

static int sus_window_run(struct sus_run *r, int index, struct sus_window *w)
{
	struct sus_collector scs[SUS_COLLECTORS];
	pid_t pids[SUS_COLLECTORS];
	struct sus_shared *sh = shared_alloc(sizeof *sh);
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	char model[32];
	int spawned = 0, bad = 0, rc = -1;

	memset(w, 0, sizeof *w);
	if (!sh)
		return sus_fail(r, NULL, "out of memory", 0);
	w->copy_ns = sus_copy_ns(r);
	snprintf(model, sizeof model, "sustained-%d", index);
	for (int i = 0; i < SUS_COLLECTORS; i++) {
		scs[i] = (struct sus_collector){ r->b, sh, model, i };
		if ((pids[i] = child_spawn(sus_collector_main, &scs[i])) < 0) {
			sus_fail(r, sh, "fork failed", 0);
			goto out;
		}
		spawned++;
	}
	if (wait_counter(&sh->ready, SUS_COLLECTORS, 30 * NS_PER_S, pids, spawned)) {
		sus_fail(r, sh, "a collector did not start", 0);
		goto out;
	}
	if (sus_open(r, sh, model, &c, &p) || sus_publish(r, sh, p, w))
		goto out;
	rc = 0;
out:
	atomic_store(&sh->stop, 1);
	for (int i = 0; i < spawned; i++)
		bad |= child_reap(pids[i], rc ? 0 : 10000) != 0;
	if (!rc && bad)
		rc = sus_fail(r, sh, "a collector failed", 0);
	if (!rc)
		sus_seen(sh, w);
	wsync_pub_close(p);
	wsync_close(c);
	shared_free(sh, sizeof *sh);
	return rc;
}

static void sus_rows(struct sus_window *w, int n)
{
	double rate[64], smin[64], smed[64], cpu[64], copy[64];
	struct bench_row *row;
	int n_cpu = 0;

	for (int i = 0; i < n; i++) {
		rate[i] = w[i].rate;
		copy[i] = w[i].copy_ns;
		smin[i] = w[i].seen_min;
		smed[i] = w[i].seen_median;
		if (w[i].broker_us >= 0)
			cpu[n_cpu++] = w[i].broker_us;
	}
	row = row_add("sustained", "16 MiB / 64 tensors flat out, 8 collectors: versions",
	              "/s", stat_median(rate, (size_t)n));
	row_ref(row, "1 / copy, no wsync", (double)NS_PER_S / stat_median(copy, (size_t)n));
	row_add("sustained", "versions seen by the slowest collector", "%",
	        stat_median(smin, (size_t)n));
	row_add("sustained", "versions seen by the median collector", "%",
	        stat_median(smed, (size_t)n));
	if (n_cpu)
		row_add("sustained", "broker CPU time per commit", "us",
		        stat_median(cpu, (size_t)n_cpu));
	else
		row_skip("sustained", "broker CPU time per commit", "no CPU time in /proc");
}

int bench_sustained(struct bench *b)
{
	struct sus_run r = { .b = b };
	struct sus_window w[64];
	int n = b->repeats < 64 ? b->repeats : 64, rc = -1;

	r.src = warm_alloc(SUS_BYTES);
	r.dst = warm_alloc(SUS_BYTES);
	r.flat = model_layout(SUS_BYTES, SUS_TENSORS);
	if (!r.src || !r.dst || !r.flat) {
		snprintf(r.error, sizeof r.error, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < SUS_TENSORS; i++)
		r.flat[i].offset = i * (SUS_BYTES / SUS_TENSORS);
	for (int i = 0; i < n; i++)
		if (sus_window_run(&r, i, &w[i]))
			goto out;
	sus_rows(w, n);
	rc = 0;
out:
	if (rc) {
		say_error("sustained: %s", r.error);
		row_skip("sustained", "16 MiB flat out, 8 collectors", "failed: %s", r.error);
	}
	warm_free(r.src, SUS_BYTES);
	warm_free(r.dst, SUS_BYTES);
	free(r.flat);
	return rc;
}
