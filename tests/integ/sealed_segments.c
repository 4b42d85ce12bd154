/*
 * sealed_segments — no process's ftruncate on a segment fd it was given
 * kills the collectors of a model.
 *
 * 1. --group: v1 is published; then a hostile publisher of another uid
 *    (65534, admitted through the group) speaking the raw protocol takes the
 *    model over (PUB_OPEN, BEGIN) and holds the read-write fds of its model
 *    page and of its granted slab, as the replies carried them (the slab
 *    with the grant: another uid is handed no slab holding a version); it calls
 *    ftruncate(fd, 0) on each: both fail with EPERM (sealed memfds). A root
 *    collector then reads v1, verified, and after the hostile one left a
 *    normal publisher and collector still work.
 * 2. The same for the model page of a broker without --group, with the
 *    hostile publisher of the broker's own uid (slabs are files there: a
 *    same-uid process can truncate them, see docs/RELIABILITY.md).
 * Root only (skipped otherwise): it needs another uid.
 */
#include "tests/lib/faults.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "shm/proto.h"
#include "shm/segment.h"
#include "shm/tensor_layout.h"

#define MODEL "sealed.policy"

static struct broker B;
static struct chan up, down;
static uid_t other_uid;
static gid_t other_gid;

static void expect_sealed(int fd, const char *what)
{
	int rc = ftruncate(fd, 0);
	TEST_ASSERT_MSG(rc < 0 && errno == EPERM, "ftruncate of the %s fd returned %d (%s), "
	                "expected EPERM", what, rc, rc ? strerror(errno) : "it shrank");
}

/* PUB_OPEN and BEGIN on a raw session; the page's and the slab's rw fds.
 * other: the session is of another uid than the broker's, which gets the
 * slab with its grant (the model holds a version), else with PUB_OPEN_OK. */
static void raw_take_over(int fd, int other, int *page_fd, int *slab_fd)
{
	union wsync_msg_any m;
	wsync_tensor_desc d[2];
	uint64_t bytes = 0;
	int fds[WSYNC_MSG_MAX_FDS], nfds;
	harness_model_2t(d);
	TEST_ASSERT(wsync_layout_compute(d, 2, d, &bytes, NULL, 0) == 0);
	int lfd = wsync_memfd_create("hostile-layout", sizeof d);
	TEST_ASSERT(lfd >= 0 && pwrite(lfd, d, sizeof d, 0) == (ssize_t)sizeof d);
	memset(&m, 0, sizeof m);
	wsync_msg_init(&m.hdr, WSYNC_MSG_PUB_OPEN, 2);
	snprintf(m.pub_open.model, sizeof m.pub_open.model, "%s", MODEL);
	m.pub_open.n_tensors = 2;
	m.pub_open.bytes = bytes;
	m.pub_open.layout_hash = wsync_layout_hash(d, 2);
	TEST_OK(faults_raw_send(fd, &m, sizeof m.pub_open, &lfd, 1));
	close(lfd);
	nfds = WSYNC_MSG_MAX_FDS;
	TEST_ASSERT(faults_raw_recv(fd, &m, fds, &nfds, HARNESS_WAIT_MS) > 0);
	/* the page, then every slab writable (mapped at open, off the publish
	 * path), unless the session is of another uid: the slots hold v1 */
	TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_PUB_OPEN_OK &&
	                nfds == (other ? 1 : 1 + (int)m.pub_open_ok.n_slots),
	                "PUB_OPEN: %s %s (%d fds)", wsync_msg_name(m.hdr.type),
	                m.hdr.type == WSYNC_MSG_ERROR ? m.error.msg : "", nfds);
	*page_fd = fds[0];
	*slab_fd = other ? -1 : fds[1];
	for (int i = 2; i < nfds; i++)
		close(fds[i]);
	uint32_t id = m.pub_open_ok.model_id;
	memset(&m, 0, sizeof m);
	wsync_msg_init(&m.hdr, WSYNC_MSG_BEGIN, 3);
	m.begin.m.model_id = id;
	TEST_OK(faults_raw_send(fd, &m, sizeof m.begin, NULL, 0));
	nfds = WSYNC_MSG_MAX_FDS;
	TEST_ASSERT(faults_raw_recv(fd, &m, fds, &nfds, HARNESS_WAIT_MS) > 0);
	TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_GRANT && nfds == (other ? 1 : 0) &&
	                !(m.grant.flags & WSYNC_GRANT_HAS_FD) == !other, "BEGIN: %s %s",
	                wsync_msg_name(m.hdr.type), m.hdr.type == WSYNC_MSG_ERROR ?
	                m.error.msg : "");
	if (other)
		*slab_fd = fds[0];
}

static int hostile(void *arg)
{
	int group = (int)(intptr_t)arg, page_fd, slab_fd;
	if (group) {
		TEST_ASSERT(setgroups(1, &other_gid) == 0);
		TEST_ASSERT(setresgid(other_gid, other_gid, other_gid) == 0);
		TEST_ASSERT(setresuid(other_uid, other_uid, other_uid) == 0);
		prctl(PR_SET_DUMPABLE, 1);
	}
	int fd = faults_raw_connect(&B);
	faults_raw_hello(fd, 1, "hostile", NULL, NULL);
	raw_take_over(fd, group, &page_fd, &slab_fd);
	expect_sealed(page_fd, "model page");
	if (group)
		expect_sealed(slab_fd, "slab");
	harness_log("uid %u: ftruncate refused on the page%s", (unsigned)getuid(),
	            group ? " and the slab" : "");
	chan_send(&up, 1);
	chan_recv(&down, getppid());                /* the collector has read */
	close(page_fd);
	close(slab_fd);
	close(fd);
	return 0;
}

static void run(int group)
{
	wsync_client *c;
	wsync_pub *p;
	wsync_sub *s;
	wsync_view v;
	uint64_t v1;
	chan_open(&up);
	chan_open(&down);
	if (group) {
		TEST_ASSERT(harness_broker_start(&B, HARNESS_OTHER_USERS, NULL) == 0);
	} else {
		TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	}
	TEST_OK(harness_connect(&B, "sealed-collector", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	TEST_OK(harness_publish(p, 1, 5 * HARNESS_S, &v1));
	wsync_pub_close(p);
	pid_t pid = harness_fork(hostile, (void *)(intptr_t)group);
	chan_recv(&up, pid);
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire(s, &v));           /* reads the page and the slab */
	TEST_EQ_U64(v.version, v1);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_close(c);
	chan_send(&down, 1);
	harness_expect_exit0(pid, group ? "the group publisher" : "the same-uid publisher");
	harness_publish_and_read(&B, "sealed.after", 2);
	harness_broker_finish(&B);
	chan_close(&up);
	chan_close(&down);
}

int main(void)
{
	int skip = harness_other_user("run a publisher", &other_uid, &other_gid);

	if (skip)
		return skip;
	run(1);
	run(0);
	return 0;
}
