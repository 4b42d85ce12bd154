/*
 * libclient/checksum.c — per-version slab checksums (see checksum.h).
 *
 * The publisher forms the checksum in pub_publish() (pub_commit.c). Most
 * blocks were hashed by wsync_slab_copy_tensors as it wrote them
 * (copy_engine.c); when none are left the commit combines them and stores
 * the checksum with the version's metadata before `latest` moves (the
 * seq_cst store of `latest` releases it). Else the version becomes visible
 * at once with the slot's sum_pending word set to the publisher's session
 * id, and after the wake the commit itself (a few KiB left, sum_job_run)
 * or the publisher's hashing thread (struct sum_hasher) finishes: it
 * stores the checksum, then clears sum_pending with a release store and
 * wakes the word's futex waiters.
 *
 * Why a collector reading sum_pending == 0 with an acquire load reads the
 * final checksum: either it read the value the commit stored (0 and a
 * complete checksum, before `latest`, which the collector's acquire of
 * `latest` ordered), or the hasher's release store, which orders the
 * checksum before it. The metadata of a pinned slot does not change, and
 * the publisher never writes a slot again while its hash runs (it waits in
 * begin, at the next commit and at close), so the word cannot belong to a
 * later version. A publisher that dies hashing leaves its id in the word;
 * the collector finds no live session with that id in the control
 * segment's table and says so (-ENODATA) instead of waiting on.
 *
 * Why blocks: XXH3 of a whole slab is one sequential pass, which a copy
 * split across threads cannot feed in order; a hash per block can be
 * formed by whichever thread copies the block, and combining them is a few
 * KiB more of hashing. A block is a whole MiB so that the combining stays
 * small and every block of a copy is long enough for the fused loop.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "checksum.h"
#include "client.h"
#include "shm/clock.h"
#include "shm/errmsg.h"
#include "shm/futex.h"
#include "sub_attach.h"
#include "xxh3_copy.h"

static uint64_t nonzero(uint64_t h)
{
	return h ? h : 1;
}

uint64_t wsync_sum_combine(const uint64_t *hash, size_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return nonzero(n == 1 ? hash[0] : XXH3_64bits(hash, n * sizeof(*hash)));
#else
	XXH3_state_t st;

	if (n == 1)
		return nonzero(hash[0]);
	XXH3_64bits_reset(&st);
	for (size_t k = 0; k < n; k++) {
		uint64_t le = __builtin_bswap64(hash[k]);

		XXH3_64bits_update(&st, &le, sizeof(le));
	}
	return nonzero(XXH3_64bits_digest(&st));
#endif
}

uint64_t wsync_checksum(const void *data, size_t len)
{
	return wsync_checksum_threads(data, len, 1);
}

uint64_t wsync_checksum_threads(const void *data, size_t len, unsigned threads)
{
	size_t n = copy_blocks(len);
	uint64_t *hash, sum;

	if (n <= 1)
		return nonzero(xxh3_hash(data, len));
	hash = malloc(n * sizeof(*hash));
	if (!hash)
		return 1;
	copy_hash_blocks(data, len, hash, NULL, threads);
	sum = wsync_sum_combine(hash, n);
	free(hash);
	return sum;
}

struct sum_blocks *sum_blocks_new(uint64_t bytes)
{
	struct sum_blocks *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->n = copy_blocks(bytes);
	s->hash = calloc(s->n ? s->n : 1, sizeof(*s->hash));
	s->ok = calloc(s->n ? s->n : 1, sizeof(*s->ok));
	if (!s->hash || !s->ok) {
		sum_blocks_free(s);
		return NULL;
	}
	return s;
}

void sum_blocks_free(struct sum_blocks *s)
{
	if (!s)
		return;
	free(s->hash);
	free((void *)s->ok);
	free(s);
}

void sum_blocks_claim(struct sum_blocks *s, uint64_t tag)
{
	/* Two threads copying into a fresh slab at once may both clear; a
	 * block cleared after another thread hashed it is only hashed again
	 * at commit. */
	if (atomic_exchange(&s->tag, tag) == tag)
		return;
	for (size_t k = 0; k < s->n; k++)
		atomic_store_explicit(&s->ok[k], 0, memory_order_relaxed);
}

void sum_blocks_forget(struct sum_blocks *s, uint64_t tag, uint64_t off, uint64_t len)
{
	if (!s || !len || atomic_load(&s->tag) != tag)
		return;
	for (size_t k = off / WSYNC_SUM_BLOCK; k < s->n && k <= (off + len - 1) / WSYNC_SUM_BLOCK; k++)
		atomic_store_explicit(&s->ok[k], 0, memory_order_relaxed);
}

