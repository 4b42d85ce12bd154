/*
 * libclient/slab_copy.c — filling a slab at memory speed.
 *
 * Two things make a plain memcpy of a model slower than the machine allows:
 *  - one core moves about 12 GB/s on the machines we measure; a second core
 *    adds a third or more, so large copies are split across threads;
 *  - a model is many tensors of a few MiB, each below glibc's switch to
 *    streaming stores (tens of MiB), so every destination line is first read
 *    for ownership. Pieces of 256 KiB or more are copied here with streaming
 *    (non-temporal) stores, four pages at a time to keep several DRAM pages
 *    open; the slab is read by other cores next, never by this one.
 * Streaming stores are weakly ordered: each thread fences before it
 * finishes, and the join orders its stores before the caller's commit.
 *
 * Threads are started per call: a large copy takes milliseconds, a thread
 * start tens of microseconds, and nothing lingers inside the user's process
 * between publishes. Copies under 4 MiB per thread stay on the caller.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_internal.h"
#include "shm/errmsg.h"
#include "shm/tensor_layout.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define COPY_MAX_THREADS     16
#define COPY_PER_THREAD_MIN  (4u << 20)
#define COPY_SPLIT_ALIGN     4096u
#define COPY_NT_MIN          (256u << 10)
#define COPY_STACK_SEGS      256

struct copy_seg {
	char *dst;
	const char *src;
	size_t len;
};

/* Bytes [lo, hi) of the concatenated segments, copied by one thread. */
struct copy_job {
	const struct copy_seg *segs;
	size_t n_segs, lo, hi;
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

static void copy_piece(char *d, const char *s, size_t n)
{
	if (n >= COPY_NT_MIN)
		copy_stream(d, s, n);
	else
		memcpy(d, s, n);
}

static void *copy_job_run(void *arg)
{
	const struct copy_job *job = arg;
	size_t pos = 0;

	for (size_t i = 0; i < job->n_segs && pos < job->hi; i++) {
		const struct copy_seg *g = &job->segs[i];
		size_t a = job->lo > pos ? job->lo : pos;
		size_t e = job->hi < pos + g->len ? job->hi : pos + g->len;

		if (a < e)
			copy_piece(g->dst + (a - pos), g->src + (a - pos), e - a);
		pos += g->len;
	}
	copy_fence();
	return NULL;
}

static unsigned copy_threads(unsigned asked, size_t len)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned n = asked ? asked : (unsigned)(cpus > 0 ? cpus : 1);

	if (n > COPY_MAX_THREADS)
		n = COPY_MAX_THREADS;
	if (n > len / COPY_PER_THREAD_MIN)
		n = (unsigned)(len / COPY_PER_THREAD_MIN);
	return n ? n : 1;
}

/* Copies the segments (total bytes in all) with up to `threads` threads;
 * a thread that cannot be started leaves its share to the caller. */
static void copy_segments(const struct copy_seg *segs, size_t n_segs, size_t total,
                          unsigned threads)
{
	struct copy_job jobs[COPY_MAX_THREADS];
	pthread_t tids[COPY_MAX_THREADS];
	bool started[COPY_MAX_THREADS] = { false };
	unsigned n = copy_threads(threads, total);
	size_t chunk = (total / n + COPY_SPLIT_ALIGN - 1) & ~(size_t)(COPY_SPLIT_ALIGN - 1);

	for (unsigned i = 0; i < n; i++) {
		size_t lo = (size_t)i * chunk;

		jobs[i].segs = segs;
		jobs[i].n_segs = n_segs;
		jobs[i].lo = lo < total ? lo : total;
		jobs[i].hi = lo + chunk < total && i + 1 < n ? lo + chunk : total;
	}
	for (unsigned i = 1; i < n; i++)
		started[i] = jobs[i].lo < jobs[i].hi &&
		             pthread_create(&tids[i], NULL, copy_job_run, &jobs[i]) == 0;
	copy_job_run(&jobs[0]);
	for (unsigned i = 1; i < n; i++) {
		if (started[i])
			pthread_join(tids[i], NULL);
		else if (jobs[i].lo < jobs[i].hi)
			copy_job_run(&jobs[i]);
	}
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
