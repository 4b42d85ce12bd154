/*
 * tools/bench/fanout.c — one publisher (this process), N collector processes
 * blocked in a wait, and the time until each collector holds the new version.
 * Used by the "wake" scenario (a 4 KiB model, from the commit) and by the
 * C side of "peers" (16/256 MiB, from the start of the copy).
 *
 * Per sample: the publisher waits until every collector has armed its wait
 * for this sample, stays idle for a random 1-2 ms (collectors and cores go to
 * sleep, as between two updates of a real trainer), checks in /proc that
 * every collector sleeps, then records the time and begins, copies and
 * commits. Each collector records CLOCK_MONOTONIC (system-wide) as soon as
 * its wait returns with the new view, into shared memory, and releases it.
 *
 * In hot mode the publisher never sleeps: it spins, yielding, until the
 * collectors are armed and asleep, then commits at once, so no core stays
 * idle long enough for the hypervisor to deschedule it: the conditions of a
 * futex ping-pong.
 *
 * FAN_RAW_FUTEX runs the same protocol with a bare futex word instead of
 * wsync: store the sample number, FUTEX_WAKE all; the floor for the wsync
 * figures under identical conditions. With raw_commit the publisher first
 * commits a version of a model nobody waits on, so the bare wake comes
 * after a commit's round trip to the broker, as every wsync wake back to
 * back does.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "shm/futex.h"

#define FAN_MAX_COLLECTORS 64
#define FAN_WAIT_NS        (30 * NS_PER_S)   /* a wait longer than this: hung */

struct fan_shared {
	_Atomic int failed;
	char error[320];
	_Alignas(64) _Atomic uint32_t seq;            /* raw mode's futex word */
	_Alignas(64) _Atomic int armed[FAN_MAX_COLLECTORS];
	int64_t held[];                               /* [total * collectors] */
};

struct fan_collector {
	const struct fan_cfg *cfg;
	struct fan_shared *sh;
	int index;
};

static void fan_set_error(struct fan_shared *sh, const char *what, int err)
{
	int expected = 0;

	if (atomic_compare_exchange_strong(&sh->failed, &expected, err ? err : -1))
		wsync_error_text(sh->error, sizeof sh->error, what, err);
}

/* Pins the calling process to cpu_plus_1 - 1 (0: leaves it alone). */
static int fan_pin(int cpu_plus_1)
{
	cpu_set_t set;

	if (!cpu_plus_1)
		return 0;
	CPU_ZERO(&set);
	CPU_SET(cpu_plus_1 - 1, &set);
	return sched_setaffinity(0, sizeof set, &set) ? -errno : 0;
}

/* ---- collectors ------------------------------------------------------------ */

/* Reads a few bytes of the view, as a collector starting to use it would. */
static void view_touch(const wsync_view *v)
{
	const volatile unsigned char *base = v->base;
	unsigned sum = 0;

	for (size_t i = 0; i < v->n_tensors && i < 4; i++)
		sum += base[v->tensors[i].offset];
	sum += base[v->bytes - 1];
	(void)sum;
}

static int fan_wait_wsync(struct fan_collector *fc, wsync_sub *sub, uint64_t *after,
                          int s)
{
	wsync_view v;
	int err = wsync_sub_wait(sub, *after, FAN_WAIT_NS, &v);
	int64_t t = mono_ns();

	if (err) {
		fan_set_error(fc->sh, "wsync_sub_wait", err);
		return -1;
	}
	view_touch(&v);
	fc->sh->held[(size_t)s * (size_t)fc->cfg->collectors + (size_t)fc->index] = t;
	*after = v.version;
	wsync_sub_release(sub, &v);
	return 0;
}

static int fan_wait_raw(struct fan_collector *fc, int s)
{
	int64_t deadline = mono_ns() + FAN_WAIT_NS;

	while (atomic_load(&fc->sh->seq) == (uint32_t)s) {
		int err = wsync_futex_wait(&fc->sh->seq, (uint32_t)s, deadline);

		if (err && err != -EINTR) {
			fan_set_error(fc->sh, "futex wait", err);
			return -1;
		}
	}
	fc->sh->held[(size_t)s * (size_t)fc->cfg->collectors + (size_t)fc->index] = mono_ns();
	return 0;
}

