/*
 * test_layout — the canonical placement of tensors in a slab
 * (shm/tensor_layout.h): offsets, slab size, what is rejected, the layout
 * hash, the human-readable diff, and the name index.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm/tensor_layout.h"
#include "wsync.h"

#define PAGE 4096u
#define MANY_DUP 3000

static void desc(wsync_tensor_desc *d, const char *name, uint32_t dtype, uint32_t ndim, ...)
{
	memset(d, 0, sizeof *d);
	snprintf(d->name, sizeof d->name, "%s", name);
	d->dtype = dtype;
	d->ndim = ndim;
	va_list ap;
	va_start(ap, ndim);
	for (uint32_t i = 0; i < ndim && i < WSYNC_MAX_DIMS; i++)
		d->shape[i] = va_arg(ap, uint64_t);
	va_end(ap);
}

static uint64_t round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

/* compute must refuse with -EINVAL and say why */
static void expect_rejected(const wsync_tensor_desc *d, size_t n)
{
	wsync_tensor_desc out[8];
	uint64_t bytes = 0;
	char why[256] = "";
	assert_true(n <= 8);
	int rc = wsync_layout_compute(d, n, out, &bytes, why, sizeof why);
	if (rc != -EINVAL)
		fail_msg("wsync_layout_compute returned %d, expected -EINVAL", rc);
	if (why[0] == 0)
		fail_msg("rejected without a reason in why");
	/* and why may be NULL */
	assert_int_equal(wsync_layout_compute(d, n, out, &bytes, NULL, 0), -EINVAL);
}

static void compute_ok(const wsync_tensor_desc *in, size_t n, wsync_tensor_desc *out,
                       uint64_t *bytes)
{
	char why[256] = "";
	int rc = wsync_layout_compute(in, n, out, bytes, why, sizeof why);
	if (rc != 0)
		fail_msg("wsync_layout_compute returned %d: %s", rc, why);
}

/* ---- placement ------------------------------------------------------------ */

static void offsets_are_aligned_in_order_and_bytes_page_rounded(void **state)
{
	(void)state;
	wsync_tensor_desc d[4], o[4];
	desc(&d[0], "a", WSYNC_F32, 1, (uint64_t)3);          /* 12 bytes */
	desc(&d[1], "b", WSYNC_F64, 2, (uint64_t)10, (uint64_t)10); /* 800 */
	desc(&d[2], "c", WSYNC_U8, 1, (uint64_t)1);           /* 1 */
	desc(&d[3], "d", WSYNC_BF16, 1, (uint64_t)300);       /* 600 */
	uint64_t bytes = 0;
	compute_ok(d, 4, o, &bytes);
	assert_int_equal(o[0].offset, 0);
	assert_int_equal(o[1].offset, 256);
	assert_int_equal(o[2].offset, 1280);   /* 256 + 800 = 1056, next multiple of 256 */
	assert_int_equal(o[3].offset, 1536);
	assert_int_equal(bytes, PAGE);         /* 1536 + 600 rounded up to a page */
	for (int i = 0; i < 4; i++) {
		assert_int_equal(o[i].offset % WSYNC_ALIGN, 0);
		if (i)
			assert_true(o[i].offset >= o[i - 1].offset + wsync_tensor_bytes(&o[i - 1]));
		/* everything but the offset is copied */
		assert_string_equal(o[i].name, d[i].name);
		assert_int_equal(o[i].dtype, d[i].dtype);
		assert_int_equal(o[i].ndim, d[i].ndim);
		assert_memory_equal(o[i].shape, d[i].shape, sizeof d[i].shape);
	}
}

