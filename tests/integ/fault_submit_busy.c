/*
 * fault_submit_busy — the broker's loop goes on when the kernel refuses a
 * submit until completions are reaped (its CQ overflowed: -EBUSY); it once
 * retried that submit for ever, inside the callback that needed an SQE.
 *
 * 20 subscribers each queue 64 WAIT_READERS with no deadline on one model.
 * Its DELETE answers all 1,280 at the broker's next look, in one event, so
 * the broker queues more sends than its SQ holds, twice over. wsyncd-fault
 * with WSYNC_FAULT_SUBMIT=2 refuses the second of those submits, and every
 * retry until the loop reaps its CQ (broker/fault.h), with the first
 * submit's send completions waiting there. Every wait is answered -EIDRM,
 * the broker says it set completions aside, another client's round trip
 * works, and the broker's descriptors come back once the subscribers go
 * (every set-aside completion was dispatched: its send buffer freed).
 */
#include "tests/lib/faults.h"
#include "tests/lib/harness.h"
#include "tests/lib/hostile.h"
#include "tests/lib/raw.h"

#include <stdio.h>
#include <stdlib.h>

#define MODEL    "submit.model"
#define SESSIONS 20
#define WAITS    64                      /* the broker's WAIT_READERS per session */

static struct broker B;

int main(void)
{
	static struct raw s[SESSIONS];
	struct hostile_base base;
	wsync_client *c;
	wsync_pub *p, *honest;
	uint64_t version;
	uint32_t id = 0;

	if (harness_use_fault_wsyncd())
		return HARNESS_SKIP;
	setenv("WSYNC_FAULT_SUBMIT", "2", 1);
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	unsetenv("WSYNC_FAULT_SUBMIT");
	TEST_OK(harness_connect(&B, "trainer", &c));
	TEST_OK(harness_pub_open_2t(c, "submit.honest", 0, &honest));
	hostile_base_take(&B, honest, &base);
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	TEST_OK(harness_publish(p, 1, HARNESS_S, &version));
	wsync_pub_close(p);

	for (int k = 0; k < SESSIONS; k++) {
		union wsync_msg_any m;
		int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;
		char name[32];

		snprintf(name, sizeof name, "waiter-%d", k);
		raw_hello(&s[k], &B, name);
		id = raw_sub_open(&s[k], MODEL);
		for (int i = 0; i < WAITS; i++) {
			raw_init(&s[k], &m, WSYNC_MSG_WAIT_READERS);
			m.wait_readers.m.model_id = id;
			m.wait_readers.version = version;
			m.wait_readers.n_readers = 1000;
			m.wait_readers.timeout_ms = UINT32_MAX;
			TEST_OK(raw_post(&s[k], &m, NULL, 0));
		}
		/* answered after the waits, so they are all queued by then */
		raw_init(&s[k], &m, WSYNC_MSG_ATTACH);
		m.attach.m.model_id = id;
		raw_request(s[k].fd, &m, sizeof m.attach, NULL, 0, WSYNC_MSG_ATTACH_OK, fds, &nfds);
		raw_close_fds(fds, nfds);
	}
	TEST_ASSERT(!faults_log_contains(&B, "fault injection"));

	TEST_OK(wsync_model_delete(c, MODEL));
	for (int k = 0; k < SESSIONS; k++) {
		for (int i = 0; i < WAITS; i++) {
			union wsync_msg_any m;
			ssize_t n = raw_recv(s[k].fd, &m, NULL, NULL, HARNESS_WAIT_MS);

			TEST_ASSERT_MSG(n > 0, "session %d: answer %d of %d to its waits: %zd", k,
			                i + 1, WAITS, n);
			TEST_ASSERT_MSG(m.hdr.type == WSYNC_MSG_ERROR && m.error.err == -EIDRM,
			                "session %d: a wait answered %s %d", k,
			                wsync_msg_name(m.hdr.type),
			                m.hdr.type == WSYNC_MSG_ERROR ? m.error.err : 0);
		}
	}
	harness_log("%d waits answered -EIDRM after the model's delete", SESSIONS * WAITS);
	TEST_ASSERT_MSG(faults_log_contains(&B, "failing io_uring submit #2"),
	                "the injected -EBUSY was not reached");
	TEST_ASSERT(faults_log_contains(&B, "completions set aside"));

	hostile_check_rtt(&B, honest, &base, "after a refused submit");
	for (int k = 0; k < SESSIONS; k++)
		raw_close(&s[k]);
	hostile_check_settled(&B, &base, 8 * 1024, "the waiters went");
	wsync_pub_close(honest);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
