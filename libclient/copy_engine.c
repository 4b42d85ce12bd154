/*
 * libclient/copy_engine.c — copying at the machine's memory bandwidth, and
 * hashing what is copied while it passes through the registers.
 *
 * What a plain memcpy of a model leaves on the table:
 *  - cores: one core rarely saturates memory; how many threads pay differs
 *    by machine (on the 2-vCPU VMs we measure, a second thread gained 6 %
 *    on an AMD EPYC one day and halved the time on it another, and halved
 *    it on an Intel Xeon), so it is measured, not assumed, on the copies
 *    themselves: every copy of TUNE_MIN bytes or more that was left to the
 *    library (threads 0) times itself, thread starts included, and keeps
 *    the best rate seen for its thread count. The first such copies of
 *    the process go TUNE_EXPLORE_ROUNDS times round the candidates (the
 *    online CPUs, 16 at most, then halving down to 1); afterwards copies use the fewest
 *    threads whose best rate is within 3 % of the best, except one in
 *    TUNE_REVISIT, which tries another count again if its best came within
 *    70 % of the chosen one's: a count that was unlucky (a machine busy for
 *    a moment, slabs written for the first time) gets another chance, and
 *    a clear loser costs nothing more. Until a count was measured, a copy
 *    uses one thread per CPU.
 *    Trials of a few MiB inside one copy were tried first and misled: on
 *    these VMs they ran from caches at twice the steady rate for any count.
 *  - the store method: a model is many tensors of a few MiB, each below
 *    glibc's switch to streaming stores, so on many CPUs every destination
 *    line is first read for ownership; streaming stores avoid that, but on
 *    CPUs whose `rep movsb` (ERMS/FSRM) already avoids it memcpy is as fast
 *    or faster. The first copy of 32 MiB or more measures both on its
 *    own first blocks, on the threads it runs with and at once, since a
 *    method's worth depends on the traffic of the others (one core may
 *    copy faster with memcpy while two are faster with streaming stores,
 *    which spare memory the reads for ownership): blocks alternate between the two, their pages touched first so
 *    faults are not timed, PROBE_ROUNDS per thread each; streaming is kept
 *    only if its best block beats the other's by 5 %. Hashed copies
 *    measure their two ways (ordinary or streaming stores from
 *    xxh3_copy.c's fused loop) the same way, separately.
 * Every measurement copies real blocks of the copy in progress, once:
 * nothing is copied twice. Concurrent first copies may both measure;
 * either result stands.
 *
 * The work is cut into the destination's 1 MiB blocks, which threads take
 * in turn from a shared counter: a thread that starts late or is preempted
 * by another process leaves more blocks to the others. A block is also the
 * checksum's unit (checksum.h): a thread hashes a whole block in order,
 * stripe by stripe as it copies it, so the hash does not depend on how many
 * threads ran. Streaming stores are weakly ordered: each thread fences
 * before it finishes, and the join orders its stores (and the hashes it
 * wrote) before whatever the caller does next.
 *
 * Threads are started per call: a large copy takes milliseconds, a thread
 * start tens of microseconds, and nothing lingers inside the user's process
 * between publishes. Copies under 4 MiB per thread stay on the caller.
 *
 * Pacing. A burst is what a trainer wants when it has the cores to itself;
 * beside collectors on the same cores it takes every core from them at
 * once, and the one whose pass it lands on waits the whole copy. A paced
 * copy (plan->spread_ns > 0) trickles instead: on one thread unless asked
 * for more, block k of the n it covers ends no earlier than
 * start + (k + 1) / n * spread, the thread sleeping (clock_nanosleep on an
 * absolute deadline, so sleeps do not add up their overshoots) between
 * blocks, so the copy takes one block's time of a core at a time, and the
 * scheduler, which favours a thread that slept, slips it in between the
 * collectors' slices. A thread behind its deadlines copies without sleeping,
 * so a paced copy takes the longer of the spread and its time unpaced on
 * the same threads. Paced copies are neither
 * timed nor used to probe the store method (they would measure the sleeps
 * and burst), and use what earlier copies measured. Blocks, their hashes
 * and the fences are the same as unpaced.
 */
