/*
 * group_promises — a publisher group keeps what docs/SHARDING.md promises
 * when one party is faulty or slow.
 *
 *  1. Only the broker makes a group's version visible: a rank that stores
 *     the grant into the model page's `latest` itself, before the other rank
 *     committed, is ignored by collectors (they keep the previous version,
 *     never a view with the other rank's half unwritten), and the broker
 *     puts `latest` back; the version is visible, whole, once both
 *     committed.
 *  2. An honest slow rank is not a protocol violator: with a 200 ms group
 *     deadline and rank 2 taking 700 ms to write its part, ranks 0 and 1 are
 *     told the version was dropped because rank 2 missed the deadline; rank
 *     2's late COMMIT gets the same reason (not -EPROTO); the version the
 *     others began meanwhile is dropped for the same reason; then all three
 *     publish the next versions, and a collector reads them whole.
 */
#include "tests/lib/harness.h"
#include "tests/lib/raw.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EARLY "groups.early"
#define SLOW  "groups.slow"
#define ROWS  48
#define COLS  16

static struct broker B;

static void layout(wsync_tensor_desc *d)
{
	uint64_t shape[2] = { ROWS, COLS };

	harness_desc(d, "w", WSYNC_U32, 2, shape);
}

/* ---- 1: a rank that stores latest early --------------------------------------- */

static void early_latest(void)
{
	wsync_tensor_desc d;
	wsync_shard h0 = { 0, 0, 0, ROWS / 2 }, h1 = { 0, 0, ROWS / 2, ROWS };
	struct raw_rank g0 = { 2, 0, 0, &h0, 1 }, g1 = { 2, 1, 0, &h1, 1 };
	struct raw r0, r1;
	union wsync_msg_any m;
	struct wsync_model_page *page;
	wsync_client *c;
	wsync_sub *s;
	wsync_view v;
	uint32_t id, id1, slot;
	uint64_t version, seen = 0;
	int page_fd, fds[WSYNC_MSG_MAX_FDS], nfds;

	layout(&d);
	raw_hello(&r0, &B, "rank-0");
	raw_hello(&r1, &B, "rank-1");
	TEST_OK(raw_pub_open(&r0, EARLY, &d, 1, 3, &g0, &id, &page_fd));
	TEST_OK(raw_pub_open(&r1, EARLY, &d, 1, 3, &g1, &id1, NULL));
	page = mmap(NULL, WSYNC_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, page_fd, 0);
	TEST_ASSERT(page != MAP_FAILED);
	TEST_OK(harness_connect(&B, "collector", &c));
	TEST_OK(wsync_sub_open(c, EARLY, &s));

	/* both ranks publish step 1 honestly (the broker stores latest) */
	for (int step = 1; step <= 2; step++) {
		struct raw *rk[2] = { &r0, &r1 };
		uint32_t seqs[2];

		for (int k = 0; k < 2; k++) {
			nfds = WSYNC_MSG_MAX_FDS;
			raw_init(rk[k], &m, WSYNC_MSG_BEGIN);
			m.begin.m.model_id = id;
			raw_request(rk[k]->fd, &m, sizeof m.begin, NULL, 0, WSYNC_MSG_GRANT, fds, &nfds);
			raw_close_fds(fds, nfds);
		}
		slot = m.grant.slot;
		version = m.grant.version;
		if (step == 2) {
			/* rank 0 makes "its" version visible before rank 1 committed */
			atomic_store(&page->slots[slot].version, version);
			atomic_store(&page->slots[slot].step, 2);
			atomic_store(&page->latest, wsync_latest_pack(version, slot));
			atomic_fetch_add(&page->seq, 1);
			TEST_OK(wsync_sub_acquire(s, &v));
			harness_log("after rank 0 stored v%llu itself a collector sees v%llu",
			            (unsigned long long)version, (unsigned long long)v.version);
			TEST_ASSERT_MSG(v.version < version, "a collector took v%llu of the group "
			                "before every rank committed it",
			                (unsigned long long)version);
			wsync_sub_release(s, &v);
			TEST_RC(wsync_sub_wait(s, seen, 150 * HARNESS_MS, &v), -ETIMEDOUT);
		}
		for (int k = 0; k < 2; k++) {
			raw_init(rk[k], &m, WSYNC_MSG_COMMIT);
			m.commit.m.model_id = id;
			m.commit.slot = slot;
			m.commit.version = version;
			m.commit.step = (uint64_t)step;
			seqs[k] = m.hdr.seq;
			TEST_OK(raw_post(rk[k], &m, NULL, 0));
		}
		for (int k = 0; k < 2; k++) {
			TEST_ASSERT(raw_recv(rk[k]->fd, &m, NULL, NULL, HARNESS_WAIT_MS) > 0);
			TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_COMMIT_OK && m.hdr.seq == seqs[k],
			                "rank %d: %s (%s)", k, wsync_msg_name(m.hdr.type),
			                m.hdr.type == WSYNC_MSG_ERROR ? m.error.msg : "");
		}
		TEST_OK(wsync_sub_wait(s, step == 1 ? 0 : seen, 5 * HARNESS_S, &v));
		TEST_EQ_U64(v.version, version);
		TEST_EQ_U64(v.step, (uint64_t)step);
		seen = v.version;
		wsync_sub_release(s, &v);
	}
	munmap(page, WSYNC_PAGE);
	close(page_fd);
	wsync_sub_close(s);
	wsync_close(c);
	raw_close(&r0);
	raw_close(&r1);
}