uint64_t sum_blocks_finish(struct sum_blocks *s, uint64_t tag, const void *base,
                           uint64_t bytes, unsigned threads)
{
	sum_blocks_claim(s, tag);
	copy_hash_blocks(base, bytes, s->hash, s->ok, threads);
	return wsync_sum_combine(s->hash, s->n);
}

uint64_t sum_blocks_unhashed(const struct sum_blocks *s, uint64_t tag, uint64_t bytes)
{
	uint64_t left = 0;

	if (atomic_load(&s->tag) != tag)
		return bytes;
	for (size_t k = 0; k < s->n; k++) {
		uint64_t a = (uint64_t)k * WSYNC_SUM_BLOCK;

		if (!atomic_load_explicit(&s->ok[k], memory_order_relaxed))
			left += bytes - a < WSYNC_SUM_BLOCK ? bytes - a : WSYNC_SUM_BLOCK;
	}
	return left;
}

void sum_settle(_Atomic uint64_t *checksum, _Atomic uint32_t *pending, uint64_t sum)
{
	atomic_store_explicit(checksum, sum, memory_order_relaxed);
	atomic_store_explicit(pending, 0, memory_order_release);
	wsync_futex_wake(pending, INT32_MAX);
}

void sum_job_run(const struct sum_job *job)
{
	sum_settle(job->checksum, job->pending,
	           sum_blocks_finish(job->s, job->tag, job->base, job->bytes, 0));
}

/*
 * The hasher and whoever waits for it share the job's blocks: each takes
 * the next block from `next` and hashes it unless a copy did, then counts
 * it in `done`; the one that counts the last block (acq_rel: it has seen
 * every other's hash[k]) combines and stores. So a publisher that must
 * wait (its next commit came before the hash ended, on a machine whose
 * CPUs are all busy) hashes too, instead of sleeping while a thread of
 * lower priority does it alone: at worst the pass costs what it cost at
 * commit.
 *
 * The job (and next, done) change only at submit, which needs busy false,
 * and busy turns false only once the checksum is stored and no worker is
 * inside hasher_work: a worker joins under the lock, only the job of the
 * generation it saw, so none ever takes a block of the next job with the
 * state of the last.
 */
struct sum_hasher {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;             /* a job submitted, one done, or stop */
	struct sum_job job;              /* constant while busy */
	size_t n;                        /* the job's blocks */
	atomic_size_t next, done;
	uint64_t gen;                    /* jobs submitted */
	unsigned workers;                /* threads inside hasher_work */
	bool stored;                     /* the job's checksum is stored */
	bool busy;                       /* submitted, and stored or worked on */
	bool stop;
	struct sum_hasher *next_hasher;  /* in `hashers`, under hashers_lock */
};

/* Every hasher of the process: a trainer that exits (exit(), the end of
 * main, a Python interpreter that ends) without closing its publisher
 * would otherwise leave its last checksum pending for ever, and collectors
 * would be told it died; hashers_drain, run at exit, stores them first. A
 * process killed or ending in _exit() still leaves them pending. A child
 * of fork() has none of its parent's threads: its list starts empty, or
 * its exit would wait for hashes that no thread of its runs. */
static pthread_mutex_t hashers_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t hashers_once = PTHREAD_ONCE_INIT;
static struct sum_hasher *hashers;

static void hashers_drain(void)
{
	pthread_mutex_lock(&hashers_lock);
	for (struct sum_hasher *h = hashers; h; h = h->next_hasher)
		sum_hasher_wait(h, WSYNC_SLOT_NONE);
	pthread_mutex_unlock(&hashers_lock);
}

static void hashers_forget(void)
{
	pthread_mutex_init(&hashers_lock, NULL);
	hashers = NULL;
}

static void hashers_at_exit(void)
{
	atexit(hashers_drain);
	pthread_atfork(NULL, NULL, hashers_forget);
}

/* How much nicer the hashing thread is than the publisher's. */
#define SUM_HASHER_NICE 5

