/*
 * acked_settle — a collector's explicit ack answers its publisher's
 * WAIT_READERS at once (ACKED), not at the broker's next look.
 *
 * The model's ctl entry says reader_waits while a wait pends and no longer
 * once it is answered (met or timed out). A collector process acks after
 * the trainer's wait has pended long enough for the broker's looks to be
 * 10 ms apart: the wait must return within a couple of milliseconds of the
 * ack in most rounds (by the looks alone it would take 5 ms on average; a
 * loaded machine may delay a few rounds). The library's ACKED is one-way:
 * nothing ever arrives on the collector's socket for it. An ACKED from a
 * session that does not subscribe to the model is refused (-EIDRM), and
 * from a raw session before HELLO as any request is; a one-way ACKED that
 * is refused (not a subscriber, a model id out of range, an unknown flag)
 * is counted in bad_messages and never answered, and the session goes on:
 * the reply to its next request is that request's.
 */
#include "tests/lib/harness.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "libclient/client.h"
#include "shm/proto.h"

#define MODEL  "acked.policy"
#define ROUNDS 12
#define PEND_MS 120        /* past 80 ms the broker looks every 10 ms */
#define LATE_NS (2 * 1000 * 1000)

static struct broker B;
static struct chan up, down;
static _Atomic int64_t *acked_ns;       /* shared with the collector */

static int collector(void *arg)
{
	wsync_client *c;
	wsync_sub *s;
	wsync_view v;

	(void)arg;
	TEST_OK(harness_connect(&B, "acked-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_set_ack(s, 1));
	chan_send(&up, 1);
	for (;;) {
		uint64_t want = chan_recv(&down, 0);

		struct pollfd pf = { .fd = c->sock, .events = POLLIN };

		/* the last round's ACKED was handled before its wait returned,
		 * and that before this round was sent: any answer is here */
		TEST_ASSERT_MSG(poll(&pf, 1, 0) == 0, "the broker answered a one-way ACKED");
		if (!want)
			break;
		TEST_OK(wsync_sub_wait(s, want - 1, 5 * HARNESS_S, &v));
		TEST_EQ_U64(v.version, want);
		harness_sleep_ms(PEND_MS);
		atomic_store(acked_ns, harness_mono_ns());
		TEST_OK(wsync_sub_ack(s, v.version));
		wsync_sub_release(s, &v);
	}
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

static const struct wsync_ctl_model *entry_of(wsync_client *c, const char *model)
{
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		const struct wsync_ctl_model *e = client_ctl_model(c, i);

		if (atomic_load(&e->state) != WSYNC_MODEL_FREE && !strcmp(e->name, model))
			return e;
	}
	TEST_ASSERT_MSG(0, "model %s not in the control segment", model);
	return NULL;
}

struct waiter {
	wsync_pub *p;
	uint64_t version;
	int rc;
	int64_t done_ns;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;
	uint32_t have;

	w->rc = wsync_pub_wait_readers(w->p, w->version, 0, 5 * HARNESS_S, &have);
	w->done_ns = harness_mono_ns();
	return NULL;
}

static bool hint_becomes(const struct wsync_ctl_model *e, uint32_t want)
{
	for (int i = 0; i < 2000; i++) {
		if (atomic_load(&e->reader_waits) == want)
			return true;
		harness_sleep_ms(1);
	}
	return false;
}

/* An ACKED through a raw session that subscribes to nothing: -EIDRM. */
static void acked_refused(uint32_t model_id)
{
	union wsync_msg_any m;
	struct pollfd pf;
	int fd = harness_raw_connect(&B);

	TEST_ASSERT(fd >= 0);
	wsync_msg_init(&m.hdr, WSYNC_MSG_ACKED, 1);
	m.acked.model_id = model_id;
	TEST_OK(harness_raw_send(fd, &m, sizeof m.acked, NULL, 0));
	pf = (struct pollfd){ .fd = fd, .events = POLLIN };
	TEST_ASSERT(poll(&pf, 1, HARNESS_WAIT_MS) == 1);
	TEST_ASSERT(recv(fd, &m, sizeof m, 0) > 0);
	TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_ERROR, "ACKED before HELLO answered %u",
	                m.hdr.type);
	close(fd);

	fd = harness_raw_connect(&B);
	TEST_ASSERT(fd >= 0);
	wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, 1);
	m.hello.layout_version = WSYNC_LAYOUT_VERSION;
	m.hello.pid = (uint32_t)getpid();
	snprintf(m.hello.name, sizeof m.hello.name, "acked-stranger");
	TEST_OK(harness_raw_send(fd, &m, sizeof m.hello, NULL, 0));
	pf = (struct pollfd){ .fd = fd, .events = POLLIN };
	TEST_ASSERT(poll(&pf, 1, HARNESS_WAIT_MS) == 1);
	{
		union { char buf[CMSG_SPACE(sizeof(int) * WSYNC_MSG_MAX_FDS)];
		        struct cmsghdr align; } ctl;
		struct iovec iov = { &m, sizeof m };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
		                     .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf };

		TEST_ASSERT(recvmsg(fd, &mh, MSG_CMSG_CLOEXEC) > 0);
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
			for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
				close(((int *)CMSG_DATA(cm))[i]);
	}
	TEST_ASSERT(m.hdr.type == WSYNC_MSG_HELLO_OK);
	wsync_msg_init(&m.hdr, WSYNC_MSG_ACKED, 2);
	m.acked.model_id = model_id;
	TEST_OK(harness_raw_send(fd, &m, sizeof m.acked, NULL, 0));
	pf = (struct pollfd){ .fd = fd, .events = POLLIN };
	TEST_ASSERT(poll(&pf, 1, HARNESS_WAIT_MS) == 1);
	TEST_ASSERT(recv(fd, &m, sizeof m, 0) > 0);
	TEST_ASSERT(m.hdr.type == WSYNC_MSG_ERROR);
	TEST_ASSERT(m.error.err == -EIDRM);
	TEST_CONTAINS(m.error.msg, "does not subscribe");
	close(fd);
}

