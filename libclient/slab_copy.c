/*
 * libclient/slab_copy.c — filling a slab at memory speed, hashing it as it
 * is filled.
 *
 * The copy itself is copy_engine.c's (threads and store method measured on
 * this machine); this file turns a call into pieces of the begun slab and
 * keeps the publisher's block hashes (checksum.h) true to the slab:
 *
 *  - a block the call fills completely (every tensor byte in it is one the
 *    call writes) is hashed as it is copied, its padding read from the
 *    slab, and counts as hashed for the begun version;
 *  - a block the call writes only in part (a tensor passed as NULL, a
 *    range that ends inside a tensor) is copied and left to the commit,
 *    which hashes it from the slab then;
 *  - a block the call does not touch keeps what it had.
 *
 * So the checksum is of the slab as the copies left it, plus whatever was
 * written into the blocks they left to the commit. Bytes written by other
 * means into a block a copy hashed are not seen (the caller said it had
 * finished with them by copying); wsync_slab_tensor, which hands out a
 * writable pointer, gives its tensor's blocks back to the commit.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "checksum.h"
#include "copy_engine.h"
#include "pub.h"
#include "shm/errmsg.h"
#include "shm/tensor_layout.h"

#define COPY_STACK_SEGS 256

/* opts checked (NULL: the defaults) into *o, or -EINVAL with a message. */
static int opts_take(const wsync_copy_opts *opts, wsync_copy_opts *o, const char *what)
{
	static const wsync_copy_opts none;

	*o = opts ? *opts : none;
	if (o->spread_ns < 0 || o->spread_ns > WSYNC_SPREAD_MAX_NS)
		return wsync_fail(-EINVAL, "%s: spread_ns %lld is not in 0 .. %lld (an hour)",
		                  what, (long long)o->spread_ns, (long long)WSYNC_SPREAD_MAX_NS);
	if (o->flags || o->reserved[0] || o->reserved[1])
		return wsync_fail(-EINVAL, "%s: flags and reserved fields of wsync_copy_opts "
		                  "must be 0", what);
	return 0;
}

int wsync_copy_with(void *dst, const void *src, size_t len, const wsync_copy_opts *opts)
{
	struct copy_seg seg = { 0, src, len };
	struct copy_plan pl = { .base = dst, .bytes = len, .segs = &seg, .n_segs = 1 };
	wsync_copy_opts o;
	int err = opts_take(opts, &o, "wsync_copy");

	if (err)
		return err;
	if (!len)
		return 0;
	if (!dst || !src)
		return wsync_fail(-EINVAL, "wsync_copy: NULL buffer");
	pl.spread_ns = o.spread_ns;
	copy_run(&pl, o.threads);
	return 0;
}

