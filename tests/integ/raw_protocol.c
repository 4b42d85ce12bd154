/*
 * raw_protocol — bad input is answered, not obeyed: on raw SOCK_SEQPACKET
 * connections the broker gets garbage, a truncated header, a header whose
 * length disagrees with the datagram, an unknown type, BEGIN before HELLO, a
 * 64 KiB datagram, fds attached where none belong, a second HELLO, requests
 * for a model the session does not publish, COMMIT of a slot never granted,
 * and a publisher that stores a forged `latest` before committing. Each gets
 * a well-formed ERROR reply or a closed connection, never silence; a session
 * that keeps sending garbage is dropped; the forged latest is undone. The
 * broker survives it all: 100 connect-and-close and 1100 HELLO-and-close
 * sessions later (more than the session table holds) its fd count is back
 * where it was, and a normal client still publishes and acquires.
 */
#include "tests/lib/harness.h"

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/proto.h"
#include "shm/segment.h"
#include "shm/tensor_layout.h"

static struct broker B;

static void broker_alive(const char *after)
{
	int st;
	pid_t r = waitpid(B.pid, &st, WNOHANG);
	if (r == B.pid) {
		B.pid = 0;
		harness_fail(__FILE__, __LINE__, "the broker died (%s) after: %s",
		             harness_status_str(st), after);
	}
}

static int raw_connect(void)
{
	int fd = harness_raw_connect(&B);
	TEST_ASSERT_MSG(fd >= 0, "connect %s: %s", B.sock, strerror(-fd));
	return fd;
}

/* 0 sent, or -errno (the broker may have closed the connection already). */
static int raw_send(int fd, const void *buf, size_t len, const int *fds, int nfds)
{
	return harness_raw_send(fd, buf, len, fds, nfds);
}

/* One datagram: its length, 0 when the broker closed the connection,
 * -ETIMEDOUT when nothing came. Received fds go to fds (up to *nfds, the
 * rest closed); *nfds is set to how many arrived. */
