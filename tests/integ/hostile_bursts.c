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
