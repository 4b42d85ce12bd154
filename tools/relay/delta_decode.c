/*
 * tools/relay/delta_decode.c — rebuilds a version from its base and a stream of
 * records, on all threads, while the caller receives the next frame.
 *
 * Nothing in a stream is trusted: feed checks every record header (magic,
 * kind, chunk index in range and not seen before, data length within the
 * frame and right for the kind) before queueing it; a task decodes one
 * record into its own chunk of out (zstd into a buffer exactly as long as
 * the most the kind can need, so no frame can write past it; a sparse form
 * must be exactly as long as its bitmap says), XORs the base in, and
 * compares the chunk's hash with the record's. The end checks that every chunk came and
 * compares the whole-version checksum. Any failure is sticky and the
 * caller must not publish out: out holds a half-built version then.
 */
#include <errno.h>

#include <xxhash.h>

#include "tools/relay/delta_internal.h"

static void xor_in(uint8_t *dst, const uint8_t *b, size_t len)
{
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t x, y;

		memcpy(&x, dst + i, 8);
		memcpy(&y, b + i, 8);
		x ^= y;
		memcpy(dst + i, &x, 8);
	}
	for (; i < len; i++)
		dst[i] ^= b[i];
}

static void task_fail(struct wsync_delta *d, uint32_t index, const char *what)
{
	pthread_mutex_lock(&d->mu);
	delta_task_err(d, -EBADMSG, "chunk %u: %s", index, what);
	pthread_mutex_unlock(&d->mu);
}

/* out = base with the sparse form's XORs applied; NULL or why not. */
static const char *apply_sparse(uint8_t *out, const uint8_t *base, size_t len,
                                const uint8_t *form, size_t n)
{
	size_t words = len / 2, bm = delta_sparse_bitmap(len), k = 0;

	if (n < bm)
		return "a sparse form shorter than its bitmap";
	if (words % 8 && (form[bm - 1] >> (words % 8)))
		return "a sparse bitmap with bits past the chunk";
	for (size_t i = 0; i < bm; i++)
		k += (size_t)__builtin_popcount(form[i]);
	if (n != bm + 2 * k + (len & 1))
		return "a sparse form whose length does not match its bitmap";
	memcpy(out, base, len);
	const uint8_t *vals = form + bm;

	k = 0;
	for (size_t i = 0; i < bm; i++) {
		unsigned m = form[i];

		while (m) {
			size_t j = 8 * i + (size_t)__builtin_ctz(m);
			uint16_t a, x;

			memcpy(&a, out + 2 * j, 2);
			memcpy(&x, vals + 2 * k++, 2);
			a ^= x;
			memcpy(out + 2 * j, &a, 2);
			m &= m - 1;
		}
	}
	if (len & 1)
		out[len - 1] ^= form[n - 1];
	return NULL;
}

static int dec_task(struct wsync_delta *d, size_t t, struct delta_worker *w)
{
	const struct delta_dec_task *k = &d->d_tasks[t];
	size_t off = (size_t)k->index * d->chunk, len = delta_chunk_len(d, k->index);
	uint8_t *out = d->d_out + off;
	const uint8_t *base = d->d_base + off;
	uint64_t h;

	switch (k->kind) {
	case WSYNC_DELTA_SAME:
		memcpy(out, base, len);
		break;
	case WSYNC_DELTA_RAW:
		memcpy(out, k->data, len);
		break;
	case WSYNC_DELTA_XSPARSE: {
		size_t cap = delta_sparse_max(len), z;
		const char *bad;

		if (delta_scratch(d, w, cap, k->index))
			return -ENOMEM;
		z = ZSTD_decompressDCtx(w->dctx, w->scratch, cap, k->data, k->len);
		if (ZSTD_isError(z)) {
			task_fail(d, k->index, ZSTD_getErrorName(z));
			return -EBADMSG;
		}
		bad = apply_sparse(out, base, len, w->scratch, z);
		if (bad) {
			task_fail(d, k->index, bad);
			return -EBADMSG;
		}
		break;
	}
	default: {
		size_t z = ZSTD_decompressDCtx(w->dctx, out, len, k->data, k->len);

		if (ZSTD_isError(z)) {
			task_fail(d, k->index, ZSTD_getErrorName(z));
			return -EBADMSG;
		}
		if (z != len) {
			task_fail(d, k->index, "decompressed to the wrong length");
			return -EBADMSG;
		}
		xor_in(out, base, len);
	}
	}
	h = XXH3_64bits(out, len);
	d->hashes[k->index] = h;
	if (h != k->hash) {
		task_fail(d, k->index, "its bytes do not match their hash");
		return -EBADMSG;
	}
	return 0;
}

int wsync_delta_dec_begin(wsync_delta *d, const void *base, void *out, size_t n, size_t chunk)
{
	int rc;

	if (!d || ((!base || !out) && n))
		return delta_err(-EINVAL, "dec_begin: no codec or no buffer");
	pthread_mutex_lock(&d->mu);
	if (d->op != OP_NONE) {
		rc = delta_err(-EBUSY, "another codec operation is under way");
		goto out;
	}
	rc = delta_geometry(d, n, chunk);
	if (rc)
		goto out;
	if (delta_grow((void **)&d->d_tasks, &d->d_tasks_cap, d->n_chunks + 1, sizeof *d->d_tasks) ||
	    delta_grow((void **)&d->d_seen, &d->d_seen_cap, d->n_chunks + 1, 1)) {
		rc = delta_err(-ENOMEM, "out of memory for %zu chunks", d->n_chunks);
		goto out;
	}
	memset(d->d_seen, 0, d->n_chunks + 1);
	d->d_base = base;
	d->d_out = out;
	d->d_fed = 0;
	d->d_frames = 0;
	rc = delta_job_start(d, OP_DEC, dec_task, 0, 0);
out:
	pthread_mutex_unlock(&d->mu);
	return rc;
}

