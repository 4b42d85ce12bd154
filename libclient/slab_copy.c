/*
 * libclient/slab_copy.c — filling a slab at memory speed.
 *
 * Two things make a plain memcpy of a model slower than the machine allows:
 *  - one core moves about 12 GB/s on the machines we measure; a second core
 *    adds a third or more, so large copies are split across threads;
 *  - a model is many tensors of a few MiB, each below glibc's switch to
 *    streaming stores (tens of MiB), so on many CPUs every destination line
 *    is first read for ownership. Streaming (non-temporal) stores, four
 *    pages at a time to keep several DRAM pages open, avoid that; the slab
 *    is read by other cores next, never by this one. But on CPUs whose
 *    `rep movsb` (ERMS/FSRM, which glibc's memcpy uses) already avoids the
 *    read for ownership, memcpy is as fast or faster.
 * So the method for pieces of 256 KiB or more is picked per CPU, by
 * measuring, once per process: the first copy of 32 MiB or more starts with
 * 1 MiB chunks of its own data, alternately with memcpy and with streaming
 * stores, eight of each on the calling thread (each chunk's pages touched
 * first, so that page faults are not timed); streaming stores are kept
 * only if their best chunk beats memcpy's best by 5% (glibc's choice wins
 * ties), and the rest of that copy and every later one use the winner.
 * Nothing is copied twice; smaller copies before that use memcpy. The
 * number of online CPUs is also read once (sysconf reads /sys each call).
 * Streaming stores are weakly ordered: each thread fences before it
 * finishes, and the join orders its stores before the caller's commit.
 *
 * Threads are started per call: a large copy takes milliseconds, a thread
 * start tens of microseconds, and nothing lingers inside the user's process
 * between publishes. Copies under 4 MiB per thread stay on the caller.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pub.h"
#include "shm/errmsg.h"
#include "shm/tensor_layout.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define COPY_MAX_THREADS     16
#define COPY_PER_THREAD_MIN  (4u << 20)
#define COPY_CHUNK           (2u << 20)
#define COPY_NT_MIN          (256u << 10)
#define COPY_STACK_SEGS      256
#define COPY_PROBE_MIN       (32u << 20)
#define COPY_PROBE_CHUNK     (1u << 20)
#define COPY_PROBE_ROUNDS    8

/* COPY_TOUCH writes one byte per page (its final value): page faults
 * taken before a probe chunk is timed. */
enum copy_method { COPY_UNDECIDED, COPY_MEMCPY, COPY_STREAM, COPY_TOUCH };

static _Atomic int copy_method_chosen;  /* enum copy_method, for this process */
static atomic_long copy_cpus_online;    /* 0 until read */

struct copy_seg {
	char *dst;
	const char *src;
	size_t len;
};

/* Bytes [lo, hi) of the concatenated segments, copied by one thread. */
struct copy_job {
	const struct copy_seg *segs;
	size_t n_segs, lo, hi;
	int method;                     /* for pieces of COPY_NT_MIN or more */
};

/* A copy shared by threads that take COPY_CHUNK-byte ranges in turn from
 * `next` until `total`: a thread that starts late, or is preempted by
 * another process, leaves more of the work to the others instead of
 * making the caller wait for its fixed share. */
struct copy_work {
	const struct copy_seg *segs;
	size_t n_segs, total;
	atomic_size_t next;
	int method;
};

#if defined(__x86_64__)
#define NT_PAGE 4096u

static inline void nt_line(char *d, const char *s)
{
	__m128i a = _mm_loadu_si128((const __m128i *)s);
	__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
	__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
	__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));

	_mm_stream_si128((__m128i *)d, a);
	_mm_stream_si128((__m128i *)(d + 16), b);
	_mm_stream_si128((__m128i *)(d + 32), c);
	_mm_stream_si128((__m128i *)(d + 48), e);
}

static void copy_stream(char *d, const char *s, size_t n)
{
	size_t head = (64 - ((uintptr_t)d & 63)) & 63;

	if (head > n)
		head = n;
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 4 * NT_PAGE; n -= 4 * NT_PAGE, d += 4 * NT_PAGE, s += 4 * NT_PAGE)
		for (size_t o = 0; o < NT_PAGE; o += 64)
			for (size_t k = 0; k < 4; k++)
				nt_line(d + k * NT_PAGE + o, s + k * NT_PAGE + o);
	for (; n >= 64; n -= 64, d += 64, s += 64)
		nt_line(d, s);
	memcpy(d, s, n);
}

