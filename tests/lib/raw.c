/* tests/lib/raw.c — the wire protocol by hand; see raw.h. */
#include "tests/lib/raw.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/segment.h"
#include "shm/tensor_layout.h"

int raw_connect(const struct broker *b)
{
	int fd = harness_raw_connect(b);

	TEST_ASSERT_MSG(fd >= 0, "connect %s: %s", b->sock, strerror(-fd));
	return fd;
}

ssize_t raw_recv(int fd, union wsync_msg_any *m, int *fds, int *nfds, int timeout_ms)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * WSYNC_MSG_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct iovec iov = { m, sizeof *m };
	struct msghdr mh;
	int cap = fds && nfds ? *nfds : 0, got = 0, r;
	ssize_t n;

	if (nfds)
		*nfds = 0;
	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return -ETIMEDOUT;
	memset(&mh, 0, sizeof mh);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = ctl.buf;
	mh.msg_controllen = sizeof ctl.buf;
	n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return errno == ECONNRESET ? 0 : -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		size_t k;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int x;

			memcpy(&x, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (got < cap)
				fds[got] = x;
			else
				close(x);
			got++;
		}
	}
	if (nfds)
		*nfds = got < cap ? got : cap;
	return n;
}

void raw_close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

static void broker_alive(const struct broker *b, const char *after)
{
	int st;

	if (b && b->pid > 0 && waitpid(b->pid, &st, WNOHANG) == b->pid)
		harness_fail(__FILE__, __LINE__, "the broker died (%s) after: %s",
		             harness_status_str(st), after);
}

int raw_expect_refusal(const struct broker *b, int fd, const char *what, uint32_t seq,
                       int32_t *err)
{
	union wsync_msg_any m;
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;
	char why[256] = "";
	ssize_t n = raw_recv(fd, &m, fds, &nfds, HARNESS_WAIT_MS);

	raw_close_fds(fds, nfds);
	TEST_ASSERT_MSG(n != -ETIMEDOUT, "%s: neither a reply nor a close within %d ms", what,
	                HARNESS_WAIT_MS);
	broker_alive(b, what);
	if (n == 0) {
		harness_log("%s: connection closed", what);
		return 1;
	}
	TEST_ASSERT_MSG(n > 0, "%s: recv: %s", what, strerror((int)-n));
	TEST_ASSERT_MSG(nfds == 0, "%s: the refusal carried %d fds", what, nfds);
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

void raw_request(int fd, union wsync_msg_any *m, size_t len, const int *sfds, int nsfds,
                 uint32_t want, int *fds, int *nfds)
{
	uint32_t seq = m->hdr.seq;
	char why[256] = "";
	ssize_t n;

	TEST_OK(harness_raw_send(fd, m, len, sfds, nsfds));
	n = raw_recv(fd, m, fds, nfds, HARNESS_WAIT_MS);
	TEST_ASSERT_MSG(n > 0, "no reply to a well-formed request (%zd)", n);
	TEST_ASSERT_MSG(wsync_msg_validate(m, (size_t)n, why, sizeof why) == 0,
	                "malformed reply: %s", why);
	TEST_ASSERT_MSG(m->hdr.type == want, "got %s (%d: %s), expected %s",
	                wsync_msg_name(m->hdr.type),
	                m->hdr.type == WSYNC_MSG_ERROR ? m->error.err : 0,
	                m->hdr.type == WSYNC_MSG_ERROR ? m->error.msg : "",
	                wsync_msg_name(want));
	TEST_EQ_U64(m->hdr.seq, seq);
}

uint32_t raw_init(struct raw *r, union wsync_msg_any *m, uint32_t type)
{
	memset(m, 0, sizeof *m);
	wsync_msg_init(&m->hdr, type, ++r->seq);
	return r->seq;
}

int raw_post(struct raw *r, const union wsync_msg_any *m, const int *fds, int nfds)
{
	return harness_raw_send(r->fd, m, m->hdr.len, fds, nfds);
}

void raw_hello(struct raw *r, const struct broker *b, const char *name)
{
	union wsync_msg_any m;
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;

	memset(r, 0, sizeof *r);
	r->fd = raw_connect(b);
	raw_init(r, &m, WSYNC_MSG_HELLO);
	m.hello.layout_version = WSYNC_LAYOUT_VERSION;
	m.hello.pid = (uint32_t)getpid();
	snprintf(m.hello.name, sizeof m.hello.name, "%s", name);
	raw_request(r->fd, &m, sizeof m.hello, NULL, 0, WSYNC_MSG_HELLO_OK, fds, &nfds);
	raw_close_fds(fds, nfds);
	r->session_id = m.hello_ok.session_id;
}

void raw_close(struct raw *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
}

int raw_pub_open(struct raw *r, const char *model, const wsync_tensor_desc *d, uint32_t n,
                 uint32_t slots, const struct raw_rank *g, uint32_t *id, int *page_fd)
{
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;
	int err = raw_pub_open_fds(r, model, d, n, slots, g, id, fds, &nfds);

	if (err)
		return err;
	if (page_fd)
		*page_fd = fds[0];
	else
		close(fds[0]);
	raw_close_fds(fds + 1, nfds - 1);
	return 0;
}

int raw_pub_open_fds(struct raw *r, const char *model, const wsync_tensor_desc *d,
                     uint32_t n, uint32_t slots, const struct raw_rank *g, uint32_t *id,
                     int *keep, int *nkeep)
{
	size_t parts = g ? g->n_parts : 0;
	size_t len = n * sizeof(*d) + parts * sizeof(wsync_shard);
	wsync_tensor_desc *canon = calloc(n, sizeof(*canon));
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;
	union wsync_msg_any m;
	uint64_t bytes = 0;
	char why[256] = "";
	ssize_t got;
	int lfd;

	TEST_ASSERT(canon);
	TEST_ASSERT_MSG(wsync_layout_compute(d, n, canon, &bytes, why, sizeof why) == 0, "%s", why);
	lfd = wsync_memfd_create("raw-layout", len);
	TEST_ASSERT(lfd >= 0);
	TEST_ASSERT(pwrite(lfd, canon, n * sizeof(*d), 0) == (ssize_t)(n * sizeof(*d)));
	if (parts)
		TEST_ASSERT(pwrite(lfd, g->parts, parts * sizeof(wsync_shard),
		                   (off_t)(n * sizeof(*d))) == (ssize_t)(parts * sizeof(wsync_shard)));
	raw_init(r, &m, WSYNC_MSG_PUB_OPEN);
	snprintf(m.pub_open.model, sizeof m.pub_open.model, "%s", model);
	m.pub_open.n_tensors = n;
	m.pub_open.slots = slots;
	m.pub_open.bytes = bytes;
	m.pub_open.layout_hash = wsync_layout_hash(canon, n);
	if (g) {
		m.pub_open.group_size = g->size;
		m.pub_open.rank = g->rank;
		m.pub_open.n_parts = g->n_parts;
		m.pub_open.group_timeout_ms = g->timeout_ms;
	}
	free(canon);
	TEST_OK(raw_post(r, &m, &lfd, 1));
	close(lfd);
	got = raw_recv(r->fd, &m, fds, &nfds, HARNESS_WAIT_MS);
	TEST_ASSERT_MSG(got > 0, "no answer to PUB_OPEN of '%s' (%zd)", model, got);
	if (m.hdr.type == WSYNC_MSG_ERROR) {
		raw_close_fds(fds, nfds);
		return m.error.err;
	}
	TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_PUB_OPEN_OK, "PUB_OPEN answered with %s",
	                wsync_msg_name(m.hdr.type));
	TEST_ASSERT_MSG(nfds >= 1, "PUB_OPEN_OK without the model page");
	*id = m.pub_open_ok.model_id;
	for (int i = 0; i < nfds; i++) {
		if (i < *nkeep)
			keep[i] = fds[i];
		else
			close(fds[i]);
	}
	*nkeep = nfds < *nkeep ? nfds : *nkeep;
	return 0;
}