int wsync_copy(void *dst, const void *src, size_t len, unsigned threads)
{
	wsync_copy_opts o = { .threads = threads };

	return wsync_copy_with(dst, src, len, &o);
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

static void hole_mark(uint8_t *hole, size_t n_blocks, uint64_t lo, uint64_t hi)
{
	for (size_t k = lo / WSYNC_SUM_BLOCK; k < n_blocks && k <= (hi - 1) / WSYNC_SUM_BLOCK; k++)
		hole[k] = 1;
}

/* hole[k] = 1 for every block holding tensor bytes that no piece writes.
 * Tensors and pieces are both sorted by offset. */
static void holes_find(const struct wsync_pub *p, const struct copy_seg *segs, size_t n,
                       uint8_t *hole, size_t n_blocks)
{
	size_t j = 0;

	for (size_t t = 0; t < p->n_tensors; t++) {
		uint64_t at = p->tensors[t].offset;
		uint64_t end = at + wsync_tensor_bytes(&p->tensors[t]);

		while (at < end) {
			while (j < n && segs[j].off + segs[j].len <= at)
				j++;
			if (j < n && segs[j].off <= at) {
				at = segs[j].off + segs[j].len < end ? segs[j].off + segs[j].len : end;
				continue;
			}
			{
				uint64_t gap = j < n && segs[j].off < end ? segs[j].off : end;

				hole_mark(hole, n_blocks, at, gap);
				at = gap;
			}
		}
	}
}

/* Copies the pieces (sorted, disjoint, inside the slab) into p's begun slab,
 * hashing the blocks they fill when p keeps checksums. */
static int slab_fill(struct wsync_pub *p, const wsync_slab *s, const struct copy_seg *segs,
                     size_t n, const wsync_copy_opts *o)
{
	struct copy_plan pl = { .base = s->base, .bytes = p->bytes, .segs = segs, .n_segs = n,
	                        .spread_ns = o->spread_ns };
	struct sum_blocks *sums = p->sums;
	uint8_t *hole = NULL;

	if (!n)
		return 0;
	if (sums)
		hole = calloc(sums->n, 1);
	if (hole) {
		holes_find(p, segs, n, hole, sums->n);
		sum_blocks_claim(sums, p->cur.version);
		pl.hole = hole;
		pl.hash = sums->hash;
		pl.ok = sums->ok;
	}
	copy_run(&pl, o->threads);
	if (sums && !hole)           /* no memory to plan: the commit hashes */
		sum_blocks_forget(sums, p->cur.version, segs[0].off,
		                  segs[n - 1].off + segs[n - 1].len - segs[0].off);
	free(hole);
	return 0;
}

int wsync_slab_copy_with(const wsync_slab *s, uint64_t offset, const void *src,
                         size_t len, const wsync_copy_opts *opts)
{
	struct wsync_pub *p = slab_writable(s, "wsync_slab_copy");
	struct copy_seg seg = { offset, src, len };
	wsync_copy_opts o;

	if (!p)
		return -EINVAL;
	if (opts_take(opts, &o, "wsync_slab_copy"))
		return -EINVAL;
	if (!src && len)
		return wsync_fail(-EINVAL, "model '%s': wsync_slab_copy from NULL", p->model);
	if (offset > s->bytes || len > s->bytes - offset)
		return wsync_fail(-EINVAL, "model '%s': copy of %zu bytes at offset %llu runs "
		                  "past the slab's %zu bytes", p->model, len,
		                  (unsigned long long)offset, s->bytes);
	return slab_fill(p, s, &seg, len ? 1 : 0, &o);
}

int wsync_slab_copy(const wsync_slab *s, uint64_t offset, const void *src,
                    size_t len, unsigned threads)
{
	wsync_copy_opts o = { .threads = threads };

	return wsync_slab_copy_with(s, offset, src, len, &o);
}

int wsync_slab_copy_tensors_with(const wsync_slab *s, const void *const *srcs,
                                 const wsync_copy_opts *opts)
{
	struct copy_seg stack_segs[COPY_STACK_SEGS], *segs = stack_segs;
	struct wsync_pub *p = slab_writable(s, "wsync_slab_copy_tensors");
	wsync_copy_opts o;
	size_t n = 0;
	int err;

	if (!p)
		return -EINVAL;
	if (opts_take(opts, &o, "wsync_slab_copy_tensors"))
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
	/* in layout order, which is offset order (shm/tensor_layout.c) */
	for (size_t i = 0; i < s->n_tensors; i++) {
		size_t len = (size_t)wsync_tensor_bytes(&s->tensors[i]);

		if (!srcs[i] || !len)
			continue;
		segs[n].off = s->tensors[i].offset;
		segs[n].src = srcs[i];
		segs[n].len = len;
		n++;
	}
	err = slab_fill(p, s, segs, n, &o);
	if (segs != stack_segs)
		free(segs);
	return err;
}

int wsync_slab_copy_tensors(const wsync_slab *s, const void *const *srcs, unsigned threads)
{
	wsync_copy_opts o = { .threads = threads };

	return wsync_slab_copy_tensors_with(s, srcs, &o);
}
