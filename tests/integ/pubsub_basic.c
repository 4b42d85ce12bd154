/*
 * pubsub_basic — a trainer publishes a two-tensor model and a collector in
 * another process reads it with zero copies: the view is a read-only shared
 * mapping of the broker's slab (the same address for every acquire of a
 * version), tensors are found by name, every byte is what the trainer wrote.
 * Over 20 commits the collector sees strictly increasing versions, each with
 * its step and a publish time taken during the commit. commit_async makes the
 * version visible at once and wait_commit collects the same version;
 * wait_commit with nothing outstanding is -ENOENT.
 */
#include "tests/lib/harness.h"

#include <stdio.h>
#include <string.h>

#define MODEL   "pubsub.policy"
#define ROUNDS  20

static struct broker B;
static struct chan to_child, to_parent;

static void check_layout(const wsync_view *v)
{
	wsync_tensor_desc want[2];
	harness_model_2t(want);
	TEST_EQ_U64(v->n_tensors, 2);
	TEST_ASSERT(v->tensors != NULL);
	for (int i = 0; i < 2; i++) {
		const wsync_tensor_desc *t = &v->tensors[i];
		TEST_ASSERT_MSG(strcmp(t->name, want[i].name) == 0, "tensor %d is '%s'", i, t->name);
		TEST_EQ_U64(t->dtype, want[i].dtype);
		TEST_EQ_U64(t->ndim, want[i].ndim);
		TEST_ASSERT(memcmp(t->shape, want[i].shape, sizeof t->shape) == 0);
		TEST_EQ_U64(t->offset % WSYNC_ALIGN, 0);
		TEST_ASSERT(t->offset + wsync_tensor_bytes(t) <= v->bytes);
	}

	const void *data = NULL;
	const wsync_tensor_desc *d = NULL;
	TEST_OK(wsync_view_tensor(v, "policy.bias", &data, &d));
	TEST_ASSERT(d == &v->tensors[1] || strcmp(d->name, "policy.bias") == 0);
	TEST_ASSERT(data == (const char *)v->base + d->offset);
	TEST_EQ_U64(d->shape[0], 129);
	TEST_OK(wsync_view_tensor(v, "policy.weight", &data, &d));
	TEST_ASSERT(data == (const char *)v->base + d->offset);
	TEST_EQ_U64(wsync_tensor_bytes(d), 64 * 129 * 4);
	TEST_OK(wsync_view_tensor(v, "policy.weight", NULL, NULL));
	TEST_RC(wsync_view_tensor(v, "policy.missing", &data, &d), -ENOENT);
	TEST_RC(wsync_view_tensor(v, "", &data, &d), -ENOENT);
}

/* The view is read-only, shared, and a broker segment in /dev/shm. */
static void check_zero_copy_mapping(const wsync_view *v)
{
	char perms[5], path[512], path_end[512];
	TEST_ASSERT_MSG(harness_mapping_of(v->base, perms, path, sizeof path) == 0,
	                "view base %p is not mapped", v->base);
	TEST_ASSERT_MSG(perms[0] == 'r' && perms[1] == '-' && perms[3] == 's',
	                "view mapped %s, want r-?s (read-only, shared)", perms);
	TEST_CONTAINS(path, "/dev/shm/wsync.");
	TEST_ASSERT(harness_mapping_of((const char *)v->base + v->bytes - 1, perms, path_end,
	                               sizeof path_end) == 0);
	TEST_ASSERT_MSG(strcmp(path, path_end) == 0, "view spans two mappings: %s, %s",
	                path, path_end);
}