/* With d->mu held: the record at p (room bytes left in the frame), or why
 * not. */
static const char *rec_check(const struct wsync_delta *d, const uint8_t *p, size_t room,
                             struct delta_dec_task *k)
{
	if (room < WSYNC_DELTA_REC_BYTES)
		return "a record header cut short";
	if (get_le32(p) != DELTA_REC_MAGIC)
		return "not a record (bad magic)";
	k->kind = p[4];
	k->index = get_le32(p + 8);
	k->len = get_le32(p + 12);
	k->hash = get_le64(p + 16);
	k->data = p + WSYNC_DELTA_REC_BYTES;
	if (p[5] || p[6] || p[7])
		return "reserved bytes set";
	if (k->index >= d->n_chunks)
		return "chunk index out of range";
	if (d->d_seen[k->index])
		return "a chunk sent twice";
	if (k->len > room - WSYNC_DELTA_REC_BYTES)
		return "record data cut short";
	size_t clen = delta_chunk_len(d, k->index);

	switch (k->kind) {
	case WSYNC_DELTA_SAME:
		return k->len == 0 ? NULL : "a SAME record with data";
	case WSYNC_DELTA_RAW:
		return k->len == clen ? NULL : "a RAW record of the wrong length";
	case WSYNC_DELTA_XZSTD:
		return k->len > 0 && k->len < clen ? NULL : "an XZSTD record of a bad length";
	case WSYNC_DELTA_XSPARSE:
		return k->len > 0 && k->len < clen ? NULL : "an XSPARSE record of a bad length";
	default:
		return "unknown record kind";
	}
}

int wsync_delta_dec_feed(wsync_delta *d, const void *frame, size_t len, uint64_t *ticket)
{
	const uint8_t *p = frame;
	size_t pos = 0;
	int rc = 0;

	pthread_mutex_lock(&d->mu);
	*ticket = d->d_fed;
	if (d->op != OP_DEC) {
		rc = delta_err(-EINVAL, "dec_feed: no decode under way");
		goto out;
	}
	if (d->job.err) {
		rc = delta_err(d->job.err, "%s", d->job.errmsg);
		goto out;
	}
	d->d_frames++;
	while (pos < len) {
		struct delta_dec_task k;
		const char *bad = rec_check(d, p + pos, len - pos, &k);

		if (bad) {
			delta_task_err(d, -EBADMSG, "frame %llu, byte %zu: %s",
			               (unsigned long long)d->d_frames, pos, bad);
			rc = delta_err(-EBADMSG, "%s", d->job.errmsg);
			break;
		}
		d->d_seen[k.index] = 1;
		d->d_tasks[d->d_fed++] = k;
		pos += WSYNC_DELTA_REC_BYTES + k.len;
	}
	d->job.n_tasks = d->job.limit = d->d_fed;
	pthread_cond_broadcast(&d->work);
	*ticket = d->d_fed;
out:
	pthread_mutex_unlock(&d->mu);
	return rc;
}

int wsync_delta_dec_wait(wsync_delta *d, uint64_t ticket, int64_t timeout_ns)
{
	int rc;

	pthread_mutex_lock(&d->mu);
	if (d->op != OP_DEC)
		rc = delta_err(-EINVAL, "dec_wait: no decode under way");
	else if (ticket > d->d_fed)
		rc = delta_err(-EINVAL, "dec_wait: ticket %llu was never given",
		               (unsigned long long)ticket);
	else
		rc = delta_wait_done(d, (size_t)ticket, timeout_ns);
	pthread_mutex_unlock(&d->mu);
	return rc;
}

int wsync_delta_dec_end(wsync_delta *d, uint64_t checksum, int64_t timeout_ns)
{
	int rc;

	pthread_mutex_lock(&d->mu);
	if (d->op != OP_DEC) {
		rc = delta_err(-EINVAL, "dec_end: no decode under way");
		goto out;
	}
	rc = delta_wait_done(d, d->d_fed, timeout_ns);
	if (rc) {
		delta_job_cancel(d);
		goto end;
	}
	if (d->job.err) {
		rc = delta_err(d->job.err, "%s", d->job.errmsg);
		goto end;
	}
	if (d->d_fed != d->n_chunks) {
		size_t miss = 0;

		while (miss < d->n_chunks && d->d_seen[miss])
			miss++;
		rc = delta_err(-EBADMSG, "the delta is truncated: %zu of %zu chunks came "
		               "(chunk %zu is missing)", d->d_fed, d->n_chunks, miss);
		goto end;
	}
	uint64_t whole = delta_whole_checksum(d->hashes, d->n_chunks, d->n);

	if (whole != checksum)
		rc = delta_err(-EBADMSG, "whole-version checksum %016llx, the source's is %016llx",
		               (unsigned long long)whole, (unsigned long long)checksum);
end:
	delta_job_end(d);
out:
	pthread_mutex_unlock(&d->mu);
	return rc;
}
