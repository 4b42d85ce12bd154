/*
 * hostile_bursts — a burst of 1,000 of every request type from one session
 * is answered, refused or cuts that session off; it never takes the broker
 * from the others (DESIGN invariants 6, 9 and 10).
 *
 * For each type the session sends 1,000 requests without reading a reply
 * (the pattern that once overflowed the broker's reply queue inside a send
 * and re-entered the teardown), then reads what comes: every answer must be
 * well-formed, carry one of the burst's seqs, and there are never more
 * answers than requests; the broker may cut the session off. After each
 * burst an honest trainer's commit round trip is near its idle figure.
 * A group rank with its COMMIT pending is cut off the same way: the other
 * ranks get -ECONNABORTED, cleanly, and the broker serves on.
 * Then sessions die holding each kind of pending thing: an eventfd write
 * parked on a full eventfd, replies queued and never read, a subscription
 * with a notifier. At the end, with the models they made deleted, the
 * broker's descriptors and memory are back at their baseline.
 */
#include "tests/lib/harness.h"
#include "tests/lib/hostile.h"
#include "tests/lib/raw.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MODEL "bursts.model"
#define BURST 1000

static struct broker B;
static uint32_t model_id;

/* Fills request i of a burst of type on r (seq set by raw_init). */
static void burst_request(struct raw *r, union wsync_msg_any *m, uint32_t type, int i)
{
	raw_init(r, m, type);
	switch (type) {
	case WSYNC_MSG_HELLO:
		m->hello.layout_version = WSYNC_LAYOUT_VERSION;
		snprintf(m->hello.name, sizeof m->hello.name, "again-%d", i);
		break;
	case WSYNC_MSG_SUB_OPEN:
		snprintf(m->sub_open.model, sizeof m->sub_open.model, "%s", MODEL);
		break;
	case WSYNC_MSG_ATTACH:
		m->attach.m.model_id = model_id;
		break;
	case WSYNC_MSG_BEGIN:
		m->begin.m.model_id = model_id;
		break;
	case WSYNC_MSG_COMMIT:
		m->commit.m.model_id = model_id;
		m->commit.version = 1000000 + (uint64_t)i;
		break;
	case WSYNC_MSG_ABORT:
		m->abort.m.model_id = model_id;
		m->abort.version = 1000000 + (uint64_t)i;
		break;
	case WSYNC_MSG_NOTIFY:
		m->notify.m.model_id = model_id;
		break;
	case WSYNC_MSG_CLOSE:
		m->close.m.model_id = model_id;
		m->close.what = WSYNC_CLOSE_SUB;
		break;
	case WSYNC_MSG_DELETE:
		snprintf(m->delete_.model, sizeof m->delete_.model, "bursts.ghost-%d", i % 7);
		break;
	case WSYNC_MSG_WAIT_READERS:
		m->wait_readers.m.model_id = model_id;
		m->wait_readers.version = 1;
		m->wait_readers.n_readers = 100;
		m->wait_readers.timeout_ms = 100;
		break;
	case WSYNC_MSG_GPU_ATTACH:
		m->gpu_attach.m.model_id = model_id;
		break;
	default:
		break;
	}
}

/* A burst of BURST requests of type, sent without reading; then whatever
 * comes back is read and checked. */
