/*
 * tools/bench/gpu_wake.c — the gpu scenario's wake rows: from the instant
 * before the publisher's commit until a collector in another process,
 * blocked in wsync_sub_wait_gpu (or wsync_sub_wait for the host
 * reference), holds the new view. A 4 KiB model, so the copies do not
 * count; a device model's commit still fans the version out and
 * synchronises its stream before collectors can see it.
 *
 * One phase: the bench forks the collectors and a publisher (each makes its
 * own CUDA context: nothing CUDA crosses a fork), they step through the
 * samples with counters in shared memory, and every timestamp is
 * CLOCK_MONOTONIC, the same clock in every process. Before each commit the
 * publisher waits until every collector has armed its wait and sleeps (at
 * most 20 ms), as in the wake scenario. The collectors are not the
 * publisher's children, so it cannot see one die: a dead collector shows
 * as a timeout (10 s), then the bench reaps them all.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bench_gpu.h"

#define WAKE_BYTES   4096
#define WAKE_TIMEOUT (10 * NS_PER_S)

#ifdef WSYNC_HAVE_CUDA_H

struct wake_arg {
	struct gb_shared *sh;
	int k;                           /* collector index */
};

/* The first failure of the phase is kept; later ones would only follow. */
static void wake_error(struct gb_wake *w, const char *who, const char *text)
{
	if (!w->error[0])
		snprintf(w->error, sizeof w->error, "%s: %s", who, text);
}

/* A process of the phase ends (its clients closed): the driver released
 * and, on the fake, checked for leaks; a failure is kept (g->err): the exit
 * code. */
static int wake_exit(struct gb_shared *sh, struct gb_cuda *g, int rc, const char *who)
{
	if (gb_cuda_down(g, !rc && sh->plan.fake) && !rc)
		rc = -1;
	if (rc)
		wake_error(&sh->wake, who, g->err);
	return rc ? 1 : 0;
}

/* A context on gpu, or nothing for the host (gb_model_open and the error
 * helpers still work). */
static int wake_cuda_up(struct gb_cuda *g, int gpu, char *err, size_t len)
{
	if (gpu >= 0)
		return gb_cuda_up(g, gpu, err, len);
	memset(g, 0, sizeof *g);
	g->err = err;
	g->err_len = len;
	g->ordinal = -1;
	return 0;
}

/* Waits for the version after `after`, holds it, releases it: its version. */
static int collector_wait(struct gb_cuda *g, wsync_sub *s, const char *uuid,
                          uint64_t after, int64_t *t_held, uint64_t *version)
{
	wsync_dview dv;
	wsync_view v;
	int err;

	if (uuid) {
		err = wsync_sub_wait_gpu(s, uuid, after, WAKE_TIMEOUT, &dv);
		*t_held = mono_ns();
		if (err)
			return gb_wsync(g, err, "wsync_sub_wait_gpu");
		*version = dv.version;
		wsync_sub_release_gpu(s, &dv, WSYNC_STREAM_NONE);
	} else {
		err = wsync_sub_wait(s, after, WAKE_TIMEOUT, &v);
		*t_held = mono_ns();
		if (err)
			return gb_wsync(g, err, "wsync_sub_wait");
		*version = v.version;
		wsync_sub_release(s, &v);
	}
	return 0;
}

static int wake_collector(void *arg)
{
	const struct wake_arg *a = arg;
	struct gb_wake *w = &a->sh->wake;
	const struct gb_plan *pl = &a->sh->plan;
	int gpu = w->collector_gpu[a->k], total = pl->warmup + pl->samples, rc = -1, err;
	char uuid[WSYNC_GPU_UUID_LEN], text[GB_ERR_LEN] = "";
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	struct gb_cuda g;
	uint64_t after = 0;
	int64_t t;

	if (wake_cuda_up(&g, gpu, text, sizeof text))
		goto out;
	if (gpu >= 0 && (err = wsync_gpu_uuid(gpu, uuid, sizeof uuid))) {
		gb_wsync(&g, err, "wsync_gpu_uuid");
		goto out;
	}
	if (wait_counter(&w->opened, 1, 60 * NS_PER_S, NULL, 0)) {
		snprintf(text, sizeof text, "the publisher never opened the model");
		goto out;
	}
	if ((err = wsync_connect(pl->endpoint, "bench-gpu-collector", &c)) ||
	    (err = wsync_sub_open(c, w->model, &s))) {
		gb_wsync(&g, err, "wsync_connect/wsync_sub_open");
		goto out;
	}
	/* the first version maps the slots on this GPU */
	if (collector_wait(&g, s, gpu >= 0 ? uuid : NULL, 0, &t, &after))
		goto out;
	for (int i = 0; i < total; i++) {
		atomic_fetch_add(&w->ready, 1);
		if (collector_wait(&g, s, gpu >= 0 ? uuid : NULL, after, &t, &after))
			goto out;
		if (i >= pl->warmup)
			w->t_held[a->k][i - pl->warmup] = t;
		atomic_fetch_add(&w->done, 1);
	}
	rc = 0;
out:
	wsync_sub_close(s);
	wsync_close(c);
	return wake_exit(a->sh, &g, rc, gpu >= 0 ? "collector on a GPU" : "host collector");
}

