/* shm/shard.c — parts of tensors: their geometry and a group's coverage. */
#include "shard.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"

#define say(why, whylen, ...) wsync_why(why, whylen, -EINVAL, __VA_ARGS__)

/* Bytes of one index along dim (the product of the dims after it times
 * the element size). */
static uint64_t dim_stride(const wsync_tensor_desc *d, uint32_t dim)
{
	uint64_t b = wsync_dtype_size(d->dtype);

	for (uint32_t i = dim + 1; i < d->ndim; i++)
		b *= d->shape[i];
	return b;
}

static int slice_of(const wsync_tensor_desc *d, uint32_t dim, uint64_t start, uint64_t end,
                    wsync_slice *out, char *why, size_t whylen)
{
	if (dim == WSYNC_SHARD_WHOLE) {
		out->offset = d->offset;
		out->rows = 1;
		out->row_bytes = wsync_tensor_bytes(d);
		out->stride = out->row_bytes;
		return 0;
	}
	if (dim > 1 || dim >= d->ndim)
		return say(why, whylen, "tensor '%.64s' (%u dims) cannot be cut along dim %u "
		           "(0 or 1)", d->name, d->ndim, dim);
	if (start >= end || end > d->shape[dim])
		return say(why, whylen, "tensor '%.64s': range [%llu, %llu) along dim %u is "
		           "outside [0, %llu) or empty", d->name, (unsigned long long)start,
		           (unsigned long long)end, dim, (unsigned long long)d->shape[dim]);
	if (dim == 0) {
		uint64_t row = dim_stride(d, 0);

		out->offset = d->offset + start * row;
		out->rows = 1;
		out->row_bytes = (end - start) * row;
		out->stride = out->row_bytes;
		return 0;
	}
	out->offset = d->offset + start * dim_stride(d, 1);
	out->rows = d->shape[0];
	out->row_bytes = (end - start) * dim_stride(d, 1);
	out->stride = dim_stride(d, 0);
	return 0;
}

int wsync_shard_slice(const wsync_tensor_desc *d, const wsync_shard *part, wsync_slice *out)
{
	char why[WSYNC_ERRMSG_LEN];
	int err;

	if (!d || !part || !out)
		return wsync_fail(-EINVAL, "wsync_shard_slice: NULL argument");
	err = slice_of(d, part->dim, part->start, part->end, out, why, sizeof(why));
	return err ? wsync_fail(err, "%s", why) : 0;
}

int wsync_tensor_part(const wsync_tensor_desc *d, uint32_t dim, uint32_t k, uint32_t K,
                      wsync_slice *out)
{
	char why[WSYNC_ERRMSG_LEN];
	uint64_t size, each;
	int err;

	if (!d || !out)
		return wsync_fail(-EINVAL, "wsync_tensor_part: NULL argument");
	if (dim > 1 || dim >= d->ndim)
		return wsync_fail(-EINVAL, "tensor '%.64s' (%u dims) has no dim %u to split",
		                  d->name, d->ndim, dim);
	size = d->shape[dim];
	if (K == 0 || k >= K || size % K)
		return wsync_fail(-EINVAL, "tensor '%.64s': part %u of %u along dim %u of "
		                  "size %llu (the size must divide evenly)", d->name, k, K, dim,
		                  (unsigned long long)size);
	each = size / K;
	err = slice_of(d, dim, k * each, (k + 1) * each, out, why, sizeof(why));
	return err ? wsync_fail(err, "%s", why) : 0;
}

void wsync_slice_read(void *dst, const void *base, const wsync_slice *s)
{
	const char *src = (const char *)base + s->offset;
	char *d = dst;

	for (uint64_t r = 0; r < s->rows; r++)
		memcpy(d + r * s->row_bytes, src + r * s->stride, s->row_bytes);
}

void wsync_slice_write(void *base, const void *src, const wsync_slice *s)
{
	char *dst = (char *)base + s->offset;
	const char *p = src;

	for (uint64_t r = 0; r < s->rows; r++)
		memcpy(dst + r * s->stride, p + r * s->row_bytes, s->row_bytes);
}

struct claim {
	uint32_t rank, dim;
	uint64_t start, end;
};