static void burst(uint32_t type)
{
	uint32_t first, sent = 0, answered = 0, closed = 0;
	struct raw r;
	int fds[WSYNC_MSG_MAX_FDS];

	raw_hello(&r, &B, "burst");
	if (type != WSYNC_MSG_HELLO && type != WSYNC_MSG_DELETE)
		TEST_EQ_U64(raw_sub_open(&r, MODEL), model_id);
	first = r.seq + 1;
	for (int i = 0; i < BURST; i++) {
		union wsync_msg_any m;
		int efd = -1, err;

		burst_request(&r, &m, type, i);
		if (type == WSYNC_MSG_NOTIFY) {
			efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
			TEST_ASSERT(efd >= 0);
		}
		err = raw_post(&r, &m, efd >= 0 ? &efd : NULL, efd >= 0 ? 1 : 0);
		if (efd >= 0)
			close(efd);
		if (err)
			break;                   /* cut off meanwhile */
		sent++;
	}
	for (;;) {
		union wsync_msg_any m;
		int nfds = WSYNC_MSG_MAX_FDS;
		char why[256] = "";
		ssize_t n = raw_recv(r.fd, &m, fds, &nfds, 3000);

		raw_close_fds(fds, nfds);
		if (n == 0 || n == -ECONNRESET) {
			closed = 1;
			break;
		}
		if (n == -ETIMEDOUT)
			break;
		TEST_ASSERT_MSG(n > 0, "%s burst: recv %zd", wsync_msg_name(type), n);
		TEST_ASSERT_MSG(wsync_msg_validate(&m, (size_t)n, why, sizeof why) == 0,
		                "%s burst: malformed answer: %s", wsync_msg_name(type), why);
		TEST_ASSERT_MSG(m.hdr.seq >= first && m.hdr.seq < first + sent,
		                "%s burst: an answer with seq %u (burst %u..%u)",
		                wsync_msg_name(type), m.hdr.seq, first, first + sent - 1);
		answered++;
		if (answered == sent && type != WSYNC_MSG_WAIT_READERS)
			break;
	}
	TEST_ASSERT_MSG(answered <= sent, "%s burst: %u answers to %u requests",
	                wsync_msg_name(type), answered, sent);
	TEST_ASSERT_MSG(closed || answered == sent, "%s burst: %u of %u requests answered and "
	                "the session was not cut off", wsync_msg_name(type), answered, sent);
	harness_log("%-12s burst: %u sent, %u answered%s", wsync_msg_name(type), sent, answered,
	            closed ? ", then cut off" : "");
	raw_close(&r);
}

/* A subscriber whose eventfd is full (the broker's write of 1 parks), with
 * its replies unread, dies at once: SIGKILL. */
static int parked_notify(void *arg)
{
	struct chan *up = arg;
	union wsync_msg_any m;
	uint64_t full = 0xfffffffffffffffeull;
	struct raw r;
	int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

	TEST_ASSERT(efd >= 0);
	TEST_ASSERT(write(efd, &full, sizeof full) == sizeof full);
	raw_hello(&r, &B, "parked");
	TEST_EQ_U64(raw_sub_open(&r, MODEL), model_id);
	raw_init(&r, &m, WSYNC_MSG_NOTIFY);
	m.notify.m.model_id = model_id;
	raw_request(r.fd, &m, sizeof m.notify, &efd, 1, WSYNC_MSG_NOTIFY_OK, NULL, NULL);
	/* replies it will never read */
	for (int i = 0; i < 200; i++) {
		raw_init(&r, &m, WSYNC_MSG_ATTACH);
		m.attach.m.model_id = model_id;
		if (raw_post(&r, &m, NULL, 0))
			break;
	}
	chan_send(up, 1);
	pause();
	return 0;
}

/* BEGIN on a rank (already open) of model id: its grant; fds closed. */
static void rank_begin(struct raw *r, uint32_t id, uint32_t *slot, uint64_t *version)
{
	union wsync_msg_any m;
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;

	raw_init(r, &m, WSYNC_MSG_BEGIN);
	m.begin.m.model_id = id;
	raw_request(r->fd, &m, sizeof m.begin, NULL, 0, WSYNC_MSG_GRANT, fds, &nfds);
	raw_close_fds(fds, nfds);
	*slot = m.grant.slot;
	*version = m.grant.version;
}

/* Posts rank r's COMMIT of the grant (slot, version) at step: its seq. */
static uint32_t rank_commit(struct raw *r, uint32_t id, uint32_t slot, uint64_t version,
                            uint64_t step)
{
	union wsync_msg_any m;
	uint32_t seq = raw_init(r, &m, WSYNC_MSG_COMMIT);

	m.commit.m.model_id = id;
	m.commit.slot = slot;
	m.commit.version = version;
	m.commit.step = step;
	TEST_OK(raw_post(r, &m, NULL, 0));
	return seq;
}

