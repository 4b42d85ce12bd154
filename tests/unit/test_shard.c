/*
 * test_shard — parts of tensors: the slice of a part along dim 0, along dim
 * 1 (strided) and whole; equal tensor-parallel parts; reading and writing a
 * slice reproduces exactly the same elements as indexing the full tensor;
 * a group's declarations refused when two ranks overlap, when a tensor is
 * cut along two dims, when indices are out of range, and (complete) when
 * bytes are left unowned; accepted when they tile every tensor.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "shm/shard.h"
#include "shm/tensor_layout.h"

/* "w" f32 [6, 8] then "b" f32 [6], placed canonically. */
static void layout(wsync_tensor_desc t[2])
{
	wsync_tensor_desc in[2];
	uint64_t bytes;

	memset(in, 0, sizeof(in));
	strcpy(in[0].name, "w");
	in[0].dtype = WSYNC_F32;
	in[0].ndim = 2;
	in[0].shape[0] = 6;
	in[0].shape[1] = 8;
	strcpy(in[1].name, "b");
	in[1].dtype = WSYNC_F32;
	in[1].ndim = 1;
	in[1].shape[0] = 6;
	assert_int_equal(wsync_layout_compute(in, 2, t, &bytes, NULL, 0), 0);
}

static void slices(void **state)
{
	wsync_tensor_desc t[2];
	wsync_slice s;
	wsync_shard whole = { .tensor = 0, .dim = WSYNC_SHARD_WHOLE };
	wsync_shard rows = { .tensor = 0, .dim = 0, .start = 2, .end = 5 };
	wsync_shard cols = { .tensor = 0, .dim = 1, .start = 4, .end = 8 };
	wsync_shard bad = { .tensor = 1, .dim = 1, .start = 0, .end = 1 };

	(void)state;
	layout(t);
	assert_int_equal(wsync_shard_slice(&t[0], &whole, &s), 0);
	assert_true(s.offset == t[0].offset && s.rows == 1 && s.row_bytes == 6 * 8 * 4);
	assert_int_equal(wsync_shard_slice(&t[0], &rows, &s), 0);
	assert_true(s.offset == t[0].offset + 2 * 32 && s.rows == 1 && s.row_bytes == 3 * 32);
	assert_int_equal(wsync_shard_slice(&t[0], &cols, &s), 0);
	assert_true(s.offset == t[0].offset + 16 && s.rows == 6 && s.row_bytes == 16 &&
	            s.stride == 32);
	assert_int_equal(wsync_shard_slice(&t[1], &bad, &s), -EINVAL);
	rows.end = 7;
	assert_int_equal(wsync_shard_slice(&t[0], &rows, &s), -EINVAL);
	assert_int_equal(wsync_tensor_part(&t[0], 1, 1, 2, &s), 0);
	assert_true(s.offset == t[0].offset + 16 && s.rows == 6 && s.row_bytes == 16);
	assert_int_equal(wsync_tensor_part(&t[0], 0, 2, 3, &s), 0);
	assert_true(s.offset == t[0].offset + 4 * 32 && s.row_bytes == 2 * 32);
	assert_int_equal(wsync_tensor_part(&t[0], 1, 0, 3, &s), -EINVAL);   /* 8 % 3 */
	assert_int_equal(wsync_tensor_part(&t[0], 0, 3, 3, &s), -EINVAL);
}

/* Every element of a column slice read back equals the full tensor's. */
static void read_write_round_trip(void **state)
{
	wsync_tensor_desc t[2];
	wsync_slice s;
	float slab[4096 / 4], part[6 * 3], back[6 * 3];

	(void)state;
	layout(t);
	memset(slab, 0, sizeof(slab));
	for (int i = 0; i < 6 * 8; i++)
		((float *)((char *)slab + t[0].offset))[i] = (float)i;
	assert_int_equal(wsync_tensor_part(&t[0], 1, 0, 1, &s), 0);
	wsync_shard mid = { .tensor = 0, .dim = 1, .start = 3, .end = 6 };
	assert_int_equal(wsync_shard_slice(&t[0], &mid, &s), 0);
	wsync_slice_read(part, slab, &s);
	for (int r = 0; r < 6; r++)
		for (int c = 0; c < 3; c++)
			assert_true(part[r * 3 + c] == (float)(r * 8 + 3 + c));
	for (int i = 0; i < 18; i++)
		back[i] = -part[i];
	wsync_slice_write(slab, back, &s);
	for (int r = 0; r < 6; r++)
		for (int c = 0; c < 8; c++) {
			float want = (float)(r * 8 + c);

			if (c >= 3 && c < 6)
				want = -want;
			assert_true(((float *)((char *)slab + t[0].offset))[r * 8 + c] == want);
		}
}

static void group_checks(void **state)
{
	wsync_tensor_desc t[2];
	char why[256];
	/* rank 0: rows [0,3) of w and all of b; rank 1: rows [3,6) of w */
	wsync_shard r0[] = { { 0, 0, 0, 3 }, { 1, WSYNC_SHARD_WHOLE, 0, 0 } };
	wsync_shard r1[] = { { 0, 0, 3, 6 } };
	const wsync_shard *parts[2] = { r0, r1 };
	size_t n[2] = { 2, 1 };

	(void)state;
	layout(t);
	assert_int_equal(wsync_shards_check(t, 2, parts, n, 2, 1, why, sizeof(why)), 0);
	/* overlap */
	r1[0].start = 2;
	assert_int_equal(wsync_shards_check(t, 2, parts, n, 2, 0, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "overlap"));
	/* a gap: fine while incomplete, refused when complete */
	r1[0].start = 4;
	assert_int_equal(wsync_shards_check(t, 2, parts, n, 2, 0, why, sizeof(why)), 0);
	assert_int_equal(wsync_shards_check(t, 2, parts, n, 2, 1, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "no rank"));
	/* two dims for one tensor */
	r1[0] = (wsync_shard){ 0, 1, 0, 8 };
	assert_int_equal(wsync_shards_check(t, 2, parts, n, 2, 0, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "one dimension"));
	/* whole twice */
	r1[0] = (wsync_shard){ 1, WSYNC_SHARD_WHOLE, 0, 0 };
	assert_int_equal(wsync_shards_check(t, 2, parts, n, 2, 0, why, sizeof(why)), -EINVAL);
	/* out of range tensor / indices */
	r1[0] = (wsync_shard){ 7, 0, 0, 1 };
	assert_int_equal(wsync_shards_check(t, 2, parts, n, 2, 0, why, sizeof(why)), -EINVAL);
	r1[0] = (wsync_shard){ 0, 0, 3, 9 };
	assert_int_equal(wsync_shards_check(t, 2, parts, n, 2, 0, why, sizeof(why)), -EINVAL);
	/* a rank that has not declared yet */
	n[1] = 0;
	assert_int_equal(wsync_shards_check(t, 2, parts, n, 2, 0, why, sizeof(why)), 0);
	assert_int_equal(wsync_shards_check(t, 2, parts, n, 2, 1, why, sizeof(why)), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(slices),
		cmocka_unit_test(read_write_round_trip),
		cmocka_unit_test(group_checks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