static void slab_larger_than_a_page_rounds_to_pages(void **state)
{
	(void)state;
	wsync_tensor_desc d[2], o[2];
	desc(&d[0], "big", WSYNC_U8, 1, (uint64_t)5000);
	desc(&d[1], "tail", WSYNC_U8, 1, (uint64_t)1);
	uint64_t bytes = 0;
	compute_ok(d, 2, o, &bytes);
	assert_int_equal(o[1].offset, 5120);
	assert_int_equal(bytes, 2 * PAGE);

	desc(&d[0], "exact", WSYNC_F32, 1, (uint64_t)1024);  /* exactly one page */
	compute_ok(d, 1, o, &bytes);
	assert_int_equal(bytes, PAGE);

	desc(&d[0], "m", WSYNC_F32, 3, (uint64_t)7, (uint64_t)11, (uint64_t)13);
	compute_ok(d, 1, o, &bytes);
	assert_int_equal(bytes, round_up(7 * 11 * 13 * 4, PAGE));
}

static void scalar_has_ndim_0_and_one_element(void **state)
{
	(void)state;
	wsync_tensor_desc d[2], o[2];
	desc(&d[0], "lr", WSYNC_F32, 0);
	desc(&d[1], "after", WSYNC_I64, 1, (uint64_t)2);
	uint64_t bytes = 0;
	compute_ok(d, 2, o, &bytes);
	assert_int_equal(wsync_tensor_bytes(&o[0]), 4);
	assert_int_equal(o[0].offset, 0);
	assert_int_equal(o[1].offset, 256);
	assert_int_equal(bytes, PAGE);
}

static void empty_tensor_takes_no_bytes_but_keeps_its_name(void **state)
{
	(void)state;
	wsync_tensor_desc with[3], without[2], o3[3], o2[2];
	desc(&with[0], "a", WSYNC_F32, 1, (uint64_t)3);
	desc(&with[1], "empty", WSYNC_F32, 2, (uint64_t)0, (uint64_t)5);
	desc(&with[2], "b", WSYNC_F32, 1, (uint64_t)2);
	without[0] = with[0];
	without[1] = with[2];
	uint64_t b3 = 0, b2 = 0;
	compute_ok(with, 3, o3, &b3);
	compute_ok(without, 2, o2, &b2);
	assert_int_equal(wsync_tensor_bytes(&o3[1]), 0);
	assert_string_equal(o3[1].name, "empty");
	assert_int_equal(o3[1].offset % WSYNC_ALIGN, 0);
	assert_int_equal(o3[2].offset, o2[1].offset);
	assert_int_equal(b3, b2);
}

static void offsets_given_on_input_are_ignored(void **state)
{
	(void)state;
	wsync_tensor_desc d[2], clean[2], o1[2], o2[2];
	desc(&clean[0], "x", WSYNC_F16, 1, (uint64_t)100);
	desc(&clean[1], "y", WSYNC_F16, 1, (uint64_t)100);
	memcpy(d, clean, sizeof d);
	d[0].offset = 12345;
	d[1].offset = UINT64_MAX;
	uint64_t b1 = 0, b2 = 0;
	compute_ok(clean, 2, o1, &b1);
	compute_ok(d, 2, o2, &b2);
	assert_int_equal(o1[0].offset, o2[0].offset);
	assert_int_equal(o1[1].offset, o2[1].offset);
	assert_int_equal(b1, b2);
}

static void output_may_alias_input(void **state)
{
	(void)state;
	wsync_tensor_desc d[3], ref[3];
	desc(&d[0], "p", WSYNC_I8, 1, (uint64_t)17);
	desc(&d[1], "q", WSYNC_I16, 1, (uint64_t)300);
	desc(&d[2], "r", WSYNC_BOOL, 0);
	uint64_t b1 = 0, b2 = 0;
	compute_ok(d, 3, ref, &b1);
	compute_ok(d, 3, d, &b2);
	assert_memory_equal(d, ref, sizeof d);
	assert_int_equal(b1, b2);
}

