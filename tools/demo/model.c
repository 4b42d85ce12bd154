/* tools/demo/model.c — the synthetic model: its layout and its byte pattern
 * (described in demo.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "demo.h"

#define GOLDEN   0x9E3779B97F4A7C15ull
#define HIDDEN   1023    /* odd, so most tensors end off an 8-byte boundary */

/* ---- the pattern ---- */

static uint64_t pattern_seed(uint64_t step)
{
	return step * GOLDEN;
}

void pattern_fill(void *p, uint64_t offset, uint64_t bytes, uint64_t step)
{
	uint64_t seed = pattern_seed(step), first = offset / 8, words = bytes / 8;
	uint64_t *w = p;

	for (uint64_t i = 0; i < words; i++)
		w[i] = seed ^ (first + i);
	if (bytes % 8) {
		uint64_t last = seed ^ (first + words);
		memcpy((char *)p + words * 8, &last, bytes % 8);
	}
}

uint8_t pattern_byte(uint64_t offset, uint64_t at, uint64_t step)
{
	uint64_t word = pattern_seed(step) ^ ((offset + at) / 8);
	uint8_t b[8];

	memcpy(b, &word, sizeof b);
	return b[(offset + at) % 8];
}

static uint64_t first_differing_byte(uint64_t got, uint64_t want)
{
	uint8_t g[8], w[8];
	uint64_t i = 0;

	memcpy(g, &got, sizeof g);
	memcpy(w, &want, sizeof w);
	while (i < 7 && g[i] == w[i])
		i++;
	return i;
}

/* Index of the first byte of a region that does not hold the pattern of
 * `step`, or `bytes` if every byte does. Differences are OR-ed over chunks
 * (a loop the compiler vectorises) and located only in a bad chunk. */
uint64_t pattern_find_mismatch(const void *p, uint64_t offset, uint64_t bytes,
                               uint64_t step)
{
	enum { CHUNK = 4096 };
	uint64_t seed = pattern_seed(step), first = offset / 8, words = bytes / 8;
	const uint64_t *w = p;

	for (uint64_t base = 0; base < words; base += CHUNK) {
		uint64_t n = words - base < CHUNK ? words - base : CHUNK, diff = 0;

		for (uint64_t i = 0; i < n; i++)
			diff |= w[base + i] ^ (seed ^ (first + base + i));
		if (!diff)
			continue;
		for (uint64_t i = 0; i < n; i++) {
			uint64_t want = seed ^ (first + base + i);
			if (w[base + i] != want)
				return (base + i) * 8 + first_differing_byte(w[base + i], want);
		}
	}
	for (uint64_t at = words * 8; at < bytes; at++)
		if (((const uint8_t *)p)[at] != pattern_byte(offset, at, step))
			return at;
	return bytes;
}

/* ---- the layout ---- */

/* Rows of a [rows, HIDDEN] matrix of `share` bytes; odd, so the byte size of
 * a bf16 or f32 matrix is not a multiple of 8 and the tail path is used. */
static uint64_t rows_for(uint64_t share, size_t elem_size)
{
	uint64_t rows = share / (HIDDEN * elem_size);

	return rows ? rows | 1 : 1;
}

static void tensor_set(wsync_tensor_desc *d, const char *name, uint32_t dtype,
                       uint32_t ndim, uint64_t dim0, uint64_t dim1)
{
	memset(d, 0, sizeof *d);
	snprintf(d->name, sizeof d->name, "%s", name);
	d->dtype = dtype;
	d->ndim = ndim;
	d->shape[0] = dim0;
	d->shape[1] = ndim > 1 ? dim1 : 0;
}

void model_describe(wsync_tensor_desc *t, size_t n, uint64_t mib)
{
	uint64_t n_bias = (n - 1) / 2, n_matrix = n - n_bias;
	uint64_t bias_bytes = HIDDEN * sizeof(float), total = mib << 20;
	uint64_t matrices = total > n_bias * bias_bytes ? total - n_bias * bias_bytes : 0;
	uint64_t share = matrices / n_matrix;
	char name[WSYNC_NAME_MAX];

	tensor_set(&t[0], "embed.weight", WSYNC_BF16, 2, rows_for(share, 2), HIDDEN);
	for (size_t i = 1; i < n; i++) {
		if (i % 2) {
			snprintf(name, sizeof name, "layers.%zu.weight", (i - 1) / 2);
			tensor_set(&t[i], name, WSYNC_F32, 2, rows_for(share, 4), HIDDEN);
		} else {
			snprintf(name, sizeof name, "layers.%zu.bias", i / 2 - 1);
			tensor_set(&t[i], name, WSYNC_F32, 1, HIDDEN, 0);
		}
	}
}

bool model_is_demo(const wsync_tensor_desc *t, size_t n, char *why, size_t len)
{
	char want[WSYNC_NAME_MAX];

	if (!n || strcmp(t[0].name, "embed.weight") || t[0].dtype != WSYNC_BF16 ||
	    t[0].ndim != 2 || t[0].shape[1] != HIDDEN) {
		snprintf(why, len, "its first tensor is '%s', not the demo's embed.weight "
		         "[rows, %d] bf16", n ? t[0].name : "(none)", HIDDEN);
		return false;
	}
	for (size_t i = 1; i < n; i++) {
		bool weight = i % 2;

		snprintf(want, sizeof want, weight ? "layers.%zu.weight" : "layers.%zu.bias",
		         weight ? (i - 1) / 2 : i / 2 - 1);
		if (strcmp(t[i].name, want) || t[i].dtype != WSYNC_F32 ||
		    t[i].ndim != (weight ? 2u : 1u) ||
		    t[i].shape[weight ? 1 : 0] != HIDDEN) {
			snprintf(why, len, "tensor %zu is '%s', not the demo's %s", i, t[i].name, want);
			return false;
		}
	}
	return true;
}

bool model_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (!n || n >= WSYNC_NAME_MAX) {
		say_error("--model: a name of 1..%d bytes, not '%.40s'", WSYNC_NAME_MAX - 1, name);
		return false;
	}
	return true;
}

static void shape_format(const wsync_tensor_desc *d, char *buf, size_t len)
{
	size_t used = (size_t)snprintf(buf, len, "[");

	for (uint32_t k = 0; k < d->ndim && used < len; k++)
		used += (size_t)snprintf(buf + used, len - used, "%s%" PRIu64,
		                         k ? ", " : "", d->shape[k]);
	if (used < len)
		snprintf(buf + used, len - used, "]");
}

void model_print(const char *model, const wsync_tensor_desc *t, size_t n,
                 uint64_t hz)
{
	uint64_t total = 0;
	char shape[96];

	for (size_t i = 0; i < n; i++)
		total += wsync_tensor_bytes(&t[i]);
	printf("model '%s': %zu tensors, %.1f MiB, published at %" PRIu64 " Hz\n",
	       model, n, mib_of(total), hz);
	for (size_t i = 0; i < n; i++) {
		shape_format(&t[i], shape, sizeof shape);
		printf("  %-18s %-5s %-14s %9.3f MiB\n", t[i].name,
		       wsync_dtype_name(t[i].dtype), shape, mib_of(wsync_tensor_bytes(&t[i])));
	}
}
