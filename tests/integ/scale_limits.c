/*
 * scale_limits — the documented maxima hold, past them each one is refused
 * with a clear error and no effect on the others, and nothing grows with
 * churn.
 *
 * 1. 200 connections that stay silent (no HELLO) take no table entry:
 *    beside them WSYNC_MAX_SESSIONS (1024) raw sessions say HELLO and stay;
 *    the next HELLO gets ERROR -EAGAIN naming the maximum; the first
 *    session still gets answers; all close and the broker's fds return to
 *    the baseline.
 * 2. WSYNC_MAX_MODELS (64) models of 8 slots are opened by publishers; the
 *    65th name is -ENOSPC saying the table is full, the others publish.
 *    Then 3 rounds of closing and reopening every publisher (and
 *    publishing) change neither the broker's descriptors, nor its mappings
 *    (/proc/<pid>/maps lines), nor the instance's objects in /dev/shm.
 * 3. 10,000 connect + close of a normal client (the longer run in
 *    docs/RELIABILITY.md did 100,000): the broker's fds return to the
 *    baseline and a normal client still publishes and reads.
 * 4. A slow client that never reads its socket (nor its NOTIFY eventfd)
 *    and keeps sending requests, while a trainer publishes 2,000 versions
 *    (of one of the 64 models)
 *    as fast as it can and a collector follows: every commit succeeds, the
 *    collector reaches the last version verified, the slow client is cut
 *    off (its replies pile up) and the broker's fds return to the baseline.
 */
#include "tests/lib/faults.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "shm/layout.h"
#include "shm/proto.h"

#define CHURN 10000              /* WSYNC_SCALE_CHURN=N for a longer run */

static struct broker B;

static int maps_lines(void)
{
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/%d/maps", (int)B.pid);
	FILE *f = fopen(path, "r");
	int n = 0;
	TEST_ASSERT(f != NULL);
	while (fgets(buf, sizeof buf, f))
		n++;
	fclose(f);
	return n;
}

static void sessions(void)
{
	static int fds[WSYNC_MAX_SESSIONS], silent[200];
	union wsync_msg_any m;
	int base = harness_broker_fd_settle(&B, 0, 300);
	for (int i = 0; i < 200; i++)
		silent[i] = faults_raw_connect(&B);
	for (int i = 0; i < WSYNC_MAX_SESSIONS; i++) {
		char name[32];
		snprintf(name, sizeof name, "s%d", i);
		fds[i] = faults_raw_connect(&B);
		faults_raw_hello(fds[i], 1, name, NULL, NULL);
	}
	int extra = faults_raw_connect(&B);
	memset(&m, 0, sizeof m);
	wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, 1);
	m.hello.layout_version = WSYNC_LAYOUT_VERSION;
	snprintf(m.hello.name, sizeof m.hello.name, "one-too-many");
	TEST_OK(faults_raw_send(extra, &m, sizeof m.hello, NULL, 0));
	TEST_ASSERT(faults_raw_recv(extra, &m, NULL, NULL, HARNESS_WAIT_MS) > 0);
	TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_ERROR && m.error.err == -EAGAIN,
	                "HELLO past the table: %s %d", wsync_msg_name(m.hdr.type), m.error.err);
	TEST_CONTAINS(m.error.msg, "maximum of 1024 sessions");
	harness_log("session %d refused: %s", WSYNC_MAX_SESSIONS + 1, m.error.msg);
	close(extra);
	/* the first session is unaffected */
	memset(&m, 0, sizeof m);
	wsync_msg_init(&m.hdr, WSYNC_MSG_SUB_OPEN, 2);
	snprintf(m.sub_open.model, sizeof m.sub_open.model, "scale.sub");
	TEST_OK(faults_raw_send(fds[0], &m, sizeof m.sub_open, NULL, 0));
	TEST_ASSERT(faults_raw_recv(fds[0], &m, NULL, NULL, HARNESS_WAIT_MS) > 0);
	TEST_ASSERT(m.hdr.type == WSYNC_MSG_SUB_OPEN_OK);
	for (int i = 0; i < WSYNC_MAX_SESSIONS; i++)
		close(fds[i]);
	for (int i = 0; i < 200; i++)
		close(silent[i]);
	int now = harness_broker_fd_settle(&B, base, 10000);
	TEST_ASSERT_MSG(now <= base, "broker fds %d after 1024 sessions, %d before", now, base);
}

