/*
 * tools/bench/model.c — synthetic models, the trainer's copy into a slab
 * (on one thread or split across threads), and a begin/copy/commit helper.
 *
 * The trainer's weights are one contiguous source buffer holding the tensors
 * in slab order; a publish copies each tensor to its offset in the slab, as
 * a trainer copying its parameters one by one would.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

/* ---- layouts -------------------------------------------------------------- */

wsync_tensor_desc *model_layout(size_t bytes, size_t n_tensors)
{
	wsync_tensor_desc *d = calloc(n_tensors, sizeof *d);
	size_t per = bytes / n_tensors;

	if (!d)
		return NULL;
	for (size_t i = 0; i < n_tensors; i++) {
		snprintf(d[i].name, sizeof d[i].name, "layer%03zu.weight", i);
		d[i].dtype = WSYNC_F32;
		d[i].ndim = 1;
		d[i].shape[0] = per / sizeof(float);
	}
	return d;
}

int model_open(wsync_client *c, const char *model, size_t bytes, size_t n_tensors,
               uint32_t slots, wsync_pub **out)
{
	return model_open_flags(c, model, bytes, n_tensors, slots, 0, out);
}

int model_open_flags(wsync_client *c, const char *model, size_t bytes, size_t n_tensors,
                     uint32_t slots, uint32_t flags, wsync_pub **out)
{
	wsync_model_opts opts;

	memset(&opts, 0, sizeof opts);
	opts.slots = slots;
	opts.flags = flags;
	return model_open_opts(c, model, bytes, n_tensors, &opts, out);
}

int model_open_opts(wsync_client *c, const char *model, size_t bytes, size_t n_tensors,
                    const wsync_model_opts *opts, wsync_pub **out)
{
	wsync_tensor_desc *d = model_layout(bytes, n_tensors);
	int err;

	if (!d)
		return -ENOMEM;
	err = wsync_pub_open(c, model, d, n_tensors, opts, out);
	free(d);
	return err;
}

/* ---- copies ---------------------------------------------------------------- */

typedef void *(*copy_fn)(void *dst, const void *src, size_t n);


/* Copies bytes [lo, hi) of the source stream: the concatenated tensors (or
 * the flat buffer when tensors is NULL). */
static void copy_range(char *dst, const char *src, const wsync_tensor_desc *tensors,
                       size_t n, size_t lo, size_t hi, copy_fn fn)
{
	size_t pos = 0;

	if (!tensors) {
		fn(dst + lo, src + lo, hi - lo);
		return;
	}
	for (size_t i = 0; i < n && pos < hi; i++) {
		size_t len = (size_t)wsync_tensor_bytes(&tensors[i]);
		size_t a = lo > pos ? lo : pos, e = hi < pos + len ? hi : pos + len;

		if (a < e)
			fn(dst + tensors[i].offset + (a - pos), src + a, e - a);
		pos += len;
	}
}

void copy_tensors(void *dst, const void *src, const wsync_tensor_desc *tensors,
                  size_t n)
{
	copy_range(dst, src, tensors, n, 0, SIZE_MAX, memcpy);
}

struct pcopy {
	int threads;
	pthread_t *tids;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	uint64_t gen;           /* bumped for each job */
	int pending;            /* helpers still copying the current job */
	bool quit;
	/* the current job */
	char *dst;
	const char *src;
	const wsync_tensor_desc *tensors;
	size_t n, total;
};

struct pcopy_arg {
	struct pcopy *pc;
	int index;
};

/* Thread index's share of the job, split on 4 KiB boundaries. */
static void pcopy_share(struct pcopy *pc, int index)
{
	size_t lo = pc->total / (size_t)pc->threads * (size_t)index;
	size_t hi = pc->total / (size_t)pc->threads * (size_t)(index + 1);

	lo &= ~(size_t)4095;
	hi = index + 1 == pc->threads ? pc->total : hi & ~(size_t)4095;
	copy_range(pc->dst, pc->src, pc->tensors, pc->n, lo, hi, memcpy);
}

