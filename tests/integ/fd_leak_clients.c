/*
 * fd_leak_clients — every descriptor that arrives with a message is closed
 * on every path, and silent connections cost nothing once gone.
 *
 * 300 short raw connections send random datagrams of every size (zero-length
 * ones too, some with a plausible header), a quarter of the datagrams
 * carrying an eventfd and /dev/null as SCM_RIGHTS; then 600 connections that
 * never say anything are opened together and closed (past 256 the broker
 * closes the newest at once). Afterwards a normal client still publishes
 * and reads, and the broker's descriptor count
 * (/proc/<pid>/fd) returns to where it was before (polled: the broker
 * handles closes at its own pace).
 *
 * On a broker that takes a zero-length datagram for the end of the
 * connection without looking at its fds, the count grows by two per such
 * datagram and never comes back.
 */
#include "tests/lib/harness.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "shm/proto.h"

#define SHORT_CONNS 300
#define IDLE_CONNS  600

static struct broker B;

/* One datagram of a random kind into buf; returns its length. */
static size_t random_datagram(unsigned char *buf, size_t cap, unsigned *seed)
{
	size_t len;
	switch (rand_r(seed) % 4) {
	case 0:
		return 0;                                  /* zero-length */
	case 1:
		len = (size_t)rand_r(seed) % 24;           /* shorter than a header */
		break;
	default:
		len = (size_t)rand_r(seed) % cap;          /* any size up to cap */
		break;
	}
	for (size_t i = 0; i < len; i++)
		buf[i] = (unsigned char)rand_r(seed);
	if (len >= sizeof(struct wsync_msg_hdr) && rand_r(seed) % 2) {
		struct wsync_msg_hdr h;                    /* a plausible header */
		h.magic = WSYNC_PROTO_MAGIC;
		h.type = (uint16_t)(1 + rand_r(seed) % (WSYNC_MSG_TYPE_END + 1));
		h.version = WSYNC_PROTO_VERSION;
		h.len = (uint32_t)len;
		h.seq = (uint32_t)rand_r(seed);
		memcpy(buf, &h, sizeof h);
	}
	return len;
}

static void short_connections(void)
{
	unsigned seed = 17;
	unsigned char buf[sizeof(union wsync_msg_any) + 64];
	int with_fds = 0, empty = 0;
	for (int c = 0; c < SHORT_CONNS; c++) {
		int fd = harness_raw_connect(&B);
		TEST_ASSERT_MSG(fd >= 0, "connection %d: %s", c, strerror(-fd));
		int n = 1 + rand_r(&seed) % 4;
		for (int k = 0; k < n; k++) {
			size_t len = random_datagram(buf, sizeof buf, &seed);
			int fds[2] = { -1, -1 }, nfds = 0;
			if (rand_r(&seed) % 4 == 0) {
				fds[0] = eventfd(0, EFD_CLOEXEC);
				fds[1] = open("/dev/null", O_RDWR | O_CLOEXEC);
				TEST_ASSERT(fds[0] >= 0 && fds[1] >= 0);
				nfds = 2;
				with_fds++;
				empty += len == 0;
			}
			harness_raw_send(fd, buf, len, fds, nfds);   /* may fail: closed */
			for (int i = 0; i < nfds; i++)
				close(fds[i]);
		}
		close(fd);
	}
	harness_log("%d connections, %d datagrams with fds (%d of them empty)",
	            SHORT_CONNS, with_fds, empty);
	TEST_ASSERT(empty > 0);
}

static void idle_connections(void)
{
	static int fds[IDLE_CONNS];
	int opened = 0;
	for (int i = 0; i < IDLE_CONNS; i++) {
		fds[i] = harness_raw_connect(&B);
		opened += fds[i] >= 0;
	}
	harness_log("%d of %d idle connections opened", opened, IDLE_CONNS);
	for (int i = 0; i < IDLE_CONNS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}


int main(void)
{
	if (harness_broker_start(&B, NULL))
		return 1;
	/* The baseline with the model in place: its segments stay open. */
	harness_publish_and_read(&B, "policy", 7);
	int base = harness_broker_fd_settle(&B, 0, 500);
	harness_log("broker fds at the start: %d", base);

	short_connections();
	idle_connections();
	/* The broker closes what it was sent at its own pace; past 256 silent
	 * connections it would refuse the next client at once. */
	int now = harness_broker_fd_settle(&B, base, 10000);
	harness_publish_and_read(&B, "policy", 8);
	now = harness_broker_fd_settle(&B, base, 10000);
	harness_log("broker fds at the end: %d", now);
	TEST_ASSERT_MSG(now <= base, "the broker holds %d fds, %d before: %d leaked",
	                now, base, now - base);
	harness_broker_finish(&B);
	return 0;
}
