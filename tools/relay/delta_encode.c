/*
 * tools/relay/delta_encode.c — a version against its base, chunk by chunk, on all
 * threads, handed out in chunk order while later chunks are still encoded.
 *
 * Task t encodes chunk t into ring slot t % window: a SAME record if the
 * chunk equals the base's; else, if at most a quarter of its 16-bit words
 * changed, zstd of the sparse form (XSPARSE: a bitmap and the changed
 * words' XORs: zstd then reads a tenth of the chunk at 2 % changed, which
 * is where the time went); else zstd of (cur XOR base) (XZSTD); else, when
 * the result is not smaller than the chunk, the chunk as it is (RAW); then
 * copies the chunk into base, which thereby becomes the next base. Tasks are handed out only
 * below next_read + window, so a slot is rewritten only after the caller
 * has copied its record out (enc_read): memory is window slots, whatever
 * the model's size.
 */
#include <errno.h>
#include <stdlib.h>

#include <xxhash.h>

#include "tools/relay/delta_internal.h"

static void xor_into(uint8_t *dst, const uint8_t *a, const uint8_t *b, size_t len)
{
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t x, y;

		memcpy(&x, a + i, 8);
		memcpy(&y, b + i, 8);
		x ^= y;
		memcpy(dst + i, &x, 8);
	}
	for (; i < len; i++)
		dst[i] = a[i] ^ b[i];
}

/* The sparse form of cur XOR base into out (delta_sparse_max(len) bytes);
 * returns its length, and the changed words in *changed. Eight words (16
 * bytes, one bitmap byte) at a time: most groups are unchanged and cost
 * two 64-bit XORs; in the others each word's XOR is stored and the write
 * position moves only if it is not 0 (no branch per word). */
static size_t sparse_form(uint8_t *out, const uint8_t *cur, const uint8_t *base, size_t len,
                          size_t *changed)
{
	size_t words = len / 2, bm = delta_sparse_bitmap(len), full = words / 8;
	uint8_t *vals = out + bm;
	size_t k = 0;

	for (size_t g = 0; g < full; g++) {
		uint64_t a0, a1, b0, b1;

		memcpy(&a0, cur + 16 * g, 8);
		memcpy(&a1, cur + 16 * g + 8, 8);
		memcpy(&b0, base + 16 * g, 8);
		memcpy(&b1, base + 16 * g + 8, 8);
		a0 ^= b0;
		a1 ^= b1;
		if (!(a0 | a1)) {
			out[g] = 0;
			continue;
		}
		uint64_t xs[2] = { a0, a1 };
		unsigned m = 0;

		for (unsigned j = 0; j < 8; j++) {
			uint16_t x;

			memcpy(&x, (const uint8_t *)xs + 2 * j, 2);   /* memory order, any endianness */
			memcpy(vals + 2 * k, &x, 2);
			k += x != 0;
			m |= (unsigned)(x != 0) << j;
		}
		out[g] = (uint8_t)m;
	}
	if (words % 8) {
		unsigned m = 0;

		for (size_t j = 0; j < words % 8; j++) {
			uint16_t a, b, x;

			memcpy(&a, cur + 2 * (8 * full + j), 2);
			memcpy(&b, base + 2 * (8 * full + j), 2);
			x = a ^ b;
			memcpy(vals + 2 * k, &x, 2);
			k += x != 0;
			m |= (unsigned)(x != 0) << j;
		}
		out[full] = (uint8_t)m;
	}
	*changed = k;
	size_t used = bm + 2 * k;

	if (len & 1)
		out[used++] = cur[len - 1] ^ base[len - 1];
	return used;
}

static int enc_task(struct wsync_delta *d, size_t t, struct delta_worker *w)
{
	size_t off = t * d->chunk, len = delta_chunk_len(d, t);
	const uint8_t *cur = d->e_cur + off;
	uint8_t *base = d->e_base + off;
	uint8_t *slot = d->e_ring + (t % d->e_window) * d->e_slot_cap;
	uint64_t hash = XXH3_64bits(cur, len);
	uint8_t kind;
	size_t data;

	if (memcmp(cur, base, len) == 0) {
		kind = WSYNC_DELTA_SAME;
		data = 0;
	} else {
		size_t changed, form, z;

		if (delta_scratch(d, w, delta_sparse_max(len), t))
			return -ENOMEM;
		form = sparse_form(w->scratch, cur, base, len, &changed);
		kind = WSYNC_DELTA_XSPARSE;
		if (changed > len / 8) {          /* over a quarter of the words */
			xor_into(w->scratch, cur, base, len);
			form = len;
			kind = WSYNC_DELTA_XZSTD;
		}
		/* A destination buffer one byte short of the chunk: a result that
		 * would not be smaller fails here, and the chunk goes RAW. */
		z = ZSTD_compressCCtx(w->cctx, slot + WSYNC_DELTA_REC_BYTES, len - 1,
		                      w->scratch, form, d->e_level);
		if (!ZSTD_isError(z)) {
			data = z;
		} else {
			kind = WSYNC_DELTA_RAW;
			data = len;
			memcpy(slot + WSYNC_DELTA_REC_BYTES, cur, len);
		}
		memcpy(base, cur, len);
	}
	delta_rec_put(slot, kind, (uint32_t)t, (uint32_t)data, hash);
	d->hashes[t] = hash;
	d->e_kind[t] = kind;
	d->e_slot_len[t % d->e_window] = (uint32_t)(WSYNC_DELTA_REC_BYTES + data);
	return 0;
}