/* The next answer on r: an ERROR to seq with err, whose reason is logged. */
static void expect_error(struct raw *r, const char *who, uint32_t seq, int err)
{
	union wsync_msg_any m;
	ssize_t n = raw_recv(r->fd, &m, NULL, NULL, HARNESS_WAIT_MS);

	TEST_ASSERT_MSG(n > 0, "%s: no answer (%zd)", who, n);
	TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_ERROR && m.hdr.seq == seq && m.error.err == err,
	                "%s: %s seq %u err %d (%s), expected ERROR %d to seq %u", who,
	                wsync_msg_name(m.hdr.type), m.hdr.seq,
	                m.hdr.type == WSYNC_MSG_ERROR ? m.error.err : 0,
	                m.hdr.type == WSYNC_MSG_ERROR ? m.error.msg : "", err, seq);
	harness_log("%s told: %s", who, m.error.msg);
	TEST_CONTAINS(m.error.msg, "rank 0");
	TEST_CONTAINS(m.error.msg, "does not read its replies");
}

/*
 * A group rank whose COMMIT is pending (the broker owes it an answer until
 * the other ranks commit) bursts requests and reads nothing, until the
 * broker cuts it off for not reading its replies. Its teardown drops the
 * version: the rank that committed too gets -ECONNABORTED for its COMMIT,
 * the one that only began gets it for the COMMIT it sends next, and the
 * broker is still up. (Teardown inside a send, answering the other ranks
 * through the same send path, is how one client once crashed the broker.)
 */
static void rank_cut_off(void)
{
	static const wsync_shard part[3] = {
		{ 0, 0, 0, 21 }, { 0, 0, 21, 42 }, { 0, 0, 42, 64 },
	};
	uint64_t shape[1] = { 64 }, version, v;
	uint32_t id = 0, slot, s, sent = 0, seq1, seq2;
	wsync_tensor_desc d;
	struct raw r[3];
	int closed = 0;

	harness_desc(&d, "w", WSYNC_F32, 1, shape);
	for (uint16_t k = 0; k < 3; k++) {
		struct raw_rank g = { 3, k, 0, &part[k], 1 };
		char name[32];
		uint32_t got;

		snprintf(name, sizeof name, "cut-rank-%u", k);
		raw_hello(&r[k], &B, name);
		TEST_OK(raw_pub_open(&r[k], "bursts.group", &d, 1, 2, &g, &got, NULL));
		if (k == 0)
			id = got;
		TEST_EQ_U64(got, id);
	}
	rank_begin(&r[0], id, &slot, &version);
	rank_begin(&r[1], id, &s, &v);
	TEST_ASSERT(s == slot && v == version);
	rank_begin(&r[2], id, &s, &v);
	TEST_ASSERT(s == slot && v == version);
	rank_commit(&r[0], id, slot, version, 9);
	seq1 = rank_commit(&r[1], id, slot, version, 9);

	/* rank 0: requests that each get an ERROR (it does not subscribe),
	 * none read, until the broker stops taking them */
	for (int i = 0; i < 20 * BURST; i++) {
		union wsync_msg_any m;

		raw_init(&r[0], &m, WSYNC_MSG_ATTACH);
		m.attach.m.model_id = id;
		if (raw_post(&r[0], &m, NULL, 0))
			break;
		sent++;
	}
	for (int i = 0; i <= 20 * BURST; i++) {
		union wsync_msg_any m;
		ssize_t n = raw_recv(r[0].fd, &m, NULL, NULL, HARNESS_WAIT_MS);

		if (n == 0 || n == -ECONNRESET) {
			closed = 1;
			break;
		}
		TEST_ASSERT_MSG(n > 0, "the bursting rank: recv %zd", n);
	}
	harness_log("a rank with a pending COMMIT sent %u requests unread%s", sent,
	            closed ? ", then was cut off" : "");
	TEST_ASSERT_MSG(closed, "a rank that never read %u replies was not cut off", sent);

	expect_error(&r[1], "rank 1 (committed)", seq1, -ECONNABORTED);
	seq2 = rank_commit(&r[2], id, slot, version, 9);
	expect_error(&r[2], "rank 2 (begun)", seq2, -ECONNABORTED);
	raw_close(&r[0]);
	raw_close(&r[1]);
	raw_close(&r[2]);
}