static int fan_collector_main(void *arg)
{
	struct fan_collector *fc = arg;
	const struct fan_cfg *cfg = fc->cfg;
	int total = cfg->warmup + cfg->samples, rc = 1;
	wsync_client *c = NULL;
	wsync_sub *sub = NULL;
	uint64_t after = 0;
	int err;

	if ((err = fan_pin(cfg->pin_col))) {
		fan_set_error(fc->sh, "sched_setaffinity", err);
		goto out;
	}
	if (cfg->mode == FAN_WSYNC) {
		if ((err = wsync_connect(cfg->endpoint, "bench-collector", &c))) {
			fan_set_error(fc->sh, "wsync_connect", err);
			goto out;
		}
		if ((err = wsync_sub_open(c, cfg->model, &sub))) {
			fan_set_error(fc->sh, "wsync_sub_open", err);
			goto out;
		}
		if (cfg->spin_ns && (err = wsync_sub_set_spin(sub, cfg->spin_ns))) {
			fan_set_error(fc->sh, "wsync_sub_set_spin", err);
			goto out;
		}
	}
	for (int s = 0; s < total; s++) {
		atomic_store(&fc->sh->armed[fc->index], s + 1);
		if (cfg->mode == FAN_WSYNC ? fan_wait_wsync(fc, sub, &after, s)
		                           : fan_wait_raw(fc, s))
			goto out;
	}
	rc = 0;
out:
	wsync_sub_close(sub);
	wsync_close(c);
	return rc;
}

/* ---- the publisher --------------------------------------------------------------- */

struct fan_pub {
	const struct fan_cfg *cfg;
	struct fan_shared *sh;
	pid_t pids[FAN_MAX_COLLECTORS];
	int spawned;
	void *src;
	const void **srcs;              /* lib_copy: each tensor's source */
	wsync_client *c;
	wsync_pub *p;
	struct fan_result *res;
};

static int fan_fail(struct fan_pub *fp, const char *what, int err)
{
	if (atomic_load(&fp->sh->failed))
		snprintf(fp->res->error, sizeof fp->res->error, "%s (collector)", fp->sh->error);
	else if (err)
		wsync_error_text(fp->res->error, sizeof fp->res->error, what, err);
	else
		snprintf(fp->res->error, sizeof fp->res->error, "%s", what);
	return -1;
}

static int fan_wait_armed(struct fan_pub *fp, int want)
{
	for (int c = 0; c < fp->cfg->collectors; c++) {
		int err = fp->cfg->hot
		          ? spin_counter(&fp->sh->armed[c], want, FAN_WAIT_NS, fp->pids,
		                         fp->spawned)
		          : wait_counter(&fp->sh->armed[c], want, FAN_WAIT_NS, fp->pids,
		                         fp->spawned);

		if (err)
			return fan_fail(fp, err == -ECHILD ? "a collector exited"
			                                   : "a collector did not arm its wait", 0);
	}
	return 0;
}

/* Up to ~5 ms for every collector to be asleep; false if one is not. */
static bool fan_wait_asleep(struct fan_pub *fp)
{
	int64_t deadline = mono_ns() + 5 * NS_PER_MS;

	while (!procs_sleeping(fp->pids, fp->spawned)) {
		if (mono_ns() > deadline)
			return false;
		if (!fp->cfg->hot)
			sleep_ns(200 * NS_PER_US);
	}
	return true;
}

/* Times of one sample: before begin, before the copy, before the commit,
 * after it. */
struct fan_times {
	int64_t begin, copy, commit, done;
};