static void dtype_sizes_and_names(void **state)
{
	(void)state;
	static const struct { uint32_t t; size_t size; const char *name; } tab[] = {
		{ WSYNC_F32, 4, "f32" }, { WSYNC_F16, 2, "f16" }, { WSYNC_BF16, 2, "bf16" },
		{ WSYNC_F64, 8, "f64" }, { WSYNC_I8, 1, "i8" }, { WSYNC_I16, 2, "i16" },
		{ WSYNC_I32, 4, "i32" }, { WSYNC_I64, 8, "i64" }, { WSYNC_U8, 1, "u8" },
		{ WSYNC_BOOL, 1, "bool" }, { WSYNC_U16, 2, "u16" }, { WSYNC_U32, 4, "u32" },
		{ WSYNC_U64, 8, "u64" }, { WSYNC_F8_E4M3FN, 1, "f8_e4m3fn" },
		{ WSYNC_F8_E5M2, 1, "f8_e5m2" },
	};
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
		assert_int_equal(wsync_dtype_size(tab[i].t), tab[i].size);
		assert_string_equal(wsync_dtype_name(tab[i].t), tab[i].name);
	}
	assert_int_equal(wsync_dtype_size(0), 0);
	assert_int_equal(wsync_dtype_size(WSYNC_F8_E5M2 + 1), 0);
	assert_string_equal(wsync_dtype_name(WSYNC_F8_E5M2 + 1), "?");
	assert_string_equal(wsync_dtype_name(0), "?");
	assert_string_equal(wsync_dtype_name(999), "?");

	wsync_tensor_desc d;
	desc(&d, "t", WSYNC_F64, 3, (uint64_t)2, (uint64_t)3, (uint64_t)5);
	assert_int_equal(wsync_tensor_bytes(&d), 2 * 3 * 5 * 8);
}

/* The codes are ABI (shared memory, the protocol, the Python table): the
 * dtypes added for GPU models come after bool and nothing before moved. */
static void dtype_codes_are_stable(void **state)
{
	(void)state;
	assert_int_equal(WSYNC_F32, 1);
	assert_int_equal(WSYNC_U8, 9);
	assert_int_equal(WSYNC_BOOL, 10);
	assert_int_equal(WSYNC_U16, 11);
	assert_int_equal(WSYNC_U32, 12);
	assert_int_equal(WSYNC_U64, 13);
	assert_int_equal(WSYNC_F8_E4M3FN, 14);
	assert_int_equal(WSYNC_F8_E5M2, 15);
}

/* Each added dtype lays out with its element size and changes the hash. */
static void added_dtypes_lay_out(void **state)
{
	(void)state;
	static const uint32_t t[] = { WSYNC_U16, WSYNC_U32, WSYNC_U64, WSYNC_F8_E4M3FN,
	                              WSYNC_F8_E5M2 };
	static const uint64_t size[] = { 2, 4, 8, 1, 1 };
	wsync_tensor_desc d[5], o[5];
	uint64_t bytes = 0, off = 0, h;

	for (size_t i = 0; i < 5; i++)
		desc(&d[i], (const char *[]){ "a", "b", "c", "d", "e" }[i], t[i], 2,
		     (uint64_t)3, (uint64_t)100);
	compute_ok(d, 5, o, &bytes);
	for (size_t i = 0; i < 5; i++) {
		assert_int_equal(wsync_tensor_bytes(&o[i]), 300 * size[i]);
		assert_int_equal(o[i].offset, off);
		off += (300 * size[i] + WSYNC_ALIGN - 1) / WSYNC_ALIGN * WSYNC_ALIGN;
	}
	h = wsync_layout_hash(o, 5);
	o[3].dtype = WSYNC_F8_E5M2;             /* same size, other dtype */
	assert_int_not_equal(wsync_layout_hash(o, 5), h);
	o[3].dtype = WSYNC_U8;
	assert_int_not_equal(wsync_layout_hash(o, 5), h);
}

/* ---- rejections ----------------------------------------------------------------- */

static void rejects_zero_tensors(void **state)
{
	(void)state;
	wsync_tensor_desc d[1];
	desc(&d[0], "a", WSYNC_F32, 1, (uint64_t)1);
	expect_rejected(d, 0);
}