/* PUB_OPENs of a published model with a layout of 16,384 tensors (the
 * same ones, and then other ones), until killed. */
static int big_layouts(void *arg)
{
	enum { N = 16384 };
	wsync_tensor_desc *d = calloc(N, sizeof(*d));
	uint64_t shape[1] = { 1 };
	struct raw r;

	(void)arg;
	TEST_ASSERT(d);
	for (int i = 0; i < N; i++) {
		char name[32];

		snprintf(name, sizeof name, "t%d", i);
		harness_desc(&d[i], name, WSYNC_F32, 1, shape);
	}
	raw_hello(&r, &B, "big-layouts");
	for (;;) {
		uint32_t id;
		int err = raw_pub_open(&r, MODEL, d, N, 2, NULL, &id, NULL);

		if (err != -EEXIST && err != -EBUSY)
			return 1;
		if (err == -EEXIST) {            /* 16 of those end the session */
			raw_close(&r);
			raw_hello(&r, &B, "big-layouts");
		}
	}
}

int main(void)
{
	static const uint32_t types[] = {
		WSYNC_MSG_HELLO, WSYNC_MSG_SUB_OPEN, WSYNC_MSG_ATTACH, WSYNC_MSG_BEGIN,
		WSYNC_MSG_COMMIT, WSYNC_MSG_ABORT, WSYNC_MSG_NOTIFY, WSYNC_MSG_CLOSE,
		WSYNC_MSG_DELETE, WSYNC_MSG_WAIT_READERS, WSYNC_MSG_GPU_ATTACH,
		WSYNC_MSG_PUB_OPEN,
	};
	struct hostile_base base;
	wsync_tensor_desc d[2];
	wsync_client *c;
	wsync_pub *honest;
	struct raw p;
	struct chan up;
	pid_t kid;

	if (harness_broker_start(&B, NULL))
		return 1;
	TEST_OK(harness_connect(&B, "honest-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, "bursts.honest", 0, &honest));
	hostile_base_take(&B, honest, &base);

	raw_hello(&p, &B, "publisher");
	harness_model_2t(d);
	TEST_OK(raw_pub_open(&p, MODEL, d, 2, 2, NULL, &model_id, NULL));
	raw_publish(&p, model_id, 1);

	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
		if (types[i] == WSYNC_MSG_PUB_OPEN) {
			/* the same publisher open, 1,000 times over one session; then
			 * a layout of 16,384 tensors again and again while an honest
			 * trainer commits (refused before the layout is read) */
			struct raw r;
			int refused = 0;
			pid_t big;

			raw_hello(&r, &B, "burst-pub");
			for (int k = 0; k < BURST; k++) {
				uint32_t id;
				int err = raw_pub_open(&r, MODEL, d, 2, 2, NULL, &id, NULL);

				refused += err == -EBUSY;
			}
			TEST_EQ_U64(refused, BURST);
			raw_close(&r);
			harness_log("PUB_OPEN     burst: %d refused (-EBUSY)", refused);
			big = harness_fork(big_layouts, NULL);
			harness_sleep_ms(300);
			hostile_check_rtt(&B, honest, &base, "while 16,384-tensor PUB_OPENs "
			                  "are refused");
			kill(big, SIGKILL);
			harness_wait_status(big, 5000);
		} else {
			burst(types[i]);
		}
		hostile_check_rtt(&B, honest, &base, "after a burst");
	}

	rank_cut_off();
	hostile_check_rtt(&B, honest, &base, "after a rank with a pending COMMIT was cut off");

	chan_open(&up);
	kid = harness_fork(parked_notify, &up);
	chan_recv(&up, kid);
	raw_publish(&p, model_id, 2);    /* the eventfd write parks */
	harness_sleep_ms(100);
	kill(kid, SIGKILL);
	TEST_ASSERT(WIFSIGNALED(harness_wait_status(kid, 5000)));
	raw_publish(&p, model_id, 3);
	hostile_check_rtt(&B, honest, &base, "after a subscriber died with a parked write");

	raw_close(&p);
	TEST_OK(wsync_model_delete(c, MODEL));
	hostile_check_settled(&B, &base, 16 * 1024, "every burst");
	wsync_pub_close(honest);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
