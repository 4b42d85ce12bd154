/*
 * fuzz_session — the broker's session state machine, through its real
 * socket: wsyncd runs in this process (broker_start with a temporary run
 * directory and a unique name, loop_run in a thread), and each input is one
 * client connection that sends a sequence of messages, with or without fds,
 * and pokes the shared memory the broker gave it. ASan and UBSan watch the
 * broker thread; the harness itself asserts that every request is answered
 * (a reply or a closed connection, never silence) and that the broker's
 * replies are well-formed.
 *
 * Input: a sequence of ops, each starting with a byte A:
 *   A % 4 == 0  raw datagram: length byte L (length 3*L, so longer than any
 *               message is possible), fd byte F, then the bytes as sent;
 *   A % 4 == 1  structured request: type byte, fd byte F, then the body; the
 *               header is made valid, and by F's bits the model id, the
 *               grant (slot, version), the reserved fields, the names (one
 *               of four models) and a PUB_OPEN's layout fields are repaired,
 *               so the handlers behind validation are reached;
 *   A % 4 == 2  act as the publisher: store `latest` = the last grant (or a
 *               value from the input) in the model page the broker gave,
 *               as wsync_pub_commit does before COMMIT;
 *   A % 4 == 3  write a hazard pin (8 bytes from the input) into the session
 *               page, which the broker scans before every grant.
 *   A >= 0xC0   (A - 0xC0) % 3, or 3 for A >= 0xFC: 0 a burst (type byte, count byte K, fd byte
 *               F, body): K repaired requests of one type sent without
 *               reading, then their answers (or a closed connection);
 *               1 PUB_OPEN as a rank of a group of 2..4 (6 layout bytes, size,
 *               rank, model and deadline), one session may try several
 *               ranks; 2 a hang-up: up to 7 WAIT_READERS with no deadline,
 *               then the connection closes unread and a new one says HELLO
 *               (requests that outlive their session); 3 fds in flight
 *               (model byte, 6 layout bytes): on three sessions of their
 *               own, ATTACH of a model, DELETE of it and PUB_OPEN of
 *               another (new memfds) sent back to back, so they often land
 *               in one batch; an ATTACH_OK must carry the inodes SUB_OPEN_OK
 *               gave for the model, never the new one's.
 * F & 7 chooses the fds attached: 1 the layout memfd of the current model
 * (a valid one), 2 /dev/null, 3 an eventfd, 4 a memfd of the wrong size,
 * 5 two fds, 6 SEND_FDS_MAX fds (more than a message may carry: the broker
 * sees MSG_CTRUNC), else none. A raw datagram may be zero bytes long, so
 * fds also arrive with what looks like the end of the connection.
 *
 * After each input the harness waits until the broker has let go of the
 * connection (no session left) and then requires this process's open
 * descriptors (/proc/self/fd: the broker's and the harness's) to be back
 * at their baseline, less what the model table legitimately holds: a
 * descriptor the broker kept is a finding, like a crash.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "broker/broker.h"
#include "broker/config.h"
#include "broker/log.h"
#include "broker/loop.h"
#include "broker/model.h"
#include "shm/layout.h"
#include "shm/proto.h"
#include "shm/tensor_layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define REPLY_MS  10000          /* silence this long is a finding */
#define SETTLE_MS 10000          /* a session not gone after this is a finding */
#define MAX_OPS   48
#define SEND_FDS_MAX (WSYNC_MSG_MAX_FDS + 5)

static void settle(void);

static struct broker B;
static pthread_t broker_thread;
static pid_t broker_tid;
static char rundir[64];

struct client {
	int      fd;
	uint32_t seq;
	struct wsync_session_page *page;     /* rw, from HELLO_OK */
	struct wsync_model_page *mpage;      /* rw, from PUB_OPEN_OK */
	uint32_t model_id;
	uint32_t grant_slot;
	uint64_t grant_version;
	/* the layout of the current PUB_OPEN */
	wsync_tensor_desc desc[3];
	uint32_t n_desc;
	uint64_t bytes, hash;
};

static struct config CFG;
static _Atomic int broker_ready;

/* The broker thread starts the broker itself: its ring accepts submissions
 * from the thread that created it only (IORING_SETUP_SINGLE_ISSUER). */
