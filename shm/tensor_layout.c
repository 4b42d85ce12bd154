/* shm/tensor_layout.c — canonical tensor placement, layout hashing and lookup. */
#include "tensor_layout.h"

#include "errmsg.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <xxhash.h>

#include "layout.h"
#include "proto.h"

static const struct {
	const char *name;
	uint8_t size;
} dtypes[] = {
	[WSYNC_F32] = { "f32", 4 },  [WSYNC_F16] = { "f16", 2 },
	[WSYNC_BF16] = { "bf16", 2 }, [WSYNC_F64] = { "f64", 8 },
	[WSYNC_I8] = { "i8", 1 },    [WSYNC_I16] = { "i16", 2 },
	[WSYNC_I32] = { "i32", 4 },  [WSYNC_I64] = { "i64", 8 },
	[WSYNC_U8] = { "u8", 1 },    [WSYNC_BOOL] = { "bool", 1 },
	[WSYNC_U16] = { "u16", 2 },  [WSYNC_U32] = { "u32", 4 },
	[WSYNC_U64] = { "u64", 8 },
	[WSYNC_F8_E4M3FN] = { "f8_e4m3fn", 1 }, [WSYNC_F8_E5M2] = { "f8_e5m2", 1 },
};

size_t wsync_dtype_size(uint32_t dtype)
{
	return dtype < sizeof(dtypes) / sizeof(dtypes[0]) ? dtypes[dtype].size : 0;
}

const char *wsync_dtype_name(uint32_t dtype)
{
	return wsync_dtype_size(dtype) ? dtypes[dtype].name : "?";
}

/* Element count, or UINT64_MAX on overflow. */
static uint64_t shape_elems(const wsync_tensor_desc *d)
{
	uint64_t n = 1;

	for (uint32_t i = 0; i < d->ndim && i < WSYNC_MAX_DIMS; i++) {
		if (d->shape[i] && n > UINT64_MAX / d->shape[i])
			return UINT64_MAX;
		n *= d->shape[i];
	}
	return n;
}

uint64_t wsync_tensor_bytes(const wsync_tensor_desc *d)
{
	uint64_t n = shape_elems(d), es = wsync_dtype_size(d->dtype);

	if (n == UINT64_MAX || (es && n > UINT64_MAX / es))
		return UINT64_MAX;
	return n * es;
}

#define why_fail(why, whylen, ...) wsync_why(why, whylen, -EINVAL, __VA_ARGS__)

static int desc_check(const wsync_tensor_desc *d, size_t i, char *why, size_t whylen)
{
	if (!wsync_tensor_name_valid(d->name))
		return why_fail(why, whylen, "tensor %zu: name is empty, unterminated "
		                "within %d bytes or not printable ASCII", i, WSYNC_NAME_MAX);
	if (!wsync_dtype_size(d->dtype))
		return why_fail(why, whylen, "tensor %zu '%s': unknown dtype %u",
		                i, d->name, d->dtype);
	if (d->ndim > WSYNC_MAX_DIMS)
		return why_fail(why, whylen, "tensor %zu '%s': ndim %u over %d",
		                i, d->name, d->ndim, WSYNC_MAX_DIMS);
	for (uint32_t k = d->ndim; k < WSYNC_MAX_DIMS; k++)
		if (d->shape[k])
			return why_fail(why, whylen, "tensor %zu '%s': shape[%u] = %llu "
			                "past ndim %u must be 0", i, d->name, k,
			                (unsigned long long)d->shape[k], d->ndim);
	if (wsync_tensor_bytes(d) > (UINT64_MAX >> 2))
		return why_fail(why, whylen, "tensor %zu '%s': size overflows", i, d->name);
	return 0;
}

static int name_cmp(const void *a, const void *b)
{
	return strncmp(*(const char *const *)a, *(const char *const *)b, WSYNC_NAME_MAX);
}

/*
 * Duplicate names, found by sorting: O(n log n) comparisons whatever the
 * names are. (A hash table is O(n) on average but O(n^2) on names chosen to
 * collide, and the broker runs this on what any publisher sends.)
 */
static int names_unique(const wsync_tensor_desc *d, size_t n, char *why, size_t whylen)
{
	const char **names;

	if (n < 2)
		return 0;
	names = malloc(n * sizeof(*names));
	if (!names)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		names[i] = d[i].name;
	qsort(names, n, sizeof(*names), name_cmp);
	for (size_t i = 1; i < n; i++) {
		if (!strncmp(names[i - 1], names[i], WSYNC_NAME_MAX)) {
			why_fail(why, whylen, "two tensors share the name '%.64s'", names[i]);
			free(names);
			return -EINVAL;
		}
	}
	free(names);
	return 0;
}