/* ---- 2: an honest slow rank ------------------------------------------------------- */

struct rank_arg {
	uint32_t rank;
	wsync_pub *p;
	int delay_ms;                    /* before committing the first version */
	int failures;                    /* commits answered with an error */
	int bad;                         /* ...with another error or reason */
	char first_msg[512];             /* the first error's message */
};

#define SUCCESSES 3
static void fill(const wsync_slab *slab, uint32_t rank, uint64_t step)
{
	wsync_slice sl;
	uint32_t *row;

	TEST_OK(wsync_slab_part(slab, 0, &sl));
	for (uint64_t r = 0; r < sl.rows; r++) {
		row = (uint32_t *)((char *)slab->base + sl.offset + r * sl.stride);
		for (uint64_t j = 0; j < sl.row_bytes / 4; j++)
			row[j] = (uint32_t)(step * 1000 + rank);
	}
}

/* Publishes until SUCCESSES versions went through; the step is the number
 * of versions the group published so far + 1, the same on every rank. */
static void *rank_main(void *argp)
{
	struct rank_arg *a = argp;
	int done = 0;

	for (int tries = 0; done < SUCCESSES && tries < 20; tries++) {
		wsync_slab slab;
		int err;

		TEST_OK(wsync_pub_begin(a->p, 5 * HARNESS_S, &slab));
		fill(&slab, a->rank, (uint64_t)done + 1);
		if (tries == 0 && a->delay_ms)
			harness_sleep_ms(a->delay_ms);
		err = wsync_pub_commit(a->p, (uint64_t)done + 1, NULL);
		if (!err) {
			done++;
			continue;
		}
		if (!a->failures++)
			snprintf(a->first_msg, sizeof a->first_msg, "%s", wsync_errmsg());
		if (err != -ECONNABORTED ||
		    !strstr(wsync_errmsg(), "rank 2 missed the group deadline of 200 ms"))
			a->bad++;
		harness_log("rank %u: commit %d (%s): %s", a->rank, err, wsync_strerror(err),
		            wsync_errmsg());
	}
	TEST_EQ_U64(done, SUCCESSES);
	return NULL;
}

static void slow_rank(void)
{
	wsync_tensor_desc d;
	wsync_client *cl[3], *c;
	struct rank_arg a[3];
	pthread_t t[3];
	wsync_sub *s;
	wsync_view v;

	layout(&d);
	for (uint32_t r = 0; r < 3; r++) {
		wsync_shard part = { 0, 0, r * (ROWS / 3), (r + 1) * (ROWS / 3) };
		wsync_model_opts o = { .group_size = 3, .rank = r, .group_timeout_ms = 200 };
		char name[32];

		snprintf(name, sizeof name, "rank-%u", r);
		TEST_OK(harness_connect(&B, name, &cl[r]));
		memset(&a[r], 0, sizeof a[r]);
		a[r].rank = r;
		a[r].delay_ms = r == 2 ? 700 : 0;
		TEST_OK(wsync_pub_open_shard(cl[r], SLOW, &d, 1, &o, &part, 1, &a[r].p));
	}
	TEST_OK(harness_connect(&B, "collector", &c));
	TEST_OK(wsync_sub_open(c, SLOW, &s));
	for (int r = 0; r < 3; r++)
		TEST_ASSERT(pthread_create(&t[r], NULL, rank_main, &a[r]) == 0);
	for (int r = 0; r < 3; r++)
		pthread_join(t[r], NULL);
	for (int r = 0; r < 3; r++) {
		TEST_ASSERT_MSG(a[r].failures >= 1 && !a[r].bad, "rank %d: %d failed commits, "
		                "%d of them not for rank 2's missed deadline (first: %s)", r,
		                a[r].failures, a[r].bad, a[r].first_msg);
		TEST_CONTAINS(a[r].first_msg, "v1 was dropped");
	}
	/* rank 2's late commit of v1 was its only failure: it carried on */
	TEST_EQ_U64(a[2].failures, 1);
	/* the later versions went through whole */
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.step, SUCCESSES);
	for (uint64_t i = 0; i < ROWS * COLS; i++) {
		uint32_t want = SUCCESSES * 1000 + (uint32_t)(i / COLS / (ROWS / 3));

		TEST_ASSERT_MSG(((const uint32_t *)v.base)[i] == want, "word %llu is %u, not %u",
		                (unsigned long long)i, ((const uint32_t *)v.base)[i], want);
	}
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_close(c);
	for (int r = 0; r < 3; r++) {
		wsync_pub_close(a[r].p);
		wsync_close(cl[r]);
	}
}

int main(void)
{
	if (harness_broker_start(&B, NULL))
		return 1;
	early_latest();
	slow_rank();
	harness_broker_finish(&B);
	return 0;
}