static void rejects_shape_product_overflow(void **state)
{
	(void)state;
	wsync_tensor_desc d[2];
	/* element count overflows */
	desc(&d[0], "a", WSYNC_U8, 3, (uint64_t)1 << 32, (uint64_t)1 << 32, (uint64_t)2);
	expect_rejected(d, 1);
	/* count fits, count * element size does not */
	desc(&d[0], "a", WSYNC_F64, 1, (uint64_t)1 << 62);
	expect_rejected(d, 1);
	/* the size fits, rounding it up to WSYNC_ALIGN or a page does not */
	desc(&d[0], "a", WSYNC_U8, 1, UINT64_MAX - 100);
	expect_rejected(d, 1);
	/* each tensor fits, their sum does not */
	desc(&d[0], "a", WSYNC_U8, 1, (uint64_t)1 << 63);
	desc(&d[1], "b", WSYNC_U8, 1, (uint64_t)1 << 63);
	expect_rejected(d, 2);
	/* a 0 dim after a huge product is still an overflow check, not a crash */
	desc(&d[0], "a", WSYNC_U8, 3, UINT64_MAX, UINT64_MAX, (uint64_t)0);
	wsync_tensor_desc o[1];
	uint64_t bytes;
	int rc = wsync_layout_compute(d, 1, o, &bytes, NULL, 0);
	assert_true(rc == 0 || rc == -EINVAL);
}

static void rejects_duplicate_names(void **state)
{
	(void)state;
	wsync_tensor_desc d[4];
	desc(&d[0], "w", WSYNC_F32, 1, (uint64_t)4);
	desc(&d[1], "b", WSYNC_F32, 1, (uint64_t)4);
	desc(&d[2], "c", WSYNC_F32, 1, (uint64_t)4);
	desc(&d[3], "w", WSYNC_F16, 1, (uint64_t)8);   /* same name, other dtype/shape */
	expect_rejected(d, 4);
	desc(&d[3], "b", WSYNC_F32, 1, (uint64_t)4);   /* exact duplicate of d[1] */
	expect_rejected(d, 4);

	/* a duplicate far apart among many tensors */
	wsync_tensor_desc *many = calloc(MANY_DUP, sizeof *many);
	wsync_tensor_desc *out = calloc(MANY_DUP, sizeof *out);
	assert_non_null(many);
	assert_non_null(out);
	for (int i = 0; i < MANY_DUP; i++) {
		desc(&many[i], "", WSYNC_U8, 1, (uint64_t)1);
		snprintf(many[i].name, sizeof many[i].name, "t%d", i);
	}
	uint64_t bytes = 0;
	assert_int_equal(wsync_layout_compute(many, MANY_DUP, out, &bytes, NULL, 0), 0);
	snprintf(many[MANY_DUP - 1].name, sizeof many[0].name, "t%d", 3);
	assert_int_equal(wsync_layout_compute(many, MANY_DUP, out, &bytes, NULL, 0), -EINVAL);
	free(many);
	free(out);
}

static void rejects_bad_dtype(void **state)
{
	(void)state;
	wsync_tensor_desc d[1];
	const uint32_t bad[] = { 0, WSYNC_F8_E5M2 + 1, 255, UINT32_MAX };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		desc(&d[0], "x", bad[i], 1, (uint64_t)4);
		expect_rejected(d, 1);
	}
}

static void rejects_ndim_above_max_dims(void **state)
{
	(void)state;
	wsync_tensor_desc d[1];
	desc(&d[0], "x", WSYNC_F32, 1, (uint64_t)4);
	d[0].ndim = WSYNC_MAX_DIMS + 1;
	expect_rejected(d, 1);
	d[0].ndim = UINT32_MAX;
	expect_rejected(d, 1);
	/* the maximum itself is fine */
	desc(&d[0], "x", WSYNC_F32, 8, (uint64_t)1, (uint64_t)2, (uint64_t)1, (uint64_t)2,
	     (uint64_t)1, (uint64_t)2, (uint64_t)1, (uint64_t)2);
	wsync_tensor_desc o[1];
	uint64_t bytes = 0;
	compute_ok(d, 1, o, &bytes);
	assert_int_equal(wsync_tensor_bytes(&o[0]), 16 * 4);
}