/* Reads one message within the harness's wait: its type, 0 if none came. */
static uint32_t raw_reply(int fd, union wsync_msg_any *m, int wait_ms)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };

	if (poll(&pf, 1, wait_ms) != 1)
		return 0;
	TEST_ASSERT(recv(fd, m, sizeof *m, 0) > 0);
	return m->hdr.type;
}

/* One-way ACKEDs the broker refuses: counted, never answered, and the
 * session's next request is answered as its own (seq). */
static void acked_oneway_refused(wsync_client *t, uint32_t model_id)
{
	static const struct { uint32_t model_id, flags; const char *what; } bad[] = {
		{ 0, WSYNC_ACKED_ONEWAY, "for a model it does not subscribe to" },
		{ WSYNC_MAX_MODELS, WSYNC_ACKED_ONEWAY, "for a model id out of range" },
		{ 0, WSYNC_ACKED_ONEWAY | 0x100, "with an unknown flag" },
	};
	union wsync_msg_any m;
	uint32_t seq = 1;
	int fd = harness_raw_connect(&B);

	TEST_ASSERT(fd >= 0);
	wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, seq++);
	m.hello.layout_version = WSYNC_LAYOUT_VERSION;
	m.hello.pid = (uint32_t)getpid();
	snprintf(m.hello.name, sizeof m.hello.name, "acked-oneway");
	TEST_OK(harness_raw_send(fd, &m, sizeof m.hello, NULL, 0));
	{
		union { char buf[CMSG_SPACE(sizeof(int) * WSYNC_MSG_MAX_FDS)];
		        struct cmsghdr align; } ctl;
		struct iovec iov = { &m, sizeof m };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
		                     .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf };
		struct pollfd pf = { .fd = fd, .events = POLLIN };

		TEST_ASSERT(poll(&pf, 1, HARNESS_WAIT_MS) == 1);
		TEST_ASSERT(recvmsg(fd, &mh, MSG_CMSG_CLOEXEC) > 0);
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
			for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
				close(((int *)CMSG_DATA(cm))[i]);
	}
	TEST_ASSERT(m.hdr.type == WSYNC_MSG_HELLO_OK);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint64_t bad0 = atomic_load(&t->ctl->bad_messages);
		uint32_t got;

		wsync_msg_init(&m.hdr, WSYNC_MSG_ACKED, seq++);
		m.acked.model_id = bad[i].model_id ? bad[i].model_id : model_id;
		m.acked.flags = bad[i].flags;
		TEST_OK(harness_raw_send(fd, &m, sizeof m.acked, NULL, 0));
		got = raw_reply(fd, &m, 200);
		TEST_ASSERT_MSG(got == 0, "a one-way ACKED %s was answered (type %u)",
		                bad[i].what, got);
		TEST_ASSERT_MSG(atomic_load(&t->ctl->bad_messages) > bad0,
		                "a one-way ACKED %s was not counted", bad[i].what);
	}
	/* the session goes on: a two-way ACKED is answered, and as itself */
	wsync_msg_init(&m.hdr, WSYNC_MSG_ACKED, seq);
	m.acked.model_id = model_id;
	TEST_OK(harness_raw_send(fd, &m, sizeof m.acked, NULL, 0));
	TEST_ASSERT(raw_reply(fd, &m, HARNESS_WAIT_MS) == WSYNC_MSG_ERROR);
	TEST_EQ_U64(m.hdr.seq, seq);
	TEST_ASSERT(m.error.err == -EIDRM);
	close(fd);
}