static int collector(void *arg)
{
	(void)arg;
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	TEST_OK(harness_connect(&B, "pubsub-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	chan_send(&to_parent, 1);

	/* first version: layout, contents, mapping */
	uint64_t want = chan_recv(&to_child, 0);
	wsync_view v, again;
	memset(&v, 0, sizeof v);
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, want);
	TEST_EQ_U64(v.step, 1000);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	check_layout(&v);
	check_zero_copy_mapping(&v);
	TEST_OK(wsync_sub_acquire(s, &again));   /* no copy: the same bytes */
	TEST_EQ_U64(again.version, v.version);
	TEST_ASSERT(again.base == v.base);
	wsync_sub_release(s, &again);
	wsync_sub_release(s, &v);
	chan_send(&to_parent, 1);

	/* lockstep: every commit is seen with its version, step, time and bytes */
	uint64_t last = want;
	for (int i = 1; i <= ROUNDS; i++) {
		uint64_t version = chan_recv(&to_child, 0);
		int64_t t0 = (int64_t)chan_recv(&to_child, 0);
		int64_t t1 = (int64_t)chan_recv(&to_child, 0);
		TEST_OK(wsync_sub_wait(s, last, 10 * HARNESS_S, &v));
		TEST_GT_U64(v.version, last);
		TEST_EQ_U64(v.version, version);
		TEST_EQ_U64(v.step, 1000 + (uint64_t)i);
		TEST_ASSERT_MSG(v.published_ns >= t0 && v.published_ns <= t1,
		                "published_ns %lld outside the commit [%lld, %lld]",
		                (long long)v.published_ns, (long long)t0, (long long)t1);
		TEST_ASSERT(harness_verify_view(&v) == 0);
		last = v.version;
		wsync_sub_release(s, &v);
		chan_send(&to_parent, last);
	}
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

int main(void)
{
	chan_open(&to_child);
	chan_open(&to_parent);
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);

	pid_t child = harness_fork(collector, NULL);
	chan_recv(&to_parent, child);

	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	TEST_OK(harness_connect(&B, "pubsub-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	TEST_RC(wsync_pub_wait_commit(p, 0, NULL), -ENOENT);

	/* the slab the trainer writes has the layout it declared */
	wsync_slab slab;
	memset(&slab, 0, sizeof slab);
	TEST_OK(wsync_pub_begin(p, HARNESS_S, &slab));
	TEST_EQ_U64(slab.n_tensors, 2);
	TEST_ASSERT(slab.bytes >= 64 * 129 * 4 + 129 * 4 && slab.bytes % 4096 == 0);
	void *bias = NULL;
	const wsync_tensor_desc *bd = NULL;
	TEST_OK(wsync_slab_tensor(&slab, "policy.bias", &bias, &bd));
	TEST_ASSERT(bias == (char *)slab.base + bd->offset);
	TEST_RC(wsync_slab_tensor(&slab, "nope", &bias, &bd), -ENOENT);
	harness_fill(slab.base, slab.bytes, 1000);
	uint64_t v1 = 0;
	TEST_OK(wsync_pub_commit(p, 1000, &v1));
	TEST_ASSERT(v1 > 0);
	TEST_RC(wsync_pub_wait_commit(p, 0, NULL), -ENOENT);
	chan_send(&to_child, v1);
	chan_recv(&to_parent, child);

	uint64_t last = v1;
	for (int i = 1; i <= ROUNDS; i++) {
		uint64_t version = 0;
		int64_t t0 = harness_real_ns();
		TEST_OK(harness_publish(p, 1000 + (uint64_t)i, 5 * HARNESS_S, &version));
		int64_t t1 = harness_real_ns();
		TEST_GT_U64(version, last);
		last = version;
		chan_send(&to_child, version);
		chan_send(&to_child, (uint64_t)t0);
		chan_send(&to_child, (uint64_t)t1);
		TEST_EQ_U64(chan_recv(&to_parent, child), version);
	}
	harness_expect_exit0(child, "collector");

	/* async commit: visible when it returns, confirmed by wait_commit */
	wsync_client *rc = NULL;
	wsync_sub *s = NULL;
	TEST_OK(harness_connect(&B, "pubsub-reader", &rc));
	TEST_OK(wsync_sub_open(rc, MODEL, &s));
	memset(&slab, 0, sizeof slab);
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	harness_fill(slab.base, slab.bytes, 5000);
	uint64_t va = 0, vw = 0;
	TEST_OK(wsync_pub_commit_async(p, 5000, &va));
	TEST_GT_U64(va, last);
	wsync_view v;
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, va);
	TEST_EQ_U64(v.step, 5000);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	TEST_OK(wsync_pub_wait_commit(p, 5 * HARNESS_S, &vw));
	TEST_EQ_U64(vw, va);
	TEST_RC(wsync_pub_wait_commit(p, 0, &vw), -ENOENT);

	/* an async commit left unconfirmed is collected by the next begin */
	uint64_t vb = 0, vc = 0;
	memset(&slab, 0, sizeof slab);
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	harness_fill(slab.base, slab.bytes, 5001);
	TEST_OK(wsync_pub_commit_async(p, 5001, &vb));
	TEST_GT_U64(vb, va);
	TEST_OK(harness_publish(p, 5002, 5 * HARNESS_S, &vc));
	TEST_GT_U64(vc, vb);
	TEST_RC(wsync_pub_wait_commit(p, 0, NULL), -ENOENT);
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, vc);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);

	wsync_sub_close(s);
	wsync_close(rc);
	wsync_pub_close(p);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
