/*
 * hostile_waits — WAIT_READERS cannot crash, wedge or starve the broker
 * (DESIGN invariants 9 and 10).
 *
 *  1. A subscriber sends 200 WAIT_READERS that can never be met, all with
 *     the same 200 ms deadline, so they settle in one poll: each is answered
 *     (-ETIMEDOUT, or -ENOBUFS at once past the per-session budget), in the
 *     order the budget allows, and the broker stays up. Twice, as the wedge
 *     showed only on the second round.
 *  2. A group rank whose COMMIT is pending (the broker owes it an answer
 *     until the other rank commits) sends 40 such waits on its own socket:
 *     40 timeouts, then its COMMIT_OK once the other rank commits.
 *  3. A subscriber queues waits with no deadline as fast as it can: past the
 *     budget each is refused with -ENOBUFS naming the limit; an honest
 *     trainer's commit round trip stays near its idle figure and the broker
 *     does not spin.
 *  4. The same subscriber dies (SIGKILL) holding its waits, and a rank dies
 *     holding a pending COMMIT: the broker's fds and memory come back.
 */
#include "tests/lib/harness.h"
#include "tests/lib/hostile.h"
#include "tests/lib/raw.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define MODEL   "hostile.model"
#define GROUPED "hostile.group"
#define BUDGET  64                       /* the broker's WAIT_READERS per session */

static struct broker B;

/* Posts a WAIT_READERS for n_readers readers of v of model id. */
static uint32_t post_wait(struct raw *r, uint32_t id, uint64_t v, uint32_t n_readers,
                          uint32_t timeout_ms)
{
	union wsync_msg_any m;
	uint32_t seq = raw_init(r, &m, WSYNC_MSG_WAIT_READERS);

	m.wait_readers.m.model_id = id;
	m.wait_readers.version = v;
	m.wait_readers.n_readers = n_readers;
	m.wait_readers.timeout_ms = timeout_ms;
	TEST_OK(raw_post(r, &m, NULL, 0));
	return seq;
}

/* Reads n answers on r: counts of -ETIMEDOUT and -ENOBUFS; every answer is
 * an ERROR to one of the seqs [first, first + n). */
static void collect(struct raw *r, uint32_t first, int n, int *timeouts, int *refused)
{
	char *seen = calloc((size_t)n, 1);

	TEST_ASSERT(seen);
	*timeouts = *refused = 0;
	for (int i = 0; i < n; i++) {
		union wsync_msg_any m;
		ssize_t got = raw_recv(r->fd, &m, NULL, NULL, HARNESS_WAIT_MS);

		TEST_ASSERT_MSG(got > 0, "answer %d of %d to the waits: %zd", i, n, got);
		TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_ERROR, "a wait answered with %s",
		                wsync_msg_name(m.hdr.type));
		TEST_ASSERT_MSG(m.hdr.seq >= first && m.hdr.seq < first + (uint32_t)n &&
		                !seen[m.hdr.seq - first], "an answer with seq %u", m.hdr.seq);
		seen[m.hdr.seq - first] = 1;
		if (m.error.err == -ETIMEDOUT)
			(*timeouts)++;
		else if (m.error.err == -ENOBUFS) {
			(*refused)++;
			TEST_CONTAINS(m.error.msg, "64");
		} else
			harness_fail(__FILE__, __LINE__, "a wait answered %d: %s", m.error.err,
			             m.error.msg);
	}
	free(seen);
}

static void settle_in_one_poll(uint32_t id, int round)
{
	struct raw s;
	uint32_t first;
	int timeouts, refused;

	raw_hello(&s, &B, "waits-at-once");
	TEST_EQ_U64(raw_sub_open(&s, MODEL), id);
	first = s.seq + 1;
	for (int i = 0; i < 200; i++)
		post_wait(&s, id, 1, 50, 200);
	collect(&s, first, 200, &timeouts, &refused);
	harness_log("round %d: 200 waits: %d timed out together, %d refused", round,
	            timeouts, refused);
	TEST_EQ_U64(timeouts, BUDGET);
	TEST_EQ_U64(refused, 200 - BUDGET);
	raw_close(&s);
}

