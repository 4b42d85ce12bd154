/*
 * tools/ctl/safetensors.c — parsing and writing safetensors headers (see
 * ctl_safetensors.h). The JSON is jansson's; everything a file says is
 * checked here before wsyncctl publishes a byte of it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "safetensors.h"

static const struct {
	const char *name;
	uint32_t dtype;
} dtypes[] = {
	{ "F64", WSYNC_F64 }, { "F32", WSYNC_F32 }, { "F16", WSYNC_F16 },
	{ "BF16", WSYNC_BF16 }, { "I64", WSYNC_I64 }, { "I32", WSYNC_I32 },
	{ "I16", WSYNC_I16 }, { "I8", WSYNC_I8 }, { "U8", WSYNC_U8 },
	{ "BOOL", WSYNC_BOOL }, { "U64", WSYNC_U64 }, { "U32", WSYNC_U32 },
	{ "U16", WSYNC_U16 },
	/* safetensors' F8_E4M3 is the finite-only variant (torch.float8_e4m3fn) */
	{ "F8_E4M3", WSYNC_F8_E4M3FN }, { "F8_E5M2", WSYNC_F8_E5M2 },
};
#define N_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

const char *st_dtype_name(uint32_t dtype)
{
	for (size_t i = 0; i < N_DTYPES; i++)
		if (dtypes[i].dtype == dtype)
			return dtypes[i].name;
	return NULL;
}

uint32_t st_dtype_from_name(const char *name)
{
	for (size_t i = 0; i < N_DTYPES; i++)
		if (!strcmp(dtypes[i].name, name))
			return dtypes[i].dtype;
	return 0;
}

/* The safetensors dtypes wsync has, space-separated, for error messages. */
static const char *st_dtype_list(void)
{
	static char list[128];
	size_t at = 0;

	for (size_t i = 0; i < N_DTYPES && at < sizeof(list); i++)
		at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%s", i ? " " : "",
		                       dtypes[i].name);
	return list;
}

