/*
 * tools/relay/delta_internal.h — the state behind a wsync_delta: a pool of
 * worker threads and the one operation (hash, encode or decode) they serve.
 *
 * The invariant: one mutex (d->mu) guards every word of the job below and
 * of the operation's bookkeeping (which task is next, which are done, the
 * first error). A worker takes task t under the mutex, runs it unlocked,
 * writing only the memory that belongs to task t (its chunk of the output,
 * its ring slot, hashes[t]), and marks t done under the mutex; the caller
 * reads a task's results only after it saw the task done under the mutex.
 * So the mutex alone orders every write before every read of it: no
 * atomics. A task never waits for another; the caller waits on d->done,
 * workers on d->work; each wait re-checks its condition (spurious wakes).
 */
#ifndef WSYNC_DELTA_INTERNAL_H
#define WSYNC_DELTA_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <zstd.h>

#include "tools/relay/wsync_delta.h"

enum delta_op { OP_NONE = 0, OP_HASH, OP_ENC, OP_DEC };

struct delta_worker {
	struct wsync_delta *d;
	pthread_t tid;
	ZSTD_CCtx *cctx;
	ZSTD_DCtx *dctx;
	uint8_t *scratch;           /* a chunk's XOR, or its sparse form */
	size_t scratch_len;
};

typedef int (*delta_task_fn)(struct wsync_delta *d, size_t task, struct delta_worker *w);

/* The tasks of the current operation: [0, next) handed out, [0, limit)
 * may be handed out, n_tasks exist; done[t] once task t finished. */
struct delta_job {
	delta_task_fn run;
	size_t n_tasks, limit, next;
	size_t done_prefix;         /* tasks [0, done_prefix) are all done */
	uint8_t *done;
	size_t done_cap;
	unsigned running;           /* workers inside run() */
	int err;                    /* first error of a task, sticky */
	char errmsg[256];
	uint64_t busy_ns;
};

struct delta_dec_task {
	const uint8_t *data;
	uint64_t hash;
	uint32_t index, len;
	uint8_t kind;
};

struct wsync_delta {
	pthread_mutex_t mu;
	pthread_cond_t work;        /* workers: a task may be there, or stop */
	pthread_cond_t done;        /* the caller: a task finished */
	int stopping;
	unsigned n_threads, n_started;
	struct delta_worker *w;
	enum delta_op op;
	struct delta_job job;

	/* Shared by the operations: the geometry and a hash per chunk. */
	size_t n, chunk, n_chunks;
	uint64_t *hashes;
	size_t hashes_cap;

	/* OP_HASH */
	const uint8_t *h_src;
	uint8_t *h_dst;

	/* OP_ENC: records of chunk t are built in ring slot t % window. */
	const uint8_t *e_cur;
	uint8_t *e_base;
	int e_level;
	size_t e_window, e_slot_cap, e_next_read;
	uint8_t *e_ring;
	size_t e_ring_cap;
	uint32_t *e_slot_len;
	size_t e_slot_len_cap;
	uint8_t *e_kind;
	size_t e_kind_cap;
	wsync_delta_stats e_stats;

	/* OP_DEC: tasks in the order fed; seen[i] once chunk i was fed. */
	const uint8_t *d_base;
	uint8_t *d_out;
	struct delta_dec_task *d_tasks;
	size_t d_tasks_cap;
	uint8_t *d_seen;
	size_t d_seen_cap;
	size_t d_fed;
	uint64_t d_frames;
};

/* delta_errors.c */
int delta_err(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void delta_task_err(struct wsync_delta *d, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* delta_pool.c */
int delta_job_start(struct wsync_delta *d, enum delta_op op, delta_task_fn run,
                    size_t n_tasks, size_t limit);
int delta_wait_done(struct wsync_delta *d, size_t upto, int64_t timeout_ns);
void delta_job_cancel(struct wsync_delta *d);
void delta_job_end(struct wsync_delta *d);
int delta_geometry(struct wsync_delta *d, size_t n, size_t chunk);
int delta_grow(void **p, size_t *cap, size_t want, size_t elem);
uint64_t delta_whole_checksum(const uint64_t *hashes, size_t n_chunks, size_t n);

static inline size_t delta_chunk_len(const struct wsync_delta *d, size_t i)
{
	size_t off = i * d->chunk;

	return d->n - off < d->chunk ? d->n - off : d->chunk;
}

/* The sparse form of a chunk of len bytes: bitmap bytes, then up to one
 * 16-bit XOR per word, then an odd last byte. */
static inline size_t delta_sparse_bitmap(size_t len)
{
	return (len / 2 + 7) / 8;
}

static inline size_t delta_sparse_max(size_t len)
{
	return delta_sparse_bitmap(len) + len + 2;
}

int delta_scratch(struct wsync_delta *d, struct delta_worker *w, size_t len, size_t t);

/* Little-endian loads and stores at any alignment. */
static inline void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t get_le32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static inline uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* A record header: magic, kind, index, data length, hash of the chunk's
 * new bytes (WSYNC_DELTA_REC_BYTES). */
#define DELTA_REC_MAGIC 0x31524457u    /* "WDR1" */

static inline void delta_rec_put(uint8_t *p, uint8_t kind, uint32_t index, uint32_t len,
                                 uint64_t hash)
{
	put_le32(p, DELTA_REC_MAGIC);
	p[4] = kind;
	p[5] = p[6] = p[7] = 0;
	put_le32(p + 8, index);
	put_le32(p + 12, len);
	put_le64(p + 16, hash);
}

#endif