static const wsync_shard half0 = { 0, 0, 0, 32 }, half1 = { 0, 0, 32, 64 };

static void group_rank_waits(void)
{
	wsync_tensor_desc d[2];
	struct raw r0, r1;
	struct raw_rank g0 = { 2, 0, 0, &half0, 1 }, g1 = { 2, 1, 0, &half1, 1 };
	union wsync_msg_any m;
	uint32_t id, id1, commit_seq, first;
	uint64_t version;
	uint32_t slot;
	int timeouts, refused;
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;
	uint64_t shape[1] = { 64 };

	harness_desc(&d[0], "w", WSYNC_F32, 1, shape);
	raw_hello(&r0, &B, "rank-0");
	raw_hello(&r1, &B, "rank-1");
	TEST_OK(raw_pub_open(&r0, GROUPED, d, 1, 2, &g0, &id, NULL));
	TEST_OK(raw_pub_open(&r1, GROUPED, d, 1, 2, &g1, &id1, NULL));
	TEST_EQ_U64(id, id1);
	raw_init(&r0, &m, WSYNC_MSG_BEGIN);
	m.begin.m.model_id = id;
	raw_request(r0.fd, &m, sizeof m.begin, NULL, 0, WSYNC_MSG_GRANT, fds, &nfds);
	raw_close_fds(fds, nfds);
	slot = m.grant.slot;
	version = m.grant.version;
	commit_seq = raw_init(&r0, &m, WSYNC_MSG_COMMIT);
	m.commit.m.model_id = id;
	m.commit.slot = slot;
	m.commit.version = version;
	m.commit.step = 5;
	TEST_OK(raw_post(&r0, &m, NULL, 0));
	/* the broker owes r0 that answer; now 40 waits that all expire at once */
	first = r0.seq + 1;
	for (int i = 0; i < 40; i++)
		post_wait(&r0, id, version > 1 ? version - 1 : 1, 50, 200);
	harness_sleep_ms(400);
	collect(&r0, first, 40, &timeouts, &refused);
	TEST_EQ_U64(timeouts, 40);
	/* the other rank commits: r0's COMMIT is answered */
	nfds = WSYNC_MSG_MAX_FDS;
	raw_init(&r1, &m, WSYNC_MSG_BEGIN);
	m.begin.m.model_id = id;
	raw_request(r1.fd, &m, sizeof m.begin, NULL, 0, WSYNC_MSG_GRANT, fds, &nfds);
	raw_close_fds(fds, nfds);
	raw_init(&r1, &m, WSYNC_MSG_COMMIT);
	m.commit.m.model_id = id;
	m.commit.slot = slot;
	m.commit.version = version;
	m.commit.step = 5;
	raw_request(r1.fd, &m, sizeof m.commit, NULL, 0, WSYNC_MSG_COMMIT_OK, NULL, NULL);
	TEST_ASSERT(raw_recv(r0.fd, &m, NULL, NULL, HARNESS_WAIT_MS) > 0);
	TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_COMMIT_OK && m.hdr.seq == commit_seq,
	                "rank 0's commit answered with %s seq %u (%s)", wsync_msg_name(m.hdr.type),
	                m.hdr.seq, m.hdr.type == WSYNC_MSG_ERROR ? m.error.msg : "");
	TEST_EQ_U64(m.commit_ok.version, version);

	/* rank 0 commits the next version and dies before rank 1 does */
	nfds = WSYNC_MSG_MAX_FDS;
	raw_init(&r0, &m, WSYNC_MSG_BEGIN);
	m.begin.m.model_id = id;
	raw_request(r0.fd, &m, sizeof m.begin, NULL, 0, WSYNC_MSG_GRANT, fds, &nfds);
	raw_close_fds(fds, nfds);
	slot = m.grant.slot;
	version = m.grant.version;
	raw_init(&r0, &m, WSYNC_MSG_COMMIT);
	m.commit.m.model_id = id;
	m.commit.slot = slot;
	m.commit.version = version;
	m.commit.step = 6;
	TEST_OK(raw_post(&r0, &m, NULL, 0));
	for (int i = 0; i < 40; i++)
		post_wait(&r0, id, version, 50, UINT32_MAX);
	raw_close(&r0);
	raw_close(&r1);
}

