/*
 * tools/relay/delta_pool.c — the worker threads of a wsync_delta and the job they
 * serve (the invariant is in delta_internal.h: one mutex orders a task's
 * writes before anyone reads them).
 *
 * Workers live as long as the wsync_delta and sleep on d->work between
 * jobs. A job is a numbered list of tasks; an operation starts one with a
 * task function and a limit (the encoder raises the limit as its window
 * frees, the decoder as frames are fed), waits for a prefix of the tasks to
 * be done, and ends it once no worker runs a task of it.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "tools/relay/delta_internal.h"

/* The calling thread's CPU time: what a task cost, whoever else ran. */
static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int job_has_task(const struct delta_job *j)
{
	return j->run && j->next < j->limit && j->next < j->n_tasks;
}

/* With d->mu held: task t finished with rc. */
static void job_finish(struct wsync_delta *d, size_t t, uint64_t ns)
{
	struct delta_job *j = &d->job;

	j->done[t] = 1;
	j->busy_ns += ns;
	while (j->done_prefix < j->n_tasks && j->done[j->done_prefix])
		j->done_prefix++;
	j->running--;
	pthread_cond_broadcast(&d->done);
}

static void *worker_main(void *arg)
{
	struct delta_worker *w = arg;
	struct wsync_delta *d = w->d;

	pthread_mutex_lock(&d->mu);
	for (;;) {
		while (!d->stopping && !job_has_task(&d->job))
			pthread_cond_wait(&d->work, &d->mu);
		if (d->stopping)
			break;
		size_t t = d->job.next++;
		delta_task_fn run = d->job.run;

		d->job.running++;
		pthread_mutex_unlock(&d->mu);
		uint64_t t0 = cpu_ns();
		int rc = run(d, t, w);
		uint64_t ns = cpu_ns() - t0;

		pthread_mutex_lock(&d->mu);
		(void)rc;               /* a failing task has said why (delta_task_err) */
		job_finish(d, t, ns);
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

static unsigned cpus_allowed(void)
{
	cpu_set_t set;
	const char *env = getenv("WSYNC_DELTA_THREADS");

	if (env && *env) {
		long v = strtol(env, NULL, 10);

		if (v > 0 && v <= 1024)
			return (unsigned)v;
	}
	if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
		return (unsigned)CPU_COUNT(&set);
	return 1;
}

int wsync_delta_new(unsigned threads, wsync_delta **out)
{
	struct wsync_delta *d;
	pthread_condattr_t ca;
	int rc;

	*out = NULL;
	if (threads == 0)
		threads = cpus_allowed();
	if (threads > 1024)
		return delta_err(-EINVAL, "%u threads: at most 1024", threads);
	d = calloc(1, sizeof *d);
	if (!d)
		return delta_err(-ENOMEM, "out of memory");
	d->w = calloc(threads, sizeof *d->w);
	if (!d->w)
		goto out_free;
	pthread_mutex_init(&d->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->work, &ca);
	pthread_cond_init(&d->done, &ca);
	pthread_condattr_destroy(&ca);
	d->n_threads = threads;
	for (unsigned i = 0; i < threads; i++) {
		d->w[i].d = d;
		d->w[i].cctx = ZSTD_createCCtx();
		d->w[i].dctx = ZSTD_createDCtx();
		if (!d->w[i].cctx || !d->w[i].dctx)
			goto out_stop;
		/* No frame may make a worker hold more than 32 MiB of window. */
		ZSTD_DCtx_setParameter(d->w[i].dctx, ZSTD_d_windowLogMax, 25);
		rc = pthread_create(&d->w[i].tid, NULL, worker_main, &d->w[i]);
		if (rc)
			goto out_stop;
		d->n_started++;
	}
	*out = d;
	return 0;

out_stop:
	wsync_delta_free(d);
	return delta_err(-ENOMEM, "cannot start %u codec threads", threads);
out_free:
	free(d);
	return delta_err(-ENOMEM, "out of memory");
}

void wsync_delta_free(wsync_delta *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	if (d->op != OP_NONE) {
		d->job.limit = d->job.next;     /* nothing new for the workers */
		while (d->job.running)
			pthread_cond_wait(&d->done, &d->mu);
	}
	d->stopping = 1;
	pthread_cond_broadcast(&d->work);
	pthread_mutex_unlock(&d->mu);
	for (unsigned i = 0; i < d->n_started; i++)
		pthread_join(d->w[i].tid, NULL);
	for (unsigned i = 0; i < d->n_threads; i++) {
		ZSTD_freeCCtx(d->w[i].cctx);
		ZSTD_freeDCtx(d->w[i].dctx);
		free(d->w[i].scratch);
	}
	pthread_cond_destroy(&d->work);
	pthread_cond_destroy(&d->done);
	pthread_mutex_destroy(&d->mu);
	free(d->job.done);
	free(d->hashes);
	free(d->e_ring);
	free(d->e_slot_len);
	free(d->e_kind);
	free(d->d_tasks);
	free(d->d_seen);
	free(d->w);
	free(d);
}

unsigned wsync_delta_threads(const wsync_delta *d)
{
	return d->n_threads;
}

size_t wsync_delta_chunk_for(size_t n, unsigned threads)
{
	size_t want = n / ((size_t)(threads ? threads : 1) * 8);

	if (want < (16u << 10))
		want = 16u << 10;
	if (want > (256u << 10))
		want = 256u << 10;
	return (want + 4095) & ~(size_t)4095;
}

size_t wsync_delta_frame_min(size_t chunk)
{
	return WSYNC_DELTA_REC_BYTES + chunk;
}

/* The worker's scratch, at least len bytes; an error of task t if not. */
int delta_scratch(struct wsync_delta *d, struct delta_worker *w, size_t len, size_t t)
{
	if (w->scratch_len >= len)
		return 0;
	uint8_t *s = realloc(w->scratch, len);

	if (!s) {
		pthread_mutex_lock(&d->mu);
		delta_task_err(d, -ENOMEM, "chunk %zu: out of memory", t);
		pthread_mutex_unlock(&d->mu);
		return -ENOMEM;
	}
	w->scratch = s;
	w->scratch_len = len;
	return 0;
}

int delta_grow(void **p, size_t *cap, size_t want, size_t elem)
{
	if (want <= *cap)
		return 0;
	void *q = realloc(*p, want * elem);

	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = want;
	return 0;
}

/* Checks n and chunk and sizes the per-chunk arrays; with d->mu held. */
int delta_geometry(struct wsync_delta *d, size_t n, size_t chunk)
{
	if (chunk < WSYNC_DELTA_CHUNK_MIN || chunk > WSYNC_DELTA_CHUNK_MAX)
		return delta_err(-EINVAL, "chunk of %zu bytes: must be %u .. %u", chunk,
		                 WSYNC_DELTA_CHUNK_MIN, WSYNC_DELTA_CHUNK_MAX);
	size_t n_chunks = n / chunk + (n % chunk != 0);

	if (n_chunks > UINT32_MAX)
		return delta_err(-EINVAL, "%zu bytes in chunks of %zu: too many chunks", n, chunk);
	if (delta_grow((void **)&d->hashes, &d->hashes_cap, n_chunks + 1, sizeof *d->hashes) ||
	    delta_grow((void **)&d->job.done, &d->job.done_cap, n_chunks + 1, 1))
		return delta_err(-ENOMEM, "out of memory for %zu chunks", n_chunks);
	d->n = n;
	d->chunk = chunk;
	d->n_chunks = n_chunks;
	return 0;
}

/* With d->mu held: a new job of n_tasks tasks, [0, limit) available. */
int delta_job_start(struct wsync_delta *d, enum delta_op op, delta_task_fn run,
                    size_t n_tasks, size_t limit)
{
	struct delta_job *j = &d->job;

	if (d->op != OP_NONE)
		return delta_err(-EBUSY, "another codec operation is under way");
	memset(j->done, 0, d->n_chunks + 1);
	j->run = run;
	j->n_tasks = n_tasks;
	j->limit = limit;
	j->next = 0;
	j->done_prefix = 0;
	j->running = 0;
	j->err = 0;
	j->errmsg[0] = 0;
	j->busy_ns = 0;
	d->op = op;
	pthread_cond_broadcast(&d->work);
	return 0;
}

/* With d->mu held: waits until tasks [0, upto) are done, or a timeout. */
int delta_wait_done(struct wsync_delta *d, size_t upto, int64_t timeout_ns)
{
	struct timespec abs;

	if (timeout_ns >= 0) {
		clock_gettime(CLOCK_MONOTONIC, &abs);
		abs.tv_sec += timeout_ns / 1000000000;
		abs.tv_nsec += timeout_ns % 1000000000;
		if (abs.tv_nsec >= 1000000000) {
			abs.tv_sec++;
			abs.tv_nsec -= 1000000000;
		}
	}
	while (d->job.done_prefix < upto) {
		if (timeout_ns < 0) {
			pthread_cond_wait(&d->done, &d->mu);
		} else if (pthread_cond_timedwait(&d->done, &d->mu, &abs) == ETIMEDOUT &&
		           d->job.done_prefix < upto) {
			return delta_err(-ETIMEDOUT, "codec: %zu of %zu chunks done after the timeout",
			                 d->job.done_prefix, upto);
		}
	}
	return 0;
}

/* With d->mu held: hands out nothing more and waits for running tasks. */
void delta_job_cancel(struct wsync_delta *d)
{
	d->job.limit = d->job.next;
	while (d->job.running)
		pthread_cond_wait(&d->done, &d->mu);
}

/* With d->mu held, no task running: the job is over. */
void delta_job_end(struct wsync_delta *d)
{
	d->job.run = NULL;
	d->job.n_tasks = d->job.limit = d->job.next = 0;
	d->op = OP_NONE;
}

uint64_t delta_whole_checksum(const uint64_t *hashes, size_t n_chunks, size_t n)
{
	XXH3_state_t st;
	uint8_t le[8 * 64];

	XXH3_INITSTATE(&st);
	XXH3_64bits_reset_withSeed(&st, (uint64_t)n);
	for (size_t i = 0; i < n_chunks; i += 64) {
		size_t k = n_chunks - i < 64 ? n_chunks - i : 64;

		for (size_t j = 0; j < k; j++)
			put_le64(le + 8 * j, hashes[i + j]);
		XXH3_64bits_update(&st, le, 8 * k);
	}
	return XXH3_64bits_digest(&st);
}