static ssize_t raw_recv(int fd, union wsync_msg_any *m, int *fds, int *nfds, int timeout_ms)
{
	int cap = nfds ? *nfds : 0;
	if (nfds)
		*nfds = 0;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r;
	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return -ETIMEDOUT;
	union {
		char buf[CMSG_SPACE(sizeof(int) * WSYNC_MSG_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { m, sizeof *m };
	struct msghdr mh;
	memset(&mh, 0, sizeof mh);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = ctl.buf;
	mh.msg_controllen = sizeof ctl.buf;
	ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return errno == ECONNRESET ? 0 : -errno;
	int got = 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int *in = (int *)CMSG_DATA(cm);
		for (size_t i = 0; i < k; i++) {
			if (got < cap)
				fds[got] = in[i];
			else
				close(in[i]);
			got++;
		}
	}
	if (nfds)
		*nfds = got < cap ? got : cap;
	return n;
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

/* The answer to a bad request: a well-formed ERROR (with seq, if nonzero),
 * or a closed connection. Returns 1 if closed, 0 if an ERROR came. */
static int expect_refusal(int fd, const char *what, uint32_t seq, int32_t *err)
{
	union wsync_msg_any m;
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;
	ssize_t n = raw_recv(fd, &m, fds, &nfds, HARNESS_WAIT_MS);
	close_fds(fds, nfds);
	TEST_ASSERT_MSG(n != -ETIMEDOUT, "%s: neither a reply nor a close within %d ms", what,
	                HARNESS_WAIT_MS);
	broker_alive(what);
	if (n == 0) {
		harness_log("%s: connection closed", what);
		return 1;
	}
	TEST_ASSERT_MSG(n > 0, "%s: recv: %s", what, strerror((int)-n));
	TEST_ASSERT_MSG(nfds == 0, "%s: the refusal carried %d fds", what, nfds);
	char why[256] = "";
	TEST_ASSERT_MSG(wsync_msg_validate(&m, (size_t)n, why, sizeof why) == 0,
	                "%s: malformed reply: %s", what, why);
	TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_ERROR, "%s: answered with %s, not ERROR", what,
	                wsync_msg_name(m.hdr.type));
	TEST_ASSERT(m.error.err < 0);
	if (seq)
		TEST_ASSERT_MSG(m.hdr.seq == seq, "%s: ERROR has seq %u, the request had %u",
		                what, m.hdr.seq, seq);
	if (err)
		*err = m.error.err;
	harness_log("%s: ERROR %d (%s): %s", what, m.error.err, wsync_strerror(m.error.err),
	            m.error.msg);
	return 0;
}

/* A well-formed request and its reply, which must be of type want. */
static void request(int fd, union wsync_msg_any *m, size_t len, const int *sfds, int nsfds,
                    uint32_t want, int *fds, int *nfds)
{
	uint32_t seq = m->hdr.seq;
	TEST_OK(raw_send(fd, m, len, sfds, nsfds));
	ssize_t n = raw_recv(fd, m, fds, nfds, HARNESS_WAIT_MS);
	TEST_ASSERT_MSG(n > 0, "no reply to a well-formed request (%zd)", n);
	char why[256] = "";
	TEST_ASSERT_MSG(wsync_msg_validate(m, (size_t)n, why, sizeof why) == 0,
	                "malformed reply: %s", why);
	TEST_ASSERT_MSG(m->hdr.type == want, "got %s (%d: %s), expected %s",
	                wsync_msg_name(m->hdr.type),
	                m->hdr.type == WSYNC_MSG_ERROR ? m->error.err : 0,
	                m->hdr.type == WSYNC_MSG_ERROR ? m->error.msg : "",
	                wsync_msg_name(want));
	TEST_EQ_U64(m->hdr.seq, seq);
}

static int raw_hello(const char *name)
{
	int fd = raw_connect();
	union wsync_msg_any m;
	memset(&m, 0, sizeof m);
	wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, 1);
	m.hello.layout_version = WSYNC_LAYOUT_VERSION;
	m.hello.pid = (uint32_t)getpid();
	snprintf(m.hello.name, sizeof m.hello.name, "%s", name);
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;
	request(fd, &m, sizeof m.hello, NULL, 0, WSYNC_MSG_HELLO_OK, fds, &nfds);
	close_fds(fds, nfds);
	return fd;
}

/* PUB_OPEN of the two-tensor layout on a raw session. Returns the model id
 * and the model page's rw fd. */
static uint32_t raw_pub_open(int fd, const char *model, uint32_t seq, int *page_fd)
{
	wsync_tensor_desc d[2];
	harness_model_2t(d);
	uint64_t bytes = 0;
	char why[256] = "";
	TEST_ASSERT_MSG(wsync_layout_compute(d, 2, d, &bytes, why, sizeof why) == 0, "%s", why);
	int lfd = wsync_memfd_create("raw-layout", sizeof d);
	TEST_ASSERT(lfd >= 0);
	TEST_ASSERT(pwrite(lfd, d, sizeof d, 0) == (ssize_t)sizeof d);

	union wsync_msg_any m;
	memset(&m, 0, sizeof m);
	wsync_msg_init(&m.hdr, WSYNC_MSG_PUB_OPEN, seq);
	snprintf(m.pub_open.model, sizeof m.pub_open.model, "%s", model);
	m.pub_open.n_tensors = 2;
	m.pub_open.slots = 2;
	m.pub_open.bytes = bytes;
	m.pub_open.layout_hash = wsync_layout_hash(d, 2);
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;
	request(fd, &m, sizeof m.pub_open, &lfd, 1, WSYNC_MSG_PUB_OPEN_OK, fds, &nfds);
	close(lfd);
	TEST_ASSERT_MSG(nfds >= 1, "PUB_OPEN_OK without the model page");
	*page_fd = fds[0];
	close_fds(fds + 1, nfds - 1);
	return m.pub_open_ok.model_id;
}

/* Sends bytes on a fresh connection; the broker must refuse. */
static void fresh_refusal(const char *what, const void *buf, size_t len, const int *fds, int nfds)
{
	int fd = raw_connect();
	int rc = raw_send(fd, buf, len, fds, nfds);
	if (rc == 0)
		expect_refusal(fd, what, 0, NULL);
	else
		harness_log("%s: send failed (%s): the broker closed first", what, strerror(-rc));
	close(fd);
	broker_alive(what);
}

static void publish_and_read(const char *model, uint64_t step)
{
	harness_publish_and_read(&B, model, step);
}

int main(void)
{
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	publish_and_read("raw.policy", 1);

	union wsync_msg_any m;
	unsigned char junk[256];
	uint64_t seed = 0x243F6A8885A308D3ull;
	for (size_t i = 0; i < sizeof junk; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		junk[i] = (unsigned char)(seed >> 56);
	}

	/* garbage, truncated, wrong lengths, unknown type */
	fresh_refusal("100 bytes of garbage", junk, 100, NULL, 0);
	memset(&m, 0, sizeof m);
	wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, 1);
	fresh_refusal("a truncated header", &m, 8, NULL, 0);
	fresh_refusal("a HELLO cut short", &m, sizeof m.hello - 20, NULL, 0);
	m.hdr.len = sizeof m.hello + 12;
	fresh_refusal("a HELLO whose hdr.len is too large", &m, sizeof m.hello, NULL, 0);
	wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, 1);
	m.hello.layout_version = WSYNC_LAYOUT_VERSION;
	snprintf(m.hello.name, sizeof m.hello.name, "raw");
	fresh_refusal("a HELLO with 64 trailing bytes", &m, sizeof m.hello + 64, NULL, 0);
	memset(&m, 0, sizeof m);
	wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, 1);
	m.hdr.type = 200;
	m.hdr.len = sizeof m.hdr;
	fresh_refusal("a message of unknown type 200", &m, sizeof m.hdr, NULL, 0);
	m.hdr.type = 0;
	fresh_refusal("a message of type 0", &m, sizeof m.hdr, NULL, 0);

	/* a HELLO of another layout version */
	memset(&m, 0, sizeof m);
	wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, 1);
	m.hello.layout_version = WSYNC_LAYOUT_VERSION + 1;
	snprintf(m.hello.name, sizeof m.hello.name, "raw");
	fresh_refusal("a HELLO of layout version + 1", &m, sizeof m.hello, NULL, 0);

	/* BEGIN before HELLO: refused with its seq */
	{
		int fd = raw_connect();
		memset(&m, 0, sizeof m);
		wsync_msg_init(&m.hdr, WSYNC_MSG_BEGIN, 77);
		TEST_OK(raw_send(fd, &m, sizeof m.begin, NULL, 0));
		int32_t err = 0;
		if (expect_refusal(fd, "BEGIN before HELLO", 77, &err) == 0)
			TEST_EQ_U64((uint64_t)(int64_t)err, (uint64_t)(int64_t)-EPROTO);
		close(fd);
	}

	/* a 64 KiB datagram that starts like a HELLO */
	{
		size_t big = 64 * 1024;
		unsigned char *buf = calloc(1, big);
		TEST_ASSERT(buf);
		memset(&m, 0, sizeof m);
		wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, 1);
		m.hello.layout_version = WSYNC_LAYOUT_VERSION;
		snprintf(m.hello.name, sizeof m.hello.name, "raw");
		memcpy(buf, &m, sizeof m.hello);
		fresh_refusal("a 64 KiB datagram", buf, big, NULL, 0);
		memcpy(buf, junk, sizeof junk);
		fresh_refusal("a 64 KiB datagram of garbage", buf, big, NULL, 0);
		free(buf);
	}

	/* fds where none belong: a HELLO carrying a pipe and an eventfd-like fd */
	{
		int p[2];
		TEST_ASSERT(pipe2(p, O_CLOEXEC) == 0);
		memset(&m, 0, sizeof m);
		wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, 1);
		m.hello.layout_version = WSYNC_LAYOUT_VERSION;
		snprintf(m.hello.name, sizeof m.hello.name, "raw");
		fresh_refusal("a HELLO with 2 fds attached", &m, sizeof m.hello, p, 2);
		/* and on a session: a BEGIN with an fd */
		int fd = raw_hello("raw-fds");
		memset(&m, 0, sizeof m);
		wsync_msg_init(&m.hdr, WSYNC_MSG_SUB_OPEN, 2);
		snprintf(m.sub_open.model, sizeof m.sub_open.model, "raw.policy");
		if (raw_send(fd, &m, sizeof m.sub_open, p, 1) == 0)
			expect_refusal(fd, "a SUB_OPEN with an fd attached", 0, NULL);
		close(fd);
		close(p[0]);
		close(p[1]);
	}

	/* a second HELLO */
	{
		int fd = raw_hello("raw-twice");
		memset(&m, 0, sizeof m);
		wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, 2);
		m.hello.layout_version = WSYNC_LAYOUT_VERSION;
		snprintf(m.hello.name, sizeof m.hello.name, "raw-twice");
		TEST_OK(raw_send(fd, &m, sizeof m.hello, NULL, 0));
		expect_refusal(fd, "a second HELLO", 2, NULL);
		close(fd);
	}

	/* BEGIN/COMMIT/ABORT on a model this session only subscribed to */
	uint64_t latest_before = 0;
	{
		wsync_client *c = NULL;
		wsync_sub *s = NULL;
		wsync_view v;
		TEST_OK(harness_connect(&B, "raw-check", &c));
		TEST_OK(wsync_sub_open(c, "raw.policy", &s));
		TEST_OK(wsync_sub_acquire(s, &v));
		latest_before = v.version;
		wsync_sub_release(s, &v);

		int fd = raw_hello("raw-sub");
		memset(&m, 0, sizeof m);
		wsync_msg_init(&m.hdr, WSYNC_MSG_SUB_OPEN, 2);
		snprintf(m.sub_open.model, sizeof m.sub_open.model, "raw.policy");
		int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;
		request(fd, &m, sizeof m.sub_open, NULL, 0, WSYNC_MSG_SUB_OPEN_OK, fds, &nfds);
		close_fds(fds, nfds);
		uint32_t id = m.sub_open_ok.model_id;

		uint32_t seq = 3;
		int closed = 0;
		memset(&m, 0, sizeof m);
		wsync_msg_init(&m.hdr, WSYNC_MSG_BEGIN, seq);
		m.begin.m.model_id = id;
		if (raw_send(fd, &m, sizeof m.begin, NULL, 0) == 0)
			closed = expect_refusal(fd, "BEGIN by a subscriber", seq, NULL);
		if (!closed) {
			memset(&m, 0, sizeof m);
			wsync_msg_init(&m.hdr, WSYNC_MSG_COMMIT, ++seq);
			m.commit.m.model_id = id;
			m.commit.slot = 0;
			m.commit.version = latest_before + 1;
			m.commit.step = 1;
			if (raw_send(fd, &m, sizeof m.commit, NULL, 0) == 0)
				closed = expect_refusal(fd, "COMMIT by a subscriber", seq, NULL);
		}
		if (!closed) {
			memset(&m, 0, sizeof m);
			wsync_msg_init(&m.hdr, WSYNC_MSG_ABORT, ++seq);
			m.abort.m.model_id = id;
			m.abort.slot = 1;
			m.abort.version = latest_before + 1;
			if (raw_send(fd, &m, sizeof m.abort, NULL, 0) == 0)
				expect_refusal(fd, "ABORT by a subscriber", seq, NULL);
		}
		close(fd);

		/* nothing changed for readers */
		TEST_OK(wsync_sub_acquire(s, &v));
		TEST_EQ_U64(v.version, latest_before);
		TEST_ASSERT(harness_verify_view(&v) == 0);
		wsync_sub_release(s, &v);
		wsync_sub_close(s);
		wsync_close(c);
	}

	/* the publisher commits a slot it was never granted */
	{
		int fd = raw_hello("raw-pub");
		int page = -1;
		uint32_t id = raw_pub_open(fd, "raw.ungranted", 2, &page);
		close(page);
		memset(&m, 0, sizeof m);
		wsync_msg_init(&m.hdr, WSYNC_MSG_COMMIT, 3);
		m.commit.m.model_id = id;
		m.commit.slot = 1;
		m.commit.version = 1;
		m.commit.step = 1;
		if (raw_send(fd, &m, sizeof m.commit, NULL, 0) == 0)
			expect_refusal(fd, "COMMIT of a slot never granted", 3, NULL);
		close(fd);

		wsync_client *c = NULL;
		wsync_sub *s = NULL;
		wsync_view v;
		TEST_OK(harness_connect(&B, "raw-check", &c));
		TEST_OK(wsync_sub_open(c, "raw.ungranted", &s));
		TEST_RC(wsync_sub_acquire(s, &v), -ENODATA);
		wsync_sub_close(s);
		wsync_close(c);
	}

	/* the publisher forges `latest` in its model page, then commits it */
	{
		int fd = raw_hello("raw-forger");
		int page = -1;
		uint32_t id = raw_pub_open(fd, "raw.forged", 2, &page);
		struct wsync_model_page *pg = mmap(NULL, WSYNC_PAGE, PROT_READ | PROT_WRITE,
		                                   MAP_SHARED, page, 0);
		TEST_ASSERT_MSG(pg != MAP_FAILED, "the model page fd is not writable: %s",
		                strerror(errno));
		close(page);
		atomic_store(&pg->slots[1].version, 12345);
		atomic_store(&pg->latest, wsync_latest_pack(12345, 1));
		atomic_fetch_add(&pg->seq, 1);
		memset(&m, 0, sizeof m);
		wsync_msg_init(&m.hdr, WSYNC_MSG_COMMIT, 3);
		m.commit.m.model_id = id;
		m.commit.slot = 1;
		m.commit.version = 12345;
		m.commit.step = 1;
		if (raw_send(fd, &m, sizeof m.commit, NULL, 0) == 0)
			expect_refusal(fd, "COMMIT of a forged latest", 3, NULL);
		/* the broker cuts off the publishing role, not the session: a
		 * BEGIN is refused as from a session that does not publish */
		memset(&m, 0, sizeof m);
		wsync_msg_init(&m.hdr, WSYNC_MSG_BEGIN, 4);
		m.begin.m.model_id = id;
		TEST_OK(raw_send(fd, &m, sizeof m.begin, NULL, 0));
		TEST_ASSERT_MSG(expect_refusal(fd, "BEGIN after being cut off", 4, NULL) == 0,
		                "the session of the forging publisher was closed");
		close(fd);
		uint64_t l = atomic_load(&pg->latest);
		TEST_ASSERT_MSG(wsync_latest_slot(l) == WSYNC_SLOT_NONE,
		                "forged latest not undone: version %llu slot %u",
		                (unsigned long long)wsync_latest_version(l), wsync_latest_slot(l));
		munmap(pg, WSYNC_PAGE);

		wsync_client *c = NULL;
		wsync_sub *s = NULL;
		wsync_view v;
		TEST_OK(harness_connect(&B, "raw-check", &c));
		TEST_OK(wsync_sub_open(c, "raw.forged", &s));
		TEST_RC(wsync_sub_acquire(s, &v), -ENODATA);
		wsync_sub_close(s);
		wsync_close(c);
		/* the model works for an honest publisher */
		publish_and_read("raw.forged", 2);
	}

	/* a session that keeps sending garbage is dropped */
	{
		int fd = raw_hello("raw-noisy");
		int closed = 0;
		for (int i = 0; i < 40 && !closed; i++) {
			if (raw_send(fd, junk, 64, NULL, 0) != 0) {
				closed = 1;
				break;
			}
			closed = expect_refusal(fd, "garbage on a session", 0, NULL);
		}
		TEST_ASSERT_MSG(closed, "40 bad messages and the session is still open");
		close(fd);
	}

	/* churn: connect-and-close, HELLO-and-close; no fd left behind */
	broker_alive("the bad messages");
	int fds_before = harness_broker_fd_count(&B);
	TEST_ASSERT(fds_before > 0);
	for (int i = 0; i < 100; i++)
		close(raw_connect());
	for (int i = 0; i < 1100; i++) {
		char name[32];
		snprintf(name, sizeof name, "churn-%d", i);
		close(raw_hello(name));
	}
	broker_alive("1200 short sessions");
	int64_t deadline = harness_mono_ns() + 5 * HARNESS_S;
	int fds_after = harness_broker_fd_count(&B);
	while (fds_after > fds_before && harness_mono_ns() < deadline) {
		harness_sleep_ms(20);
		fds_after = harness_broker_fd_count(&B);
	}
	TEST_ASSERT_MSG(fds_after <= fds_before, "broker fds: %d before 1200 short sessions, %d after",
	                fds_before, fds_after);
	harness_log("broker fds: %d before 1200 short sessions, %d after", fds_before, fds_after);

	/* still serving */
	publish_and_read("raw.policy", 3);
	publish_and_read("raw.after", 4);
	harness_broker_finish(&B);
	return 0;
}