static void rejects_nonzero_shape_past_ndim(void **state)
{
	(void)state;
	wsync_tensor_desc d[1];
	desc(&d[0], "x", WSYNC_F32, 1, (uint64_t)4);
	d[0].shape[1] = 3;
	expect_rejected(d, 1);
	desc(&d[0], "scalar", WSYNC_F32, 0);
	d[0].shape[0] = 1;
	expect_rejected(d, 1);
	desc(&d[0], "x", WSYNC_F32, 7, (uint64_t)1, (uint64_t)1, (uint64_t)1, (uint64_t)1,
	     (uint64_t)1, (uint64_t)1, (uint64_t)1);
	d[0].shape[7] = 1;
	expect_rejected(d, 1);
}

static void rejects_unterminated_name(void **state)
{
	(void)state;
	wsync_tensor_desc d[1];
	desc(&d[0], "x", WSYNC_F32, 1, (uint64_t)4);
	memset(d[0].name, 'n', sizeof d[0].name);   /* no NUL anywhere */
	expect_rejected(d, 1);
	/* the longest valid name: WSYNC_NAME_MAX - 1 characters */
	d[0].name[WSYNC_NAME_MAX - 1] = 0;
	wsync_tensor_desc o[1];
	uint64_t bytes = 0;
	compute_ok(d, 1, o, &bytes);
}

static void rejects_empty_and_unprintable_names(void **state)
{
	(void)state;
	wsync_tensor_desc d[1];
	const char *bad[] = { "", "tab\there", "nl\n", "del\x7f", "caf\xc3\xa9" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		desc(&d[0], bad[i], WSYNC_F32, 1, (uint64_t)4);
		expect_rejected(d, 1);
	}
	/* any printable ASCII is fine, spaces and punctuation included */
	desc(&d[0], "layer 1/attn.q_proj[0]:weight~!", WSYNC_F32, 1, (uint64_t)4);
	wsync_tensor_desc o[1];
	uint64_t bytes = 0;
	compute_ok(d, 1, o, &bytes);
}

/* ---- hash ------------------------------------------------------------------------- */

static void model3(wsync_tensor_desc d[3])
{
	desc(&d[0], "emb", WSYNC_BF16, 2, (uint64_t)1000, (uint64_t)64);
	desc(&d[1], "fc.weight", WSYNC_F32, 2, (uint64_t)64, (uint64_t)10);
	desc(&d[2], "fc.bias", WSYNC_F32, 1, (uint64_t)10);
	uint64_t bytes;
	assert_int_equal(wsync_layout_compute(d, 3, d, &bytes, NULL, 0), 0);
}

static void hash_is_stable(void **state)
{
	(void)state;
	wsync_tensor_desc a[3], b[3];
	model3(a);
	model3(b);
	uint64_t h = wsync_layout_hash(a, 3);
	assert_int_equal(wsync_layout_hash(a, 3), h);
	assert_int_equal(wsync_layout_hash(b, 3), h);
	wsync_tensor_desc *copy = malloc(sizeof a);
	assert_non_null(copy);
	memcpy(copy, a, sizeof a);
	assert_int_equal(wsync_layout_hash(copy, 3), h);
	free(copy);
}

static void hash_differs_for_any_change(void **state)
{
	(void)state;
	wsync_tensor_desc base[3], d[3];
	model3(base);
	uint64_t h = wsync_layout_hash(base, 3);
	uint64_t seen[8];
	int n = 0;

	memcpy(d, base, sizeof d);
	d[1].name[0] = 'g';                      /* a name */
	seen[n++] = wsync_layout_hash(d, 3);
	memcpy(d, base, sizeof d);
	d[2].dtype = WSYNC_F16;                  /* a dtype */
	seen[n++] = wsync_layout_hash(d, 3);
	memcpy(d, base, sizeof d);
	d[0].shape[1] = 65;                      /* a dim */
	seen[n++] = wsync_layout_hash(d, 3);
	memcpy(d, base, sizeof d);
	d[2].ndim = 2;                           /* ndim ([10] vs [10, 0]) */
	seen[n++] = wsync_layout_hash(d, 3);
	memcpy(d, base, sizeof d);
	d[1] = base[2];                          /* the order */
	d[2] = base[1];
	seen[n++] = wsync_layout_hash(d, 3);
	seen[n++] = wsync_layout_hash(base, 2);  /* the count */

	for (int i = 0; i < n; i++) {
		if (seen[i] == h)
			fail_msg("change %d did not change the hash", i);
		for (int j = 0; j < i; j++)
			if (seen[i] == seen[j])
				fail_msg("changes %d and %d hash alike", i, j);
	}
}