static void open_all(wsync_client *c, wsync_pub **p, int round)
{
	for (int i = 0; i < WSYNC_MAX_MODELS; i++) {
		char name[32];
		uint64_t v;
		snprintf(name, sizeof name, "scale.m%d", i);
		TEST_OK(harness_pub_open_2t(c, name, 8, &p[i]));
		TEST_OK(harness_publish(p[i], (uint64_t)round * 100 + 1, 5 * HARNESS_S, &v));
	}
}

static void models(void)
{
	wsync_client *c;
	wsync_pub *p[WSYNC_MAX_MODELS], *q;
	TEST_OK(harness_connect(&B, "scale-models", &c));
	open_all(c, p, 0);
	TEST_RC(harness_pub_open_2t(c, "scale.one-too-many", 8, &q), -ENOSPC);
	TEST_CONTAINS(wsync_errmsg(), "table is full");
	harness_log("model %d refused: %s", WSYNC_MAX_MODELS + 1, wsync_errmsg());
	int fds0 = harness_broker_fd_count(&B), maps0 = maps_lines();
	int shm0 = harness_shm_leftovers(&B, 0);
	for (int round = 1; round <= 3; round++) {
		for (int i = 0; i < WSYNC_MAX_MODELS; i++)
			wsync_pub_close(p[i]);
		open_all(c, p, round);
	}
	int fds1 = harness_broker_fd_settle(&B, fds0, 5000), maps1 = maps_lines();
	int shm1 = harness_shm_leftovers(&B, 0);
	harness_log("64 models x 8 slots: broker fds %d -> %d, maps %d -> %d, /dev/shm "
	            "entries %d -> %d after 3 rounds", fds0, fds1, maps0, maps1, shm0, shm1);
	TEST_ASSERT(fds1 <= fds0 && maps1 <= maps0 && shm1 == shm0);
	for (int i = 0; i < WSYNC_MAX_MODELS; i++)
		wsync_pub_close(p[i]);
	wsync_close(c);
}

static void churn(void)
{
	int base = harness_broker_fd_settle(&B, 0, 300);
	const char *env = getenv("WSYNC_SCALE_CHURN");
	int churns = env && atoi(env) > 0 ? atoi(env) : CHURN;
	int64_t t0 = harness_mono_ns();
	for (int i = 0; i < churns; i++) {
		wsync_client *c;
		TEST_OK(harness_connect(&B, "churn", &c));
		wsync_close(c);
	}
	harness_log("%d connect + close in %.1f s", churns, (harness_mono_ns() - t0) / 1e9);
	int now = harness_broker_fd_settle(&B, base, 10000);
	TEST_ASSERT_MSG(now <= base, "broker fds %d after the churn, %d before", now, base);
}