static void *broker_main(void *arg)
{
	sigset_t set;

	(void)arg;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	broker_tid = (pid_t)syscall(SYS_gettid);
	if (broker_start(&B, &CFG))
		abort();
	atomic_store(&broker_ready, 1);
	if (loop_run(B.loop))
		abort();
	broker_stop(&B);
	return NULL;
}

static void broker_down(void)
{
	char cmd[128];

	if (!broker_tid)
		return;
	syscall(SYS_tgkill, getpid(), broker_tid, SIGTERM);
	pthread_join(broker_thread, NULL);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", rundir);
	if (system(cmd) != 0)
		fprintf(stderr, "fuzz_session: could not remove %s\n", rundir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char name[32], *av[16];
	struct config cfg;
	char err[512];
	int ac = 0;

	(void)argc;
	(void)argv;
	snprintf(rundir, sizeof(rundir), "/tmp/wsync-fuzz-XXXXXX");
	if (!mkdtemp(rundir))
		abort();
	setenv("XDG_RUNTIME_DIR", rundir, 1);
	snprintf(name, sizeof(name), "fz%d", (int)getpid());
	av[ac++] = "wsyncd";
	av[ac++] = "--name";
	av[ac++] = name;
	av[ac++] = "--shm-limit";
	av[ac++] = "64M";
	av[ac++] = "--log-level";
	av[ac++] = getenv("FUZZ_BROKER_LOG") ? "debug" : "error";
	av[ac] = NULL;
	if (config_parse(&cfg, ac, av, err, sizeof(err)) != CONFIG_RUN ||
	    config_finish(&cfg, err, sizeof(err))) {
		fprintf(stderr, "fuzz_session: %s\n", err);
		abort();
	}
	log_set_level(cfg.log_level);
	signal(SIGPIPE, SIG_IGN);
	CFG = cfg;
	if (pthread_create(&broker_thread, NULL, broker_main, NULL))
		abort();
	while (!atomic_load(&broker_ready))
		usleep(1000);
	atexit(broker_down);
	return 0;
}

static int client_connect(void)
{
	struct sockaddr_un a;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		abort();
	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", B.cfg.socket_path);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		fprintf(stderr, "fuzz_session: connect: %s\n", strerror(errno));
		abort();
	}
	return fd;
}

/* A valid layout memfd of the client's current descriptors. */
static int layout_memfd(const struct client *c, int wrong_size)
{
	size_t len = c->n_desc * sizeof(wsync_tensor_desc);
	int fd = memfd_create("fuzz-layout", MFD_CLOEXEC);

	if (fd < 0)
		abort();
	if (wrong_size)
		len = len / 2 + 1;
	if (write(fd, c->desc, len) != (ssize_t)len)
		abort();
	return fd;
}

static int make_fds(const struct client *c, uint8_t f, int *fds)
{
	switch (f & 7) {
	case 0:
		return 0;
	case 1:
		fds[0] = layout_memfd(c, 0);
		return 1;
	case 2:
		fds[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		return fds[0] < 0 ? 0 : 1;
	case 3:
		fds[0] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		return fds[0] < 0 ? 0 : 1;
	case 4:
		fds[0] = layout_memfd(c, 1);
		return 1;
	case 5:
		fds[0] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		fds[1] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		return 2;
	case 6:
		for (int i = 0; i < SEND_FDS_MAX; i++)
			fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		return SEND_FDS_MAX;
	default:
		return 0;
	}
}

/* 0 sent, -1 the connection is gone. */
static int send_msg(struct client *c, const void *buf, size_t len, const int *fds, int n)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * SEND_FDS_MAX)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { (void *)buf, len };
	struct msghdr mh;
	ssize_t r;

	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (n) {
		struct cmsghdr *cm;

		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)n);
	}
	r = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return r == (ssize_t)len ? 0 : -1;
}