/* Hashes blocks of job gen until none is left; the last one stores. */
static void hasher_work(struct sum_hasher *h, uint64_t gen)
{
	const struct sum_job *job = &h->job;
	bool last = false;

	pthread_mutex_lock(&h->lock);
	if (!h->busy || h->gen != gen) {
		pthread_mutex_unlock(&h->lock);
		return;
	}
	h->workers++;
	pthread_mutex_unlock(&h->lock);
	for (;;) {
		size_t k = atomic_fetch_add_explicit(&h->next, 1, memory_order_relaxed);
		uint64_t a = (uint64_t)k * WSYNC_SUM_BLOCK, e = a + WSYNC_SUM_BLOCK;

		if (k >= h->n)
			break;
		if (!atomic_load_explicit(&job->s->ok[k], memory_order_relaxed)) {
			if (e > job->bytes)
				e = job->bytes;
			job->s->hash[k] = xxh3_hash((const char *)job->base + a, e - a);
			atomic_store_explicit(&job->s->ok[k], 1, memory_order_relaxed);
		}
		if (atomic_fetch_add_explicit(&h->done, 1, memory_order_acq_rel) + 1 == h->n) {
			last = true;
			break;
		}
	}
	if (last)
		sum_settle(job->checksum, job->pending, wsync_sum_combine(job->s->hash, job->s->n));
	pthread_mutex_lock(&h->lock);
	h->workers--;
	h->stored |= last;
	if (h->stored && !h->workers) {
		h->busy = false;
		pthread_cond_broadcast(&h->cond);
	}
	pthread_mutex_unlock(&h->lock);
}