static int fail(char *why, size_t whylen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

void st_free(struct st_file *f)
{
	for (size_t i = 0; i < f->n_meta; i++) {
		free(f->meta[i].key);
		free(f->meta[i].value);
	}
	free(f->meta);
	free(f->tensors);
	memset(f, 0, sizeof(*f));
}

const char *st_meta_get(const struct st_file *f, const char *key)
{
	for (size_t i = 0; i < f->n_meta; i++)
		if (!strcmp(f->meta[i].key, key))
			return f->meta[i].value;
	return NULL;
}

static bool json_u64(const json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*out = (uint64_t)json_integer_value(v);
	return true;
}

static int parse_meta(const json_t *obj, struct st_file *f, char *why, size_t whylen)
{
	const char *key;
	json_t *val;

	if (!json_is_object(obj))
		return fail(why, whylen, "__metadata__ is not an object");
	f->meta = calloc(json_object_size(obj) + 1, sizeof(*f->meta));
	if (!f->meta)
		return -ENOMEM;
	json_object_foreach((json_t *)obj, key, val) {
		struct st_meta *m = &f->meta[f->n_meta];

		if (!json_is_string(val))
			return fail(why, whylen, "__metadata__ value of '%.64s' is not a string", key);
		m->key = strdup(key);
		m->value = strdup(json_string_value(val));
		if (!m->key || !m->value) {
			free(m->key);
			free(m->value);
			return -ENOMEM;
		}
		f->n_meta++;
	}
	return 0;
}

static int parse_tensor(const char *name, const json_t *e, struct st_tensor *t,
                        char *why, size_t whylen)
{
	const json_t *dt, *shape, *offs;
	uint64_t bytes, dim;
	size_t esize;

	if (!json_is_object(e))
		return fail(why, whylen, "tensor '%.64s': entry is not an object", name);
	if (strlen(name) >= WSYNC_NAME_MAX)
		return fail(why, whylen, "tensor '%.64s...': name longer than %d bytes", name,
		            WSYNC_NAME_MAX - 1);
	if (json_object_size(e) != 3)
		return fail(why, whylen, "tensor '%.64s': entry must have exactly dtype, shape "
		            "and data_offsets", name);
	dt = json_object_get(e, "dtype");
	shape = json_object_get(e, "shape");
	offs = json_object_get(e, "data_offsets");
	if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs))
		return fail(why, whylen, "tensor '%.64s': dtype must be a string, shape and "
		            "data_offsets arrays", name);
	snprintf(t->desc.name, sizeof(t->desc.name), "%s", name);
	t->desc.dtype = st_dtype_from_name(json_string_value(dt));
	if (!t->desc.dtype)
		return fail(why, whylen, "tensor '%.64s': dtype '%.16s' is not supported (wsync has "
		            "%s)", name, json_string_value(dt), st_dtype_list());
	if (json_array_size(shape) > WSYNC_MAX_DIMS)
		return fail(why, whylen, "tensor '%.64s': %zu dimensions, at most %d", name,
		            json_array_size(shape), WSYNC_MAX_DIMS);
	esize = wsync_dtype_size(t->desc.dtype);
	bytes = esize;
	t->desc.ndim = (uint32_t)json_array_size(shape);
	for (uint32_t d = 0; d < t->desc.ndim; d++) {
		if (!json_u64(json_array_get(shape, d), &dim))
			return fail(why, whylen, "tensor '%.64s': shape[%u] is not a size", name, d);
		t->desc.shape[d] = dim;
		if (__builtin_mul_overflow(bytes, dim, &bytes))
			return fail(why, whylen, "tensor '%.64s': shape overflows", name);
	}
	if (json_array_size(offs) != 2 || !json_u64(json_array_get(offs, 0), &t->begin) ||
	    !json_u64(json_array_get(offs, 1), &t->end))
		return fail(why, whylen, "tensor '%.64s': data_offsets must be [begin, end]", name);
	if (t->end < t->begin)
		return fail(why, whylen, "tensor '%.64s': data_offsets [%" PRIu64 ", %" PRIu64
		            "] end before begin", name, t->begin, t->end);
	if (t->end - t->begin != bytes)
		return fail(why, whylen, "tensor '%.64s': shape and dtype make %" PRIu64 " bytes, "
		            "data_offsets %" PRIu64, name, bytes, t->end - t->begin);
	return 0;
}

static int by_offset(const void *a, const void *b)
{
	const struct st_tensor *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return x < y ? -1 : x > y;     /* keeps zero-size tensors in file order */
}

/* The ranges, sorted, must tile [0, data_len). */
static int check_tiling(struct st_file *f, char *why, size_t whylen)
{
	uint64_t at = 0;

	qsort(f->tensors, f->n_tensors, sizeof(*f->tensors), by_offset);
	for (size_t i = 0; i < f->n_tensors; i++) {
		const struct st_tensor *t = &f->tensors[i];

		if (t->begin < at)
			return fail(why, whylen, "tensor '%.64s': data_offsets [%" PRIu64 ", %" PRIu64
			            "] overlap the previous tensor", t->desc.name, t->begin, t->end);
		if (t->begin > at)
			return fail(why, whylen, "tensor '%.64s': data_offsets begin at %" PRIu64
			            ", leaving a gap after %" PRIu64, t->desc.name, t->begin, at);
		if (t->end > f->data_len)
			return fail(why, whylen, "tensor '%.64s': data ends at %" PRIu64 " but the "
			            "file has %" PRIu64 " bytes of data (truncated?)", t->desc.name,
			            t->end, f->data_len);
		at = t->end;
	}
	if (at != f->data_len)
		return fail(why, whylen, "%" PRIu64 " bytes of data, tensors cover %" PRIu64,
		            f->data_len, at);
	return 0;
}

