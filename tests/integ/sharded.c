/*
 * sharded — one model published by a group of 4 ranks (processes), each
 * writing its part: tensor "a" cut along dim 0, "b" along dim 1 (strided
 * parts), "c" whole by one rank. Collectors see bit-exact whole tensors,
 * never a mix of two versions. Overlapping declarations are refused, as is
 * a second process opening a rank already open. Ranks giving different
 * steps get -EINVAL and nothing is published. A rank SIGKILLed between
 * begin and commit makes the others' commits fail with -ECONNABORTED,
 * nothing becomes visible, and once it is restarted the group publishes
 * again. A rank that never commits is cut short by the group deadline.
 * One session cannot open two ranks of a group (-EBUSY naming its rank);
 * once it is closed, new sessions open the rank it had and the one it was
 * refused, and the model can be deleted when they go.
 * A tensor-parallel slice read by a collector equals the same slice of the
 * whole tensor.
 */
#include "tests/lib/harness.h"

#include <stdatomic.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "libclient/sub.h"

#define MODEL "shard.policy"
#define RANKS 4
#define A_ROWS 64
#define A_COLS 32
#define B_ROWS 16
#define B_COLS 64
#define C_LEN  100

static struct broker B;

static void layout(wsync_tensor_desc d[3])
{
	uint64_t a[2] = { A_ROWS, A_COLS }, b[2] = { B_ROWS, B_COLS }, c[1] = { C_LEN };

	harness_desc(&d[0], "a", WSYNC_F32, 2, a);
	harness_desc(&d[1], "b", WSYNC_F32, 2, b);
	harness_desc(&d[2], "c", WSYNC_F32, 1, c);
}

static size_t rank_parts(uint32_t r, wsync_shard *p)
{
	size_t n = 0;

	p[n++] = (wsync_shard){ 0, 0, r * (A_ROWS / RANKS), (r + 1) * (A_ROWS / RANKS) };
	p[n++] = (wsync_shard){ 1, 1, r * (B_COLS / RANKS), (r + 1) * (B_COLS / RANKS) };
	if (r == RANKS - 1)
		p[n++] = (wsync_shard){ 2, WSYNC_SHARD_WHOLE, 0, 0 };
	return n;
}

/* ---- a rank: a child process driven by commands ------------------------------ */

enum { OP_PUBLISH = 1, OP_BEGIN, OP_COMMIT, OP_EXIT };
#define CMD(op, arg) (((uint64_t)(op) << 56) | (arg))

struct rank {
	uint32_t r;
	uint32_t timeout_ms;
	struct chan cmd, res;
	pid_t pid;
};

static int rank_main(void *arg)
{
	struct rank *rk = arg;
	wsync_tensor_desc d[3];
	wsync_shard parts[3];
	size_t n = rank_parts(rk->r, parts);
	wsync_model_opts o = { .group_size = RANKS, .rank = rk->r,
	                       .group_timeout_ms = rk->timeout_ms };
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	char name[32];

	layout(d);
	snprintf(name, sizeof(name), "rank-%u", rk->r);
	TEST_OK(harness_connect(&B, name, &c));
	chan_send(&rk->res, (uint64_t)(int64_t)wsync_pub_open_shard(c, MODEL, d, 3, &o, parts,
	                                                               n, &p));
	for (;;) {
		uint64_t cmd = chan_recv(&rk->cmd, getppid());
		uint64_t op = cmd >> 56, step = cmd & ((UINT64_C(1) << 56) - 1);
		wsync_slab slab;
		int rc = 0;

		if (op == OP_EXIT)
			break;
		if (op == OP_PUBLISH || op == OP_BEGIN) {
			rc = wsync_pub_begin(p, 10 * HARNESS_S, &slab);
			if (!rc)
				TEST_OK(harness_fill_parts(&slab, parts, n, step));
		}
		if (!rc && (op == OP_PUBLISH || op == OP_COMMIT))
			rc = wsync_pub_commit(p, step, NULL);
		if (rc)
			harness_log("rank %u: %s: %s", rk->r, wsync_strerror(rc), wsync_errmsg());
		chan_send(&rk->res, (uint64_t)(int64_t)rc);
	}
	wsync_close(c);
	return 0;
}

static struct rank ranks[RANKS];

static int rank_start(uint32_t r, uint32_t timeout_ms)
{
	struct rank *rk = &ranks[r];

	rk->r = r;
	rk->timeout_ms = timeout_ms;
	chan_open(&rk->cmd);
	chan_open(&rk->res);
	rk->pid = harness_fork(rank_main, rk);
	return (int)(int64_t)chan_recv(&rk->res, rk->pid);
}

static void rank_stop(uint32_t r)
{
	chan_send(&ranks[r].cmd, CMD(OP_EXIT, 0));
	harness_expect_exit0(ranks[r].pid, "a rank");
	chan_close(&ranks[r].cmd);
	chan_close(&ranks[r].res);
}

static int rank_result(uint32_t r)
{
	return (int)(int64_t)chan_recv(&ranks[r].res, ranks[r].pid);
}