static int fan_publish(struct fan_pub *fp, int s, struct fan_times *t)
{
	wsync_slab slab;
	int err;

	if (fp->cfg->mode == FAN_RAW_FUTEX) {
		if (fp->p) {
			if ((err = wsync_pub_begin(fp->p, 10 * NS_PER_S, &slab)))
				return fan_fail(fp, "wsync_pub_begin", err);
			copy_tensors(slab.base, fp->src, slab.tensors, slab.n_tensors);
			if ((err = wsync_pub_commit(fp->p, (uint64_t)s + 1, NULL)))
				return fan_fail(fp, "wsync_pub_commit", err);
		}
		t->begin = t->copy = t->commit = mono_ns();
		atomic_store(&fp->sh->seq, (uint32_t)s + 1);
		wsync_futex_wake(&fp->sh->seq, INT_MAX);
		t->done = mono_ns();
		return 0;
	}
	t->begin = mono_ns();
	if ((err = wsync_pub_begin(fp->p, 10 * NS_PER_S, &slab)))
		return fan_fail(fp, "wsync_pub_begin", err);
	t->copy = mono_ns();
	if (fp->srcs) {
		if ((err = wsync_slab_copy_tensors(&slab, fp->srcs, 0)))
			return fan_fail(fp, "wsync_slab_copy_tensors", err);
	} else {
		copy_tensors(slab.base, fp->src, slab.tensors, slab.n_tensors);
	}
	t->commit = mono_ns();
	err = wsync_pub_commit(fp->p, (uint64_t)s + 1, NULL);
	t->done = mono_ns();
	if (err)
		return fan_fail(fp, "wsync_pub_commit", err);
	return 0;
}

static int fan_open(struct fan_pub *fp)
{
	const struct fan_cfg *cfg = fp->cfg;
	int err;

	if (cfg->mode != FAN_WSYNC && !cfg->raw_commit)
		return 0;
	if (!(fp->src = warm_alloc(cfg->bytes)))
		return fan_fail(fp, "out of memory", 0);
	if ((err = wsync_connect(cfg->endpoint, "bench-publisher", &fp->c)))
		return fan_fail(fp, "wsync_connect", err);
	if ((err = model_open_flags(fp->c, cfg->model, cfg->bytes, cfg->n_tensors, cfg->slots,
	                            cfg->model_flags, &fp->p)))
		return fan_fail(fp, "wsync_pub_open", err);
	if (cfg->lib_copy) {
		if (!(fp->srcs = calloc(cfg->n_tensors, sizeof *fp->srcs)))
			return fan_fail(fp, "out of memory", 0);
		/* the source is laid out like the slab's tensors, contiguously */
		for (size_t i = 0; i < cfg->n_tensors; i++)
			fp->srcs[i] = (const char *)fp->src + i * (cfg->bytes / cfg->n_tensors);
	}
	return 0;
}

static int fan_loop(struct fan_pub *fp)
{
	const struct fan_cfg *cfg = fp->cfg;
	int total = cfg->warmup + cfg->samples;

	for (int s = 0; s < total; s++) {
		struct fan_times t = { 0, 0, 0, 0 };

		if (fan_wait_armed(fp, s + 1))
			return -1;
		if (cfg->between)
			cfg->between(cfg->between_arg, s);
		if (!cfg->hot)
			sleep_ns(rand_range(cfg->pause_min_ns, cfg->pause_max_ns));
		if (!fan_wait_asleep(fp) && s >= cfg->warmup)
			fp->res->not_asleep++;
		if (fan_publish(fp, s, &t))
			return -1;
		if (s >= cfg->warmup) {
			fp->res->t_begin[s - cfg->warmup] = t.begin;
			fp->res->t_copy[s - cfg->warmup] = t.copy;
			fp->res->t_commit[s - cfg->warmup] = t.commit;
			fp->res->t_done[s - cfg->warmup] = t.done;
		}
	}
	return 0;
}

