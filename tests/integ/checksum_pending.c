/*
 * checksum_pending — a version written without the copy helper becomes
 * visible at once, its checksum pending while its publisher's hashing
 * thread forms it (docs/ARCHITECTURE.md, "Checksums"):
 *  1. wait: a publisher stopped (SIGSTOP) right after such a commit leaves
 *     the checksum pending; a collector's verify waits, and succeeds once
 *     the publisher goes on (SIGCONT 300 ms later);
 *  2. death: a publisher SIGKILLed while hashing leaves it pending for
 *     ever; verify and wsync_view_checksum answer -ENODATA ("died while
 *     hashing") within seconds, never hang, never say -EBADMSG;
 *  3. move: then a publisher of another uid opens that model, which moves
 *     it to new memory with its latest version: verify of the moved
 *     version says the same (needs root; skipped otherwise);
 *  4. stray write: once the hash is stored, a byte changed behind the
 *     library's back is still caught (-EBADMSG);
 *  5. back to back: 2 slots, 40 publishes with no pause, most of them
 *     hashed after the commit (some through the copy helper, hashed at
 *     once): a collector verifies every version it gets, and each
 *     checksum is that version's (a slot written again while it was
 *     hashed, or a late store of the previous version's checksum, would
 *     show as -EBADMSG);
 *  6. group: two ranks that ask for checksums (WSYNC_PUB_CHECKSUM; a
 *     group's default is none) publish a model whose tensors are split
 *     along dim 0 and dim 1 (blocks shared by the ranks), rank 0 partly through
 *     wsync_slab_copy: the broker makes each version visible with its
 *     checksum pending on rank 0, which hashes it; every version verifies;
 *  7. group, hasher killed: rank 0 SIGKILLed while it hashes a version:
 *     verify says -ENODATA;
 *  8. exit: a publisher that returns from main (exit) right after such a
 *     commit, without closing anything, still stores its checksum (the
 *     library drains its hashers at exit): verify succeeds.
 */
#include "tests/lib/harness.h"

#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libclient/checksum.h"
#include "libclient/client.h"
#include "libclient/pub.h"
#include "libclient/sub.h"
#include "libclient/sub_attach.h"

#define BIG_BYTES   (64u << 20)
#define FAST_BYTES  (8u << 20)
#define STOPPED     "pend.stopped"
#define DEAD        "pend.dead"
#define STRAY       "pend.stray"
#define FAST        "pend.fast"
#define FAST_N      40
#define GROUP       "pend.group"
#define EXITING     "pend.exit"
#define GROUP_DEAD  "pend.group.dead"
#define G_ROWS      4096
#define G_COLS      4096
#define G_STEPS     4

static struct broker B;
static uid_t other_uid;
static gid_t other_gid;
static int can_move;

static void desc_of(wsync_tensor_desc *d, uint64_t bytes)
{
	uint64_t shape[1] = { bytes };

	harness_desc(d, "w", WSYNC_U8, 1, shape);
}

/* The pending word of a view's slot, as the view's page has it. */
static uint32_t view_pending(const wsync_sub *s, const wsync_view *v)
{
	const struct sub_maps *m = atomic_load(&s->c->hz[v->priv_hazard].maps);

	TEST_ASSERT(m != NULL);
	return atomic_load(&m->page->sum_pending[v->priv_slot]);
}

/* A publisher that writes the slab itself (so its commit hashes after the
 * version is visible), commits and stops; on SIGCONT it closes. */
static int stopping_publisher(void *arg)
{
	const char *model = arg;
	wsync_tensor_desc d;
	wsync_client *c;
	wsync_pub *p;
	wsync_slab slab;

	desc_of(&d, BIG_BYTES);
	TEST_OK(harness_connect(&B, "pend-trainer", &c));
	TEST_OK(wsync_pub_open(c, model, &d, 1, NULL, &p));
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	harness_fill(slab.base, BIG_BYTES, 7);
	/* not waiting for the broker's answer: the hash has only just begun */
	TEST_OK(wsync_pub_commit_async(p, 7, NULL));
	TEST_ASSERT_MSG(atomic_load(&p->page->sum_pending[slab.priv_slot]) != 0,
	                "a commit of 64 MiB written directly hashed before it returned");
	raise(SIGSTOP);
	wsync_pub_close(p);
	wsync_close(c);
	return 0;
}

