/*
 * test_safetensors — tools/ctl/safetensors.c: a header built by
 * st_header_build parses back to the same tensors and metadata (8-byte
 * length, JSON padded with spaces to 8 bytes, offsets back to back); a file
 * whose entries are listed out of data order is read in data order; empty
 * tensors may share an offset; and every malformed file is refused with a
 * reason (length past the file or over the cap, bad JSON, duplicates,
 * unknown dtype, size mismatch, overlap, gap, truncation, trailing bytes).
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tools/ctl/safetensors.h"

static char why[512];

/* A file of header JSON text hdr followed by data_len bytes of data. */
static uint8_t *file_of(const char *hdr, size_t data_len, size_t *len)
{
	size_t n = strlen(hdr);
	uint8_t *buf = calloc(1, 8 + n + data_len + 1);

	for (int i = 0; i < 8; i++)
		buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
	memcpy(buf + 8, hdr, n);
	for (size_t i = 0; i < data_len; i++)
		buf[8 + n + i] = (uint8_t)i;
	*len = 8 + n + data_len;
	return buf;
}

static int parse_text(const char *hdr, size_t data_len, struct st_file *f)
{
	size_t len;
	uint8_t *buf = file_of(hdr, data_len, &len);
	int err = st_parse(buf, len, f, why, sizeof(why));

	if (!err)
		st_free(f);
	free(buf);
	return err;
}

static void built_header_parses_back(void **state)
{
	wsync_tensor_desc t[3] = {
		{ .name = "w", .dtype = WSYNC_BF16, .ndim = 2, .shape = { 3, 5 } },
		{ .name = "s", .dtype = WSYNC_F64, .ndim = 0 },
		{ .name = "e", .dtype = WSYNC_BOOL, .ndim = 1, .shape = { 0 } },
	};
	struct st_meta meta[] = { { "k", "v" }, { "wsync_step", "12" } };
	struct st_file f;
	size_t hlen, len;
	char *hdr;
	uint8_t *buf;

	(void)state;
	assert_int_equal(st_header_build(t, 3, meta, 2, &hdr, &hlen), 0);
	assert_int_equal(hlen % 8, 0);
	assert_memory_equal(hdr + 8, "{\"__metadata__\":{\"k\":\"v\",\"wsync_step\":\"12\"},"
	                    "\"w\":{\"dtype\":\"BF16\",\"shape\":[3,5],\"data_offsets\":[0,30]}", 85);
	len = hlen + 38;
	buf = calloc(1, len);
	memcpy(buf, hdr, hlen);
	assert_int_equal(st_parse(buf, len, &f, why, sizeof(why)), 0);
	assert_int_equal(f.n_tensors, 3);
	assert_string_equal(f.tensors[0].desc.name, "w");
	assert_int_equal(f.tensors[0].desc.dtype, WSYNC_BF16);
	assert_int_equal(f.tensors[0].desc.shape[1], 5);
	assert_int_equal(f.tensors[1].begin, 30);
	assert_int_equal(f.tensors[1].desc.ndim, 0);
	assert_int_equal(f.tensors[2].begin, 38);
	assert_int_equal(f.tensors[2].end, 38);
	assert_ptr_equal(f.data, buf + hlen);
	assert_int_equal(f.data_len, 38);
	assert_string_equal(st_meta_get(&f, "wsync_step"), "12");
	assert_null(st_meta_get(&f, "absent"));
	st_free(&f);
	free(buf);
	free(hdr);
}

static void entries_are_read_in_data_order(void **state)
{
	struct st_file f;
	size_t len;
	uint8_t *buf = file_of("{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
	                       "\"z\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[4,4]},"
	                       "\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
	                       6, &len);

	(void)state;
	assert_int_equal(st_parse(buf, len, &f, why, sizeof(why)), 0);
	assert_string_equal(f.tensors[0].desc.name, "a");
	assert_string_equal(f.tensors[1].desc.name, "z");
	assert_string_equal(f.tensors[2].desc.name, "b");
	st_free(&f);
	free(buf);
}

static void refuses(const char *hdr, size_t data_len, const char *reason)
{
	struct st_file f;

	why[0] = 0;
	assert_int_equal(parse_text(hdr, data_len, &f), -EINVAL);
	if (!strstr(why, reason))
		fail_msg("refused for '%s', expected '%s'", why, reason);
}

#define U8(name, b, e, n) "\"" name "\":{\"dtype\":\"U8\",\"shape\":[" #n "],\"data_offsets\":[" #b "," #e "]}"

static void malformed_files_are_refused(void **state)
{
	(void)state;
	refuses("{" U8("a", 0, 4, 4) "}", 3, "truncated");
	refuses("{" U8("a", 0, 4, 4) "}", 5, "cover");
	refuses("{" U8("a", 0, 4, 4) ",", 4, "not valid JSON");
	refuses("[]", 0, "not a JSON object");
	refuses("{" U8("a", 0, 4, 4) "," U8("a", 4, 8, 4) "}", 8, "duplicate");
	refuses("{\"a\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
	        "not supported (wsync has F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL U64 U32 U16 "
	        "F8_E4M3 F8_E5M2)");
	refuses("{" U8("a", 0, 4, 3) "}", 4, "make 3 bytes");
	refuses("{" U8("a", 0, 4, 4) "," U8("b", 3, 5, 2) "}", 5, "overlap");
	refuses("{" U8("a", 0, 4, 4) "," U8("b", 5, 7, 2) "}", 7, "gap");
	refuses("{" U8("a", 4, 0, 0) "}", 0, "end before begin");
	refuses("{\"a\":5}", 0, "not an object");
	refuses("{\"__metadata__\":{\"k\":[]}," U8("a", 0, 1, 1) "}", 1, "not a string");
	refuses("{\"__metadata__\":{}}", 0, "no tensors");
	refuses("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],"
	        "\"data_offsets\":[0,0]}}", 0, "overflows");
}