static int trainer(void *arg)
{
	wsync_client *c;
	wsync_pub *p;
	uint64_t v = 0;
	(void)arg;
	TEST_OK(harness_connect(&B, "fast-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, "scale.m1", 8, &p));
	int64_t t0 = harness_mono_ns();
	for (uint64_t step = 1; step <= 2000; step++)
		TEST_OK(harness_publish(p, step, 5 * HARNESS_S, &v));
	harness_log("2000 commits in %.2f s beside the slow client",
	            (harness_mono_ns() - t0) / 1e9);
	wsync_pub_close(p);
	wsync_close(c);
	return 0;
}

static void slow_reader(void)
{
	union wsync_msg_any m;
	wsync_client *c;
	wsync_sub *s;
	wsync_view v;
	int base = harness_broker_fd_settle(&B, 0, 300);
	TEST_OK(harness_connect(&B, "follower", &c));
	TEST_OK(wsync_sub_open(c, "scale.m1", &s));
	/* the slow one: subscribes, registers an eventfd, never reads */
	int slow = faults_raw_connect(&B);
	faults_raw_hello(slow, 1, "slow", NULL, NULL);
	memset(&m, 0, sizeof m);
	wsync_msg_init(&m.hdr, WSYNC_MSG_SUB_OPEN, 2);
	snprintf(m.sub_open.model, sizeof m.sub_open.model, "scale.m1");
	TEST_OK(faults_raw_send(slow, &m, sizeof m.sub_open, NULL, 0));
	TEST_ASSERT(faults_raw_recv(slow, &m, NULL, NULL, HARNESS_WAIT_MS) > 0);
	uint32_t id = m.sub_open_ok.model_id;
	int efd = eventfd(0, EFD_CLOEXEC);
	memset(&m, 0, sizeof m);
	wsync_msg_init(&m.hdr, WSYNC_MSG_NOTIFY, 3);
	m.notify.m.model_id = id;
	TEST_OK(faults_raw_send(slow, &m, sizeof m.notify, &efd, 1));
	close(efd);
	pid_t t = harness_fork(trainer, NULL);
	/* blocking sends: they end only when the broker cuts it off */
	int sent = 0, err = 0;
	for (uint32_t seq = 4; sent < 1000000; seq++, sent++) {
		memset(&m, 0, sizeof m);
		wsync_msg_init(&m.hdr, WSYNC_MSG_ATTACH, seq);
		m.attach.m.model_id = id;
		if ((err = harness_raw_send(slow, &m, sizeof m.attach, NULL, 0)))
			break;
	}
	harness_log("the slow client sent %d requests without reading, then: %s", sent,
	            strerror(-err));
	TEST_ASSERT_MSG(err == -EPIPE || err == -ECONNRESET, "the slow client was not cut off");
	harness_expect_exit0(t, "the fast trainer");
	uint64_t last = 0;
	while (last < 2000) {                     /* steps 1..2000 */
		TEST_OK(wsync_sub_wait(s, last ? v.version : 0, 5 * HARNESS_S, &v));
		TEST_ASSERT(harness_verify_view(&v) == 0);
		last = v.step;
		wsync_sub_release(s, &v);
	}
	TEST_ASSERT_MSG(faults_log_contains(&B, "does not read"),
	                "the broker does not say it cut the slow client off for not reading");
	close(slow);
	wsync_sub_close(s);
	wsync_close(c);
	int now = harness_broker_fd_settle(&B, base, 10000);
	TEST_ASSERT_MSG(now <= base, "broker fds %d after the slow client, %d before", now, base);
}

int main(void)
{
	struct rlimit rl;
	TEST_ASSERT(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	if (rl.rlim_max < 2 * WSYNC_MAX_SESSIONS) {
		printf("SKIP: RLIMIT_NOFILE hard limit %llu is too low for %d sessions\n",
		       (unsigned long long)rl.rlim_max, WSYNC_MAX_SESSIONS);
		return HARNESS_SKIP;
	}
	rl.rlim_cur = rl.rlim_max;
	TEST_ASSERT(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	if (harness_broker_start(&B, NULL))
		return 1;
	sessions();
	models();
	slow_reader();
	churn();
	/* still serving (the table is full: an existing model) */
	wsync_client *c;
	wsync_pub *p;
	wsync_sub *s;
	wsync_view v;
	uint64_t version;
	TEST_OK(harness_connect(&B, "scale-after", &c));
	TEST_OK(harness_pub_open_2t(c, "scale.m0", 8, &p));
	TEST_OK(harness_publish(p, 999, 5 * HARNESS_S, &version));
	TEST_OK(wsync_sub_open(c, "scale.m0", &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, version);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_pub_close(p);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