static int fan_alloc(struct fan_result *res, const struct fan_cfg *cfg)
{
	memset(res, 0, sizeof *res);
	res->samples = cfg->samples;
	res->collectors = cfg->collectors;
	res->t_begin = calloc((size_t)cfg->samples, sizeof *res->t_begin);
	res->t_copy = calloc((size_t)cfg->samples, sizeof *res->t_copy);
	res->t_commit = calloc((size_t)cfg->samples, sizeof *res->t_commit);
	res->t_done = calloc((size_t)cfg->samples, sizeof *res->t_done);
	res->t_held = calloc((size_t)cfg->samples * (size_t)cfg->collectors,
	                     sizeof *res->t_held);
	return res->t_begin && res->t_copy && res->t_commit && res->t_done && res->t_held ?
	       0 : -1;
}

void fan_result_free(struct fan_result *res)
{
	free(res->t_begin);
	free(res->t_copy);
	free(res->t_commit);
	free(res->t_done);
	free(res->t_held);
	res->t_begin = res->t_copy = res->t_commit = res->t_done = res->t_held = NULL;
}

int fan_run(const struct fan_cfg *cfg, struct fan_result *res)
{
	int total = cfg->warmup + cfg->samples, rc = -1, bad = 0;
	size_t shm_bytes = sizeof(struct fan_shared) +
	                   (size_t)total * (size_t)cfg->collectors * sizeof(int64_t);
	struct fan_collector fcs[FAN_MAX_COLLECTORS];
	struct fan_pub fp = { .cfg = cfg, .res = res };
	cpu_set_t saved;
	int err;

	if (fan_alloc(res, cfg) || cfg->collectors > FAN_MAX_COLLECTORS ||
	    !(fp.sh = shared_alloc(shm_bytes))) {
		snprintf(res->error, sizeof res->error, "out of memory");
		goto out;
	}
	CPU_ZERO(&saved);
	for (int c = 0; c < cfg->collectors; c++) {
		fcs[c] = (struct fan_collector){ cfg, fp.sh, c };
		if ((fp.pids[c] = child_spawn(fan_collector_main, &fcs[c])) < 0) {
			fan_fail(&fp, "fork", 0);
			goto out_reap;
		}
		fp.spawned++;
	}
	if (cfg->pin_pub) {
		err = sched_getaffinity(0, sizeof saved, &saved) ? -errno
		                                                 : fan_pin(cfg->pin_pub);
		if (err) {
			CPU_ZERO(&saved);
			fan_fail(&fp, "sched_setaffinity", err);
			goto out_reap;
		}
	}
	if (fan_wait_armed(&fp, 1) || fan_open(&fp) || fan_loop(&fp))
		goto out_reap;
	rc = 0;
out_reap:
	if (CPU_COUNT(&saved))
		sched_setaffinity(0, sizeof saved, &saved);
	for (int c = 0; c < fp.spawned; c++)
		bad |= child_reap(fp.pids[c], rc ? 0 : 10000) != 0;
	if (!rc && bad)
		rc = fan_fail(&fp, "a collector failed", 0);
	if (!rc)
		for (int s = 0; s < cfg->samples; s++)
			memcpy(&res->t_held[(size_t)s * (size_t)cfg->collectors],
			       &fp.sh->held[(size_t)(s + cfg->warmup) * (size_t)cfg->collectors],
			       (size_t)cfg->collectors * sizeof(int64_t));
	wsync_pub_close(fp.p);
	wsync_close(fp.c);
	free(fp.srcs);
	warm_free(fp.src, cfg->bytes);
	shared_free(fp.sh, shm_bytes);
out:
	return rc;
}

void fan_latencies(const struct fan_result *res, enum fan_from from, bool last, double *out)
{
	double lat[FAN_MAX_COLLECTORS];
	int nc = res->collectors;

	for (int s = 0; s < res->samples; s++) {
		int64_t t0 = from == FAN_FROM_BEGIN ? res->t_begin[s] :
		             from == FAN_FROM_COPY ? res->t_copy[s] : res->t_commit[s];

		for (int c = 0; c < nc; c++)
			lat[c] = (double)(res->t_held[(size_t)s * (size_t)nc + (size_t)c] - t0);
		out[s] = last ? stat_max(lat, (size_t)nc) : stat_median(lat, (size_t)nc);
	}
}
