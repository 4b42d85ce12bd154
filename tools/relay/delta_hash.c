/*
 * tools/relay/delta_hash.c — the whole-version checksum of a full version, on all
 * threads, optionally copying it on the way (the source's next base).
 *
 * Task t hashes chunk t into hashes[t] (and copies it to dst); the
 * checksum is delta_whole_checksum of the hashes, the same function the
 * encoder and decoder use, so full and delta versions compare alike.
 */
#include <errno.h>

#include <xxhash.h>

#include "tools/relay/delta_internal.h"

static int hash_task(struct wsync_delta *d, size_t t, struct delta_worker *w)
{
	size_t off = t * d->chunk, len = delta_chunk_len(d, t);

	(void)w;
	if (d->h_dst)
		memcpy(d->h_dst + off, d->h_src + off, len);
	d->hashes[t] = XXH3_64bits(d->h_src + off, len);
	return 0;
}

int wsync_delta_hash_start(wsync_delta *d, const void *buf, size_t n, size_t chunk, void *dst)
{
	int rc;

	if (!d || (!buf && n))
		return delta_err(-EINVAL, "hash: no codec or no buffer");
	pthread_mutex_lock(&d->mu);
	if (d->op != OP_NONE) {
		rc = delta_err(-EBUSY, "another codec operation is under way");
		goto out;
	}
	rc = delta_geometry(d, n, chunk);
	if (rc)
		goto out;
	d->h_src = buf;
	d->h_dst = dst;
	rc = delta_job_start(d, OP_HASH, hash_task, d->n_chunks, d->n_chunks);
out:
	pthread_mutex_unlock(&d->mu);
	return rc;
}

int wsync_delta_hash_wait(wsync_delta *d, int64_t timeout_ns, uint64_t *checksum)
{
	int rc;

	pthread_mutex_lock(&d->mu);
	if (d->op != OP_HASH) {
		rc = delta_err(-EINVAL, "hash_wait: no hash under way");
		goto out;
	}
	rc = delta_wait_done(d, d->n_chunks, timeout_ns);
	if (rc)
		goto out;
	if (checksum)
		*checksum = delta_whole_checksum(d->hashes, d->n_chunks, d->n);
	delta_job_end(d);
out:
	pthread_mutex_unlock(&d->mu);
	return rc;
}

int wsync_delta_checksum(wsync_delta *d, const void *buf, size_t n, size_t chunk,
                         uint64_t *checksum)
{
	int rc = wsync_delta_hash_start(d, buf, n, chunk, NULL);

	return rc ? rc : wsync_delta_hash_wait(d, WSYNC_DELTA_FOREVER, checksum);
}
