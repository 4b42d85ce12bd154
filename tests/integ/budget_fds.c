/*
 * budget_fds — the fds of replies a uid has not read are budgeted, so
 * sessions that never read cannot hold every fd the kernel lets the
 * broker's user have in flight (past RLIMIT_NOFILE of them every
 * SCM_RIGHTS send of a broker without CAP_SYS_RESOURCE fails, HELLO
 * included). Needs root (skipped otherwise): the burst comes from another
 * uid admitted through --group. The broker runs with RLIMIT_NOFILE 2048,
 * so its share per uid is 2048 / 16 = 128 fds.
 *
 *  1. Eight sessions of the other uid each send 60 ATTACHes of a model of
 *     8 slots (10 fds a reply) without reading. Together they get at most
 *     128 fds; the rest are refused with -ENOBUFS naming the uid and the
 *     limit. Meanwhile clients of the broker's uid connect and an honest
 *     trainer's commit round trip stays near its idle figure.
 *  2. Once the other uid reads its replies, its budget is back: a new
 *     session of it attaches.
 *  3. A ninth session leaves 3 ATTACH_OKs unread and is cut off (a BEGIN
 *     carrying an fd): its socket is kept, still counted, until its peer
 *     is gone. The other uid dies; the broker's fds and memory come back,
 *     and it did not lose count (its log says so when it does).
 */
#include "tests/lib/harness.h"
#include "tests/lib/hostile.h"
#include "tests/lib/raw.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define MODEL    "fds.model"
#define SESSIONS 8
#define ATTACHES 60
#define SHARE    128                     /* 2048 / UIDS_FDS_PART (broker/uids.c) */

static struct broker G;
static uid_t other_uid;
static gid_t other_gid;
static struct chan up, down;

static void post_attach(struct raw *r, uint32_t id)
{
	union wsync_msg_any m;

	raw_init(r, &m, WSYNC_MSG_ATTACH);
	m.attach.m.model_id = id;
	TEST_OK(raw_post(r, &m, NULL, 0));
}

static int other_user(void *arg)
{
	static struct raw s[SESSIONS];
	struct raw late, cut;
	union wsync_msg_any m;
	int fds[WSYNC_MSG_MAX_FDS], nfds, got_fds = 0, refused = 0, answered = 0;
	uint32_t id = (uint32_t)(uintptr_t)arg;
	int devnull;

	hostile_become(other_uid, other_gid);
	for (int i = 0; i < SESSIONS; i++) {
		char name[32];

		snprintf(name, sizeof name, "deaf-%d", i);
		raw_hello(&s[i], &G, name);
		TEST_EQ_U64(raw_sub_open(&s[i], MODEL), id);
	}
	for (int k = 0; k < ATTACHES; k++)
		for (int i = 0; i < SESSIONS; i++)
			post_attach(&s[i], id);
	harness_sleep_ms(500);
	chan_send(&up, 1);                /* the parent looks while nothing is read */
	chan_recv(&down, getppid());
	for (int i = 0; i < SESSIONS; i++) {
		for (int k = 0; k < ATTACHES; k++) {
			nfds = WSYNC_MSG_MAX_FDS;
			TEST_ASSERT(raw_recv(s[i].fd, &m, fds, &nfds, HARNESS_WAIT_MS) > 0);
			raw_close_fds(fds, nfds);
			got_fds += nfds;
			if (m.hdr.type == WSYNC_MSG_ATTACH_OK) {
				answered++;
				continue;
			}
			TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_ERROR && m.error.err == -ENOBUFS,
			                "an ATTACH answered %s %d: %s", wsync_msg_name(m.hdr.type),
			                m.hdr.type == WSYNC_MSG_ERROR ? m.error.err : 0,
			                m.hdr.type == WSYNC_MSG_ERROR ? m.error.msg : "");
			if (!refused++)
				harness_log("refused: %s", m.error.msg);
			TEST_CONTAINS(m.error.msg, "limit 128 per user");
		}
	}
	harness_log("%d ATTACHes of one uid, unread: %d answered with %d fds, %d refused",
	            SESSIONS * ATTACHES, answered, got_fds, refused);
	TEST_ASSERT_MSG(got_fds <= SHARE, "uid %u got %d fds in replies it did not read",
	                (unsigned)other_uid, got_fds);
	TEST_ASSERT(refused > 0);

	/* 2. read: room again */
	raw_hello(&late, &G, "reads");
	TEST_EQ_U64(raw_sub_open(&late, MODEL), id);
	post_attach(&late, id);
	nfds = WSYNC_MSG_MAX_FDS;
	TEST_ASSERT(raw_recv(late.fd, &m, fds, &nfds, HARNESS_WAIT_MS) > 0);
	raw_close_fds(fds, nfds);
	TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_ATTACH_OK, "%s", m.error.msg);

	/* 3. cut off with replies unread */
	raw_hello(&cut, &G, "cut-off");
	TEST_EQ_U64(raw_sub_open(&cut, MODEL), id);
	for (int k = 0; k < 3; k++)
		post_attach(&cut, id);
	devnull = open("/dev/null", O_RDONLY);
	raw_init(&cut, &m, WSYNC_MSG_BEGIN);
	m.begin.m.model_id = id;
	TEST_OK(raw_post(&cut, &m, &devnull, 1));
	close(devnull);
	chan_send(&up, 2);
	pause();
	return 0;
}

