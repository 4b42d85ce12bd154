/*
 * layout_clash — a model has one layout and one publisher: a second publisher
 * declaring a different layout gets -EEXIST with a message naming the model
 * (while the first is open and after it closed); a second publisher with the
 * same layout gets -EBUSY naming the current one, and succeeds once the first
 * closed. Layouts that differ only in what the API ignores (bytes after a
 * name's NUL, input offsets) are the same layout. Bad arguments (NULL
 * pointers, empty or invalid names, bad dtype, 0 tensors, bad shapes, bad
 * slot counts, unknown flags, nonzero reserved options) get -EINVAL and a non-empty
 * wsync_errmsg(), and none of them creates a model.
 */
#include "tests/lib/harness.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shm/layout.h"

#define MODEL "clash.policy"

static struct broker B;

static void expect_einval(wsync_client *c, const char *what, const char *model,
                          const wsync_tensor_desc *d, size_t n, const wsync_model_opts *o,
                          int null_out)
{
	wsync_pub *p = NULL;
	int rc = wsync_pub_open(c, model, d, n, o, null_out ? NULL : &p);
	TEST_ASSERT_MSG(rc == -EINVAL, "%s: pub_open returned %d (%s), expected -EINVAL",
	                what, rc, wsync_strerror(rc));
	TEST_ASSERT_MSG(wsync_errmsg()[0] != 0, "%s: -EINVAL without a message", what);
	TEST_ASSERT(p == NULL);
}

