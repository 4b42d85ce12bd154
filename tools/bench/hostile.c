/*
 * tools/bench/hostile.c — scenario "hostile": what one hostile client costs
 * an honest one (DESIGN invariant 10: at most 2x on its round trip).
 *
 * The honest trainer's begin+commit round trip of a 4 KiB model (no copy),
 * p50 and p99: on an idle broker (the reference, and the target's: within
 * 2x of it); beside a process that only spins (what any busy process costs
 * on a machine of few cores, for context); and while another session holds
 * every budget it can fill: its 64 WAIT_READERS that can never be met (the
 * broker looks at them on a timer), its 16 names nobody publishes kept in
 * the model table, a NOTIFY eventfd it never reads (a write parked on it at
 * every commit), and requests sent as fast as it gets the answers, each
 * carrying the model's fds. All in the same run; the hostile client speaks
 * the protocol by hand, as an attacker would.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "bench_common.h"
#include "shm/proto.h"

#define HOSTILE_MODEL "bench.hostile"
#define HOSTILE_WAITS 64
#define HOSTILE_NAMES 16                 /* the broker's SESSION_MAX_AWAITED */

struct hostile_arg {
	const struct bench *b;
	_Atomic int *ready;
};

static int raw_send(int fd, const union wsync_msg_any *m, const int *fds, int nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { (void *)m, m->hdr.len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfds) {
		struct cmsghdr *cm;

		memset(&ctl, 0, sizeof ctl);
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof ctl.buf;
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), fds, sizeof(int));
	}
	return sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)m->hdr.len ? 0 : -1;
}

/* One reply (its fds closed): its type, or -1. */
static int raw_reply(int fd, union wsync_msg_any *m)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * WSYNC_MSG_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { m, sizeof *m };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
	                     .msg_controllen = sizeof ctl.buf };
	struct pollfd p = { .fd = fd, .events = POLLIN };

	if (poll(&p, 1, 10000) != 1 || recvmsg(fd, &mh, MSG_CMSG_CLOEXEC) <= 0)
		return -1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		int *in = (int *)CMSG_DATA(cm);

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
			close(in[i]);
	}
	return m->hdr.type;
}

/* The hostile session: fills its budgets, then asks as fast as it is
 * answered, until killed. */
static int hostile_main(void *argp)
{
	struct hostile_arg *a = argp;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	union wsync_msg_any m;
	uint32_t seq = 0, id;
	int fd, efd;

	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", a->b->endpoint);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
		return 1;
	wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, ++seq);
	m.hello.layout_version = WSYNC_LAYOUT_VERSION;
	snprintf(m.hello.name, sizeof m.hello.name, "hostile");
	if (raw_send(fd, &m, NULL, 0) || raw_reply(fd, &m) != WSYNC_MSG_HELLO_OK)
		return 2;
	wsync_msg_init(&m.hdr, WSYNC_MSG_SUB_OPEN, ++seq);
	snprintf(m.sub_open.model, sizeof m.sub_open.model, "%s", HOSTILE_MODEL);
	if (raw_send(fd, &m, NULL, 0) || raw_reply(fd, &m) != WSYNC_MSG_SUB_OPEN_OK)
		return 3;
	id = m.sub_open_ok.model_id;
	for (int i = 0; i < HOSTILE_WAITS; i++) {
		wsync_msg_init(&m.hdr, WSYNC_MSG_WAIT_READERS, ++seq);
		m.wait_readers.m.model_id = id;
		m.wait_readers.version = 1;
		m.wait_readers.n_readers = 1000;
		m.wait_readers.timeout_ms = UINT32_MAX;
		if (raw_send(fd, &m, NULL, 0))
			return 4;
	}
	for (int i = 0; i < HOSTILE_NAMES; i++) {
		wsync_msg_init(&m.hdr, WSYNC_MSG_SUB_OPEN, ++seq);
		snprintf(m.sub_open.model, sizeof m.sub_open.model, "bench.hostile.nobody.%d", i);
		if (raw_send(fd, &m, NULL, 0) || raw_reply(fd, &m) != WSYNC_MSG_SUB_OPEN_OK)
			return 7;
	}
	efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	wsync_msg_init(&m.hdr, WSYNC_MSG_NOTIFY, ++seq);
	m.notify.m.model_id = id;
	if (efd < 0 || raw_send(fd, &m, &efd, 1) || raw_reply(fd, &m) != WSYNC_MSG_NOTIFY_OK)
		return 5;
	atomic_store(a->ready, 1);
	for (;;) {
		wsync_msg_init(&m.hdr, WSYNC_MSG_ATTACH, ++seq);
		m.attach.m.model_id = id;
		if (raw_send(fd, &m, NULL, 0) || raw_reply(fd, &m) < 0)
			return 6;
	}
}