/* Forks a stopping publisher of model and waits until it stopped. */
static pid_t stopped_publisher(const char *model)
{
	pid_t pid = harness_fork(stopping_publisher, (void *)model);
	int st;

	TEST_ASSERT(waitpid(pid, &st, WUNTRACED) == pid);
	TEST_ASSERT_MSG(WIFSTOPPED(st), "publisher: %s", harness_status_str(st));
	return pid;
}

static void *cont_later(void *arg)
{
	harness_sleep_ms(300);
	kill(*(pid_t *)arg, SIGCONT);
	return NULL;
}

/* 1. */
static void pending_waits(wsync_client *c)
{
	pid_t pid = stopped_publisher(STOPPED);
	wsync_sub *s;
	wsync_view v;
	pthread_t th;
	int64_t t0;
	uint64_t sum = 0;

	TEST_OK(wsync_sub_open(c, STOPPED, &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.step, 7);
	TEST_ASSERT(view_pending(s, &v) != 0);
	TEST_ASSERT(pthread_create(&th, NULL, cont_later, &pid) == 0);
	t0 = harness_mono_ns();
	TEST_OK(wsync_view_verify(&v));
	TEST_ASSERT_MSG(harness_mono_ns() - t0 >= 250 * HARNESS_MS,
	                "verify returned before its publisher went on");
	TEST_ASSERT(pthread_join(th, NULL) == 0);
	TEST_EQ_U64(view_pending(s, &v), 0);
	TEST_OK(wsync_view_checksum(&v, &sum));
	TEST_EQ_U64(sum, wsync_checksum(v.base, v.bytes));
	TEST_OK(harness_verify_view(&v));
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	harness_expect_exit0(pid, "stopped publisher");
}

/* verify of a version whose publisher died hashing: -ENODATA, at once or
 * nearly (never the 10 s of a live publisher's wait). */
static void expect_orphan(wsync_view *v)
{
	int64_t t0 = harness_mono_ns();
	uint64_t sum = 0;

	TEST_RC(wsync_view_verify(v), -ENODATA);
	TEST_CONTAINS(wsync_errmsg(), "died while hashing");
	TEST_ASSERT_MSG(harness_mono_ns() - t0 < 5 * HARNESS_S, "verify took %lld ms",
	                (long long)((harness_mono_ns() - t0) / HARNESS_MS));
	TEST_RC(wsync_view_checksum(v, &sum), -ENODATA);
}

/* 3., as another uid: opens the model (it moves), then leaves. */
static int other_publisher(void *arg)
{
	wsync_tensor_desc d;
	wsync_client *c;
	wsync_pub *p;
	int err;

	(void)arg;
	TEST_ASSERT(setgroups(0, NULL) == 0);
	TEST_ASSERT(setgid(other_gid) == 0);
	TEST_ASSERT(setuid(other_uid) == 0);
	desc_of(&d, BIG_BYTES);
	TEST_OK(harness_connect(&B, "other-trainer", &c));
	while ((err = wsync_pub_open(c, DEAD, &d, 1, NULL, &p)) == -EBUSY)
		harness_sleep_ms(50);
	TEST_OK(err);
	wsync_pub_close(p);
	wsync_close(c);
	return 0;
}

/* 2. and 3. */
static void publisher_dies(wsync_client *c)
{
	pid_t pid = stopped_publisher(DEAD);
	const struct wsync_ctl_model *e;
	uint64_t inc;
	wsync_sub *s;
	wsync_view v, moved;

	TEST_OK(wsync_sub_open(c, DEAD, &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_ASSERT(view_pending(s, &v) != 0);
	kill(pid, SIGKILL);
	TEST_ASSERT(harness_wait_status(pid, 5000) != -1);
	expect_orphan(&v);
	TEST_OK(harness_verify_view(&v));
	if (!can_move) {
		wsync_sub_release(s, &v);
		wsync_sub_close(s);
		return;
	}
	e = client_ctl_model(c, s->model_id);
	inc = atomic_load(&e->incarnation);
	harness_expect_exit0(harness_fork(other_publisher, NULL), "other uid's publisher");
	TEST_ASSERT_MSG(atomic_load(&e->incarnation) != inc, "the model did not move");
	TEST_OK(wsync_sub_acquire(s, &moved));
	TEST_EQ_U64(moved.version, v.version);
	TEST_ASSERT(moved.base != v.base);
	TEST_ASSERT(view_pending(s, &moved) != 0);
	expect_orphan(&moved);
	TEST_OK(harness_verify_view(&moved));
	expect_orphan(&v);                   /* the view held across the move */
	wsync_sub_release(s, &moved);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
}

/* 4. */
static void stray_write(wsync_client *c)
{
	wsync_tensor_desc d;
	wsync_pub *p;
	wsync_sub *s;
	wsync_slab slab;
	wsync_view v;

	desc_of(&d, FAST_BYTES);
	TEST_OK(wsync_pub_open(c, STRAY, &d, 1, NULL, &p));
	TEST_OK(wsync_sub_open(c, STRAY, &s));
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	harness_fill(slab.base, FAST_BYTES, 3);
	TEST_OK(wsync_pub_commit(p, 3, NULL));
	wsync_pub_sum_settle(p, WSYNC_SLOT_NONE);
	TEST_EQ_U64(atomic_load(&p->page->sum_pending[slab.priv_slot]), 0);
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_OK(wsync_view_verify(&v));
	((uint8_t *)slab.base)[FAST_BYTES / 2 + 12345] ^= 0x10;
	TEST_RC(wsync_view_verify(&v), -EBADMSG);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_pub_close(p);
}

/* 5.: the publisher, in a process of its own. */
static int fast_publisher(void *arg)
{
	struct chan *go = arg;
	wsync_tensor_desc d;
	wsync_model_opts o = { .slots = 2 };
	wsync_client *c;
	wsync_pub *p;
	wsync_slab slab;
	uint8_t *src = malloc(FAST_BYTES);
	const void *srcs[1] = { src };

	TEST_ASSERT(src != NULL);
	desc_of(&d, FAST_BYTES);
	TEST_OK(harness_connect(&B, "fast-trainer", &c));
	TEST_OK(wsync_pub_open(c, FAST, &d, 1, &o, &p));
	chan_send(go, 1);
	for (uint64_t step = 1; step <= FAST_N; step++) {
		TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
		if (step % 3 == 0) {
			harness_fill(src, FAST_BYTES, step);
			TEST_OK(wsync_slab_copy_tensors(&slab, srcs, 0));
		} else {
			harness_fill(slab.base, FAST_BYTES, step);
		}
		TEST_OK(wsync_pub_commit(p, step, NULL));
	}
	wsync_pub_close(p);
	wsync_close(c);
	free(src);
	return 0;
}

static void back_to_back(wsync_client *c)
{
	struct chan go;
	wsync_sub *s;
	wsync_view v;
	uint64_t last = 0, step = 0;
	int verified = 0;
	pid_t pid;

	chan_open(&go);
	pid = harness_fork(fast_publisher, &go);
	chan_recv(&go, pid);
	TEST_OK(wsync_sub_open(c, FAST, &s));
	while (step < FAST_N) {
		int err = wsync_sub_wait(s, last, 10 * HARNESS_S, &v);

		TEST_OK(err);
		TEST_OK(wsync_view_verify(&v));
		TEST_OK(harness_verify_view(&v));
		last = v.version;
		step = v.step;
		verified++;
		wsync_sub_release(s, &v);
	}
	harness_log("back to back: %d of %d versions verified", verified, FAST_N);
	TEST_ASSERT(verified >= 2);
	wsync_sub_close(s);
	harness_expect_exit0(pid, "fast publisher");
	chan_close(&go);
}

/* 6. and 7.: "a" f32 [G_ROWS, G_COLS] split along dim 0, "b" f32 [512, 64]
 * along dim 1 (every block of it shared). */
static void group_layout(wsync_tensor_desc d[2])
{
	uint64_t a[2] = { G_ROWS, G_COLS }, b[2] = { 512, 64 };

	harness_desc(&d[0], "a", WSYNC_F32, 2, a);
	harness_desc(&d[1], "b", WSYNC_F32, 2, b);
}

static size_t group_parts(uint32_t r, wsync_shard p[2])
{
	p[0] = (wsync_shard){ 0, 0, r * (G_ROWS / 2), (r + 1) * (G_ROWS / 2) };
	p[1] = (wsync_shard){ 1, 1, r * 32, (r + 1) * 32 };
	return 2;
}

struct group_rank {
	const char *model;
	uint32_t r;
	int steps;
	bool stop_after;                 /* rank 0 of 7.: stop once hashing */
};

/* A rank: publishes steps 1..steps; rank 0 rewrites its rows of "a"
 * through wsync_slab_copy (hashed as copied, reused by its checksum). */
static int group_rank_main(void *arg)
{
	const struct group_rank *g = arg;
	wsync_tensor_desc d[2];
	wsync_shard parts[2];
	size_t n = group_parts(g->r, parts);
	wsync_model_opts o = { .group_size = 2, .rank = g->r, .flags = WSYNC_PUB_CHECKSUM };
	wsync_client *c;
	wsync_pub *p;
	char name[32];
	int err;

	group_layout(d);
	snprintf(name, sizeof(name), "group-rank-%u", g->r);
	TEST_OK(harness_connect(&B, name, &c));
	while ((err = wsync_pub_open_shard(c, g->model, d, 2, &o, parts, n, &p)) == -EBUSY)
		harness_sleep_ms(20);
	TEST_OK(err);
	for (int step = 1; step <= g->steps; step++) {
		wsync_slab slab;
		wsync_slice sl;

		TEST_OK(wsync_pub_begin(p, 10 * HARNESS_S, &slab));
		TEST_OK(harness_fill_parts(&slab, parts, n, (uint64_t)step));
		if (g->r == 0) {
			void *buf;

			TEST_OK(wsync_slab_part(&slab, 0, &sl));
			TEST_ASSERT(sl.rows == 1 && (buf = malloc(sl.row_bytes)) != NULL);
			memcpy(buf, (char *)slab.base + sl.offset, sl.row_bytes);
			TEST_OK(wsync_slab_copy(&slab, sl.offset, buf, sl.row_bytes, 0));
			free(buf);
		}
		TEST_OK(wsync_pub_commit(p, (uint64_t)step, NULL));
		if (g->stop_after) {
			TEST_ASSERT_MSG(atomic_load(&p->page->sum_pending[p->group_slot]) != 0,
			                "rank 0 hashed 64 MiB before its commit returned");
			raise(SIGSTOP);
		}
	}
	wsync_pub_close(p);
	wsync_close(c);
	return 0;
}

/* 6. */
static void group_verifies(wsync_client *c)
{
	struct group_rank g0 = { GROUP, 0, G_STEPS, false }, g1 = { GROUP, 1, G_STEPS, false };
	pid_t r0 = harness_fork(group_rank_main, &g0), r1 = harness_fork(group_rank_main, &g1);
	uint64_t last = 0, step = 0, sum = 0;
	int verified = 0;
	wsync_sub *s;
	wsync_view v;
	int err;

	while ((err = wsync_sub_open(c, GROUP, &s)) == -ENOENT)
		harness_sleep_ms(20);
	TEST_OK(err);
	while (step < G_STEPS) {
		TEST_OK(wsync_sub_wait(s, last, 10 * HARNESS_S, &v));
		TEST_OK(wsync_view_verify(&v));
		TEST_OK(wsync_view_checksum(&v, &sum));
		TEST_EQ_U64(sum, wsync_checksum(v.base, v.bytes));
		TEST_OK(harness_verify_tensors(&v));
		last = v.version;
		step = v.step;
		verified++;
		wsync_sub_release(s, &v);
	}
	harness_log("group: %d of %d versions verified", verified, G_STEPS);
	wsync_sub_close(s);
	harness_expect_exit0(r0, "rank 0");
	harness_expect_exit0(r1, "rank 1");
}

/* 7. */
static void group_hasher_dies(wsync_client *c)
{
	struct group_rank g0 = { GROUP_DEAD, 0, 1, true }, g1 = { GROUP_DEAD, 1, 1, false };
	pid_t r0 = harness_fork(group_rank_main, &g0), r1 = harness_fork(group_rank_main, &g1);
	wsync_sub *s;
	wsync_view v;
	int st, err;

	TEST_ASSERT(waitpid(r0, &st, WUNTRACED) == r0);
	TEST_ASSERT_MSG(WIFSTOPPED(st), "rank 0: %s", harness_status_str(st));
	while ((err = wsync_sub_open(c, GROUP_DEAD, &s)) == -ENOENT)
		harness_sleep_ms(20);
	TEST_OK(err);
	TEST_OK(wsync_sub_wait(s, 0, 10 * HARNESS_S, &v));
	TEST_ASSERT(view_pending(s, &v) != 0);
	kill(r0, SIGKILL);
	TEST_ASSERT(harness_wait_status(r0, 5000) != -1);
	expect_orphan(&v);
	TEST_OK(harness_verify_tensors(&v));
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	harness_expect_exit0(r1, "rank 1");
}

/* 8.: commits a version written directly and exits at once */
static int exiting_publisher(void *arg)
{
	wsync_tensor_desc d;
	wsync_client *c;
	wsync_pub *p;
	wsync_slab slab;

	(void)arg;
	desc_of(&d, BIG_BYTES);
	TEST_OK(harness_connect(&B, "exiting-trainer", &c));
	TEST_OK(wsync_pub_open(c, EXITING, &d, 1, NULL, &p));
	TEST_OK(wsync_pub_begin(p, 5 * HARNESS_S, &slab));
	harness_fill(slab.base, BIG_BYTES, 9);
	TEST_OK(wsync_pub_commit_async(p, 9, NULL));
	TEST_ASSERT(atomic_load(&p->page->sum_pending[slab.priv_slot]) != 0);
	return 0;                            /* exit(), nothing closed */
}

static void exit_stores(wsync_client *c)
{
	wsync_sub *s;
	wsync_view v;

	harness_expect_exit0(harness_fork(exiting_publisher, NULL), "exiting publisher");
	TEST_OK(wsync_sub_open(c, EXITING, &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.step, 9);
	TEST_EQ_U64(view_pending(s, &v), 0);
	TEST_OK(wsync_view_verify(&v));
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
}

int main(void)
{
	wsync_client *c;

	can_move = harness_other_user("open a model as another uid (a move)", &other_uid,
	                              &other_gid) == 0;
	TEST_ASSERT(harness_broker_start(&B, can_move ? HARNESS_OTHER_USERS : NULL,
	                                 NULL) == 0);
	TEST_OK(harness_connect(&B, "pend-collector", &c));
	pending_waits(c);
	publisher_dies(c);
	stray_write(c);
	back_to_back(c);
	group_verifies(c);
	group_hasher_dies(c);
	exit_stores(c);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