int main(void)
{
	struct rlimit rl = { 2048, 2048 };
	wsync_tensor_desc d[2];
	struct hostile_base base;
	wsync_client *c;
	wsync_pub *honest;
	struct raw p;
	uint32_t id;
	pid_t kid;
	int st, skip;

	skip = harness_other_user("leave replies unread as another uid", &other_uid, &other_gid);
	if (skip)
		return skip;
	TEST_ASSERT(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	if (harness_broker_start(&G, HARNESS_OTHER_USERS, NULL))
		return 1;
	TEST_OK(harness_connect(&G, "honest-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, "fds.honest", 0, &honest));
	raw_hello(&p, &G, "publisher");
	harness_model_2t(d);
	TEST_OK(raw_pub_open(&p, MODEL, d, 2, 8, NULL, &id, NULL));
	raw_publish(&p, id, 1);
	hostile_base_take(&G, honest, &base);

	/* 1. */
	chan_open(&up);
	chan_open(&down);
	kid = harness_fork(other_user, (void *)(uintptr_t)id);
	TEST_EQ_U64(chan_recv(&up, kid), 1);
	for (int i = 0; i < 20; i++) {
		wsync_client *x;

		TEST_OK(harness_connect(&G, "honest-own-uid", &x));
		wsync_close(x);
	}
	hostile_check_rtt(&G, honest, &base, "while another uid leaves its replies unread");
	chan_send(&down, 1);

	/* 2, 3. */
	TEST_EQ_U64(chan_recv(&up, kid), 2);
	harness_sleep_ms(1200);
	harness_log("broker fds %d with the cut-off session's socket kept",
	            harness_broker_fd_count(&G));
	kill(kid, SIGKILL);
	st = harness_wait_status(kid, 5000);
	TEST_ASSERT(WIFSIGNALED(st));
	raw_close(&p);
	TEST_OK(wsync_model_delete(c, MODEL));
	hostile_check_settled(&G, &base, 4 * 1024, "the other uid's sessions went");
	harness_sleep_ms(1100);           /* the tick drops the uid's books */
	{
		static char log[1 << 20];

		harness_read_file(G.log, log, sizeof log);
		TEST_ASSERT_MSG(!strstr(log, "counted with nothing holding them"),
		                "the broker lost count of the fds in flight");
	}
	hostile_check_rtt(&G, honest, &base, "after the other uid went");
	hostile_other_finish(&G, c, honest);
	return 0;
}