static void *pcopy_helper(void *argp)
{
	struct pcopy_arg *arg = argp;
	struct pcopy *pc = arg->pc;
	uint64_t seen = 0;

	pthread_mutex_lock(&pc->mu);
	for (;;) {
		while (!pc->quit && pc->gen == seen)
			pthread_cond_wait(&pc->go, &pc->mu);
		if (pc->quit)
			break;
		seen = pc->gen;
		pthread_mutex_unlock(&pc->mu);
		pcopy_share(pc, arg->index);
		pthread_mutex_lock(&pc->mu);
		if (--pc->pending == 0)
			pthread_cond_signal(&pc->done);
	}
	pthread_mutex_unlock(&pc->mu);
	free(arg);
	return NULL;
}

struct pcopy *pcopy_new(int threads)
{
	struct pcopy *pc = calloc(1, sizeof *pc);

	if (!pc)
		return NULL;
	pc->threads = threads < 1 ? 1 : threads;
	pc->tids = calloc((size_t)pc->threads, sizeof *pc->tids);
	pthread_mutex_init(&pc->mu, NULL);
	pthread_cond_init(&pc->go, NULL);
	pthread_cond_init(&pc->done, NULL);
	if (!pc->tids)
		goto out_free;
	for (int i = 1; i < pc->threads; i++) {
		struct pcopy_arg *arg = malloc(sizeof *arg);

		if (!arg)
			goto out_stop;
		*arg = (struct pcopy_arg){ pc, i };
		if (pthread_create(&pc->tids[i], NULL, pcopy_helper, arg)) {
			free(arg);
			goto out_stop;
		}
	}
	return pc;
out_stop:
	pcopy_free(pc);
	return NULL;
out_free:
	free(pc);
	return NULL;
}

void pcopy_free(struct pcopy *pc)
{
	if (!pc)
		return;
	pthread_mutex_lock(&pc->mu);
	pc->quit = true;
	pthread_cond_broadcast(&pc->go);
	pthread_mutex_unlock(&pc->mu);
	for (int i = 1; i < pc->threads; i++)
		if (pc->tids[i])
			pthread_join(pc->tids[i], NULL);
	pthread_cond_destroy(&pc->go);
	pthread_cond_destroy(&pc->done);
	pthread_mutex_destroy(&pc->mu);
	free(pc->tids);
	free(pc);
}

static void pcopy_run(struct pcopy *pc, void *dst, const void *src,
                      const wsync_tensor_desc *tensors, size_t n, size_t total)
{
	pthread_mutex_lock(&pc->mu);
	pc->dst = dst;
	pc->src = src;
	pc->tensors = tensors;
	pc->n = n;
	pc->total = total;
	pc->pending = pc->threads - 1;
	pc->gen++;
	pthread_cond_broadcast(&pc->go);
	pthread_mutex_unlock(&pc->mu);

	pcopy_share(pc, 0);

	pthread_mutex_lock(&pc->mu);
	while (pc->pending > 0)
		pthread_cond_wait(&pc->done, &pc->mu);
	pthread_mutex_unlock(&pc->mu);
}

void pcopy_flat(struct pcopy *pc, void *dst, const void *src, size_t bytes)
{
	pcopy_run(pc, dst, src, NULL, 0, bytes);
}

/* ---- publishing ------------------------------------------------------------- */


/* The library's copy: tensor i's source is its stretch of the concatenated
 * tensors in src. */
static int lib_copy(const wsync_slab *s, const void *src, unsigned threads)
{
	const void *srcs[256];
	const char *at = src;

	if (s->n_tensors > sizeof srcs / sizeof srcs[0])
		return -E2BIG;
	for (size_t i = 0; i < s->n_tensors; i++) {
		srcs[i] = at;
		at += wsync_tensor_bytes(&s->tensors[i]);
	}
	return wsync_slab_copy_tensors(s, srcs, threads);
}

int publish_once(wsync_pub *p, const void *src, const struct copier *how,
                 uint64_t step, uint64_t *version, const char **err_what)
{
	wsync_slab s;
	int err;

	err = wsync_pub_begin(p, 10 * NS_PER_S, &s);
	if (err) {
		*err_what = "wsync_pub_begin";
		return err;
	}
	if (src && how && (how->lib_threads || how->lib_default)) {
		err = lib_copy(&s, src, how->lib_default ? 0 : how->lib_threads);
		if (err) {
			*err_what = "wsync_slab_copy_tensors";
			wsync_pub_abort(p);
			return err;
		}
	} else if (src) {
		copy_tensors(s.base, src, s.tensors, s.n_tensors);
	}
	err = wsync_pub_commit(p, step, version);
	if (err)
		*err_what = "wsync_pub_commit";
	return err;
}