/* Every rank publishes step; each result must be want. */
static void group_publish(uint64_t step, int want)
{
	for (uint32_t r = 0; r < RANKS; r++)
		chan_send(&ranks[r].cmd, CMD(OP_PUBLISH, step));
	for (uint32_t r = 0; r < RANKS; r++)
		TEST_RC(rank_result(r), want);
}

/* wsync_pub_open_shard of one part, retried while it is -EBUSY (a session
 * that had the rank may not be torn down yet) for up to 5 s. */
static int open_shard_retry(wsync_client *c, const char *model, const wsync_tensor_desc *d,
                            const wsync_model_opts *o, const wsync_shard *part, wsync_pub **out)
{
	int64_t deadline = harness_mono_ns() + 5 * HARNESS_S;
	int rc;

	while ((rc = wsync_pub_open_shard(c, model, d, 3, o, part, 1, out)) == -EBUSY &&
	       harness_mono_ns() < deadline)
		harness_sleep_ms(10);
	if (rc)
		harness_log("rank %u of '%s': %s", o->rank, model, wsync_errmsg());
	return rc;
}

/* wsync_model_delete, retried while it is -EBUSY (its ranks' sessions may
 * not be torn down yet) for up to 5 s. */
static int delete_retry(wsync_client *c, const char *model)
{
	int64_t deadline = harness_mono_ns() + 5 * HARNESS_S;
	int rc;

	while ((rc = wsync_model_delete(c, model)) == -EBUSY && harness_mono_ns() < deadline)
		harness_sleep_ms(10);
	if (rc)
		harness_log("delete '%s': %s", model, wsync_errmsg());
	return rc;
}

