/*
 * libclient/slab_copy.c — filling a slab with several threads.
 *
 * One thread copying into shared memory is limited by what one core can
 * move (about 12 GB/s on the machines we measure); a second core adds a
 * third or more. Threads are started per call: a large copy takes
 * milliseconds, a thread start tens of microseconds, and nothing lingers
 * inside the user's process between publishes. Small copies stay on the
 * calling thread. glibc's memcpy already switches to non-temporal stores
 * for copies larger than the cache, so each chunk just calls it.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "client_internal.h"
#include "shm/errmsg.h"

#define COPY_MAX_THREADS     16
#define COPY_PER_THREAD_MIN  (4u << 20)   /* below this a thread is not worth it */
#define COPY_CHUNK_ALIGN     4096u

struct copy_part {
	char *dst;
	const char *src;
	size_t len;
};

static void *copy_part_run(void *arg)
{
	struct copy_part *part = arg;

	memcpy(part->dst, part->src, part->len);
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

int wsync_copy(void *dst, const void *src, size_t len, unsigned threads)
{
	struct copy_part parts[COPY_MAX_THREADS] = { 0 };
	pthread_t tids[COPY_MAX_THREADS];
	unsigned n, started = 0;
	size_t chunk, at = 0;

	if (!len)
		return 0;
	if (!dst || !src)
		return wsync_fail(-EINVAL, "wsync_copy: NULL buffer");
	n = copy_threads(threads, len);
	chunk = (len / n + COPY_CHUNK_ALIGN - 1) & ~(size_t)(COPY_CHUNK_ALIGN - 1);
	for (unsigned i = 0; i < n && at < len; i++) {
		parts[i].dst = (char *)dst + at;
		parts[i].src = (const char *)src + at;
		parts[i].len = len - at < chunk ? len - at : chunk;
		at += parts[i].len;
	}
	/* parts[0] is the calling thread's; the others get threads of their
	 * own, and if a start fails the caller copies that part itself. */
	for (unsigned i = 1; i < n && parts[i].len; i++) {
		if (pthread_create(&tids[i], NULL, copy_part_run, &parts[i]) != 0)
			break;
		started = i;
	}
	copy_part_run(&parts[0]);
	for (unsigned i = started + 1; i < n && parts[i].len; i++)
		copy_part_run(&parts[i]);
	for (unsigned i = 1; i <= started; i++)
		pthread_join(tids[i], NULL);
	return 0;
}

int wsync_slab_copy(const wsync_slab *s, uint64_t offset, const void *src,
                    size_t len, unsigned threads)
{
	struct wsync_pub *p;

	if (!s || !s->base || !s->priv_pub || (!src && len))
		return wsync_fail(-EINVAL, "wsync_slab_copy: slab and src must not be NULL");
	p = s->priv_pub;
	if (!p->begun || p->cur.version != s->priv_version || p->cur.slot != s->priv_slot)
		return wsync_fail(-EINVAL, "model '%s': wsync_slab_copy into a slab that is "
		                  "not begun (committed or aborted already?)", p->model);
	if (offset > s->bytes || len > s->bytes - offset)
		return wsync_fail(-EINVAL, "model '%s': copy of %zu bytes at offset %llu runs "
		                  "past the slab's %zu bytes", p->model, len,
		                  (unsigned long long)offset, s->bytes);
	return wsync_copy((char *)s->base + offset, src, len, threads);
}