int wsync_delta_enc_begin(wsync_delta *d, const void *cur, void *base, size_t n, size_t chunk,
                          int level)
{
	int rc;

	if (!d || ((!cur || !base) && n))
		return delta_err(-EINVAL, "enc_begin: no codec or no buffer");
	if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel())
		return delta_err(-EINVAL, "zstd level %d: must be %d .. %d", level,
		                 ZSTD_minCLevel(), ZSTD_maxCLevel());
	pthread_mutex_lock(&d->mu);
	if (d->op != OP_NONE) {
		rc = delta_err(-EBUSY, "another codec operation is under way");
		goto out;
	}
	rc = delta_geometry(d, n, chunk);
	if (rc)
		goto out;
	/* Enough chunks ahead for frames of many records (each frame is a
	 * round trip on the link), at most 64 slots: 16 MiB of 256 KiB chunks. */
	size_t window = 4 * (size_t)d->n_threads;

	if (window < 64)
		window = 64;
	if (window > d->n_chunks)
		window = d->n_chunks ? d->n_chunks : 1;
	size_t slot_cap = WSYNC_DELTA_REC_BYTES + chunk;

	if (delta_grow((void **)&d->e_ring, &d->e_ring_cap, window * slot_cap, 1) ||
	    delta_grow((void **)&d->e_slot_len, &d->e_slot_len_cap, window, sizeof(uint32_t)) ||
	    delta_grow((void **)&d->e_kind, &d->e_kind_cap, d->n_chunks + 1, 1)) {
		rc = delta_err(-ENOMEM, "out of memory for the encoder's window");
		goto out;
	}
	d->e_cur = cur;
	d->e_base = base;
	d->e_level = level ? level : 1;
	d->e_window = window;
	d->e_slot_cap = slot_cap;
	d->e_next_read = 0;
	memset(&d->e_stats, 0, sizeof d->e_stats);
	d->e_stats.chunks = d->n_chunks;
	d->e_stats.bytes_in = n;
	rc = delta_job_start(d, OP_ENC, enc_task, d->n_chunks, window);
out:
	pthread_mutex_unlock(&d->mu);
	return rc;
}

int wsync_delta_enc_read(wsync_delta *d, void *out, size_t cap, int64_t timeout_ns,
                         size_t *len, int *last)
{
	size_t first, k, used = 0;
	int rc;

	*len = 0;
	*last = 0;
	pthread_mutex_lock(&d->mu);
	if (d->op != OP_ENC) {
		rc = delta_err(-EINVAL, "enc_read: no encode under way");
		goto out;
	}
	if (cap < wsync_delta_frame_min(d->chunk)) {
		rc = delta_err(-ENOSPC, "enc_read: %zu bytes of room, a record needs up to %zu",
		               cap, wsync_delta_frame_min(d->chunk));
		goto out;
	}
	first = d->e_next_read;
	if (first == d->n_chunks) {
		*last = 1;
		rc = 0;
		goto out;
	}
	rc = delta_wait_done(d, first + 1, timeout_ns);
	if (rc)
		goto out;
	if (d->job.err) {
		rc = delta_err(d->job.err, "%s", d->job.errmsg);
		goto out;
	}
	for (k = first; k < d->n_chunks && d->job.done[k]; k++) {
		size_t l = d->e_slot_len[k % d->e_window];

		if (used + l > cap)
			break;
		used += l;
	}
	/* Slots [first, k) are not handed out again before the limit moves. */
	pthread_mutex_unlock(&d->mu);
	used = 0;
	for (size_t i = first; i < k; i++) {
		size_t l = d->e_slot_len[i % d->e_window];

		memcpy((uint8_t *)out + used, d->e_ring + (i % d->e_window) * d->e_slot_cap, l);
		used += l;
	}
	pthread_mutex_lock(&d->mu);
	for (size_t i = first; i < k; i++) {
		d->e_stats.same += d->e_kind[i] == WSYNC_DELTA_SAME;
		d->e_stats.xzstd += d->e_kind[i] == WSYNC_DELTA_XZSTD;
		d->e_stats.raw += d->e_kind[i] == WSYNC_DELTA_RAW;
		d->e_stats.xsparse += d->e_kind[i] == WSYNC_DELTA_XSPARSE;
	}
	d->e_stats.bytes_out += used;
	d->e_next_read = k;
	d->job.limit = k + d->e_window;
	pthread_cond_broadcast(&d->work);
	*len = used;
	*last = k == d->n_chunks;
out:
	pthread_mutex_unlock(&d->mu);
	return rc;
}

int wsync_delta_enc_end(wsync_delta *d, uint64_t *checksum, wsync_delta_stats *stats)
{
	int rc = 0;

	pthread_mutex_lock(&d->mu);
	if (d->op != OP_ENC) {
		rc = delta_err(-EINVAL, "enc_end: no encode under way");
		goto out;
	}
	delta_job_cancel(d);
	if (d->e_next_read < d->n_chunks) {
		rc = delta_err(-ECANCELED, "encode ended after %zu of %zu chunks: the base is "
		               "partly updated", d->e_next_read, d->n_chunks);
	} else if (d->job.err) {
		rc = delta_err(d->job.err, "%s", d->job.errmsg);
	} else {
		if (checksum)
			*checksum = delta_whole_checksum(d->hashes, d->n_chunks, d->n);
		if (stats) {
			*stats = d->e_stats;
			stats->busy_ns = d->job.busy_ns;
		}
	}
	delta_job_end(d);
out:
	pthread_mutex_unlock(&d->mu);
	return rc;
}