/* A process that only burns a core, until killed. */
static int spinner_main(void *argp)
{
	_Atomic int *ready = argp;
	volatile uint64_t x = 0;

	atomic_store(ready, 1);
	for (;;)
		x++;
	return 0;
}

/* p50 and p99 (us) of n begin+commit round trips. */
static int round_trips(wsync_pub *p, int n, double *p50, double *p99)
{
	double *t = malloc((size_t)n * sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		wsync_slab slab;
		int64_t t0 = mono_ns();
		int err = wsync_pub_begin(p, 2 * NS_PER_S, &slab);

		if (!err)
			err = wsync_pub_commit(p, (uint64_t)i + 1, NULL);
		if (err) {
			free(t);
			return err;
		}
		t[i] = (double)(mono_ns() - t0) / 1e3;
	}
	*p50 = stat_median(t, (size_t)n);
	*p99 = stat_pct(t, (size_t)n, 0.99);
	free(t);
	return 0;
}

int bench_hostile(struct bench *b)
{
	int n = b->quick ? 1000 : 4000, err;
	double idle50, idle99, spin50, spin99, hot50, hot99;
	_Atomic int *ready = shared_alloc(sizeof(*ready));
	struct hostile_arg arg = { b, ready };
	struct bench_row *r;
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	pid_t kid = -1;
	char why[256];

	if (!ready)
		return -1;
	err = wsync_connect(b->endpoint, "bench-honest", &c);
	if (!err)
		err = model_open(c, HOSTILE_MODEL, 4096, 1, 4, &p);
	if (!err)
		err = round_trips(p, n / 4, &idle50, &idle99);          /* warm */
	if (!err)
		err = round_trips(p, n, &idle50, &idle99);
	if (err) {
		wsync_error_text(why, sizeof why, "the honest trainer", err);
		row_skip("hostile", "commit round trip beside a hostile session", "%s", why);
		goto out;
	}
	kid = child_spawn(spinner_main, (void *)ready);
	if (kid < 0 || wait_counter(ready, 1, 10 * NS_PER_S, &kid, 1) ||
	    round_trips(p, n, &spin50, &spin99)) {
		row_skip("hostile", "commit round trip beside a hostile session",
		         "the reference beside a spinning process could not be taken");
		err = -1;
		goto out;
	}
	kill(kid, SIGKILL);
	child_reap(kid, 5000);
	atomic_store(ready, 0);
	kid = child_spawn(hostile_main, &arg);
	if (kid < 0 || wait_counter(ready, 1, 10 * NS_PER_S, &kid, 1)) {
		row_skip("hostile", "commit round trip beside a hostile session",
		         "the hostile session did not get going");
		err = -1;
		goto out;
	}
	err = round_trips(p, n, &hot50, &hot99);
	if (err) {
		wsync_error_text(why, sizeof why, "the honest trainer beside it", err);
		row_skip("hostile", "commit round trip beside a hostile session", "%s", why);
		goto out;
	}
	r = row_add("hostile", "commit round trip, idle broker, a process spinning beside, p50",
	            "us", spin50);
	row_ref(r, "idle broker", idle50);
	/* invariant 10's target is against the idle broker of this run; the
	 * spinner's row says what any busy neighbour costs, for context */
	r = row_add("hostile", "commit round trip, another session holding every budget, p50",
	            "us", hot50);
	row_ref(r, "idle broker", idle50);
	row_target_ratio(r, 2.0);
	r = row_add("hostile", "commit round trip, another session holding every budget, p99",
	            "us", hot99);
	row_ref(r, "idle broker", idle99);
out:
	if (kid > 0) {
		kill(kid, SIGKILL);
		child_reap(kid, 5000);
	}
	wsync_pub_close(p);
	wsync_close(c);
	shared_free((void *)ready, sizeof(*ready));
	return err ? -1 : 0;
}