static void copy_fence(void)
{
	_mm_sfence();
}
#else
static void copy_stream(char *d, const char *s, size_t n)
{
	memcpy(d, s, n);
}

static void copy_fence(void)
{
	atomic_thread_fence(memory_order_release);
}
#endif

static void copy_piece(char *d, const char *s, size_t n, int method)
{
	if (method == COPY_TOUCH)
		for (size_t o = 0; o < n; o += 4096)
			d[o] = s[o];
	else if (n >= COPY_NT_MIN && method == COPY_STREAM)
		copy_stream(d, s, n);
	else
		memcpy(d, s, n);
}

/* Copies bytes [job->lo, job->hi). *seg and *pos are a cursor: a segment
 * at or before the one holding lo, and its offset; they are left at the
 * segment holding hi, so that a later, higher range starts from there. */
static void copy_range(const struct copy_job *job, size_t *seg, size_t *pos)
{
	while (*seg < job->n_segs && *pos < job->hi) {
		const struct copy_seg *g = &job->segs[*seg];
		size_t a = job->lo > *pos ? job->lo : *pos;
		size_t e = job->hi < *pos + g->len ? job->hi : *pos + g->len;

		if (a < e)
			copy_piece(g->dst + (a - *pos), g->src + (a - *pos), e - a, job->method);
		if (*pos + g->len > job->hi)
			break;
		*pos += g->len;
		(*seg)++;
	}
}

static void *copy_work_run(void *arg)
{
	struct copy_work *w = arg;
	struct copy_job job = { w->segs, w->n_segs, 0, 0, w->method };
	size_t seg = 0, pos = 0;

	for (;;) {
		job.lo = atomic_fetch_add_explicit(&w->next, COPY_CHUNK, memory_order_relaxed);
		if (job.lo >= w->total)
			break;
		job.hi = w->total - job.lo > COPY_CHUNK ? job.lo + COPY_CHUNK : w->total;
		copy_range(&job, &seg, &pos);
	}
	copy_fence();
	return NULL;
}

static long cpus_online(void)
{
	long cpus = atomic_load_explicit(&copy_cpus_online, memory_order_relaxed);

	if (!cpus) {
		cpus = sysconf(_SC_NPROCESSORS_ONLN);
		if (cpus < 1)
			cpus = 1;
		atomic_store_explicit(&copy_cpus_online, cpus, memory_order_relaxed);
	}
	return cpus;
}

static unsigned copy_threads(unsigned asked, size_t len)
{
	long cpus = cpus_online();
	unsigned n = asked ? asked : (unsigned)(cpus > 0 ? cpus : 1);

	if (n > COPY_MAX_THREADS)
		n = COPY_MAX_THREADS;
	if (n > len / COPY_PER_THREAD_MIN)
		n = (unsigned)(len / COPY_PER_THREAD_MIN);
	return n ? n : 1;
}

#if defined(__x86_64__)
static int64_t copy_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Picks this process's method (see the top of the file) while copying the
 * first COPY_PROBE_ROUNDS * 2 chunks of the segments; returns the bytes
 * copied. Concurrent first copies may both measure; either result stands. */
static size_t copy_probe(const struct copy_seg *segs, size_t n_segs)
{
	int64_t best[2] = { INT64_MAX, INT64_MAX };
	struct copy_job job = { segs, n_segs, 0, 0, COPY_MEMCPY };
	int expected = COPY_UNDECIDED, pick;
	size_t seg = 0, pos = 0;

	for (unsigned k = 0; k < 2 * COPY_PROBE_ROUNDS; k++) {
		size_t seg_at = seg, pos_at = pos;
		int64_t t0, dt;

		job.lo = (size_t)k * COPY_PROBE_CHUNK;
		job.hi = job.lo + COPY_PROBE_CHUNK;
		job.method = COPY_TOUCH;
		copy_range(&job, &seg, &pos);
		seg = seg_at;
		pos = pos_at;
		job.method = k & 1 ? COPY_STREAM : COPY_MEMCPY;
		t0 = copy_clock_ns();
		copy_range(&job, &seg, &pos);
		copy_fence();
		dt = copy_clock_ns() - t0;
		if (dt < best[k & 1])
			best[k & 1] = dt;
	}
	pick = best[1] * 100 < best[0] * 95 ? COPY_STREAM : COPY_MEMCPY;
	atomic_compare_exchange_strong(&copy_method_chosen, &expected, pick);
	return job.hi;
}
#endif