int wsync_layout_compute(const wsync_tensor_desc *in, size_t n,
                         wsync_tensor_desc *out, uint64_t *bytes,
                         char *why, size_t whylen)
{
	uint64_t at = 0;
	int err;

	if (n == 0 || n > WSYNC_MAX_TENSORS)
		return why_fail(why, whylen, "a model needs 1 to %d tensors, not %zu",
		                WSYNC_MAX_TENSORS, n);
	for (size_t i = 0; i < n; i++) {
		wsync_tensor_desc d = in[i];
		uint64_t sz;

		err = desc_check(&d, i, why, whylen);
		if (err)
			return err;
		sz = wsync_tensor_bytes(&d);
		at = (at + WSYNC_ALIGN - 1) & ~(uint64_t)(WSYNC_ALIGN - 1);
		if (at > (UINT64_MAX >> 2) - sz)
			return why_fail(why, whylen, "model size overflows at tensor %zu '%s'",
			                i, d.name);
		/* canonical form: the name zero-padded, so layouts compare bytewise */
		size_t nl = strlen(d.name);
		memset(d.name + nl, 0, WSYNC_NAME_MAX - nl);
		d.offset = at;
		out[i] = d;
		at += sz;
	}
	at = (at + WSYNC_PAGE - 1) & ~(uint64_t)(WSYNC_PAGE - 1);
	*bytes = at ? at : WSYNC_PAGE;
	return names_unique(out, n, why, whylen);
}

uint64_t wsync_layout_hash(const wsync_tensor_desc *d, size_t n)
{
	return XXH64(d, n * sizeof(*d), 0x77737963ull);
}

static void shape_str(const wsync_tensor_desc *d, char *buf, size_t len)
{
	size_t at = 0;

	at += (size_t)snprintf(buf, len, "%s[", wsync_dtype_name(d->dtype));
	for (uint32_t i = 0; i < d->ndim && i < WSYNC_MAX_DIMS && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%llu", i ? "," : "",
		                       (unsigned long long)d->shape[i]);
	if (at < len)
		snprintf(buf + at, len - at, "]");
}

int wsync_layout_diff(const wsync_tensor_desc *a, size_t na,
                      const wsync_tensor_desc *b, size_t nb,
                      char *why, size_t whylen)
{
	char sa[160], sb[160];

	for (size_t i = 0; i < na && i < nb; i++) {
		if (strncmp(a[i].name, b[i].name, WSYNC_NAME_MAX)) {
			why_fail(why, whylen, "tensor %zu is '%.64s' here, '%.64s' in the "
			         "existing model", i, a[i].name, b[i].name);
			return 1;
		}
		if (a[i].dtype != b[i].dtype || a[i].ndim != b[i].ndim ||
		    memcmp(a[i].shape, b[i].shape, sizeof(a[i].shape))) {
			shape_str(&a[i], sa, sizeof(sa));
			shape_str(&b[i], sb, sizeof(sb));
			why_fail(why, whylen, "tensor %zu '%.64s' is %s here, %s in the "
			         "existing model", i, a[i].name, sa, sb);
			return 1;
		}
	}
	if (na != nb) {
		why_fail(why, whylen, "%zu tensors here, %zu in the existing model", na, nb);
		return 1;
	}
	return 0;
}

/*
 * The seed of the name index: random per process, so nobody can choose
 * names that collide in it (the index is never shared or stored). Set once;
 * racing first callers store the same kind of value, any of which is good.
 */
static uint64_t name_seed(void)
{
	static _Atomic uint64_t seed;
	uint64_t s = atomic_load_explicit(&seed, memory_order_relaxed);

	if (s)
		return s;
	if (getrandom(&s, sizeof(s), GRND_NONBLOCK) != (ssize_t)sizeof(s))
		s = (uint64_t)(uintptr_t)&seed ^ (uint64_t)getpid() * 0x9E3779B97F4A7C15ull;
	s |= 1;                          /* never 0: 0 means unset */
	uint64_t unset = 0;
	if (!atomic_compare_exchange_strong(&seed, &unset, s))
		s = unset;
	return s;
}

static uint32_t name_hash(const char *name)
{
	return (uint32_t)XXH64(name, strnlen(name, WSYNC_NAME_MAX), name_seed());
}

int wsync_name_index_build(struct wsync_name_index *ix,
                           const wsync_tensor_desc *d, size_t n)
{
	uint32_t cap = 8;

	if (n > WSYNC_MAX_TENSORS)
		return -EINVAL;
	while (cap < 2 * n)
		cap <<= 1;
	ix->slots = calloc(cap, sizeof(*ix->slots));
	if (!ix->slots)
		return -ENOMEM;
	ix->mask = cap - 1;
	for (size_t i = 0; i < n; i++) {
		uint32_t h = name_hash(d[i].name) & ix->mask;

		while (ix->slots[h]) {
			if (!strncmp(d[ix->slots[h] - 1].name, d[i].name, WSYNC_NAME_MAX)) {
				wsync_name_index_free(ix);
				return -EEXIST;
			}
			h = (h + 1) & ix->mask;
		}
		ix->slots[h] = (uint32_t)i + 1;
	}
	return 0;
}

long wsync_name_index_find(const struct wsync_name_index *ix,
                           const wsync_tensor_desc *d, const char *name)
{
	uint32_t h;

	if (!ix->slots || !name)
		return -1;
	h = name_hash(name) & ix->mask;
	while (ix->slots[h]) {
		if (!strncmp(d[ix->slots[h] - 1].name, name, WSYNC_NAME_MAX))
			return (long)ix->slots[h] - 1;
		h = (h + 1) & ix->mask;
	}
	return -1;
}

void wsync_name_index_free(struct wsync_name_index *ix)
{
	free(ix->slots);
	ix->slots = NULL;
	ix->mask = 0;
}