static void header_length_is_checked(void **state)
{
	uint8_t buf[16] = { 0 };
	struct st_file f;

	(void)state;
	assert_int_equal(st_parse(buf, 7, &f, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "too short"));
	buf[0] = 9;                                  /* 9 bytes of header, 8 left */
	assert_int_equal(st_parse(buf, 16, &f, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "past the end"));
	memset(buf, 0, 8);
	buf[3] = 0x10;                               /* 256 MiB > the cap */
	assert_int_equal(st_parse(buf, 16, &f, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "allowed"));
	memset(buf, 0xff, 8);                        /* 2^64 - 1 */
	assert_int_equal(st_parse(buf, 16, &f, why, sizeof(why)), -EINVAL);
}

static void dtype_names_map_both_ways(void **state)
{
	static const char *const names[] = { "F64", "F32", "F16", "BF16", "I64", "I32", "I16",
	                                     "I8", "U64", "U32", "U16", "U8", "BOOL",
	                                     "F8_E4M3", "F8_E5M2" };

	(void)state;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		assert_string_equal(st_dtype_name(st_dtype_from_name(names[i])), names[i]);
	assert_int_equal(st_dtype_from_name("F8_E4M3"), WSYNC_F8_E4M3FN);
	assert_int_equal(st_dtype_from_name("F8_E5M2"), WSYNC_F8_E5M2);
	assert_int_equal(st_dtype_from_name("U16"), WSYNC_U16);
	/* names safetensors has and wsync does not, or that are not safetensors' */
	assert_int_equal(st_dtype_from_name("F8_E4M3FN"), 0);
	assert_int_equal(st_dtype_from_name("F8_E8M0"), 0);
	assert_int_equal(st_dtype_from_name("u16"), 0);
	assert_null(st_dtype_name(0));
	assert_null(st_dtype_name(WSYNC_F8_E5M2 + 1));
}

/* The unsigned and FP8 dtypes go out in a header and come back with their
 * element sizes (2, 4, 8, 1, 1 bytes) checked against the data offsets. */
static void added_dtypes_round_trip(void **state)
{
	wsync_tensor_desc t[5] = {
		{ .name = "u16", .dtype = WSYNC_U16, .ndim = 2, .shape = { 2, 3 } },
		{ .name = "u32", .dtype = WSYNC_U32, .ndim = 1, .shape = { 3 } },
		{ .name = "u64", .dtype = WSYNC_U64, .ndim = 0 },
		{ .name = "e4m3", .dtype = WSYNC_F8_E4M3FN, .ndim = 1, .shape = { 5 } },
		{ .name = "e5m2", .dtype = WSYNC_F8_E5M2, .ndim = 2, .shape = { 1, 7 } },
	};
	static const uint64_t end[5] = { 12, 24, 32, 37, 44 };
	struct st_file f;
	size_t hlen;
	char *hdr, *text;
	uint8_t *buf;

	(void)state;
	assert_int_equal(st_header_build(t, 5, NULL, 0, &hdr, &hlen), 0);
	text = strndup(hdr + 8, hlen - 8);         /* the header is not NUL-terminated */
	assert_non_null(strstr(text, "\"e4m3\":{\"dtype\":\"F8_E4M3\",\"shape\":[5],"
	                       "\"data_offsets\":[32,37]}"));
	buf = calloc(1, hlen + 44);
	memcpy(buf, hdr, hlen);
	assert_int_equal(st_parse(buf, hlen + 44, &f, why, sizeof(why)), 0);
	assert_int_equal(f.n_tensors, 5);
	for (size_t i = 0; i < 5; i++) {
		assert_string_equal(f.tensors[i].desc.name, t[i].name);
		assert_int_equal(f.tensors[i].desc.dtype, t[i].dtype);
		assert_int_equal(f.tensors[i].end, end[i]);
	}
	st_free(&f);
	/* an element size that does not fit the range is refused per dtype */
	refuses("{\"a\":{\"dtype\":\"U32\",\"shape\":[3],\"data_offsets\":[0,6]}}", 6,
	        "make 12 bytes");
	refuses("{\"a\":{\"dtype\":\"F8_E5M2\",\"shape\":[3],\"data_offsets\":[0,6]}}", 6,
	        "make 3 bytes");
	free(text);
	free(buf);
	free(hdr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(built_header_parses_back),
		cmocka_unit_test(entries_are_read_in_data_order),
		cmocka_unit_test(malformed_files_are_refused),
		cmocka_unit_test(header_length_is_checked),
		cmocka_unit_test(dtype_names_map_both_ways),
		cmocka_unit_test(added_dtypes_round_trip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