/* One version: begin (device or host), no copy, then commit timed from *t. */
static int wake_publish(struct gb_cuda *g, wsync_pub *p, const char *uuid, uint64_t step,
                        int64_t *t)
{
	wsync_dslab ds;
	wsync_slab s;
	int err;

	err = uuid ? wsync_pub_begin_gpu(p, uuid, WAKE_TIMEOUT, &ds)
	           : wsync_pub_begin(p, WAKE_TIMEOUT, &s);
	if (err)
		return gb_wsync(g, err, "wsync_pub_begin(_gpu)");
	*t = mono_ns();
	err = uuid ? wsync_pub_commit_gpu(p, g->stream, step, NULL)
	           : wsync_pub_commit(p, step, NULL);
	return err ? gb_wsync(g, err, "wsync_pub_commit(_gpu)") : 0;
}

/* Until every collector sleeps in its wait (or 20 ms went by). */
static void collectors_asleep(const struct gb_wake *w)
{
	int64_t deadline = mono_ns() + 20 * NS_PER_MS;

	while (!procs_sleeping(w->collector_pid, w->n_collectors) && mono_ns() < deadline)
		sleep_ns(20 * NS_PER_US);
}

/* The model's GPUs: the publisher's, then every collector's. */
static int wake_gpus(const struct gb_wake *w, int *gpus)
{
	int n = 0;

	if (w->pub_gpu < 0)
		return 0;
	gpus[n++] = w->pub_gpu;
	for (int k = 0; k < w->n_collectors; k++) {
		bool seen = w->collector_gpu[k] < 0;

		for (int j = 0; j < n && !seen; j++)
			seen = gpus[j] == w->collector_gpu[k];
		if (!seen)
			gpus[n++] = w->collector_gpu[k];
	}
	return n;
}

static int wake_publisher(void *arg)
{
	struct gb_shared *sh = arg;
	struct gb_wake *w = &sh->wake;
	const struct gb_plan *pl = &sh->plan;
	int n = w->n_collectors, total = pl->warmup + pl->samples, rc = -1, err;
	int gpus[GB_COLLECTORS + 1], n_gpus = wake_gpus(w, gpus);
	char uuid[WSYNC_GPU_UUID_LEN], text[GB_ERR_LEN] = "";
	const char *on = w->pub_gpu >= 0 ? uuid : NULL;
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	struct gb_cuda g;
	uint64_t step = 0;
	int64_t t;

	if (wake_cuda_up(&g, w->pub_gpu, text, sizeof text))
		goto out;
	if (on && (err = wsync_gpu_uuid(w->pub_gpu, uuid, sizeof uuid))) {
		gb_wsync(&g, err, "wsync_gpu_uuid");
		goto out;
	}
	if ((err = wsync_connect(pl->endpoint, "bench-gpu-publisher", &c))) {
		gb_wsync(&g, err, "wsync_connect");
		goto out;
	}
	if (gb_model_open(&g, c, w->model, WAKE_BYTES, 1, gpus, n_gpus, &p) ||
	    wake_publish(&g, p, on, ++step, &t))
		goto out;
	atomic_store(&w->opened, 1);
	for (int i = 0; i < total; i++) {
		if ((err = wait_counter(&w->ready, (i + 1) * n, WAKE_TIMEOUT, NULL, 0))) {
			snprintf(text, sizeof text, "collectors not ready: %s", strerror(-err));
			goto out;
		}
		collectors_asleep(w);
		if (wake_publish(&g, p, on, ++step, &t))
			goto out;
		if (i >= pl->warmup)
			w->t_commit[i - pl->warmup] = t;
		if ((err = wait_counter(&w->done, (i + 1) * n, WAKE_TIMEOUT, NULL, 0))) {
			snprintf(text, sizeof text, "collectors did not wake: %s", strerror(-err));
			goto out;
		}
	}
	rc = 0;
out:
	wsync_pub_close(p);
	wsync_close(c);
	return wake_exit(sh, &g, rc, "publisher");
}

int gb_wake_phase(struct gb_shared *sh)
{
	static struct wake_arg args[GB_COLLECTORS];
	struct gb_wake *w = &sh->wake;
	int rc = 0;
	pid_t pub;

	atomic_store(&w->opened, 0);
	atomic_store(&w->ready, 0);
	atomic_store(&w->done, 0);
	w->error[0] = '\0';
	for (int k = 0; k < w->n_collectors; k++) {
		args[k] = (struct wake_arg){ .sh = sh, .k = k };
		w->collector_pid[k] = child_spawn(wake_collector, &args[k]);
		if (w->collector_pid[k] < 0) {
			snprintf(w->error, sizeof w->error, "fork failed");
			w->n_collectors = k;
			rc = -1;
			break;
		}
	}
	pub = rc ? -1 : child_spawn(wake_publisher, sh);
	if (!rc && (pub < 0 || child_reap(pub, 600 * 1000) != 0))
		rc = -1;
	for (int k = 0; k < w->n_collectors; k++)
		if (child_reap(w->collector_pid[k], rc ? 0 : 30 * 1000) != 0)
			rc = -1;
	if (rc && !w->error[0])
		snprintf(w->error, sizeof w->error, "a process of the phase failed");
	return rc;
}

#else

int gb_wake_phase(struct gb_shared *sh)
{
	snprintf(sh->wake.error, sizeof sh->wake.error, "built without cuda.h");
	return -1;
}

#endif /* WSYNC_HAVE_CUDA_H */