/* Copies the segments (total bytes in all) with up to `threads` threads,
 * the caller among them; a thread that cannot be started leaves its chunks
 * to the others. */
static void copy_segments(const struct copy_seg *segs, size_t n_segs, size_t total,
                          unsigned threads)
{
	pthread_t tids[COPY_MAX_THREADS];
	bool started[COPY_MAX_THREADS] = { false };
	int method = atomic_load_explicit(&copy_method_chosen, memory_order_relaxed);
	struct copy_work work;
	size_t done = 0;
	unsigned n;

#if defined(__x86_64__)
	if (method == COPY_UNDECIDED && total >= COPY_PROBE_MIN) {
		done = copy_probe(segs, n_segs);
		method = atomic_load_explicit(&copy_method_chosen, memory_order_relaxed);
	}
#else
	method = COPY_MEMCPY;
#endif
	if (done >= total)
		return;
	n = copy_threads(threads, total - done);
	work.segs = segs;
	work.n_segs = n_segs;
	work.total = total;
	work.method = method;
	atomic_init(&work.next, done);
	for (unsigned i = 1; i < n; i++)
		started[i] = pthread_create(&tids[i], NULL, copy_work_run, &work) == 0;
	copy_work_run(&work);
	for (unsigned i = 1; i < n; i++)
		if (started[i])
			pthread_join(tids[i], NULL);
}

int wsync_copy(void *dst, const void *src, size_t len, unsigned threads)
{
	struct copy_seg seg = { dst, src, len };

	if (!len)
		return 0;
	if (!dst || !src)
		return wsync_fail(-EINVAL, "wsync_copy: NULL buffer");
	copy_segments(&seg, 1, len, threads);
	return 0;
}

/* The publisher of a slab that may be written now, or NULL with a message. */
static struct wsync_pub *slab_writable(const wsync_slab *s, const char *what)
{
	struct wsync_pub *p;

	if (!s || !s->base || !s->priv_pub) {
		wsync_fail(-EINVAL, "%s: slab must not be NULL", what);
		return NULL;
	}
	p = s->priv_pub;
	if (!p->begun || p->cur.version != s->priv_version || p->cur.slot != s->priv_slot) {
		wsync_fail(-EINVAL, "model '%s': %s into a slab that is not begun "
		           "(committed or aborted already?)", p->model, what);
		return NULL;
	}
	return p;
}

int wsync_slab_copy(const wsync_slab *s, uint64_t offset, const void *src,
                    size_t len, unsigned threads)
{
	struct wsync_pub *p = slab_writable(s, "wsync_slab_copy");

	if (!p)
		return -EINVAL;
	if (!src && len)
		return wsync_fail(-EINVAL, "model '%s': wsync_slab_copy from NULL", p->model);
	if (offset > s->bytes || len > s->bytes - offset)
		return wsync_fail(-EINVAL, "model '%s': copy of %zu bytes at offset %llu runs "
		                  "past the slab's %zu bytes", p->model, len,
		                  (unsigned long long)offset, s->bytes);
	return wsync_copy((char *)s->base + offset, src, len, threads);
}

int wsync_slab_copy_tensors(const wsync_slab *s, const void *const *srcs, unsigned threads)
{
	struct copy_seg stack_segs[COPY_STACK_SEGS], *segs = stack_segs;
	struct wsync_pub *p = slab_writable(s, "wsync_slab_copy_tensors");
	size_t n = 0, total = 0;

	if (!p)
		return -EINVAL;
	if (!srcs)
		return wsync_fail(-EINVAL, "model '%s': wsync_slab_copy_tensors: srcs is NULL",
		                  p->model);
	if (s->n_tensors > COPY_STACK_SEGS) {
		segs = malloc(s->n_tensors * sizeof(*segs));
		if (!segs)
			return wsync_fail(-ENOMEM, "model '%s': wsync_slab_copy_tensors: out of "
			                  "memory", p->model);
	}
	for (size_t i = 0; i < s->n_tensors; i++) {
		size_t len = (size_t)wsync_tensor_bytes(&s->tensors[i]);

		if (!srcs[i] || !len)
			continue;
		segs[n].dst = (char *)s->base + s->tensors[i].offset;
		segs[n].src = srcs[i];
		segs[n].len = len;
		total += len;
		n++;
	}
	if (total)
		copy_segments(segs, n, total, threads);
	if (segs != stack_segs)
		free(segs);
	return 0;
}