int main(void)
{
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	uint64_t seen = 0;

	if (harness_broker_start(&B, NULL))
		return 1;
	TEST_OK(harness_connect(&B, "collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	for (uint32_t r = 0; r < RANKS; r++)
		TEST_OK(rank_start(r, 0));

	/* a second process for a rank already open, and overlapping parts */
	{
		wsync_tensor_desc d[3];
		wsync_shard parts[3];
		size_t n = rank_parts(1, parts);
		wsync_model_opts o = { .group_size = RANKS, .rank = 1 };
		wsync_client *x = NULL, *y = NULL, *z = NULL;
		wsync_pub *p = NULL, *p0 = NULL, *p1 = NULL;
		wsync_sub *so = NULL;

		layout(d);
		/* the collector keeps shard.overlap in the table once its ranks
		 * go, so that its DELETE below means something */
		TEST_OK(wsync_sub_open(c, "shard.overlap", &so));
		TEST_OK(harness_connect(&B, "intruder", &x));
		TEST_RC(wsync_pub_open_shard(x, MODEL, d, 3, &o, parts, n, &p), -EBUSY);
		o.rank = 0;
		parts[0] = (wsync_shard){ 0, 0, 0, 20 };
		TEST_RC(wsync_pub_open_shard(x, "shard.overlap", d, 3, &o, parts, 1, &p), 0);
		o.rank = 1;
		parts[0] = (wsync_shard){ 0, 0, 20, 32 };
		/* one session, two ranks: refused, naming the rank it has */
		TEST_RC(wsync_pub_open_shard(x, "shard.overlap", d, 3, &o, parts, 1, &p), -EBUSY);
		TEST_CONTAINS(wsync_errmsg(), "already publishes rank 0");
		TEST_OK(harness_connect(&B, "intruder-2", &y));
		parts[0] = (wsync_shard){ 0, 0, 16, 32 };
		TEST_RC(wsync_pub_open_shard(y, "shard.overlap", d, 3, &o, parts, 1, &p), -EINVAL);
		TEST_CONTAINS(wsync_errmsg(), "overlap");
		wsync_close(y);
		wsync_close(x);

		/* Once that session is gone nothing of it stays in the group (it
		 * once left a pointer to its freed memory there): new sessions
		 * open the rank it had and the rank it was refused, and when they
		 * go the model can be deleted. Its teardown is asynchronous to
		 * them: -EBUSY is retried for a while, never for ever. */
		TEST_OK(harness_connect(&B, "rank-0-again", &y));
		TEST_OK(harness_connect(&B, "rank-1-again", &z));
		o.rank = 0;
		parts[0] = (wsync_shard){ 0, 0, 0, 20 };
		TEST_OK(open_shard_retry(y, "shard.overlap", d, &o, parts, &p0));
		o.rank = 1;
		parts[0] = (wsync_shard){ 0, 0, 20, 32 };
		TEST_OK(open_shard_retry(z, "shard.overlap", d, &o, parts, &p1));
		wsync_pub_close(p0);
		wsync_pub_close(p1);
		wsync_close(z);
		wsync_close(y);
		TEST_OK(delete_retry(c, "shard.overlap"));
		wsync_sub_close(so);
	}

	/* versions: whole, never mixed */
	for (uint64_t step = 1; step <= 20; step++) {
		group_publish(step, 0);
		TEST_OK(wsync_sub_wait(s, seen, 5 * HARNESS_S, &v));
		TEST_EQ_U64(v.step, step);
		TEST_ASSERT(harness_verify_tensors(&v) == 0);
		seen = v.version;
		wsync_sub_release(s, &v);
	}

	/* a tensor-parallel reader's slice equals the whole tensor's columns */
	{
		wsync_slice sl;
		uint32_t part[A_ROWS * A_COLS / 2];

		TEST_OK(wsync_sub_acquire(s, &v));
		TEST_OK(wsync_tensor_part(&v.tensors[0], 1, 1, 2, &sl));
		wsync_slice_read(part, v.base, &sl);
		for (uint64_t r = 0; r < A_ROWS; r++)
			for (uint64_t j = 0; j < A_COLS / 2; j++)
				TEST_ASSERT(part[r * (A_COLS / 2) + j] ==
				            harness_elem_word(v.step, 0, r * A_COLS + A_COLS / 2 + j));
		wsync_sub_release(s, &v);
	}

	/* different steps: nothing published, every rank told */
	for (uint32_t r = 0; r < RANKS; r++)
		chan_send(&ranks[r].cmd, CMD(OP_PUBLISH, r == 2 ? 99 : 21));
	for (uint32_t r = 0; r < RANKS; r++)
		TEST_RC(rank_result(r), -EINVAL);
	TEST_RC(wsync_sub_wait(s, seen, 100 * HARNESS_MS, &v), -ETIMEDOUT);

	/* rank 3 dies between begin and commit */
	chan_send(&ranks[3].cmd, CMD(OP_BEGIN, 22));
	TEST_OK(rank_result(3));
	for (uint32_t r = 0; r < 3; r++)
		chan_send(&ranks[r].cmd, CMD(OP_PUBLISH, 22));
	{
		/* monitors see the group's progress: 3 of 4 ranks committed */
		const struct wsync_ctl_model *e = client_ctl_model(c, s->model_id);
		int64_t deadline = harness_mono_ns() + 10 * HARNESS_S;

		TEST_EQ_U64(atomic_load(&e->group_size), RANKS);
		TEST_ASSERT(atomic_load(&e->group_last_ns) > 0);
		while (atomic_load(&e->group_committed) != 0x7) {
			TEST_ASSERT_MSG(harness_mono_ns() < deadline, "committed ranks: 0x%x",
			                atomic_load(&e->group_committed));
			harness_sleep_ms(10);
		}
		TEST_ASSERT(atomic_load(&e->group_first_ns) > 0);

		/* and wsyncctl says so */
		char ctl[256], out[16384];
		const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
		snprintf(ctl, sizeof(ctl), "%s/bin/wsyncctl", build);
		char *argv[] = { ctl, "--endpoint", B.sock, "--json", "models", NULL };
		int st = harness_run(argv, out, sizeof(out), HARNESS_WAIT_MS);
		TEST_ASSERT_MSG(st == 0, "wsyncctl models: %s: %s", harness_status_str(st), out);
		TEST_CONTAINS(out, "\"ranks\":4");
		TEST_CONTAINS(out, "\"committed\":[0,1,2]");
	}
	kill(ranks[3].pid, SIGKILL);
	harness_wait_status(ranks[3].pid, 5000);
	for (uint32_t r = 0; r < 3; r++)
		TEST_RC(rank_result(r), -ECONNABORTED);
	TEST_RC(wsync_sub_wait(s, seen, 100 * HARNESS_MS, &v), -ETIMEDOUT);
	chan_close(&ranks[3].cmd);
	chan_close(&ranks[3].res);
	TEST_OK(rank_start(3, 0));
	group_publish(23, 0);
	TEST_OK(wsync_sub_wait(s, seen, 5 * HARNESS_S, &v));
	TEST_EQ_U64(v.step, 23);
	TEST_ASSERT(harness_verify_tensors(&v) == 0);
	seen = v.version;
	wsync_sub_release(s, &v);
	for (uint32_t r = 0; r < RANKS; r++)
		rank_stop(r);

	/* a group deadline: rank 3 begins but never commits */
	for (uint32_t r = 0; r < RANKS; r++)
		TEST_OK(rank_start(r, 3000));   /* generous: ASan on 2 loaded cores */
	group_publish(24, 0);
	chan_send(&ranks[3].cmd, CMD(OP_BEGIN, 25));
	TEST_OK(rank_result(3));
	for (uint32_t r = 0; r < 3; r++)
		chan_send(&ranks[r].cmd, CMD(OP_PUBLISH, 25));
	for (uint32_t r = 0; r < 3; r++)
		TEST_RC(rank_result(r), -ECONNABORTED);
	chan_send(&ranks[3].cmd, CMD(OP_COMMIT, 25));
	TEST_RC(rank_result(3), -ECONNABORTED);
	group_publish(26, 0);
	TEST_OK(wsync_sub_wait(s, seen, 5 * HARNESS_S, &v));
	TEST_EQ_U64(v.step, 26);
	TEST_ASSERT(harness_verify_tensors(&v) == 0);
	wsync_sub_release(s, &v);
	for (uint32_t r = 0; r < RANKS; r++)
		rank_stop(r);

	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