/* A child that queues waits with no deadline until told to stop (then it
 * dies without a word: SIGKILL by the parent). Reports how many it posted
 * and how many were refused. */
static struct chan up;

static int starver(void *arg)
{
	uint32_t id = (uint32_t)(uintptr_t)arg;
	struct raw s;
	int refused = 0;

	raw_hello(&s, &B, "starver");
	TEST_EQ_U64(raw_sub_open(&s, MODEL), id);
	for (int i = 0; i < BUDGET; i++)
		post_wait(&s, id, 1, 50, UINT32_MAX);
	/* each one past the budget is refused at once */
	for (int i = BUDGET; i < 20000; i++) {
		union wsync_msg_any m;
		uint32_t seq = post_wait(&s, id, 1, 50, UINT32_MAX);

		if (raw_recv(s.fd, &m, NULL, NULL, HARNESS_WAIT_MS) <= 0 || m.hdr.seq != seq)
			return 2;
		if (m.hdr.type == WSYNC_MSG_ERROR && m.error.err == -ENOBUFS)
			refused++;
	}
	chan_send(&up, (uint64_t)refused);
	pause();
	return 0;
}

int main(void)
{
	wsync_tensor_desc d[2];
	struct hostile_base base;
	struct raw p;
	wsync_client *c;
	wsync_pub *honest;
	uint32_t id;
	long ticks;
	pid_t kid;
	int st;

	if (harness_broker_start(&B, NULL))
		return 1;
	TEST_OK(harness_connect(&B, "honest-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, "hostile.honest", 0, &honest));
	hostile_base_take(&B, honest, &base);

	raw_hello(&p, &B, "publisher");
	harness_model_2t(d);
	TEST_OK(raw_pub_open(&p, MODEL, d, 2, 2, NULL, &id, NULL));
	raw_publish(&p, id, 1);

	settle_in_one_poll(id, 1);
	settle_in_one_poll(id, 2);
	hostile_check_rtt(&B, honest, &base, "after waits that settled together");

	group_rank_waits();
	hostile_check_rtt(&B, honest, &base, "after a rank's waits");

	chan_open(&up);
	kid = harness_fork(starver, (void *)(uintptr_t)id);
	TEST_EQ_U64(chan_recv(&up, kid), 20000 - BUDGET);
	ticks = harness_broker_cpu_ticks(&B);
	hostile_check_rtt(&B, honest, &base, "while a subscriber holds its budget of waits");
	harness_sleep_ms(1000);
	ticks = harness_broker_cpu_ticks(&B) - ticks;
	harness_log("broker CPU while 64 waits pend: %ld ticks in >1 s", ticks);
	TEST_ASSERT_MSG(ticks < sysconf(_SC_CLK_TCK) / 5, "the broker used %ld ticks of CPU "
	                "in about a second with one session's waits pending", ticks);
	kill(kid, SIGKILL);
	st = harness_wait_status(kid, 5000);
	TEST_ASSERT(WIFSIGNALED(st));

	raw_close(&p);
	/* the models they made stay until deleted: then the fds are back */
	TEST_OK(wsync_model_delete(c, MODEL));
	TEST_OK(wsync_model_delete(c, GROUPED));
	hostile_check_settled(&B, &base, 8 * 1024, "the hostile sessions went");
	hostile_check_rtt(&B, honest, &base, "after the hostile sessions went");
	wsync_pub_close(honest);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