#include "copy_engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "xxh3_copy.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define COPY_MAX_THREADS     16
#define COPY_PER_THREAD_MIN  (4u << 20)
#define COPY_NT_MIN          (256u << 10)
#define PROBE_MIN            (32u << 20)
#define PROBE_ROUNDS         8
#define TUNE_MIN             (32u << 20)  /* copies that are timed */
#define TUNE_MAX_CANDS       6
#define TUNE_EXPLORE_ROUNDS  3          /* rounds over the candidates first */
#define TUNE_REVISIT         16         /* then one copy in this many */
#define TUNE_KEEP            0.97       /* fewest threads within this of the best */
#define PAGE                 4096u

/* COPY_TOUCH writes one byte per page (its final value): page faults
 * taken before a measured block is timed. */
enum copy_method { COPY_UNDECIDED, COPY_MEMCPY, COPY_STREAM, COPY_TOUCH };

static _Atomic int plain_method;        /* enum copy_method, this process */
static _Atomic int hashed_method;       /* COPY_MEMCPY: ordinary stores */
static _Atomic unsigned tuned_threads;  /* 0 until measured */
static atomic_uint tune_copies;         /* timed copies started */
static _Atomic uint64_t tune_rate[TUNE_MAX_CANDS];  /* best bytes per us, per candidate */
static atomic_long cpus_cached;         /* 0 until read */

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static long cpus_online(void)
{
	long cpus = atomic_load_explicit(&cpus_cached, memory_order_relaxed);

	if (!cpus) {
		cpus = sysconf(_SC_NPROCESSORS_ONLN);
		if (cpus < 1)
			cpus = 1;
		atomic_store_explicit(&cpus_cached, cpus, memory_order_relaxed);
	}
	return cpus;
}

/* ---- plain pieces ------------------------------------------------------------ */

#if defined(__x86_64__)
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

/* Streaming stores four pages at a time, to keep several DRAM pages open. */
static void copy_stream(char *d, const char *s, size_t n)
{
	size_t head = (64 - ((uintptr_t)d & 63)) & 63;

	if (head > n)
		head = n;
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 4 * PAGE; n -= 4 * PAGE, d += 4 * PAGE, s += 4 * PAGE)
		for (size_t o = 0; o < PAGE; o += 64)
			for (size_t k = 0; k < 4; k++)
				nt_line(d + k * PAGE + o, s + k * PAGE + o);
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
		for (size_t o = 0; o < n; o += PAGE)
			d[o] = s[o];
	else if (n >= COPY_NT_MIN && method == COPY_STREAM)
		copy_stream(d, s, n);
	else
		memcpy(d, s, n);
}

/* ---- blocks ---------------------------------------------------------------- */