int main(void)
{
	const struct wsync_ctl_model *e;
	wsync_client *t;
	wsync_pub *p;
	uint32_t have;
	uint64_t v;
	int late = 0;
	pid_t kid;

	acked_ns = mmap(NULL, sizeof(*acked_ns), PROT_READ | PROT_WRITE,
	                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	TEST_ASSERT(acked_ns != MAP_FAILED);
	if (harness_broker_start(&B, NULL))
		return 1;
	TEST_OK(harness_connect(&B, "trainer", &t));
	TEST_OK(harness_pub_open_2t(t, MODEL, 0, &p));
	e = entry_of(t, MODEL);
	TEST_ASSERT(atomic_load(&e->reader_waits) == 0);

	chan_open(&up);
	chan_open(&down);
	kid = harness_fork(collector, NULL);
	TEST_EQ_U64(chan_recv(&up, kid), 1);

	/* a wait that times out leaves no hint behind */
	TEST_OK(harness_publish(p, 1, HARNESS_S, &v));
	TEST_RC(wsync_pub_wait_readers(p, v, 0, 100 * HARNESS_MS, &have), -ETIMEDOUT);
	TEST_ASSERT_MSG(hint_becomes(e, 0), "reader_waits still set after the wait timed out");

	for (uint64_t step = 2; step < 2 + ROUNDS; step++) {
		struct waiter w = { .p = p };
		pthread_t th;
		int64_t lag;

		TEST_OK(harness_publish(p, step, HARNESS_S, &w.version));
		atomic_store(acked_ns, 0);
		TEST_ASSERT(pthread_create(&th, NULL, wait_thread, &w) == 0);
		TEST_ASSERT_MSG(hint_becomes(e, 1), "reader_waits not set while a wait pends");
		chan_send(&down, w.version);
		TEST_ASSERT(pthread_join(th, NULL) == 0);
		TEST_OK(w.rc);
		TEST_ASSERT_MSG(atomic_load(acked_ns) != 0, "the wait for v%llu returned before "
		                "the collector acked it", (unsigned long long)w.version);
		lag = w.done_ns - atomic_load(acked_ns);
		if (lag > LATE_NS)
			late++;
		harness_log("round %llu: wait returned %+.3f ms after the ack",
		            (unsigned long long)step, lag / 1e6);
		TEST_ASSERT_MSG(hint_becomes(e, 0), "reader_waits still set after the wait");
	}
	/* by the broker's looks alone (10 ms apart by then) about 4 in 5
	 * would be late */
	TEST_ASSERT_MSG(late <= ROUNDS / 3, "%d of %d waits returned over 2 ms after the ack",
	                late, ROUNDS);
	chan_send(&down, 0);
	harness_expect_exit0(kid, "the acking collector");

	acked_refused(e->id);
	acked_oneway_refused(t, e->id);
	wsync_pub_close(p);
	wsync_close(t);
	chan_close(&up);
	chan_close(&down);
	harness_broker_finish(&B);
	return 0;
}