int main(void)
{
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);

	wsync_client *c1 = NULL, *c2 = NULL;
	wsync_pub *p1 = NULL, *p2 = NULL;
	TEST_OK(harness_connect(&B, "first-trainer", &c1));
	TEST_OK(harness_connect(&B, "second-trainer", &c2));
	TEST_OK(harness_pub_open_2t(c1, MODEL, 0, &p1));
	uint64_t v1 = 0;
	TEST_OK(harness_publish(p1, 1, HARNESS_S, &v1));

	/* a different layout: -EEXIST naming the model */
	wsync_tensor_desc other[2];
	harness_model_2t(other);
	other[1].shape[0] = 130;
	TEST_RC(wsync_pub_open(c2, MODEL, other, 2, NULL, &p2), -EEXIST);
	TEST_CONTAINS(wsync_errmsg(), MODEL);
	TEST_ASSERT(p2 == NULL);
	/* fewer tensors, another dtype: also -EEXIST */
	TEST_RC(wsync_pub_open(c2, MODEL, other, 1, NULL, &p2), -EEXIST);
	harness_model_2t(other);
	other[0].dtype = WSYNC_BF16;
	TEST_RC(wsync_pub_open(c2, MODEL, other, 2, NULL, &p2), -EEXIST);
	TEST_CONTAINS(wsync_errmsg(), MODEL);

	/* the same layout while the first publisher is open: -EBUSY naming it */
	TEST_RC(harness_pub_open_2t(c2, MODEL, 0, &p2), -EBUSY);
	const char *msg = wsync_errmsg();
	char pid[32];
	snprintf(pid, sizeof pid, "%d", (int)getpid());
	TEST_ASSERT_MSG(strstr(msg, "first-trainer") || strstr(msg, pid),
	                "-EBUSY does not name the current publisher: \"%s\"", msg);
	/* the same client may not open it twice either */
	wsync_pub *again = NULL;
	int rc = harness_pub_open_2t(c1, MODEL, 0, &again);
	TEST_ASSERT_MSG(rc == -EBUSY || rc == -EALREADY, "second open by the same client: %d (%s)",
	                rc, wsync_strerror(rc));

	/* the refusals changed nothing: the latest is the first publisher's */
	wsync_sub *s = NULL;
	wsync_view v;
	TEST_OK(wsync_sub_open(c2, MODEL, &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, v1);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);

	/* after the first closes: a different layout still -EEXIST, the same
	 * layout (with garbage after the names' NULs and in the offsets) opens */
	wsync_pub_close(p1);
	p1 = NULL;
	harness_model_2t(other);
	other[0].ndim = 1;
	other[0].shape[1] = 0;
	TEST_RC(wsync_pub_open(c2, MODEL, other, 2, NULL, &p2), -EEXIST);
	TEST_CONTAINS(wsync_errmsg(), MODEL);

	wsync_tensor_desc messy[2], clean[2];
	harness_model_2t(clean);
	memset(messy, 0xAB, sizeof messy);
	for (int i = 0; i < 2; i++) {
		memcpy(messy[i].name, clean[i].name, strlen(clean[i].name) + 1);
		messy[i].dtype = clean[i].dtype;
		messy[i].ndim = clean[i].ndim;
		memcpy(messy[i].shape, clean[i].shape, sizeof clean[i].shape);
		messy[i].offset = 0x1234567 * (uint64_t)(i + 1);
	}
	rc = wsync_pub_open(c2, MODEL, messy, 2, NULL, &p2);
	TEST_ASSERT_MSG(rc == 0, "the same layout with garbage after names' NULs and in offsets: "
	                "%d (%s): %s", rc, wsync_strerror(rc), wsync_errmsg());
	uint64_t v2 = 0;
	TEST_OK(harness_publish(p2, 2, 5 * HARNESS_S, &v2));
	TEST_GT_U64(v2, v1);
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, v2);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	wsync_pub_close(p2);

	/* ---- bad arguments ---- */
	wsync_tensor_desc d[2];
	wsync_model_opts o;
	harness_model_2t(d);
	expect_einval(c2, "NULL model name", NULL, d, 2, NULL, 0);
	expect_einval(c2, "NULL tensors", "clash.bad", NULL, 2, NULL, 0);
	expect_einval(c2, "NULL out", "clash.bad", d, 2, NULL, 1);
	expect_einval(c2, "empty model name", "", d, 2, NULL, 0);
	expect_einval(c2, "model name with a space", "clash bad", d, 2, NULL, 0);
	expect_einval(c2, "model name starting with '.'", ".clash", d, 2, NULL, 0);
	char longname[WSYNC_NAME_MAX + 8];
	memset(longname, 'm', sizeof longname - 1);
	longname[sizeof longname - 1] = 0;
	expect_einval(c2, "model name longer than WSYNC_NAME_MAX", longname, d, 2, NULL, 0);
	expect_einval(c2, "0 tensors", "clash.bad", d, 0, NULL, 0);
	harness_model_2t(d);
	d[1].dtype = 0;
	expect_einval(c2, "dtype 0", "clash.bad", d, 2, NULL, 0);
	d[1].dtype = 77;
	expect_einval(c2, "dtype 77", "clash.bad", d, 2, NULL, 0);
	harness_model_2t(d);
	d[0].ndim = WSYNC_MAX_DIMS + 1;
	expect_einval(c2, "ndim over WSYNC_MAX_DIMS", "clash.bad", d, 2, NULL, 0);
	harness_model_2t(d);
	d[1].shape[3] = 9;
	expect_einval(c2, "shape entry past ndim", "clash.bad", d, 2, NULL, 0);
	harness_model_2t(d);
	snprintf(d[1].name, sizeof d[1].name, "%s", d[0].name);
	expect_einval(c2, "duplicate tensor names", "clash.bad", d, 2, NULL, 0);
	harness_model_2t(d);
	memset(&o, 0, sizeof o);
	o.slots = 1;
	expect_einval(c2, "1 slot", "clash.bad", d, 2, &o, 0);
	o.slots = WSYNC_MAX_SLOTS + 1;
	expect_einval(c2, "more slots than WSYNC_MAX_SLOTS", "clash.bad", d, 2, &o, 0);
	memset(&o, 0, sizeof o);
	o.flags = 1u << 7;     /* not a WSYNC_PUB_* flag */
	expect_einval(c2, "unknown opts.flags", "clash.bad", d, 2, &o, 0);
	memset(&o, 0, sizeof o);
	o.reserved[1] = 1;
	expect_einval(c2, "nonzero opts.reserved", "clash.bad", d, 2, &o, 0);

	wsync_sub *bad = NULL;
	TEST_RC(wsync_sub_open(c2, "", &bad), -EINVAL);
	TEST_ASSERT(wsync_errmsg()[0] != 0);
	TEST_RC(wsync_sub_open(c2, "no spaces please", &bad), -EINVAL);
	TEST_RC(wsync_sub_open(c2, NULL, &bad), -EINVAL);
	TEST_ASSERT(bad == NULL);

	/* none of the refused opens created the model: it can take any layout */
	wsync_tensor_desc one;
	harness_desc(&one, "x", WSYNC_U8, 1, (const uint64_t[]){ 10 });
	wsync_pub *fresh = NULL;
	TEST_OK(wsync_pub_open(c2, "clash.bad", &one, 1, NULL, &fresh));
	wsync_pub_close(fresh);

	wsync_sub_close(s);
	wsync_close(c2);
	wsync_close(c1);
	harness_broker_finish(&B);
	return 0;
}