static int claim_cmp(const void *a, const void *b)
{
	const struct claim *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* The claims on one tensor: sorted, then adjacent ones must not overlap and
 * (complete) must tile [0, size). */
static int tensor_check(const wsync_tensor_desc *d, uint32_t idx, struct claim *c, size_t n,
                        int complete, char *why, size_t whylen)
{
	uint64_t size, at = 0;

	if (n == 0)
		return complete ? say(why, whylen, "tensor %u '%.64s' is written by no rank",
		                      idx, d->name) : 0;
	for (size_t i = 1; i < n; i++)
		if (c[i].dim != c[0].dim)
			return say(why, whylen, "tensor %u '%.64s' is cut along dim %u by rank %u "
			           "and along dim %u by rank %u: one dimension per tensor", idx,
			           d->name, c[0].dim, c[0].rank, c[i].dim, c[i].rank);
	if (c[0].dim == WSYNC_SHARD_WHOLE) {
		if (n > 1)
			return say(why, whylen, "tensor %u '%.64s' is claimed whole by rank %u "
			           "and also by rank %u", idx, d->name, c[0].rank, c[1].rank);
		return 0;
	}
	qsort(c, n, sizeof(*c), claim_cmp);
	size = d->shape[c[0].dim];
	for (size_t i = 0; i < n; i++) {
		if (c[i].start < at)
			return say(why, whylen, "tensor %u '%.64s': ranks %u and %u overlap along "
			           "dim %u at index %llu", idx, d->name, c[i - 1].rank, c[i].rank,
			           c[i].dim, (unsigned long long)c[i].start);
		if (complete && c[i].start > at)
			return say(why, whylen, "tensor %u '%.64s': indices [%llu, %llu) along dim "
			           "%u are written by no rank", idx, d->name, (unsigned long long)at,
			           (unsigned long long)c[i].start, c[i].dim);
		at = c[i].end;
	}
	if (complete && at < size)
		return say(why, whylen, "tensor %u '%.64s': indices [%llu, %llu) along dim %u "
		           "are written by no rank", idx, d->name, (unsigned long long)at,
		           (unsigned long long)size, c[0].dim);
	return 0;
}

int wsync_shards_check(const wsync_tensor_desc *t, size_t n_tensors,
                       const wsync_shard *const *parts, const size_t *n_parts,
                       uint32_t ranks, int complete, char *why, size_t whylen)
{
	size_t total = 0, *count, *first;
	struct claim *claims;
	int err = 0;

	for (uint32_t r = 0; r < ranks; r++)
		total += n_parts[r];
	count = calloc(n_tensors + 1, sizeof(*count));
	first = calloc(n_tensors + 1, sizeof(*first));
	claims = calloc(total + 1, sizeof(*claims));
	if (!count || !first || !claims) {
		err = say(why, whylen, "out of memory checking %zu parts", total);
		goto out_free;
	}
	/* validate every part, then bucket the claims by tensor */
	for (uint32_t r = 0; r < ranks; r++) {
		for (size_t i = 0; i < n_parts[r]; i++) {
			const wsync_shard *p = &parts[r][i];
			wsync_slice s;

			if (p->tensor >= n_tensors) {
				err = say(why, whylen, "rank %u part %zu names tensor %u of %zu", r, i,
				          p->tensor, n_tensors);
				goto out_free;
			}
			err = slice_of(&t[p->tensor], p->dim, p->start, p->end, &s, why, whylen);
			if (err)
				goto out_free;
			count[p->tensor]++;
		}
	}
	for (size_t i = 1; i <= n_tensors; i++)
		first[i] = first[i - 1] + count[i - 1];
	memset(count, 0, (n_tensors + 1) * sizeof(*count));
	for (uint32_t r = 0; r < ranks; r++) {
		for (size_t i = 0; i < n_parts[r]; i++) {
			const wsync_shard *p = &parts[r][i];
			struct claim *c = &claims[first[p->tensor] + count[p->tensor]++];

			c->rank = r;
			c->dim = p->dim;
			c->start = p->dim == WSYNC_SHARD_WHOLE ? 0 : p->start;
			c->end = p->dim == WSYNC_SHARD_WHOLE ? 0 : p->end;
		}
	}
	for (size_t k = 0; k < n_tensors && !err; k++)
		err = tensor_check(&t[k], (uint32_t)k, claims + first[k], count[k], complete,
		                   why, whylen);
out_free:
	free(claims);
	free(first);
	free(count);
	return err;
}