static int parse_header(json_t *root, struct st_file *f, char *why, size_t whylen)
{
	const char *key;
	json_t *val;
	int err;

	if (!json_is_object(root))
		return fail(why, whylen, "header is not a JSON object");
	f->tensors = calloc(json_object_size(root) + 1, sizeof(*f->tensors));
	if (!f->tensors)
		return -ENOMEM;
	json_object_foreach(root, key, val) {
		if (!strcmp(key, "__metadata__"))
			err = parse_meta(val, f, why, whylen);
		else
			err = parse_tensor(key, val, &f->tensors[f->n_tensors++], why, whylen);
		if (err)
			return err;
	}
	if (!f->n_tensors)
		return fail(why, whylen, "no tensors");
	if (f->n_tensors > WSYNC_MAX_TENSORS)
		return fail(why, whylen, "%zu tensors, wsync allows %d", f->n_tensors,
		            WSYNC_MAX_TENSORS);
	return check_tiling(f, why, whylen);
}

int st_parse(const uint8_t *buf, size_t len, struct st_file *out, char *why, size_t whylen)
{
	struct st_file f = { 0 };
	json_error_t jerr;
	uint64_t n = 0;
	json_t *root;
	int err;

	if (len < 8)
		return fail(why, whylen, "%zu bytes: too short for a safetensors file", len);
	for (int i = 7; i >= 0; i--)
		n = n << 8 | buf[i];
	if (n > ST_HEADER_MAX)
		return fail(why, whylen, "header of %" PRIu64 " bytes, more than the %u allowed",
		            n, ST_HEADER_MAX);
	if (n > len - 8)
		return fail(why, whylen, "header length %" PRIu64 " runs past the end of the "
		            "file (%zu bytes)", n, len);
	root = json_loadb((const char *)buf + 8, n, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return fail(why, whylen, "header is not valid JSON: %s (at byte %d)", jerr.text,
		            jerr.position);
	f.data = buf + 8 + n;
	f.data_len = len - 8 - n;
	err = parse_header(root, &f, why, whylen);
	json_decref(root);
	if (err == -ENOMEM)
		snprintf(why, whylen, "out of memory");
	if (err) {
		st_free(&f);
		return err;
	}
	*out = f;
	return 0;
}

int st_header_build(const wsync_tensor_desc *t, size_t n, const struct st_meta *meta,
                    size_t n_meta, char **out, size_t *out_len)
{
	json_t *root = json_object(), *md = json_object();
	uint64_t at = 0;
	size_t jlen, padded;
	char *json, *buf;
	int err = -ENOMEM;

	if (!root || !md)
		goto out;
	for (size_t i = 0; i < n_meta; i++)
		json_object_set_new(md, meta[i].key, json_string(meta[i].value));
	json_object_set(root, "__metadata__", md);
	for (size_t i = 0; i < n; i++) {
		const char *dt = st_dtype_name(t[i].dtype);
		uint64_t bytes = wsync_tensor_bytes(&t[i]);
		json_t *shape = json_array();

		if (!dt || !strcmp(t[i].name, "__metadata__")) {
			err = -EINVAL;
			json_decref(shape);
			goto out;
		}
		for (uint32_t d = 0; d < t[i].ndim; d++)
			json_array_append_new(shape, json_integer((json_int_t)t[i].shape[d]));
		json_object_set_new(root, t[i].name,
		                    json_pack("{s:s, s:o, s:[I, I]}", "dtype", dt, "shape", shape,
		                              "data_offsets", (json_int_t)at,
		                              (json_int_t)(at + bytes)));
		at += bytes;
	}
	json = json_dumps(root, JSON_PRESERVE_ORDER | JSON_COMPACT);
	if (!json)
		goto out;
	jlen = strlen(json);
	padded = (jlen + 7) & ~(size_t)7;
	buf = malloc(8 + padded);
	if (!buf) {
		free(json);
		goto out;
	}
	for (int i = 0; i < 8; i++)
		buf[i] = (char)(((uint64_t)padded >> (8 * i)) & 0xff);
	memcpy(buf + 8, json, jlen);
	memset(buf + 8 + jlen, ' ', padded - jlen);
	free(json);
	*out = buf;
	*out_len = 8 + padded;
	err = 0;
out:
	json_decref(md);
	json_decref(root);
	return err;
}