static void *hasher_main(void *arg)
{
	struct sum_hasher *h = arg;
	id_t tid = (id_t)syscall(SYS_gettid);
	uint64_t seen = 0;
	int nice_now;

	/* so that the trainer's next step and the broker win the CPU on a
	 * full machine; best effort (a thread may always lower its own) */
	errno = 0;
	nice_now = getpriority(PRIO_PROCESS, tid);
	if (!errno && setpriority(PRIO_PROCESS, tid, nice_now + SUM_HASHER_NICE > 19 ? 19 :
	                          nice_now + SUM_HASHER_NICE) < 0) {
	}
	pthread_mutex_lock(&h->lock);
	for (;;) {
		while (!h->stop && (!h->busy || h->gen == seen))
			pthread_cond_wait(&h->cond, &h->lock);
		if (!h->busy || h->gen == seen)
			break;                   /* stop, and no job left */
		seen = h->gen;
		pthread_mutex_unlock(&h->lock);
		hasher_work(h, seen);
		pthread_mutex_lock(&h->lock);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

static int hasher_start(struct sum_hasher **out)
{
	struct sum_hasher *h = calloc(1, sizeof(*h));
	int err;

	if (!h)
		return -ENOMEM;
	err = pthread_mutex_init(&h->lock, NULL);
	if (err)
		goto out_free;
	err = pthread_cond_init(&h->cond, NULL);
	if (err)
		goto out_mutex;
	err = pthread_create(&h->thread, NULL, hasher_main, h);
	if (err)
		goto out_cond;
	pthread_once(&hashers_once, hashers_at_exit);
	pthread_mutex_lock(&hashers_lock);
	h->next_hasher = hashers;
	hashers = h;
	pthread_mutex_unlock(&hashers_lock);
	*out = h;
	return 0;

out_cond:
	pthread_cond_destroy(&h->cond);
out_mutex:
	pthread_mutex_destroy(&h->lock);
out_free:
	free(h);
	return -err;
}

int sum_hasher_submit(struct sum_hasher **hp, const struct sum_job *job)
{
	struct sum_hasher *h = *hp;

	if (!copy_blocks(job->bytes)) {          /* nothing to share */
		sum_job_run(job);
		return 0;
	}
	if (!h) {
		int err = hasher_start(&h);

		if (err)
			return err;
		*hp = h;
	}
	sum_blocks_claim(job->s, job->tag);
	pthread_mutex_lock(&h->lock);
	h->job = *job;
	h->n = copy_blocks(job->bytes);
	atomic_store_explicit(&h->next, 0, memory_order_relaxed);
	atomic_store_explicit(&h->done, 0, memory_order_relaxed);
	h->gen++;
	h->stored = false;
	h->busy = true;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
	return 0;
}

void sum_hasher_wait(struct sum_hasher *h, uint32_t slot)
{
	uint64_t gen;
	bool help;

	if (!h)
		return;
	pthread_mutex_lock(&h->lock);
	help = h->busy && (slot == WSYNC_SLOT_NONE || h->job.slot == slot);
	gen = h->gen;
	pthread_mutex_unlock(&h->lock);
	if (!help)
		return;
	hasher_work(h, gen);
	pthread_mutex_lock(&h->lock);
	while (h->busy)
		pthread_cond_wait(&h->cond, &h->lock);
	pthread_mutex_unlock(&h->lock);
}

void sum_hasher_free(struct sum_hasher *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&hashers_lock);
	for (struct sum_hasher **at = &hashers; *at; at = &(*at)->next_hasher) {
		if (*at == h) {
			*at = h->next_hasher;
			break;
		}
	}
	pthread_mutex_unlock(&hashers_lock);
	sum_hasher_wait(h, WSYNC_SLOT_NONE);
	pthread_mutex_lock(&h->lock);
	h->stop = true;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->thread, NULL);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

/* Whether the session that was to store a pending checksum is gone: no
 * entry of the control segment's table has its id (ids are never reused
 * within a generation). Unknown (false) when the view's page is of
 * another generation than the control segment we read. */
static bool sum_publisher_gone(const struct wsync_client *c,
                               const struct wsync_model_page *pg, uint32_t id)
{
	const struct wsync_ctl_session *t;

	if (pg->generation != c->ctl->generation)
		return false;
	t = (const struct wsync_ctl_session *)((const char *)c->ctl + c->ctl->sessions_offset);
	for (uint32_t i = 0; i < c->ctl->max_sessions; i++)
		if (atomic_load_explicit(&t[i].id, memory_order_relaxed) == id)
			return false;
	return true;
}

/* The checksum of slot once no publisher forms it any more (see the top of
 * this file). */
static int sum_wait(const wsync_view *v, const struct wsync_model_page *pg, uint32_t slot,
                    uint64_t *out)
{
	_Atomic uint32_t *pending = (_Atomic uint32_t *)&pg->sum_pending[slot];
	int64_t now = wsync_mono_ns(), deadline = now + WSYNC_SUM_WAIT_NS, orphan = 0;
	uint32_t id;

	while ((id = atomic_load_explicit(pending, memory_order_acquire))) {
		int64_t until;

		now = wsync_mono_ns();
		if (!orphan && sum_publisher_gone(v->priv_sub->c, pg, id))
			orphan = now + WSYNC_SUM_ORPHAN_NS;
		if (orphan && now >= orphan)
			return wsync_fail(-ENODATA, "model '%s' version %llu: its checksum never "
			                  "completed: its publisher (session %u) died while "
			                  "hashing it", v->priv_sub->model,
			                  (unsigned long long)v->version, id);
		if (now >= deadline)
			return wsync_fail(-ETIMEDOUT, "model '%s' version %llu: its publisher "
			                  "(session %u) is still forming its checksum after "
			                  "%lld ms", v->priv_sub->model,
			                  (unsigned long long)v->version, id,
			                  (long long)(WSYNC_SUM_WAIT_NS / 1000000));
		/* woken when it is stored; a publisher that dies wakes nobody,
		 * so the table is looked at again every 50 ms */
		until = now + 50 * 1000000ll;
		if (orphan && until > orphan)
			until = orphan;
		if (until > deadline)
			until = deadline;
		wsync_futex_wait(pending, id, until);
	}
	*out = atomic_load_explicit(&pg->slots[slot].checksum, memory_order_relaxed);
	return 0;
}

int wsync_view_checksum(const wsync_view *v, uint64_t *out)
{
	const struct wsync_sub *s;
	const struct sub_maps *m;

	if (!v || !v->priv_sub || v->priv_slot >= WSYNC_MAX_SLOTS || !out)
		return wsync_fail(-EINVAL, "checksum: not a live view");
	s = v->priv_sub;
	if (v->priv_hazard >= WSYNC_MAX_VIEWS ||
	    !(m = atomic_load_explicit(&s->c->hz[v->priv_hazard].maps, memory_order_relaxed)))
		return wsync_fail(-EINVAL, "checksum: not a live view");
	/* the page of the view's memory: after a move, the subscription's page
	 * names the slot's checksum of another version */
	return sum_wait(v, m->page, v->priv_slot, out);
}

int wsync_view_verify(const wsync_view *v)
{
	uint64_t want = 0, got;
	int err = wsync_view_checksum(v, &want);

	if (err)
		return err;
	if (!want)
		return wsync_fail(-ENODATA, "model '%s' version %llu: published without a "
		                  "checksum (WSYNC_PUB_NO_CHECKSUM, a device model, or a "
		                  "group whose ranks did not ask with WSYNC_PUB_CHECKSUM)",
		                  v->priv_sub->model,
		                  (unsigned long long)v->version);
	got = wsync_checksum_threads(v->base, v->bytes, 0);
	if (got == want)
		return 0;
	/* for monitors: the broker sums these per model (layout.h) */
	{
		struct wsync_client *c = v->priv_sub->c;
		uint32_t id = v->priv_sub->model_id;

		if (id < WSYNC_MAX_MODELS)
			atomic_fetch_add_explicit(&c->session->verify_failed[id], 1,
			                          memory_order_relaxed);
	}
	return wsync_fail(-EBADMSG, "model '%s' version %llu: slab checksum %016llx, "
	                  "published %016llx: the slab changed after its publisher "
	                  "hashed it", v->priv_sub->model, (unsigned long long)v->version,
	                  (unsigned long long)got, (unsigned long long)want);
}