int raw_sub_try(struct raw *r, const char *model, uint32_t *id, char *why, size_t whylen)
{
	union wsync_msg_any m;
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;
	ssize_t got;

	raw_init(r, &m, WSYNC_MSG_SUB_OPEN);
	snprintf(m.sub_open.model, sizeof m.sub_open.model, "%s", model);
	TEST_OK(raw_post(r, &m, NULL, 0));
	got = raw_recv(r->fd, &m, fds, &nfds, HARNESS_WAIT_MS);
	TEST_ASSERT_MSG(got > 0, "no answer to SUB_OPEN of '%s' (%zd)", model, got);
	raw_close_fds(fds, nfds);
	if (m.hdr.type == WSYNC_MSG_ERROR) {
		if (why)
			snprintf(why, whylen, "%s", m.error.msg);
		return m.error.err;
	}
	TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_SUB_OPEN_OK, "SUB_OPEN answered with %s",
	                wsync_msg_name(m.hdr.type));
	*id = m.sub_open_ok.model_id;
	return 0;
}

uint32_t raw_sub_open(struct raw *r, const char *model)
{
	union wsync_msg_any m;
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;

	raw_init(r, &m, WSYNC_MSG_SUB_OPEN);
	snprintf(m.sub_open.model, sizeof m.sub_open.model, "%s", model);
	raw_request(r->fd, &m, sizeof m.sub_open, NULL, 0, WSYNC_MSG_SUB_OPEN_OK, fds, &nfds);
	raw_close_fds(fds, nfds);
	return m.sub_open_ok.model_id;
}

uint64_t raw_publish(struct raw *r, uint32_t id, uint64_t step)
{
	union wsync_msg_any m;
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;
	uint32_t slot;
	uint64_t version;

	raw_init(r, &m, WSYNC_MSG_BEGIN);
	m.begin.m.model_id = id;
	raw_request(r->fd, &m, sizeof m.begin, NULL, 0, WSYNC_MSG_GRANT, fds, &nfds);
	raw_close_fds(fds, nfds);
	slot = m.grant.slot;
	version = m.grant.version;
	raw_init(r, &m, WSYNC_MSG_COMMIT);
	m.commit.m.model_id = id;
	m.commit.slot = slot;
	m.commit.version = version;
	m.commit.step = step;
	nfds = WSYNC_MSG_MAX_FDS;
	raw_request(r->fd, &m, sizeof m.commit, NULL, 0, WSYNC_MSG_COMMIT_OK, fds, &nfds);
	raw_close_fds(fds, nfds);
	return version;
}
