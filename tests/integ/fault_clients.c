/*
 * fault_clients — misbehaving clients get a clear answer and cost the
 * others nothing:
 *
 *  1. Twenty connections that never send HELLO (WSYNC_HELLO_TIMEOUT_MS=300):
 *     meanwhile a normal client publishes and acquires; each silent one is
 *     closed by the broker after the deadline (EOF), and the log says why.
 *  2. A truncated message (10 bytes of a COMMIT) after HELLO, then silence:
 *     answered with ERROR -EPROTO and a reason, and the session stays usable
 *     (its next valid request is answered); the same before HELLO is
 *     answered and the connection closed.
 *  3. A client that stops reading its socket while it keeps sending
 *     requests: the broker never blocks on it; once its socket buffer is
 *     full it is disconnected (the log says it does not read), and a normal
 *     client is served while it is stuck and afterwards.
 */
#include "tests/lib/faults.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define SILENT 20

static struct broker B;

static void no_hello(void)
{
	int fds[SILENT];

	for (int i = 0; i < SILENT; i++)
		fds[i] = faults_raw_connect(&B);
	faults_normal_client(&B, "20 connections without HELLO");
	for (int i = 0; i < SILENT; i++) {
		int got = faults_raw_drain_to_eof(fds[i], HARNESS_WAIT_MS);

		TEST_ASSERT_MSG(got == 0, "silent connection %d: %s", i,
		                got < 0 ? "never closed by the broker" : "got a message");
		close(fds[i]);
	}
	TEST_ASSERT(faults_log_contains(&B, "sent no HELLO within 300 ms"));
	faults_normal_client(&B, "connections without HELLO were closed");
}

static void truncated(void)
{
	union wsync_msg_any m, r;
	ssize_t n;
	int fd;

	/* after HELLO: an error, the session lives on */
	fd = faults_raw_connect(&B);
	faults_raw_hello(fd, 1, "truncating", NULL, NULL);
	memset(&m, 0, sizeof(m));
	wsync_msg_init(&m.hdr, WSYNC_MSG_COMMIT, 2);
	TEST_ASSERT(faults_raw_send(fd, &m, 10, NULL, 0) == 0);
	n = faults_raw_recv(fd, &r, NULL, NULL, HARNESS_WAIT_MS);
	TEST_ASSERT_MSG(n == (ssize_t)sizeof(r.error) && r.hdr.type == WSYNC_MSG_ERROR,
	                "a truncated COMMIT got %zd bytes", n);
	TEST_ASSERT(r.error.err == -EPROTO || r.error.err == -EINVAL);
	TEST_ASSERT(r.error.msg[0] != 0);
	harness_log("truncated COMMIT: %s", r.error.msg);
	/* ...then it sleeps while others are served */
	faults_normal_client(&B, "a truncated message and silence");
	memset(&m, 0, sizeof(m));
	wsync_msg_init(&m.hdr, WSYNC_MSG_SUB_OPEN, 3);
	snprintf(m.sub_open.model, sizeof(m.sub_open.model), "after.truncation");
	TEST_ASSERT(faults_raw_send(fd, &m, sizeof(m.sub_open), NULL, 0) == 0);
	int nf = 4, f[4];
	n = faults_raw_recv(fd, &r, f, &nf, HARNESS_WAIT_MS);
	TEST_ASSERT_MSG(n > 0 && r.hdr.type == WSYNC_MSG_SUB_OPEN_OK && r.hdr.seq == 3,
	                "the session did not survive a truncated message");
	for (int i = 0; i < nf; i++)
		close(f[i]);
	close(fd);

	/* before HELLO: an error, then closed */
	fd = faults_raw_connect(&B);
	memset(&m, 0, sizeof(m));
	wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, 1);
	TEST_ASSERT(faults_raw_send(fd, &m, 10, NULL, 0) == 0);
	n = faults_raw_recv(fd, &r, NULL, NULL, HARNESS_WAIT_MS);
	TEST_ASSERT(n == (ssize_t)sizeof(r.error) && r.hdr.type == WSYNC_MSG_ERROR);
	TEST_ASSERT(r.error.msg[0] != 0);
	TEST_ASSERT(faults_raw_drain_to_eof(fd, HARNESS_WAIT_MS) == 0);
	close(fd);
	faults_broker_alive(&B, "truncated messages");
}

static void not_reading(void)
{
	union wsync_msg_any m, r;
	int fd, nf = 4, f[4], sent = 0, gone = 0;
	ssize_t n;

	fd = faults_raw_connect(&B);
	faults_raw_hello(fd, 1, "deaf", NULL, NULL);
	memset(&m, 0, sizeof(m));
	wsync_msg_init(&m.hdr, WSYNC_MSG_SUB_OPEN, 2);
	snprintf(m.sub_open.model, sizeof(m.sub_open.model), "deaf.model");
	TEST_ASSERT(faults_raw_send(fd, &m, sizeof(m.sub_open), NULL, 0) == 0);
	n = faults_raw_recv(fd, &r, f, &nf, HARNESS_WAIT_MS);
	TEST_ASSERT(n > 0 && r.hdr.type == WSYNC_MSG_SUB_OPEN_OK);
	for (int i = 0; i < nf; i++)
		close(f[i]);
	/* ATTACH of a model without a layout: a valid request, answered with
	 * a 512-byte ERROR (-ENODATA, not a protocol violation). Never read. */
	for (uint32_t seq = 3; seq < 200000 && !gone; seq++) {
		memset(&m, 0, sizeof(m));
		wsync_msg_init(&m.hdr, WSYNC_MSG_ATTACH, seq);
		m.attach.m.model_id = r.sub_open_ok.model_id;
		int rc = faults_raw_send(fd, &m, sizeof(m.attach), NULL, 0);
		if (rc == -EAGAIN) {
			harness_sleep_ms(1);
			if (faults_log_contains(&B, "does not read"))
				gone = 1;
			continue;
		}
		if (rc)
			gone = 1;
		else
			sent++;
		if (sent % 64 == 0 && faults_log_contains(&B, "does not read"))
			gone = 1;
		if (sent == 100)     /* while it is stuck, the others are served */
			faults_normal_client(&B, "a client that does not read (stuck)");
	}
	TEST_ASSERT_MSG(gone, "%d requests without reading a reply, still connected", sent);
	int got = faults_raw_drain_to_eof(fd, HARNESS_WAIT_MS);
	TEST_ASSERT_MSG(got >= 0, "the deaf client was not disconnected");
	harness_log("deaf client: %d requests sent, %d replies were queued before the "
	            "broker cut it off", sent, got);
	TEST_ASSERT(got < sent);
	TEST_ASSERT(faults_log_contains(&B, "does not read"));
	close(fd);
	faults_normal_client(&B, "a client that does not read");
}

int main(void)
{
	if (harness_use_fault_wsyncd())
		return HARNESS_SKIP;
	setenv("WSYNC_HELLO_TIMEOUT_MS", "300", 1);
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	unsetenv("WSYNC_HELLO_TIMEOUT_MS");
	no_hello();
	truncated();
	not_reading();
	faults_broker_alive(&B, "every misbehaving client");
	harness_broker_finish(&B);
	return 0;
}
