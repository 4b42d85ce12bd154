/*
 * launch_order — collectors may start before the trainer: a collector
 * subscribes to a model that does not exist yet and waits; when a trainer
 * process starts later and commits its first version, the wait returns that
 * version with the trainer's layout and bytes. Then two models at once, each
 * with its own layout, trainer and two such early collectors: every collector
 * gets the first version of its own model and nothing of the other.
 */
#include "tests/lib/harness.h"

#include <stdio.h>
#include <string.h>

static struct broker B;

struct role {
	const char *model;
	int         kind;       /* 0: the two-tensor layout, 1: a one-tensor f16 layout */
	uint64_t    step;
	struct chan up, down;   /* child -> parent, parent -> child */
	pid_t       pid;
};

static size_t layout_of(int kind, wsync_tensor_desc d[2])
{
	if (kind == 0)
		return harness_model_2t(d);
	harness_desc(&d[0], "value.head", WSYNC_F16, 2, (const uint64_t[]){ 3, 1000 });
	return 1;
}

static int collector(void *arg)
{
	struct role *r = arg;
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	char name[64];
	snprintf(name, sizeof name, "early-collector-%s", r->model);
	TEST_OK(harness_connect(&B, name, &c));
	TEST_OK(wsync_sub_open(c, r->model, &s));
	wsync_view v;
	memset(&v, 0, sizeof v);
	TEST_RC(wsync_sub_acquire(s, &v), -ENODATA);
	chan_send(&r->up, 1);                       /* subscribed; no model yet */

	TEST_OK(wsync_sub_wait(s, 0, 12 * HARNESS_S, &v));
	TEST_EQ_U64(v.step, r->step);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_tensor_desc want[2];
	size_t n = layout_of(r->kind, want);
	TEST_EQ_U64(v.n_tensors, n);
	for (size_t i = 0; i < n; i++) {
		TEST_ASSERT(strcmp(v.tensors[i].name, want[i].name) == 0);
		TEST_ASSERT(memcmp(v.tensors[i].shape, want[i].shape, sizeof want[i].shape) == 0);
		TEST_OK(wsync_view_tensor(&v, want[i].name, NULL, NULL));
	}
	chan_send(&r->up, v.version);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

static int trainer(void *arg)
{
	struct role *r = arg;
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	wsync_tensor_desc d[2];
	size_t n = layout_of(r->kind, d);
	TEST_OK(harness_connect(&B, "late-trainer", &c));
	TEST_OK(wsync_pub_open(c, r->model, d, n, NULL, &p));
	uint64_t v = 0;
	TEST_OK(harness_publish(p, r->step, 5 * HARNESS_S, &v));
	chan_send(&r->up, v);
	wsync_pub_close(p);
	wsync_close(c);
	return 0;
}

static void start(struct role *r, harness_child_fn fn)
{
	chan_open(&r->up);
	chan_open(&r->down);
	r->pid = harness_fork(fn, r);
}

int main(void)
{
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);

	/* one collector, then one trainer */
	struct role col = { .model = "launch.solo", .kind = 0, .step = 11 };
	struct role tr = col;
	start(&col, collector);
	chan_recv(&col.up, col.pid);
	start(&tr, trainer);
	uint64_t first = chan_recv(&tr.up, tr.pid);
	TEST_EQ_U64(chan_recv(&col.up, col.pid), first);
	harness_expect_exit0(tr.pid, "trainer");
	harness_expect_exit0(col.pid, "collector");

	/* two models, two early collectors each, then both trainers */
	struct role cols[4], trs[2];
	const char *models[2] = { "launch.policy", "launch.value" };
	for (int m = 0; m < 2; m++) {
		for (int k = 0; k < 2; k++) {
			struct role *r = &cols[m * 2 + k];
			memset(r, 0, sizeof *r);
			r->model = models[m];
			r->kind = m;
			r->step = 100 + (uint64_t)m;
			start(r, collector);
		}
	}
	for (int i = 0; i < 4; i++)
		chan_recv(&cols[i].up, cols[i].pid);
	for (int m = 0; m < 2; m++) {
		memset(&trs[m], 0, sizeof trs[m]);
		trs[m].model = models[m];
		trs[m].kind = m;
		trs[m].step = 100 + (uint64_t)m;
		start(&trs[m], trainer);
	}
	uint64_t v[2];
	for (int m = 0; m < 2; m++)
		v[m] = chan_recv(&trs[m].up, trs[m].pid);
	for (int i = 0; i < 4; i++)
		TEST_EQ_U64(chan_recv(&cols[i].up, cols[i].pid), v[i / 2]);
	for (int m = 0; m < 2; m++)
		harness_expect_exit0(trs[m].pid, "trainer");
	for (int i = 0; i < 4; i++)
		harness_expect_exit0(cols[i].pid, "collector");

	harness_broker_finish(&B);
	return 0;
}