/* ---- diff ----------------------------------------------------------------------------- */

static void diff_of_identical_layouts_is_0(void **state)
{
	(void)state;
	wsync_tensor_desc a[3], b[3];
	model3(a);
	model3(b);
	char why[256];
	assert_int_equal(wsync_layout_diff(a, 3, b, 3, why, sizeof why), 0);
}

static void diff_names_the_tensor_and_both_shapes(void **state)
{
	(void)state;
	wsync_tensor_desc a[3], b[3];
	model3(a);
	model3(b);
	b[2].shape[0] = 12;
	char why[256] = "";
	assert_int_not_equal(wsync_layout_diff(a, 3, b, 3, why, sizeof why), 0);
	if (!strstr(why, "fc.bias") || !strstr(why, "10") || !strstr(why, "12"))
		fail_msg("diff text does not name 'fc.bias' with shapes 10 and 12: \"%s\"", why);
}

static void diff_names_the_tensor_whose_dtype_differs(void **state)
{
	(void)state;
	wsync_tensor_desc a[3], b[3];
	model3(a);
	model3(b);
	b[1].dtype = WSYNC_F16;
	char why[256] = "";
	assert_int_not_equal(wsync_layout_diff(a, 3, b, 3, why, sizeof why), 0);
	if (!strstr(why, "fc.weight"))
		fail_msg("diff text does not name 'fc.weight': \"%s\"", why);
	if (!strstr(why, "f16") || !strstr(why, "f32"))
		fail_msg("diff text does not name both dtypes: \"%s\"", why);
}

static void diff_reports_names_and_counts(void **state)
{
	(void)state;
	wsync_tensor_desc a[3], b[3];
	model3(a);
	model3(b);
	snprintf(b[0].name, sizeof b[0].name, "embedding");
	char why[256] = "";
	assert_int_not_equal(wsync_layout_diff(a, 3, b, 3, why, sizeof why), 0);
	if (!strstr(why, "emb"))
		fail_msg("diff text does not name the renamed tensor: \"%s\"", why);

	why[0] = 0;
	assert_int_not_equal(wsync_layout_diff(a, 3, b, 2, why, sizeof why), 0);
	assert_true(why[0] != 0);
	why[0] = 0;
	assert_int_not_equal(wsync_layout_diff(a, 2, a, 3, why, sizeof why), 0);
	assert_true(why[0] != 0);
}

static void diff_truncates_to_the_buffer(void **state)
{
	(void)state;
	wsync_tensor_desc a[3], b[3];
	model3(a);
	model3(b);
	b[2].shape[0] = 12;
	char *why = malloc(8);   /* exact size: a sanitizer sees any overrun */
	assert_non_null(why);
	assert_int_not_equal(wsync_layout_diff(a, 3, b, 3, why, 8), 0);
	assert_true(memchr(why, 0, 8) != NULL);
	free(why);
	assert_int_not_equal(wsync_layout_diff(a, 3, b, 3, NULL, 0), 0);
}

/* ---- name index ------------------------------------------------------------------------- */

#define MANY 5000

