/*
 * fds_in_flight — an fd named in a queued reply names the same memory when
 * the reply leaves (docs/RELIABILITY.md, "Replies carry memory, not fd
 * numbers").
 *
 * A reply is queued during the event that asked for it and sent at the
 * next io_uring_submit, after every other completion of the same batch. In
 * one batch a process of another uid admitted with --group sends, on three
 * sessions: ATTACH of model A (the reply names A's page, layout and slabs),
 * DELETE of A (its fds are closed) and CLOSE of its publisher of model H
 * (H moves to new memory, whose memfds take the lowest free numbers: A's).
 * The broker is stopped (SIGSTOP) while the three go out, so they land in
 * one batch. The ATTACH_OK must carry A's memory read-only: the inode of
 * every fd is the one SUB_OPEN_OK gave for A, never H's new page or slabs
 * (before the fix: H's new memfds, read-write). Eight rounds. Needs root
 * (to become another uid); skipped otherwise.
 */
#include "tests/lib/harness.h"
#include "tests/lib/raw.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define ROUNDS 8

static struct broker B;
static uid_t other_uid;
static gid_t other_gid;
static struct chan up, down;

static void inodes(const int *fds, int n, ino_t *out)
{
	for (int i = 0; i < n; i++) {
		struct stat st;

		TEST_ASSERT(fstat(fds[i], &st) == 0);
		out[i] = st.st_ino;
	}
}

static void close_pub(struct raw *r, uint32_t id)
{
	union wsync_msg_any m;

	raw_init(r, &m, WSYNC_MSG_CLOSE);
	m.close.m.model_id = id;
	m.close.what = WSYNC_CLOSE_PUB;
	raw_request(r->fd, &m, sizeof m.close, NULL, 0, WSYNC_MSG_CLOSE_OK, NULL, NULL);
}

/* One round as the other uid; the parent stops the broker around the
 * three posts. */
static void round_once(int round)
{
	int sfds[WSYNC_MSG_MAX_FDS], afds[WSYNC_MSG_MAX_FDS];
	int nsfds = WSYNC_MSG_MAX_FDS, nafds = WSYNC_MSG_MAX_FDS;
	ino_t want[WSYNC_MSG_MAX_FDS], got[WSYNC_MSG_MAX_FDS];
	char a_name[32], h_name[32];
	wsync_tensor_desc d[2];
	union wsync_msg_any m;
	struct raw a, del, h;
	uint32_t a_id, h_id;

	snprintf(a_name, sizeof a_name, "flight.a%d", round);
	snprintf(h_name, sizeof h_name, "flight.h%d", round);
	harness_model_2t(d);
	raw_hello(&a, &B, "a-sub");
	raw_hello(&del, &B, "a-del");
	raw_hello(&h, &B, "h-pub");
	/* A: published once and left (it moves then, before any of this) */
	TEST_OK(raw_pub_open(&a, a_name, d, 2, 4, NULL, &a_id, NULL));
	raw_publish(&a, a_id, 1);
	close_pub(&a, a_id);
	raw_init(&a, &m, WSYNC_MSG_SUB_OPEN);
	snprintf(m.sub_open.model, sizeof m.sub_open.model, "%s", a_name);
	raw_request(a.fd, &m, sizeof m.sub_open, NULL, 0, WSYNC_MSG_SUB_OPEN_OK, sfds, &nsfds);
	TEST_ASSERT_MSG(m.sub_open_ok.state == WSYNC_MODEL_READY && nsfds == 2 + 4,
	                "SUB_OPEN_OK of a READY model with %d fds", nsfds);
	inodes(sfds, nsfds, want);
	/* H: published, so its publisher's CLOSE moves it; one slot more than
	 * A, so its new memfds take every number A's fds had */
	TEST_OK(raw_pub_open(&h, h_name, d, 2, 5, NULL, &h_id, NULL));
	raw_publish(&h, h_id, 1);

	chan_send(&up, 1);
	TEST_ASSERT(chan_recv(&down, 0) == 1);           /* the broker is stopped */
	raw_init(&a, &m, WSYNC_MSG_ATTACH);
	m.attach.m.model_id = a_id;
	TEST_OK(raw_post(&a, &m, NULL, 0));
	harness_sleep_ms(5);
	raw_init(&del, &m, WSYNC_MSG_DELETE);
	snprintf(m.delete_.model, sizeof m.delete_.model, "%s", a_name);
	TEST_OK(raw_post(&del, &m, NULL, 0));
	harness_sleep_ms(5);
	raw_init(&h, &m, WSYNC_MSG_CLOSE);
	m.close.m.model_id = h_id;
	m.close.what = WSYNC_CLOSE_PUB;
	TEST_OK(raw_post(&h, &m, NULL, 0));
	chan_send(&up, 2);                               /* it may go on */

	TEST_ASSERT_MSG(raw_recv(a.fd, &m, afds, &nafds, HARNESS_WAIT_MS) > 0,
	                "round %d: no answer to ATTACH", round);
	TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_ATTACH_OK, "round %d: ATTACH answered with %s",
	                round, wsync_msg_name(m.hdr.type));
	/* ATTACH_OK carries the page, layout and slabs, like SUB_OPEN_OK */
	TEST_ASSERT_MSG(nafds == nsfds, "round %d: ATTACH_OK with %d fds, SUB_OPEN_OK had %d",
	                round, nafds, nsfds);
	inodes(afds, nafds, got);
	for (int i = 0; i < nafds; i++) {
		int fl = fcntl(afds[i], F_GETFL);

		TEST_ASSERT_MSG(got[i] == want[i], "round %d: ATTACH_OK's fd %d names inode %lu, "
		                "model A's is %lu: another model's memory", round, i,
		                (unsigned long)got[i], (unsigned long)want[i]);
		TEST_ASSERT_MSG(fl >= 0 && (fl & O_ACCMODE) == O_RDONLY,
		                "round %d: ATTACH_OK's fd %d is writable", round, i);
	}
	TEST_ASSERT(raw_recv(del.fd, &m, NULL, NULL, HARNESS_WAIT_MS) > 0 &&
	            m.hdr.type == WSYNC_MSG_DELETE_OK);
	TEST_ASSERT(raw_recv(h.fd, &m, NULL, NULL, HARNESS_WAIT_MS) > 0 &&
	            m.hdr.type == WSYNC_MSG_CLOSE_OK);
	raw_close_fds(sfds, nsfds);
	raw_close_fds(afds, nafds);
	raw_close(&a);
	raw_close(&del);
	raw_close(&h);
}

