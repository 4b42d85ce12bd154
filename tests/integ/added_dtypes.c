/*
 * added_dtypes — the dtypes added for GPU models (u16, u32, u64, f8_e4m3fn,
 * f8_e5m2) go through the protocol and the broker: a model of all five
 * opens, publishes and is read back by a collector with the same codes,
 * sizes and offsets and intact bytes; the broker treats f8_e4m3fn and
 * f8_e5m2 of the same shape as different layouts (-EEXIST); the code past
 * the last one is -EINVAL with a message naming it and creates nothing.
 */
#include "tests/lib/harness.h"

#include <stdio.h>
#include <string.h>

#define MODEL "added.dtypes"

static struct broker B;

static const struct {
	const char *name, *dtype_name;
	uint32_t dtype;
	uint64_t size;
} added[] = {
	{ "u16", "u16", WSYNC_U16, 2 },
	{ "u32", "u32", WSYNC_U32, 4 },
	{ "u64", "u64", WSYNC_U64, 8 },
	{ "e4m3", "f8_e4m3fn", WSYNC_F8_E4M3FN, 1 },
	{ "e5m2", "f8_e5m2", WSYNC_F8_E5M2, 1 },
};
#define N_ADDED (sizeof(added) / sizeof(added[0]))

static void layout(wsync_tensor_desc d[N_ADDED])
{
	for (size_t i = 0; i < N_ADDED; i++)
		harness_desc(&d[i], added[i].name, added[i].dtype, 2,
		             (const uint64_t[]){ 3, 40 + i });
}

int main(void)
{
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);

	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	wsync_sub *s = NULL;
	wsync_tensor_desc d[N_ADDED];
	uint64_t version = 0;

	TEST_OK(harness_connect(&B, "added-dtypes", &c));
	layout(d);
	TEST_OK(wsync_pub_open(c, MODEL, d, N_ADDED, NULL, &p));
	TEST_OK(harness_publish(p, 5, 5 * HARNESS_S, &version));

	TEST_OK(wsync_sub_open(c, MODEL, &s));
	wsync_view v;
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, version);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	TEST_EQ_U64(v.n_tensors, N_ADDED);
	for (size_t i = 0; i < N_ADDED; i++) {
		const wsync_tensor_desc *t = NULL;
		TEST_OK(wsync_view_tensor(&v, added[i].name, NULL, &t));
		TEST_EQ_U64(t->dtype, added[i].dtype);
		TEST_EQ_U64(wsync_tensor_bytes(t), 3 * (40 + i) * added[i].size);
		TEST_EQ_U64(t->offset % WSYNC_ALIGN, 0);
		TEST_ASSERT(strcmp(wsync_dtype_name(t->dtype), added[i].dtype_name) == 0);
	}
	wsync_sub_release(s, &v);
	wsync_pub_close(p);
	p = NULL;

	/* the two FP8 kinds have one size but are different layouts */
	layout(d);
	d[3].dtype = WSYNC_F8_E5M2;
	TEST_RC(wsync_pub_open(c, MODEL, d, N_ADDED, NULL, &p), -EEXIST);
	TEST_CONTAINS(wsync_errmsg(), MODEL);

	/* one past the last code: refused with its number, nothing created */
	layout(d);
	d[4].dtype = WSYNC_F8_E5M2 + 1;
	TEST_RC(wsync_pub_open(c, "added.bad", d, N_ADDED, NULL, &p), -EINVAL);
	TEST_CONTAINS(wsync_errmsg(), "unknown dtype 16");
	TEST_ASSERT(p == NULL);
	wsync_tensor_desc one;
	harness_desc(&one, "x", WSYNC_U8, 1, (const uint64_t[]){ 10 });
	TEST_OK(wsync_pub_open(c, "added.bad", &one, 1, NULL, &p));   /* it was not created */
	wsync_pub_close(p);

	wsync_sub_close(s);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