static void index_finds_every_name_among_many(void **state)
{
	(void)state;
	wsync_tensor_desc *d = calloc(MANY, sizeof *d);
	assert_non_null(d);
	for (int i = 0; i < MANY; i++) {
		desc(&d[i], "", WSYNC_F32, 1, (uint64_t)1 + (uint64_t)i % 7);
		snprintf(d[i].name, sizeof d[i].name, "layers.%d.mlp.weight", i);
	}
	struct wsync_name_index ix;
	memset(&ix, 0, sizeof ix);
	assert_int_equal(wsync_name_index_build(&ix, d, MANY), 0);
	uint64_t cap = (uint64_t)ix.mask + 1;
	assert_true(cap >= 2 * MANY);
	assert_true((cap & (cap - 1)) == 0);
	for (int i = 0; i < MANY; i++) {
		char name[64];
		snprintf(name, sizeof name, "layers.%d.mlp.weight", i);
		long at = wsync_name_index_find(&ix, d, name);
		if (at != i)
			fail_msg("'%s' found at %ld, expected %d", name, at, i);
	}
	wsync_name_index_free(&ix);
	free(d);
}

static void index_misses_absent_names(void **state)
{
	(void)state;
	wsync_tensor_desc *d = calloc(MANY, sizeof *d);
	assert_non_null(d);
	for (int i = 0; i < MANY; i++) {
		desc(&d[i], "", WSYNC_F32, 1, (uint64_t)1);
		snprintf(d[i].name, sizeof d[i].name, "t%d", i);
	}
	struct wsync_name_index ix;
	memset(&ix, 0, sizeof ix);
	assert_int_equal(wsync_name_index_build(&ix, d, MANY), 0);
	const char *absent[] = { "", "t", "t5000", "t-1", "T1", "t1 ", "t12345", "x" };
	for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
		long at = wsync_name_index_find(&ix, d, absent[i]);
		if (at != -1)
			fail_msg("absent name '%s' found at %ld", absent[i], at);
	}
	wsync_name_index_free(&ix);
	free(d);
}

static void index_of_one_tensor(void **state)
{
	(void)state;
	wsync_tensor_desc d[1];
	desc(&d[0], "only", WSYNC_U8, 0);
	struct wsync_name_index ix;
	memset(&ix, 0, sizeof ix);
	assert_int_equal(wsync_name_index_build(&ix, d, 1), 0);
	assert_int_equal(wsync_name_index_find(&ix, d, "only"), 0);
	assert_int_equal(wsync_name_index_find(&ix, d, "other"), -1);
	wsync_name_index_free(&ix);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(offsets_are_aligned_in_order_and_bytes_page_rounded),
		cmocka_unit_test(slab_larger_than_a_page_rounds_to_pages),
		cmocka_unit_test(scalar_has_ndim_0_and_one_element),
		cmocka_unit_test(empty_tensor_takes_no_bytes_but_keeps_its_name),
		cmocka_unit_test(offsets_given_on_input_are_ignored),
		cmocka_unit_test(output_may_alias_input),
		cmocka_unit_test(dtype_sizes_and_names),
		cmocka_unit_test(dtype_codes_are_stable),
		cmocka_unit_test(added_dtypes_lay_out),
		cmocka_unit_test(rejects_zero_tensors),
		cmocka_unit_test(rejects_shape_product_overflow),
		cmocka_unit_test(rejects_duplicate_names),
		cmocka_unit_test(rejects_bad_dtype),
		cmocka_unit_test(rejects_ndim_above_max_dims),
		cmocka_unit_test(rejects_nonzero_shape_past_ndim),
		cmocka_unit_test(rejects_unterminated_name),
		cmocka_unit_test(rejects_empty_and_unprintable_names),
		cmocka_unit_test(hash_is_stable),
		cmocka_unit_test(hash_differs_for_any_change),
		cmocka_unit_test(diff_of_identical_layouts_is_0),
		cmocka_unit_test(diff_names_the_tensor_and_both_shapes),
		cmocka_unit_test(diff_names_the_tensor_whose_dtype_differs),
		cmocka_unit_test(diff_reports_names_and_counts),
		cmocka_unit_test(diff_truncates_to_the_buffer),
		cmocka_unit_test(index_finds_every_name_among_many),
		cmocka_unit_test(index_misses_absent_names),
		cmocka_unit_test(index_of_one_tensor),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