static void *map_fd(int fd, int writable)
{
	void *p = mmap(NULL, WSYNC_PAGE, writable ? PROT_READ | PROT_WRITE : PROT_READ,
	               MAP_SHARED, fd, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* Waits for one reply to a request numbered lo..hi (lo 0: any): 0, or -1
 * when the broker closed the connection. Silence is a broker bug. */
static int recv_reply_range(struct client *c, uint32_t lo, uint32_t hi)
{
	uint32_t seq = lo;
	union {
		char buf[CMSG_SPACE(sizeof(int) * WSYNC_MSG_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	union wsync_msg_any m;
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	struct iovec iov = { &m, sizeof(m) };
	struct msghdr mh;
	int fds[WSYNC_MSG_MAX_FDS], n = 0, r;
	ssize_t len;
	char why[128];

	do
		r = poll(&p, 1, REPLY_MS);
	while (r < 0 && errno == EINTR);
	if (r == 0) {
		fprintf(stderr, "fuzz_session: no reply to request %u within %d ms\n", seq,
		        REPLY_MS);
		abort();
	}
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = ctl.buf;
	mh.msg_controllen = sizeof(ctl.buf);
	len = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (len <= 0)
		return -1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
				memcpy(&fds[n++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
	/* The broker's replies are well-formed and answer this request. */
	if (wsync_msg_validate(&m, (size_t)len, why, sizeof(why)) != 0) {
		fprintf(stderr, "fuzz_session: malformed reply: %s\n", why);
		abort();
	}
	if (lo && (m.hdr.seq < lo || m.hdr.seq > hi)) {
		fprintf(stderr, "fuzz_session: reply seq %u to requests %u..%u\n", m.hdr.seq,
		        lo, hi);
		abort();
	}
	switch (m.hdr.type) {
	case WSYNC_MSG_HELLO_OK:
		if (n == 2 && !c->page)
			c->page = map_fd(fds[1], 1);
		break;
	case WSYNC_MSG_PUB_OPEN_OK:
		if (n == 1) {
			if (c->mpage)
				munmap(c->mpage, WSYNC_PAGE);
			c->mpage = map_fd(fds[0], 1);
		}
		c->model_id = m.pub_open_ok.model_id;
		break;
	case WSYNC_MSG_SUB_OPEN_OK:
		c->model_id = m.sub_open_ok.model_id;
		break;
	case WSYNC_MSG_GRANT:
		c->grant_slot = m.grant.slot;
		c->grant_version = m.grant.version;
		break;
	case WSYNC_MSG_COMMIT_OK:
		if (m.commit_ok.flags & WSYNC_NEXT_GRANTED) {
			c->grant_slot = m.commit_ok.next_slot;
			c->grant_version = m.commit_ok.next_version;
		}
		break;
	case WSYNC_MSG_ERROR:
		if (!memchr(m.error.msg, 0, sizeof(m.error.msg)) || m.error.err >= 0)
			abort();
		break;
	default:
		break;
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return 0;
}

static int recv_reply(struct client *c, uint32_t seq)
{
	return recv_reply_range(c, seq, seq);
}

static void make_layout(struct client *c, const uint8_t *b)
{
	wsync_tensor_desc in[3];
	char why[128];

	memset(in, 0, sizeof(in));
	c->n_desc = 1 + b[0] % 3;
	for (uint32_t i = 0; i < c->n_desc; i++) {
		snprintf(in[i].name, sizeof(in[i].name), "t%u", i);
		in[i].dtype = 1 + b[1 + i] % WSYNC_F8_E5M2;
		in[i].ndim = 1 + b[1 + i] % 2;
		in[i].shape[0] = 1 + b[2 + i] % 64;
		if (in[i].ndim == 2)
			in[i].shape[1] = 1 + b[3 + i] % 32;
	}
	if (wsync_layout_compute(in, c->n_desc, c->desc, &c->bytes, why, sizeof(why)))
		abort();
	c->hash = wsync_layout_hash(c->desc, c->n_desc);
}

static const char *const model_names[4] = { "fz.a", "fz.b", "fz/c", "fz:d" };

static struct wsync_model_ref *model_ref(union wsync_msg_any *m, uint32_t type)
{
	switch (type) {
	case WSYNC_MSG_ATTACH: return &m->attach.m;
	case WSYNC_MSG_BEGIN:  return &m->begin.m;
	case WSYNC_MSG_COMMIT: return &m->commit.m;
	case WSYNC_MSG_ABORT:  return &m->abort.m;
	case WSYNC_MSG_NOTIFY: return &m->notify.m;
	case WSYNC_MSG_CLOSE:  return &m->close.m;
	case WSYNC_MSG_GPU_ATTACH: return &m->gpu_attach.m;
	default:               return NULL;
	}
}

/* A request with a valid header; F's bits decide what else is repaired. */
static void structured(struct client *c, union wsync_msg_any *m, uint32_t type, uint8_t f,
                       const uint8_t *body, size_t body_len)
{
	size_t len = wsync_msg_size(type);
	struct wsync_model_ref *ref;

	memset(m, 0, sizeof(*m));
	if (len > sizeof(m->hdr))
		memcpy((char *)m + sizeof(m->hdr), body,
		       body_len < len - sizeof(m->hdr) ? body_len : len - sizeof(m->hdr));
	wsync_msg_init(&m->hdr, type, ++c->seq);
	ref = model_ref(m, type);
	if (ref && (f & 0x08)) {
		ref->model_id = c->model_id;
		ref->reserved = 0;
	}
	if (!(f & 0x40))
		return;
	switch (type) {
	case WSYNC_MSG_HELLO:
		m->hello.layout_version = (f & 0x80) ? m->hello.layout_version : WSYNC_LAYOUT_VERSION;
		snprintf(m->hello.name, sizeof(m->hello.name), "fuzz");
		break;
	case WSYNC_MSG_PUB_OPEN:
		make_layout(c, body_len >= 8 ? body : (const uint8_t *)"\0\0\0\0\0\0\0\0");
		snprintf(m->pub_open.model, sizeof(m->pub_open.model), "%s",
		         model_names[(f >> 4) & 3]);
		m->pub_open.n_tensors = c->n_desc;
		m->pub_open.slots = (f & 0x80) ? m->pub_open.slots % 34 : 0;
		m->pub_open.bytes = c->bytes;
		m->pub_open.layout_hash = c->hash;
		/* sometimes a replacing open (a model deleted under others) */
		m->pub_open.flags = (f & 0x40) ? WSYNC_OPEN_REPLACE : 0;
		m->pub_open.group_size = 0;
		m->pub_open.rank = 0;
		m->pub_open.n_parts = 0;
		m->pub_open.group_timeout_ms = 0;
		/* sometimes a device model (this broker has no GPU: -ENODEV) */
		m->pub_open.n_devices = f & 0x01;
		m->pub_open.dev_flags = 0;
		memset(m->pub_open.devices + m->pub_open.n_devices, 0,
		       sizeof(m->pub_open.devices) -
		       m->pub_open.n_devices * sizeof(m->pub_open.devices[0]));
		break;
	case WSYNC_MSG_SUB_OPEN:
		snprintf(m->sub_open.model, sizeof(m->sub_open.model), "%s",
		         model_names[(f >> 4) & 3]);
		break;
	case WSYNC_MSG_COMMIT:
		m->commit.slot = c->grant_slot;
		m->commit.version = c->grant_version;
		m->commit.reserved = 0;
		break;
	case WSYNC_MSG_ABORT:
		m->abort.slot = c->grant_slot;
		m->abort.version = c->grant_version;
		m->abort.reserved = 0;
		break;
	case WSYNC_MSG_CLOSE:
		m->close.what = 1 + (f & 0x80 ? 1 : 0);
		m->close.reserved = 0;
		break;
	case WSYNC_MSG_WAIT_READERS:
		/* short enough to be answered before the harness calls it silence */
		m->wait_readers.timeout_ms %= 50;
		m->wait_readers.m.reserved = 0;
		break;
	default:
		break;
	}
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		abort();
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Descriptors the broker keeps for its models (model.h): a page and its
 * read-only twin; once READY a layout and two per slab. */
static int model_fds(void)
{
	int n = 0;

	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		const struct model *m = __atomic_load_n(&B.models[i], __ATOMIC_ACQUIRE);

		if (!m)
			continue;
		n += 2;
		if (__atomic_load_n(&m->state, __ATOMIC_ACQUIRE) == WSYNC_MODEL_READY)
			n += 1 + 2 * (int)m->books.n_slots;
	}
	return n;
}

static int fds_baseline = -1;         /* set before each input */

/* What is open, for the report of a finding. */
static void dump_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	while (d && (e = readdir(d))) {
		char path[300], link[256];
		ssize_t k;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		k = readlink(path, link, sizeof(link) - 1);
		link[k > 0 ? k : 0] = '\0';
		fprintf(stderr, "  fd %s -> %s\n", e->d_name, link);
	}
	if (d)
		closedir(d);
}

/* Waits until the broker has freed every session and holds only its model
 * table's fds beyond the baseline taken before the input (libFuzzer opens
 * fds of its own between inputs); aborts (a finding) otherwise. */
static void settle(void)
{
	int left = -1;

	for (int waited = 0; waited < SETTLE_MS; waited += 2) {
		if (!__atomic_load_n(&B.all_sessions, __ATOMIC_ACQUIRE)) {
			left = count_fds() - model_fds();
			if (fds_baseline < 0 || left <= fds_baseline) {
				fds_baseline = left;
				return;
			}
		}
		usleep(2000);
	}
	if (__atomic_load_n(&B.all_sessions, __ATOMIC_ACQUIRE))
		fprintf(stderr, "fuzz_session: a session is still alive %d ms after its client "
		        "closed\n", SETTLE_MS);
	else
		fprintf(stderr, "fuzz_session: %d descriptors open beyond the model table, "
		        "%d at the baseline: the broker leaked %d\n", left, fds_baseline,
		        left - fds_baseline);
	dump_fds();
	abort();
}

/* A burst: K requests of one type sent without reading a reply, then their
 * answers read (or the connection found closed): -1 once it is gone. */
static int burst(struct client *c, const uint8_t *data, size_t size, size_t *at)
{
	union wsync_msg_any m;
	uint32_t type, first, k, sent = 0;
	size_t body;
	uint8_t f;

	if (size - *at < 3)
		return -1;
	type = 1 + data[*at] % (WSYNC_MSG_TYPE_END - 1);
	k = 1 + data[*at + 1] % 64;
	f = data[*at + 2] | 0x40;         /* repaired: past validation */
	*at += 3;
	body = wsync_msg_size(type) - sizeof(m.hdr);
	if (body > size - *at)
		body = size - *at;
	first = c->seq + 1;
	for (uint32_t i = 0; i < k; i++) {
		int fds[SEND_FDS_MAX], n;

		structured(c, &m, type, f, data + *at, body);
		n = make_fds(c, f & ~0x40, fds);
		if (send_msg(c, &m, wsync_msg_size(type), fds, n))
			break;
		sent++;
	}
	*at += body;
	for (uint32_t i = 0; i < sent; i++)
		if (recv_reply_range(c, first, first + sent - 1))
			return -1;
	return sent == k ? 0 : -1;
}

/* PUB_OPEN as a rank of a group of 2..4, its part an even share of tensor
 * 0 along dim 0 (or the whole tensor when it does not divide). */
static int group_open(struct client *c, const uint8_t *data, size_t size, size_t *at)
{
	union wsync_msg_any m;
	wsync_shard part;
	uint32_t g, rank, q;
	int fd;

	if (size - *at < 9)
		return -1;
	make_layout(c, data + *at);       /* reads 6 bytes */
	g = 2 + data[*at + 6] % 3;
	rank = data[*at + 7] % g;
	memset(&m, 0, sizeof(m));
	wsync_msg_init(&m.hdr, WSYNC_MSG_PUB_OPEN, ++c->seq);
	snprintf(m.pub_open.model, sizeof(m.pub_open.model), "%s", model_names[data[*at + 8] & 3]);
	m.pub_open.group_timeout_ms = (data[*at + 8] >> 2) % 4 * 50;
	*at += 9;
	q = (uint32_t)(c->desc[0].shape[0] / g);
	part.tensor = 0;
	part.dim = q ? 0 : WSYNC_SHARD_WHOLE;
	part.start = q ? rank * q : 0;
	part.end = q ? (rank == g - 1 ? c->desc[0].shape[0] : (rank + 1) * q) : 0;
	m.pub_open.n_tensors = c->n_desc;
	m.pub_open.bytes = c->bytes;
	m.pub_open.layout_hash = c->hash;
	m.pub_open.group_size = (uint16_t)g;
	m.pub_open.rank = (uint16_t)rank;
	m.pub_open.n_parts = 1;
	fd = memfd_create("fuzz-layout", MFD_CLOEXEC);
	if (fd < 0 || write(fd, c->desc, c->n_desc * sizeof(wsync_tensor_desc)) < 0 ||
	    write(fd, &part, sizeof(part)) != sizeof(part))
		abort();
	if (send_msg(c, &m, sizeof(m.pub_open), &fd, 1))
		return -1;
	return recv_reply(c, c->seq);
}

/* Requests that outlive their session: WAIT_READERS with no deadline (and
 * whatever else the input left pending, a group COMMIT among them), then the
 * connection closes unread and a new one says HELLO. -1 if it cannot. */
static int hang_up(struct client *c, const uint8_t *data, size_t size, size_t *at)
{
	union wsync_msg_any m;
	uint32_t k;

	if (size - *at < 1)
		return -1;
	k = data[(*at)++] % 8;
	for (uint32_t i = 0; i < k; i++) {
		memset(&m, 0, sizeof(m));
		wsync_msg_init(&m.hdr, WSYNC_MSG_WAIT_READERS, ++c->seq);
		m.wait_readers.m.model_id = c->model_id;
		m.wait_readers.version = 1;
		m.wait_readers.n_readers = 1000;
		m.wait_readers.timeout_ms = UINT32_MAX;
		if (send_msg(c, &m, sizeof(m.wait_readers), NULL, 0))
			break;
	}
	if (c->page)
		munmap(c->page, WSYNC_PAGE);
	if (c->mpage)
		munmap(c->mpage, WSYNC_PAGE);
	c->page = NULL;
	c->mpage = NULL;
	close(c->fd);
	c->fd = client_connect();
	memset(&m, 0, sizeof(m));
	wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, ++c->seq);
	m.hello.layout_version = WSYNC_LAYOUT_VERSION;
	snprintf(m.hello.name, sizeof(m.hello.name), "fuzz-again");
	if (send_msg(c, &m, sizeof(m.hello), NULL, 0))
		return -1;
	return recv_reply(c, c->seq);
}

/* One reply with its fds kept (up to WSYNC_MSG_MAX_FDS): its length, or
 * -1 when the connection is gone. Silence is a broker bug. */
static ssize_t recv_keep(int fd, union wsync_msg_any *m, int *fds, int *n)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * WSYNC_MSG_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct iovec iov = { m, sizeof(*m) };
	struct msghdr mh;
	ssize_t len;
	int r;

	*n = 0;
	do
		r = poll(&p, 1, REPLY_MS);
	while (r < 0 && errno == EINTR);
	if (r == 0) {
		fprintf(stderr, "fuzz_session: no reply within %d ms (fds in flight)\n", REPLY_MS);
		abort();
	}
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = ctl.buf;
	mh.msg_controllen = sizeof(ctl.buf);
	len = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (len <= 0)
		return -1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
				memcpy(&fds[(*n)++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
	return len;
}

/* A request on s (a side session) and its reply, fds kept: the reply's
 * type, or 0 when the connection is gone. */
static uint32_t side_call(struct client *s, union wsync_msg_any *m, const int *sfds, int ns,
                          int *fds, int *n)
{
	if (send_msg(s, m, m->hdr.len, sfds, ns) || recv_keep(s->fd, m, fds, n) <= 0)
		return 0;
	return m->hdr.type;
}

static void close_all(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

static int pub_open_msg(struct client *s, union wsync_msg_any *m, const char *name)
{
	memset(m, 0, sizeof(*m));
	wsync_msg_init(&m->hdr, WSYNC_MSG_PUB_OPEN, ++s->seq);
	snprintf(m->pub_open.model, sizeof(m->pub_open.model), "%s", name);
	m->pub_open.n_tensors = s->n_desc;
	m->pub_open.bytes = s->bytes;
	m->pub_open.layout_hash = s->hash;
	m->pub_open.flags = WSYNC_OPEN_REPLACE;
	return layout_memfd(s, 0);
}

/*
 * Fds in flight: a reply is queued in one event and sent after the whole
 * batch was handled. ATTACH(X), DELETE(X) and PUB_OPEN(Y) on three sessions
 * sent back to back: when they share a batch, X's fds are closed and Y's
 * new memfds take their numbers before the ATTACH_OK leaves. Its fds must
 * still name X's memory (the inodes SUB_OPEN_OK gave). Setup failures (X
 * published by the main client, names taken) just end the op.
 */
static int fds_in_flight(const uint8_t *data, size_t size, size_t *at)
{
	struct client s[3];
	union wsync_msg_any m;
	int sfds[WSYNC_MSG_MAX_FDS], afds[WSYNC_MSG_MAX_FDS], ns = 0, na = 0, fd;
	struct stat st;
	ino_t want[WSYNC_MSG_MAX_FDS];
	const uint8_t *layout;
	const char *x, *y;
	uint32_t x_id;
	uint8_t f;

	if (size - *at < 7)
		return -1;
	f = data[*at];
	layout = data + *at + 1;
	*at += 7;
	x = model_names[f & 3];
	y = model_names[(f & 3) ^ (1 + ((f >> 2) % 3))];
	memset(s, 0, sizeof(s));
	for (int i = 0; i < 3; i++) {
		make_layout(&s[i], layout);
		s[i].fd = client_connect();
		memset(&m, 0, sizeof(m));
		wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, ++s[i].seq);
		m.hello.layout_version = WSYNC_LAYOUT_VERSION;
		snprintf(m.hello.name, sizeof(m.hello.name), "fuzz-side-%d", i);
		if (side_call(&s[i], &m, NULL, 0, afds, &na) != WSYNC_MSG_HELLO_OK)
			goto out;
		close_all(afds, na);
	}
	/* X: READY, nobody publishing it, s[0] subscribed with its fds */
	fd = pub_open_msg(&s[0], &m, x);
	if (side_call(&s[0], &m, &fd, 1, afds, &na) != WSYNC_MSG_PUB_OPEN_OK)
		goto out_fds;
	close_all(afds, na);
	x_id = m.pub_open_ok.model_id;
	/* a version, so X stays once its publisher left */
	memset(&m, 0, sizeof(m));
	wsync_msg_init(&m.hdr, WSYNC_MSG_BEGIN, ++s[0].seq);
	m.begin.m.model_id = x_id;
	if (side_call(&s[0], &m, NULL, 0, afds, &na) != WSYNC_MSG_GRANT)
		goto out_fds;
	close_all(afds, na);
	{
		uint32_t slot = m.grant.slot;
		uint64_t version = m.grant.version;

		memset(&m, 0, sizeof(m));
		wsync_msg_init(&m.hdr, WSYNC_MSG_COMMIT, ++s[0].seq);
		m.commit.m.model_id = x_id;
		m.commit.slot = slot;
		m.commit.version = version;
		m.commit.step = 1;
	}
	if (side_call(&s[0], &m, NULL, 0, afds, &na) != WSYNC_MSG_COMMIT_OK)
		goto out_fds;
	close_all(afds, na);
	memset(&m, 0, sizeof(m));
	wsync_msg_init(&m.hdr, WSYNC_MSG_CLOSE, ++s[0].seq);
	m.close.m.model_id = x_id;
	m.close.what = WSYNC_CLOSE_PUB;
	if (side_call(&s[0], &m, NULL, 0, afds, &na) != WSYNC_MSG_CLOSE_OK)
		goto out_fds;
	memset(&m, 0, sizeof(m));
	wsync_msg_init(&m.hdr, WSYNC_MSG_SUB_OPEN, ++s[0].seq);
	snprintf(m.sub_open.model, sizeof(m.sub_open.model), "%s", x);
	if (side_call(&s[0], &m, NULL, 0, sfds, &ns) != WSYNC_MSG_SUB_OPEN_OK ||
	    m.sub_open_ok.model_id != x_id)
		goto out_fds;
	for (int i = 0; i < ns; i++) {
		if (fstat(sfds[i], &st))
			abort();
		want[i] = st.st_ino;
	}
	/* the three, back to back */
	memset(&m, 0, sizeof(m));
	wsync_msg_init(&m.hdr, WSYNC_MSG_ATTACH, ++s[0].seq);
	m.attach.m.model_id = x_id;
	if (send_msg(&s[0], &m, sizeof(m.attach), NULL, 0))
		goto out_fds;
	memset(&m, 0, sizeof(m));
	wsync_msg_init(&m.hdr, WSYNC_MSG_DELETE, ++s[1].seq);
	snprintf(m.delete_.model, sizeof(m.delete_.model), "%s", x);
	if (send_msg(&s[1], &m, sizeof(m.delete_), NULL, 0))
		goto out_fds;
	fd = pub_open_msg(&s[2], &m, y);
	if (send_msg(&s[2], &m, sizeof(m.pub_open), &fd, 1))
		goto out_fds;
	if (recv_keep(s[0].fd, &m, afds, &na) <= 0)
		goto out_fds;
	if (m.hdr.type == WSYNC_MSG_ATTACH_OK) {
		if (na != ns) {
			fprintf(stderr, "fuzz_session: ATTACH_OK with %d fds, SUB_OPEN_OK had %d\n",
			        na, ns);
			abort();
		}
		for (int i = 0; i < na; i++) {
			if (fstat(afds[i], &st))
				abort();
			if (st.st_ino != want[i]) {
				fprintf(stderr, "fuzz_session: ATTACH_OK's fd %d names inode %lu, "
				        "the model's is %lu: a number reused before the reply "
				        "left\n", i, (unsigned long)st.st_ino,
				        (unsigned long)want[i]);
				abort();
			}
		}
	}
	close_all(afds, na);
	na = 0;
	for (int i = 1; i < 3; i++)
		if (recv_keep(s[i].fd, &m, afds, &na) > 0)
			close_all(afds, na);
	na = 0;
out_fds:
	close_all(sfds, ns);
	close_all(afds, na);
out:
	for (int i = 0; i < 3; i++)
		if (s[i].fd > 0)
			close(s[i].fd);
	return 0;
}

static int extended_op(struct client *c, uint8_t op, const uint8_t *data, size_t size,
                       size_t *at)
{
	switch (op) {
	case 0:  return burst(c, data, size, at);
	case 1:  return group_open(c, data, size, at);
	case 2:  return hang_up(c, data, size, at);
	default: return fds_in_flight(data, size, at);
	}
}

static uint64_t get_u64(const uint8_t *p, size_t avail)
{
	uint64_t v = 0;

	memcpy(&v, p, avail < 8 ? avail : 8);
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct client c;
	union wsync_msg_any m;
	size_t at = 0;
	int ops = 0;

	fds_baseline = -1;
	settle();                        /* the baseline of this input */
	memset(&c, 0, sizeof(c));
	make_layout(&c, (const uint8_t *)"\0\0\0\0\0\0\0\0");
	c.fd = client_connect();
	while (at < size && ops++ < MAX_OPS) {
		uint8_t a = data[at++];
		int fds[SEND_FDS_MAX], n;

		if (a >= 0xC0) {                           /* bursts, ranks, hang-ups */
			if (extended_op(&c, a >= 0xFC ? 3 : (uint8_t)((a - 0xC0) % 3), data, size,
			                &at))
				break;
		} else if (a % 4 == 0) {                   /* raw datagram */
			size_t len;
			uint8_t f;

			if (size - at < 2)
				break;
			len = (size_t)data[at] * 3;
			f = data[at + 1];
			at += 2;
			if (len > size - at)
				len = size - at;
			n = make_fds(&c, f, fds);
			if (send_msg(&c, data + at, len, fds, n))
				break;
			at += len;
			if (recv_reply(&c, 0))
				break;
		} else if (a % 4 == 1) {                   /* structured request */
			uint32_t type;
			size_t body;
			uint8_t f;

			if (size - at < 2)
				break;
			type = 1 + data[at] % (WSYNC_MSG_TYPE_END - 1);
			f = data[at + 1];
			at += 2;
			body = wsync_msg_size(type) - sizeof(m.hdr);
			if (body > size - at)
				body = size - at;
			structured(&c, &m, type, f, data + at, body);
			at += body;
			n = make_fds(&c, f, fds);
			if (send_msg(&c, &m, wsync_msg_size(type), fds, n))
				break;
			if (recv_reply(&c, c.seq))
				break;
		} else if (a % 4 == 2) {                   /* store latest */
			uint64_t v = get_u64(data + at, size - at);

			at += 8;
			if (c.mpage) {
				uint32_t slot = c.grant_slot % WSYNC_MAX_SLOTS;

				atomic_store(&c.mpage->slots[slot].version, c.grant_version);
				atomic_store(&c.mpage->slots[slot].step, v);
				atomic_store(&c.mpage->latest, (a & 4) ? v :
				             wsync_latest_pack(c.grant_version, c.grant_slot));
				atomic_fetch_add(&c.mpage->seq, 1);
			}
		} else {                                   /* write a pin */
			uint64_t v = get_u64(data + at, size - at);

			at += 8;
			if (c.page) {
				struct wsync_hazard *h = &c.page->hazards[(a >> 2) % WSYNC_MAX_VIEWS];

				atomic_store(&h->pin, (a & 0x80) ? v :
				             wsync_pin_pack(c.model_id, (uint32_t)(v % 40)));
			}
		}
	}
	if (c.page)
		munmap(c.page, WSYNC_PAGE);
	if (c.mpage)
		munmap(c.mpage, WSYNC_PAGE);
	close(c.fd);
	settle();
	return 0;
}
