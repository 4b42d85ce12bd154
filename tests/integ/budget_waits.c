/*
 * budget_waits — the WAIT_READERS of all the sessions of a uid are
 * budgeted together, so another user's many sessions cannot keep the
 * broker polling tens of thousands of waits (DESIGN invariant 10). Needs
 * root (skipped otherwise): the burst comes from another uid admitted
 * through --group.
 *
 *  1. Twenty sessions of the other uid each post 64 WAIT_READERS that can
 *     never be met, with no deadline: 256 of them pend, every later one is
 *     refused at once with -ENOBUFS naming the uid and the limit.
 *  2. While they pend the broker uses under a fifth of a core and an
 *     honest trainer's commit round trip stays near its idle figure.
 *  3. The sessions die (SIGKILL): their waits go with them, and the
 *     broker's fds and memory come back.
 */
#include "tests/lib/harness.h"
#include "tests/lib/hostile.h"
#include "tests/lib/raw.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#define MODEL    "waits.model"
#define SESSIONS 20
#define PER      64                      /* the broker's READERS_MAX_PER_PEER */
#define SHARE    256                     /* its UIDS_MAX_WAITS */

static struct broker G;
static uid_t other_uid;
static gid_t other_gid;
static struct chan up;

static int other_user(void *arg)
{
	static struct raw s[SESSIONS];
	uint32_t id = (uint32_t)(uintptr_t)arg;
	int refused = 0;

	hostile_become(other_uid, other_gid);
	for (int i = 0; i < SESSIONS; i++) {
		char name[32];

		snprintf(name, sizeof name, "waiter-%d", i);
		raw_hello(&s[i], &G, name);
		TEST_EQ_U64(raw_sub_open(&s[i], MODEL), id);
		for (int k = 0; k < PER; k++) {
			union wsync_msg_any m;

			raw_init(&s[i], &m, WSYNC_MSG_WAIT_READERS);
			m.wait_readers.m.model_id = id;
			m.wait_readers.version = 1;
			m.wait_readers.n_readers = 50;
			m.wait_readers.timeout_ms = UINT32_MAX;
			TEST_OK(raw_post(&s[i], &m, NULL, 0));
		}
	}
	/* what was refused is answered at once, what pends is not: read until
	 * as many refusals came as the budget leaves (or 3 s), then 100 ms more
	 * to see that no other answer follows */
	for (int64_t t0 = harness_mono_ns(), quiet = 0; ; ) {
		bool got = false;

		for (int i = 0; i < SESSIONS; i++) {
			union wsync_msg_any m;

			while (raw_recv(s[i].fd, &m, NULL, NULL, 0) > 0) {
				TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_ERROR && m.error.err == -ENOBUFS,
				                "a wait answered %s %s", wsync_msg_name(m.hdr.type),
				                m.hdr.type == WSYNC_MSG_ERROR ? m.error.msg : "");
				if (!refused++)
					harness_log("refused: %s", m.error.msg);
				TEST_CONTAINS(m.error.msg, "limit 256 per user");
				got = true;
			}
		}
		if (refused >= SESSIONS * PER - SHARE && !quiet)
			quiet = harness_mono_ns() + 100 * HARNESS_MS;
		if ((quiet && harness_mono_ns() > quiet) || harness_mono_ns() - t0 > 3 * HARNESS_S)
			break;
		if (!got)
			harness_sleep_ms(5);
	}
	chan_send(&up, (uint64_t)refused);
	pause();
	return 0;
}

int main(void)
{
	wsync_tensor_desc d[2];
	struct hostile_base base;
	wsync_client *c;
	wsync_pub *honest;
	struct raw p;
	uint64_t refused;
	uint32_t id;
	long ticks;
	pid_t kid;
	int st, skip;

	skip = hostile_other_start(&G, "wait for readers as another uid", &other_uid, &other_gid,
	                           "waits.honest", &c, &honest);
	if (skip)
		return skip;
	raw_hello(&p, &G, "publisher");
	harness_model_2t(d);
	TEST_OK(raw_pub_open(&p, MODEL, d, 2, 2, NULL, &id, NULL));
	raw_publish(&p, id, 1);
	hostile_base_take(&G, honest, &base);

	chan_open(&up);
	kid = harness_fork(other_user, (void *)(uintptr_t)id);
	refused = chan_recv(&up, kid);
	harness_log("%d WAIT_READERS of uid %u: %llu refused", SESSIONS * PER,
	            (unsigned)other_uid, (unsigned long long)refused);
	TEST_EQ_U64(refused, SESSIONS * PER - SHARE);
	ticks = harness_broker_cpu_ticks(&G);
	harness_sleep_ms(1000);
	ticks = harness_broker_cpu_ticks(&G) - ticks;
	harness_log("broker CPU while %d waits of one uid pend: %ld ticks in 1 s", SHARE, ticks);
	TEST_ASSERT_MSG(ticks < sysconf(_SC_CLK_TCK) / 5, "the broker used %ld ticks of CPU in "
	                "a second with one uid's waits pending", ticks);
	hostile_check_rtt(&G, honest, &base, "while another uid holds its budget of waits");
	kill(kid, SIGKILL);
	st = harness_wait_status(kid, 5000);
	TEST_ASSERT(WIFSIGNALED(st));
	raw_close(&p);
	TEST_OK(wsync_model_delete(c, MODEL));
	hostile_check_settled(&G, &base, 4 * 1024, "the other uid's sessions went");
	hostile_check_rtt(&G, honest, &base, "after the other uid's sessions went");
	hostile_other_finish(&G, c, honest);
	return 0;
}