/* The first piece that ends after pos. */
static size_t seg_at(const struct copy_plan *pl, uint64_t pos)
{
	size_t lo = 0, hi = pl->n_segs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (pl->segs[mid].off + pl->segs[mid].len <= pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static uint64_t block_end(const struct copy_plan *pl, size_t k)
{
	uint64_t e = (uint64_t)(k + 1) * COPY_BLOCK;

	return e < pl->bytes ? e : pl->bytes;
}

static bool block_touched(const struct copy_plan *pl, size_t k)
{
	size_t i = seg_at(pl, (uint64_t)k * COPY_BLOCK);

	return i < pl->n_segs && pl->segs[i].off < block_end(pl, k);
}

static void block_plain(const struct copy_plan *pl, size_t k, int method)
{
	uint64_t a = (uint64_t)k * COPY_BLOCK, e = block_end(pl, k);

	for (size_t i = seg_at(pl, a); i < pl->n_segs && pl->segs[i].off < e; i++) {
		const struct copy_seg *g = &pl->segs[i];
		uint64_t lo = g->off > a ? g->off : a;
		uint64_t hi = g->off + g->len < e ? g->off + g->len : e;

		copy_piece(pl->base + lo, (const char *)g->src + (lo - g->off), hi - lo, method);
	}
}

/* Bytes [q, q + n) of the destination as they will be: copied from the
 * pieces (and stored), or read from base between them. *i is a piece
 * index at or before the first that ends after q. */
static void gather(const struct copy_plan *pl, size_t *i, uint64_t q, size_t n, uint8_t *out)
{
	uint64_t at = q, end = q + n;

	while (at < end) {
		const struct copy_seg *g;
		uint64_t hi;

		while (*i < pl->n_segs && pl->segs[*i].off + pl->segs[*i].len <= at)
			(*i)++;
		g = *i < pl->n_segs ? &pl->segs[*i] : NULL;
		if (g && g->off <= at) {
			hi = g->off + g->len < end ? g->off + g->len : end;
			memcpy(out + (at - q), (const char *)g->src + (at - g->off), hi - at);
			memcpy(pl->base + at, (const char *)g->src + (at - g->off), hi - at);
		} else {
			hi = g && g->off < end ? g->off : end;
			memcpy(out + (at - q), pl->base + at, hi - at);
		}
		at = hi;
	}
}

/* Copies block k and returns its XXH3-64: whole stripes inside a piece go
 * through the fused loop; stripes that straddle a piece's end or padding
 * are gathered first; the last 64 bytes are gathered for the final step. */
static uint64_t block_fused(const struct copy_plan *pl, size_t k, enum xxh3_store store)
{
	uint64_t a = (uint64_t)k * COPY_BLOCK, len = block_end(pl, k) - a;
	uint64_t p = a, reg_end;
	size_t i = seg_at(pl, a), tail_i;
	_Alignas(64) uint8_t tmp[XXH3_STRIPE];
	struct xxh3_run run;

	if (len < XXH3_RUN_MIN) {
		block_plain(pl, k, COPY_MEMCPY);
		return XXH3_64bits(pl->base + a, len);
	}
	if (store == XXH3_STREAM && ((uintptr_t)pl->base & 63))
		store = XXH3_STORE;
	xxh3_run_init(&run, len);
	reg_end = a + xxh3_run_stripes(len) * XXH3_STRIPE;
	while (p < reg_end) {
		const struct copy_seg *g;

		while (i < pl->n_segs && pl->segs[i].off + pl->segs[i].len <= p)
			i++;
		g = i < pl->n_segs ? &pl->segs[i] : NULL;
		if (g && g->off <= p) {
			uint64_t e = g->off + g->len < reg_end ? g->off + g->len : reg_end;
			size_t m = (size_t)((e - p) / XXH3_STRIPE);

			if (m) {
				xxh3_run_copy(&run, pl->base + p, (const char *)g->src + (p - g->off),
				              m, store);
				p += (uint64_t)m * XXH3_STRIPE;
				continue;
			}
		}
		gather(pl, &i, p, XXH3_STRIPE, tmp);
		xxh3_run_copy(&run, tmp, tmp, 1, XXH3_HASH_ONLY);
		p += XXH3_STRIPE;
	}
	tail_i = seg_at(pl, a + len - XXH3_STRIPE);
	gather(pl, &tail_i, a + len - XXH3_STRIPE, XXH3_STRIPE, tmp);
	return xxh3_run_final(&run, tmp);
}

/* ---- threads over blocks --------------------------------------------------- */

struct copy_ctx {
	const struct copy_plan *plan;
	int plain, hashed;              /* methods */
};

static void block_copy(void *arg, size_t k)
{
	const struct copy_ctx *cx = arg;
	const struct copy_plan *pl = cx->plan;

	if (!pl->hash) {
		block_plain(pl, k, cx->plain);
		return;
	}
	if (!block_touched(pl, k))
		return;
	if (pl->hole[k]) {
		block_plain(pl, k, cx->plain);
		atomic_store_explicit(&pl->ok[k], 0, memory_order_relaxed);
		return;
	}
	pl->hash[k] = block_fused(pl, k, cx->hashed == COPY_STREAM ? XXH3_STREAM : XXH3_STORE);
	atomic_store_explicit(&pl->ok[k], 1, memory_order_relaxed);
}

/* Blocks [next, end) handed to threads in turn. */
struct par {
	void (*fn)(void *ctx, size_t k);
	void *ctx;
	size_t end;
	atomic_size_t next;
};

static void *par_worker(void *arg)
{
	struct par *p = arg;

	for (;;) {
		size_t k = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);

		if (k >= p->end)
			break;
		p->fn(p->ctx, k);
	}
	copy_fence();
	return NULL;
}

/* Runs p on n threads, the caller one of them; a thread that cannot be
 * started leaves its blocks to the others. */
static void par_run(struct par *p, unsigned n)
{
	pthread_t tids[COPY_MAX_THREADS];
	bool started[COPY_MAX_THREADS] = { false };

	for (unsigned i = 1; i < n; i++)
		started[i] = pthread_create(&tids[i], NULL, par_worker, p) == 0;
	par_worker(p);
	for (unsigned i = 1; i < n; i++)
		if (started[i])
			pthread_join(tids[i], NULL);
}

/* The thread counts tried: the online CPUs (16 at most), then halving. */
static unsigned tune_cands(unsigned cand[TUNE_MAX_CANDS])
{
	unsigned n = 0, t = (unsigned)cpus_online();

	if (t > COPY_MAX_THREADS)
		t = COPY_MAX_THREADS;
	for (; n < TUNE_MAX_CANDS; t /= 2) {
		cand[n++] = t;
		if (t == 1)
			break;
	}
	return n;
}

/* The fewest threads whose best rate is within TUNE_KEEP of the best; 0
 * if nothing was measured. */
static unsigned tune_pick(void)
{
	unsigned cand[TUNE_MAX_CANDS], n = tune_cands(cand), pick = 0;
	uint64_t best = 0;

	for (unsigned i = 0; i < n; i++) {
		uint64_t r = atomic_load_explicit(&tune_rate[i], memory_order_relaxed);

		best = r > best ? r : best;
	}
	for (unsigned i = 0; i < n; i++)
		if (best && atomic_load_explicit(&tune_rate[i], memory_order_relaxed) >=
		            (uint64_t)(TUNE_KEEP * (double)best))
			pick = cand[i];              /* the last one: the fewest */
	return pick;
}

/* For a timed copy left to the library: which candidate it runs with
 * (index into tune_cands), exploring first, then now and then. */
static unsigned tune_next(void)
{
	unsigned cand[TUNE_MAX_CANDS], n = tune_cands(cand);
	unsigned k = atomic_fetch_add_explicit(&tune_copies, 1, memory_order_relaxed);
	unsigned pick = atomic_load_explicit(&tuned_threads, memory_order_relaxed);

	unsigned at = 0;

	for (unsigned i = 0; i < n; i++)
		if (cand[i] == pick)
			at = i;
	if (k < TUNE_EXPLORE_ROUNDS * n || !pick)
		return k % n;
	if (n > 1 && k % TUNE_REVISIT == 0) {    /* one of the others, in turn */
		unsigned i = (at + 1 + (k / TUNE_REVISIT) % (n - 1)) % n;
		uint64_t ri = atomic_load_explicit(&tune_rate[i], memory_order_relaxed);
		uint64_t ra = atomic_load_explicit(&tune_rate[at], memory_order_relaxed);

		/* only one that came close: a clear loser is not worth a slow copy */
		if (ri >= ra / 10 * 7)
			return i;
	}
	return at;
}

/* Records a timed copy's rate and what is best now. */
static void tune_record(unsigned idx, uint64_t bytes, int64_t ns)
{
	uint64_t rate = ns > 0 ? bytes * 1000 / (uint64_t)ns : 0;
	uint64_t old = atomic_load_explicit(&tune_rate[idx], memory_order_relaxed);

	while (rate > old && !atomic_compare_exchange_weak(&tune_rate[idx], &old, rate))
		;
	atomic_store_explicit(&tuned_threads, tune_pick(), memory_order_relaxed);
}

/* Threads for len bytes: asked (0 = measured, else one per CPU). */
static unsigned threads_for(unsigned asked, uint64_t len)
{
	unsigned n = asked;

	if (!n)
		n = atomic_load_explicit(&tuned_threads, memory_order_relaxed);
	if (!n)
		n = (unsigned)cpus_online();
	if (n > COPY_MAX_THREADS)
		n = COPY_MAX_THREADS;
	if (n > len / COPY_PER_THREAD_MIN)
		n = (unsigned)(len / COPY_PER_THREAD_MIN);
	return n ? n : 1;
}

/* Touches the destination pages of blocks [k, k + n) (faults not timed). */
static void touch_blocks(const struct copy_ctx *cx, size_t k, size_t n, size_t end)
{
	for (size_t j = k; j < k + n && j < end; j++)
		block_plain(cx->plan, j, COPY_TOUCH);
}

/* A block worth timing: full, and copied the way its method says. */
static bool block_timeable(const struct copy_plan *pl, size_t k)
{
	if ((uint64_t)(k + 1) * COPY_BLOCK > pl->bytes || !block_touched(pl, k))
		return false;
	return !pl->hash || !pl->hole[k];
}

#if defined(__x86_64__)
/* Measuring the store method on the first blocks of a copy, on the threads
 * the copy runs with, at once (under the contention the copy will see):
 * block k of the probe uses streaming stores when k is odd, ordinary ones
 * (memcpy, or the fused loop's ordinary stores) when even. */
struct probe {
	const struct copy_ctx *cx;
	size_t first;
	_Atomic int64_t best[2];
};

static void block_probe(void *arg, size_t k)
{
	struct probe *pr = arg;
	struct copy_ctx cx = *pr->cx;
	int stream = (int)((k - pr->first) & 1);
	int64_t t0, dt, old;

	if (!block_timeable(cx.plan, k)) {
		block_copy(&cx, k);
		return;
	}
	touch_blocks(&cx, k, 1, k + 1);
	if (cx.plan->hash)
		cx.hashed = stream ? COPY_STREAM : COPY_MEMCPY;
	else
		cx.plain = stream ? COPY_STREAM : COPY_MEMCPY;
	t0 = now_ns();
	block_copy(&cx, k);
	copy_fence();
	dt = now_ns() - t0;
	old = atomic_load_explicit(&pr->best[stream], memory_order_relaxed);
	while (dt < old && !atomic_compare_exchange_weak(&pr->best[stream], &old, dt))
		;
}

/* Picks the store method of this kind of copy (see the top of the file) on
 * its first blocks, with n threads; advances p->next past them. */
static void probe_method(struct par *p, struct copy_ctx *cx, _Atomic int *chosen, unsigned n)
{
	size_t first = atomic_load(&p->next);
	struct probe pr = { .cx = cx, .first = first };
	struct par pp = { .fn = block_probe, .ctx = &pr };
	int expected = COPY_UNDECIDED, pick = COPY_MEMCPY;
	int64_t b0, b1;

	atomic_init(&pr.best[0], INT64_MAX);
	atomic_init(&pr.best[1], INT64_MAX);
	pp.end = first + 2 * PROBE_ROUNDS * (size_t)n;
	if (pp.end > p->end)
		pp.end = p->end;
	atomic_init(&pp.next, first);
	par_run(&pp, n);
	atomic_store(&p->next, pp.end);
	b0 = atomic_load(&pr.best[0]);
	b1 = atomic_load(&pr.best[1]);
	if (b0 != INT64_MAX && b1 != INT64_MAX && b1 * 100 < b0 * 95)
		pick = COPY_STREAM;
	atomic_compare_exchange_strong(chosen, &expected, pick);
	if (cx->plan->hash)
		cx->hashed = atomic_load(chosen);
	else
		cx->plain = atomic_load(chosen);
}
#endif

/* ---- pacing ---------------------------------------------------------------- */

struct paced {
	struct copy_ctx cx;
	int64_t start_ns, spread_ns;
	size_t k0, n;                   /* blocks [k0, k0 + n) */
};

static void sleep_until(int64_t due_ns)
{
	struct timespec ts = { .tv_sec = due_ns / 1000000000, .tv_nsec = due_ns % 1000000000 };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static void block_paced(void *arg, size_t k)
{
	const struct paced *pc = arg;
	int64_t due;

	block_copy((void *)&pc->cx, k);
	due = pc->start_ns + (int64_t)((double)pc->spread_ns * (double)(k + 1 - pc->k0) /
	                               (double)pc->n);
	if (now_ns() < due)
		sleep_until(due);
}

static void copy_paced(const struct copy_plan *pl, unsigned threads, size_t k0, size_t end,
                       uint64_t total)
{
	struct paced pc = { .cx = { pl, COPY_MEMCPY, COPY_MEMCPY }, .spread_ns = pl->spread_ns,
	                    .k0 = k0, .n = end - k0 };
	struct par p = { .fn = block_paced, .ctx = &pc, .end = end };

#if defined(__x86_64__)
	if (atomic_load_explicit(&plain_method, memory_order_relaxed) == COPY_STREAM)
		pc.cx.plain = COPY_STREAM;
	if (atomic_load_explicit(&hashed_method, memory_order_relaxed) == COPY_STREAM)
		pc.cx.hashed = COPY_STREAM;
#endif
	atomic_init(&p.next, k0);
	pc.start_ns = now_ns();
	par_run(&p, threads_for(threads ? threads : 1, total));
}

void copy_run(const struct copy_plan *pl, unsigned threads)
{
	struct copy_ctx cx = { pl, COPY_MEMCPY, COPY_MEMCPY };
	struct par p = { .fn = block_copy, .ctx = &cx };
	const struct copy_seg *last;
	uint64_t total = 0, left;
	unsigned cand[TUNE_MAX_CANDS] = { 0 }, idx = 0, n;
	bool timed;
	int64_t t0 = 0;
	size_t k0;

	if (!pl->n_segs)
		return;
	for (size_t i = 0; i < pl->n_segs; i++)
		total += pl->segs[i].len;
	last = &pl->segs[pl->n_segs - 1];
	k0 = (size_t)(pl->segs[0].off / COPY_BLOCK);
	p.end = (size_t)((last->off + last->len - 1) / COPY_BLOCK) + 1;
	if (pl->spread_ns > 0) {
		copy_paced(pl, threads, k0, p.end, total);
		return;
	}
	atomic_init(&p.next, k0);
	timed = !threads && total >= TUNE_MIN;
	if (timed) {
		tune_cands(cand);
		idx = tune_next();
		t0 = now_ns();
	}
	n = threads_for(timed ? cand[idx] : threads, total);
	timed = timed && n == cand[idx];
#if defined(__x86_64__)
	cx.plain = atomic_load_explicit(&plain_method, memory_order_relaxed);
	cx.hashed = atomic_load_explicit(&hashed_method, memory_order_relaxed);
	if (cx.plain == COPY_UNDECIDED)
		cx.plain = COPY_MEMCPY;
	if (cx.hashed == COPY_UNDECIDED)
		cx.hashed = COPY_MEMCPY;
	if (total >= PROBE_MIN && pl->hash &&
	    atomic_load_explicit(&hashed_method, memory_order_relaxed) == COPY_UNDECIDED)
		probe_method(&p, &cx, &hashed_method, n);
	if (total >= PROBE_MIN && !pl->hash &&
	    atomic_load_explicit(&plain_method, memory_order_relaxed) == COPY_UNDECIDED)
		probe_method(&p, &cx, &plain_method, n);
#endif
	k0 = atomic_load(&p.next);
	if (k0 < p.end) {
		left = (uint64_t)(p.end - k0) * COPY_BLOCK;
		par_run(&p, threads_for(n, left < total ? left : total));
	}
	if (timed)
		tune_record(idx, total, now_ns() - t0);
}

/* ---- hashing alone ------------------------------------------------------------ */

struct hash_ctx {
	const char *base;
	uint64_t bytes;
	uint64_t *hash;
	const _Atomic uint8_t *ok;
};

static void block_hash(void *arg, size_t k)
{
	const struct hash_ctx *h = arg;
	uint64_t a = (uint64_t)k * COPY_BLOCK, e = a + COPY_BLOCK;

	if (h->ok && atomic_load_explicit(&h->ok[k], memory_order_relaxed))
		return;
	if (e > h->bytes)
		e = h->bytes;
	h->hash[k] = xxh3_hash(h->base + a, e - a);
}

void copy_hash_blocks(const void *base, uint64_t bytes, uint64_t *hash,
                      const _Atomic uint8_t *ok, unsigned threads)
{
	struct hash_ctx h = { base, bytes, hash, ok };
	struct par p = { .fn = block_hash, .ctx = &h, .end = copy_blocks(bytes) };
	uint64_t todo = 0;

	for (size_t k = 0; k < p.end; k++)
		if (!ok || !atomic_load_explicit(&ok[k], memory_order_relaxed))
			todo += COPY_BLOCK;
	if (!todo)
		return;
	if (threads_for(threads, todo) == 1) {
		/* a small model's commit: on the path to the wake, no clocks */
		for (size_t k = 0; k < p.end; k++)
			block_hash(&h, k);
		return;
	}
	atomic_init(&p.next, 0);
	par_run(&p, threads_for(threads, todo));
}

void copy_tuning_get(struct copy_tuning *out)
{
	int plain = atomic_load(&plain_method), hashed = atomic_load(&hashed_method);

	out->threads = atomic_load(&tuned_threads);
	out->plain_decided = plain != COPY_UNDECIDED;
	out->hashed_decided = hashed != COPY_UNDECIDED;
	out->plain_streams = plain == COPY_STREAM;
	out->hashed_streams = hashed == COPY_STREAM;
}