static int other(void *arg)
{
	(void)arg;
	TEST_ASSERT(setgroups(0, NULL) == 0);
	TEST_ASSERT(setgid(other_gid) == 0);
	TEST_ASSERT(setuid(other_uid) == 0);
	prctl(PR_SET_DUMPABLE, 1);
	for (int i = 0; i < ROUNDS; i++)
		round_once(i);
	return 0;
}

int main(void)
{
	int skip = harness_other_user("send ATTACH, DELETE and CLOSE as another uid",
	                              &other_uid, &other_gid);
	wsync_client *c;
	pid_t child;
	int fds_before;

	if (skip)
		return skip;
	TEST_ASSERT(harness_broker_start(&B, HARNESS_OTHER_USERS, NULL) == 0);
	fds_before = harness_broker_fd_count(&B);
	chan_open(&up);
	chan_open(&down);
	child = harness_fork(other, NULL);
	for (int i = 0; i < ROUNDS; i++) {
		TEST_ASSERT(chan_recv(&up, child) == 1);
		TEST_ASSERT(kill(B.pid, SIGSTOP) == 0);
		chan_send(&down, 1);
		TEST_ASSERT(chan_recv(&up, child) == 2);
		harness_sleep_ms(20);
		TEST_ASSERT(kill(B.pid, SIGCONT) == 0);
	}
	harness_expect_exit0(child, "the other uid's rounds");
	/* every fd a reply held is closed once it left: with the H models
	 * deleted too, the broker is back to its count before */
	TEST_OK(harness_connect(&B, "cleaner", &c));
	for (int i = 0; i < ROUNDS; i++) {
		char name[32];

		snprintf(name, sizeof name, "flight.h%d", i);
		TEST_OK(wsync_model_delete(c, name));
	}
	wsync_close(c);
	TEST_ASSERT_MSG(harness_broker_fd_settle(&B, fds_before, 5000) <= fds_before,
	                "the broker holds %d fds, %d before", harness_broker_fd_count(&B),
	                fds_before);
	harness_broker_finish(&B);
	return 0;
}
