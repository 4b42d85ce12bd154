/* tests/lib/faults.c — see faults.h. */
#include "tests/lib/faults.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/layout.h"
#include "shm/segment.h"

/* ---- raw protocol ------------------------------------------------------- */

int faults_raw_connect(const struct broker *b)
{
	int fd = harness_raw_connect(b);

	TEST_ASSERT_MSG(fd >= 0, "connect %s: %s", b->sock, strerror(-fd));
	return fd;
}

int faults_raw_send(int fd, const void *buf, size_t len, const int *fds, int nfds)
{
	struct iovec iov = { (void *)buf, len };
	union {
		char buf[CMSG_SPACE(sizeof(int) * 8)];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh;
	ssize_t n;

	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (nfds > 0) {
		struct cmsghdr *cm;

		TEST_ASSERT(nfds <= 8);
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	return n == (ssize_t)len ? 0 : -EMSGSIZE;
}

ssize_t faults_raw_recv(int fd, union wsync_msg_any *m, int *fds, int *nfds, int timeout_ms)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * WSYNC_MSG_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct iovec iov = { m, sizeof(*m) };
	struct msghdr mh;
	int cap = nfds ? *nfds : 0, got = 0, r;
	ssize_t n;

	if (nfds)
		*nfds = 0;
	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return -ETIMEDOUT;
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = ctl.buf;
	mh.msg_controllen = sizeof(ctl.buf);
	n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n < 0)
		return errno == ECONNRESET ? 0 : -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int f;

			memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (got < cap)
				fds[got++] = f;
			else
				close(f);
		}
	}
	if (nfds)
		*nfds = got;
	return n;
}

void faults_raw_hello(int fd, uint32_t seq, const char *name, int *ctl_fd, int *page_fd)
{
	union wsync_msg_any m;
	int fds[2], n = 2;
	ssize_t len;

	memset(&m, 0, sizeof(m));
	wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, seq);
	m.hello.layout_version = WSYNC_LAYOUT_VERSION;
	m.hello.pid = (uint32_t)getpid();
	snprintf(m.hello.name, sizeof(m.hello.name), "%s", name);
	TEST_ASSERT(faults_raw_send(fd, &m, sizeof(m.hello), NULL, 0) == 0);
	len = faults_raw_recv(fd, &m, fds, &n, HARNESS_WAIT_MS);
	TEST_ASSERT_MSG(len == (ssize_t)sizeof(m.hello_ok) && m.hdr.type == WSYNC_MSG_HELLO_OK &&
	                m.hdr.seq == seq && n == 2,
	                "HELLO answered with %zd bytes, type %u, %d fds", len,
	                len > 0 ? m.hdr.type : 0, n);
	if (ctl_fd)
		*ctl_fd = fds[0];
	else
		close(fds[0]);
	if (page_fd)
		*page_fd = fds[1];
	else
		close(fds[1]);
}

int faults_raw_drain_to_eof(int fd, int timeout_ms)
{
	int64_t deadline = harness_mono_ns() + (int64_t)timeout_ms * HARNESS_MS;
	union wsync_msg_any m;
	int count = 0;

	for (;;) {
		int64_t left = (deadline - harness_mono_ns()) / HARNESS_MS;
		ssize_t n;

		if (left <= 0)
			return -1;
		n = faults_raw_recv(fd, &m, NULL, NULL, (int)left);
		if (n == 0)
			return count;
		if (n == -ETIMEDOUT)
			return -1;
		if (n < 0 && n != -EAGAIN && n != -EINTR)
			return count;
		if (n > 0)
			count++;
	}
}

/* ---- the broker is fine ---------------------------------------------------- */

void faults_broker_alive_at(struct broker *b, const char *after, const char *file, int line)
{
	int st;

	TEST_ASSERT_MSG(b->pid > 0, "no broker is running (%s)", after);
	if (waitpid(b->pid, &st, WNOHANG) == b->pid) {
		b->pid = 0;
		harness_broker_dump_log(b, 30);
		harness_fail(file, line, "the broker died (%s) after: %s",
		             harness_status_str(st), after);
	}
}

void faults_normal_client_at(const struct broker *b, const char *what,
                             const char *file, int line)
{
	static int counter;
	wsync_client *pc = NULL, *sc = NULL;
	wsync_pub *p = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	char model[64];
	uint64_t version = 0, step = 1000 + (uint64_t)++counter;
	int rc;

	snprintf(model, sizeof(model), "normal.m%d", counter);
#define NC_OK(expr) do { rc = (expr); if (rc) harness_fail(file, line, \
	"a normal client after %s: %s returned %d (%s): %s", what, #expr, rc, \
	wsync_strerror(rc), wsync_errmsg()); } while (0)
	NC_OK(harness_connect(b, "normal-trainer", &pc));
	NC_OK(harness_pub_open_2t(pc, model, 0, &p));
	NC_OK(harness_publish(p, step, 5 * HARNESS_S, &version));
	NC_OK(harness_connect(b, "normal-collector", &sc));
	NC_OK(wsync_sub_open(sc, model, &s));
	NC_OK(wsync_sub_acquire(s, &v));
	if (v.version != version || v.step != step || harness_verify_view(&v) != 0)
		harness_fail(file, line, "a normal client after %s read v%llu step %llu, "
		             "published v%llu step %llu", what, (unsigned long long)v.version,
		             (unsigned long long)v.step, (unsigned long long)version,
		             (unsigned long long)step);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_close(sc);
	wsync_pub_close(p);
	wsync_close(pc);
#undef NC_OK
}

int faults_log_contains(const struct broker *b, const char *needle)
{
	FILE *f = fopen(b->log, "r");
	char line[1024];
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

/* Maps the instance's control segment read-only: NULL if absent. */
static const struct wsync_ctl_header *ctl_map(const struct broker *b)
{
	char path[PATH_MAX];
	void *p;
	int fd;
	int64_t size;

	if (harness_seg_path(b, "ctl", path, sizeof(path)))
		return NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size = wsync_seg_size(fd);
	if (size < (int64_t)sizeof(struct wsync_ctl_header)) {
		close(fd);
		return NULL;
	}
	p = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

static void ctl_unmap(const struct wsync_ctl_header *h)
{
	munmap((void *)h, h->total_bytes);
}

int faults_ctl_sessions(const struct broker *b)
{
	const struct wsync_ctl_header *h = ctl_map(b);
	const struct wsync_ctl_session *t;
	int n = 0;

	if (!h)
		return -1;
	t = (const void *)((const char *)h + h->sessions_offset);
	for (uint32_t i = 0; i < h->max_sessions; i++)
		if (atomic_load(&((struct wsync_ctl_session *)&t[i])->id))
			n++;
	ctl_unmap(h);
	return n;
}

/* ---- crash soak ------------------------------------------------------------ */

#define SOAK_MAX_T 4
#define SOAK_MAX_C 8
#define SOAK_MAX_R 4
#define SOAK_MAX_M (SOAK_MAX_T + 1)     /* the trainers' models and the group's */

/* What a publisher process (a trainer, a rank of the group) did, across its
 * restarts. */
struct soak_pub_stats {
	_Atomic uint64_t commits, last_version, reconnects, backward;
	_Atomic uint64_t dropped;        /* -ECONNABORTED: another rank died */
	char err[256];
};

struct soak_shared {
	_Atomic int stop;
	struct soak_pub_stats t[SOAK_MAX_T];
	struct {
		_Atomic uint64_t views, reconnects, torn, backward;
		_Atomic uint64_t last[SOAK_MAX_M];
		char err[256];
	} c[SOAK_MAX_C];
	struct soak_pub_stats r[SOAK_MAX_R];
};

static struct soak_shared *S;
static const struct soak_opts *SO;
static struct broker SB;

static uint64_t rng_next(uint64_t *x)
{
	/* xorshift64* */
	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return *x * 0x2545F4914F6CDD1Dull;
}

/* Model i: a trainer's (i < trainers), else the group's. */
static void soak_model(char *buf, size_t len, int i)
{
	if (i < SO->trainers)
		snprintf(buf, len, "soak.m%d", i);
	else
		snprintf(buf, len, "soak.group");
}

static int soak_models(void)
{
	return SO->trainers + (SO->ranks ? 1 : 0);
}

/* Connects, retrying while the broker is down or restarting. */
static wsync_client *soak_connect(const char *name)
{
	wsync_client *c = NULL;

	while (!atomic_load(&S->stop)) {
		if (wsync_connect(SB.sock, name, &c) == 0)
			return c;
		harness_sleep_ms(10);
	}
	return NULL;
}

/* A publisher process: what it publishes and how. */
struct soak_pubber {
	char model[32], name[32];
	struct soak_pub_stats *st;
	uint64_t x;                      /* a trainer's steps */
	wsync_model_opts o;              /* a rank's group and rank */
	wsync_tensor_desc d[3];
	wsync_shard parts[3];
	size_t n_parts;
	int (*open)(struct soak_pubber *me, wsync_client *c, wsync_pub **p);
	/* one version: 0 and its version, or an error */
	int (*publish)(struct soak_pubber *me, wsync_pub *p, uint64_t *v);
};

/* Connects, opens (again while the killed predecessor is not reaped) and
 * publishes until the soak stops; reconnects after any other error. Slots
 * held (-EBUSY), a rank not open yet (-EAGAIN) and a version another rank's
 * death dropped (-ECONNABORTED, counted) only mean the next version. */
static int soak_publisher(struct soak_pubber *me)
{
	struct soak_pub_stats *st = me->st;

	while (!atomic_load(&S->stop)) {
		wsync_client *c = soak_connect(me->name);
		wsync_pub *p = NULL;
		int rc;

		if (!c)
			break;
		while (!atomic_load(&S->stop)) {
			rc = me->open(me, c, &p);
			if (rc != -EBUSY)
				break;
			harness_sleep_ms(5);
		}
		while (p && !atomic_load(&S->stop)) {
			uint64_t v = 0;

			rc = me->publish(me, p, &v);
			if (rc == -ECONNABORTED)
				atomic_fetch_add(&st->dropped, 1);
			if (rc == -EBUSY || rc == -EAGAIN || rc == -ECONNABORTED)
				continue;
			if (rc)
				break;
			if (v <= atomic_load(&st->last_version)) {
				atomic_fetch_add(&st->backward, 1);
				snprintf(st->err, sizeof(st->err), "committed v%llu after v%llu",
				         (unsigned long long)v,
				         (unsigned long long)atomic_load(&st->last_version));
			}
			atomic_store(&st->last_version, v);
			atomic_fetch_add(&st->commits, 1);
			harness_sleep_ms(1);
		}
		wsync_pub_close(p);
		wsync_close(c);
		if (!atomic_load(&S->stop))
			atomic_fetch_add(&st->reconnects, 1);
	}
	return 0;
}

static int trainer_open(struct soak_pubber *me, wsync_client *c, wsync_pub **p)
{
	return harness_pub_open_2t(c, me->model, 0, p);
}

static int trainer_publish(struct soak_pubber *me, wsync_pub *p, uint64_t *v)
{
	return harness_publish(p, rng_next(&me->x) >> 8, 200 * HARNESS_MS, v);
}

static int soak_trainer(void *arg)
{
	int i = (int)(intptr_t)arg;
	struct soak_pubber me = {
		.st = &S->t[i],
		.x = (SO->seed ^ (uint64_t)getpid() * 0x9E3779B97F4A7C15ull) | 1,
		.open = trainer_open,
		.publish = trainer_publish,
	};

	soak_model(me.model, sizeof(me.model), i);
	snprintf(me.name, sizeof(me.name), "soak-trainer-%d", i);
	return soak_publisher(&me);
}

/* The group's model: "rows" cut along dim 0, "cols" along dim 1 (strided
 * parts), "bias" whole by the last rank; 4-byte elements throughout, so
 * harness_fill_parts and harness_verify_tensors apply. */
static void soak_group_layout(wsync_tensor_desc d[3])
{
	uint64_t rows[2] = { (uint64_t)SO->ranks * 16, 33 }, cols[2] = { 8, (uint64_t)SO->ranks * 5 };

	harness_desc(&d[0], "rows", WSYNC_F32, 2, rows);
	harness_desc(&d[1], "cols", WSYNC_F32, 2, cols);
	harness_desc(&d[2], "bias", WSYNC_F32, 1, (const uint64_t[]){ 7 });
}

static size_t soak_rank_parts(uint32_t r, wsync_shard *p)
{
	size_t n = 0;

	p[n++] = (wsync_shard){ 0, 0, r * 16, (r + 1) * 16 };
	p[n++] = (wsync_shard){ 1, 1, r * 5, (r + 1) * 5 };
	if (r == (uint32_t)SO->ranks - 1)
		p[n++] = (wsync_shard){ 2, WSYNC_SHARD_WHOLE, 0, 0 };
	return n;
}

static int rank_open(struct soak_pubber *me, wsync_client *c, wsync_pub **p)
{
	return wsync_pub_open_shard(c, me->model, me->d, 3, &me->o, me->parts, me->n_parts, p);
}

static int rank_publish(struct soak_pubber *me, wsync_pub *p, uint64_t *v)
{
	wsync_slab slab;
	int rc = wsync_pub_begin(p, 200 * HARNESS_MS, &slab);

	if (rc)
		return rc;
	/* Every rank gets the same grant, so its version is a step they all
	 * agree on; collectors check step == version. */
	rc = harness_fill_parts(&slab, me->parts, me->n_parts, slab.priv_version);
	return rc ? rc : wsync_pub_commit(p, slab.priv_version, v);
}

/* One rank of the group, killed wherever it is between open, begin and
 * commit. */
static int soak_rank(void *arg)
{
	uint32_t r = (uint32_t)(intptr_t)arg;
	struct soak_pubber me = {
		.st = &S->r[r],
		.o = { .group_size = (uint32_t)SO->ranks, .rank = r },
		.open = rank_open,
		.publish = rank_publish,
	};

	soak_group_layout(me.d);
	me.n_parts = soak_rank_parts(r, me.parts);
	soak_model(me.model, sizeof(me.model), SO->trainers);
	snprintf(me.name, sizeof(me.name), "soak-rank-%u", r);
	return soak_publisher(&me);
}

/* A trainer's view carries the pattern of its step over the whole slab; the
 * group's, the element pattern of its step in every tensor, and that step
 * is the version the ranks wrote it as: its version, or below it when a
 * restarted broker adopted it under a higher number (a grant above it was
 * outstanding when the old broker died; broker/adopt.c). Parts of two
 * versions in one view fail the element check. */
static int soak_verify(int m, const wsync_view *v)
{
	if (m < SO->trainers)
		return harness_verify_view(v);
	if (v->step > v->version || v->step == 0) {
		harness_log("group v%llu carries step %llu", (unsigned long long)v->version,
		            (unsigned long long)v->step);
		return -1;
	}
	return harness_verify_tensors(v);
}

/* Checks a view completely (never older than after), holds it a little,
 * checks it again. */
static void soak_check(int ci, int m, const wsync_view *v, uint64_t after, uint64_t *x)
{
	if (v->version < after) {
		atomic_fetch_add(&S->c[ci].backward, 1);
		snprintf(S->c[ci].err, sizeof(S->c[ci].err), "model %d: v%llu after v%llu", m,
		         (unsigned long long)v->version, (unsigned long long)after);
	}
	if (soak_verify(m, v) != 0) {
		atomic_fetch_add(&S->c[ci].torn, 1);
		snprintf(S->c[ci].err, sizeof(S->c[ci].err), "model %d: v%llu step %llu torn",
		         m, (unsigned long long)v->version, (unsigned long long)v->step);
		return;
	}
	if (rng_next(x) % 4 == 0) {
		usleep((useconds_t)(rng_next(x) % 2000));
		if (soak_verify(m, v) != 0) {
			atomic_fetch_add(&S->c[ci].torn, 1);
			snprintf(S->c[ci].err, sizeof(S->c[ci].err), "model %d: v%llu changed "
			         "while held", m, (unsigned long long)v->version);
		}
	}
	atomic_fetch_add(&S->c[ci].views, 1);
}

static int soak_collector(void *arg)
{
	int ci = (int)(intptr_t)arg;
	uint64_t x = (SO->seed ^ (uint64_t)getpid() * 0xBF58476D1CE4E5B9ull) | 1;
	char name[32];

	snprintf(name, sizeof(name), "soak-collector-%d", ci);
	while (!atomic_load(&S->stop)) {
		wsync_client *c = soak_connect(name);
		wsync_sub *s[SOAK_MAX_M] = { 0 };
		bool ok = c != NULL;

		for (int m = 0; ok && m < soak_models(); m++) {
			char model[32];

			soak_model(model, sizeof(model), m);
			ok = wsync_sub_open(c, model, &s[m]) == 0;
		}
		/* After (re)connecting, the newest version is never older than
		 * what this collector slot saw before. */
		for (int m = 0; ok && m < soak_models(); m++) {
			wsync_view v;
			int rc = wsync_sub_acquire(s[m], &v);

			if (rc == 0) {
				soak_check(ci, m, &v, atomic_load(&S->c[ci].last[m]), &x);
				atomic_store(&S->c[ci].last[m], v.version);
				wsync_sub_release(s[m], &v);
			} else if (rc != -ENODATA) {
				ok = false;
			}
		}
		while (ok && !atomic_load(&S->stop)) {
			for (int m = 0; ok && m < soak_models(); m++) {
				uint64_t last = atomic_load(&S->c[ci].last[m]);
				wsync_view v;
				int rc = wsync_sub_wait(s[m], last, 50 * HARNESS_MS, &v);

				if (rc == -ETIMEDOUT)
					continue;
				if (rc) {
					ok = false;
					break;
				}
				if (v.version <= last) {
					atomic_fetch_add(&S->c[ci].backward, 1);
					snprintf(S->c[ci].err, sizeof(S->c[ci].err), "model %d: wait "
					         "after v%llu gave v%llu", m, (unsigned long long)last,
					         (unsigned long long)v.version);
				}
				soak_check(ci, m, &v, last, &x);
				atomic_store(&S->c[ci].last[m], v.version);
				wsync_sub_release(s[m], &v);
			}
		}
		for (int m = 0; m < soak_models(); m++)
			wsync_sub_close(s[m]);
		wsync_close(c);
		if (!atomic_load(&S->stop))
			atomic_fetch_add(&S->c[ci].reconnects, 1);
	}
	return 0;
}

/* Waits up to HARNESS_WAIT_MS for cond (an expression) to hold. */
#define SOAK_UNTIL(cond, ...) do { \
	int64_t dl_ = harness_mono_ns() + HARNESS_WAIT_MS * HARNESS_MS; \
	while (!(cond)) { \
		if (harness_mono_ns() > dl_) { \
			soak_dump(); \
			harness_fail(__FILE__, __LINE__, __VA_ARGS__); \
		} \
		harness_sleep_ms(10); \
	} \
} while (0)

static void soak_dump_pub(const char *what, int i, const struct soak_pub_stats *st)
{
	harness_log("%s %d: %llu commits, last v%llu, %llu dropped, %llu reconnects%s%s", what, i,
	            (unsigned long long)st->commits, (unsigned long long)st->last_version,
	            (unsigned long long)st->dropped, (unsigned long long)st->reconnects,
	            st->err[0] ? ": " : "", st->err);
}

static void soak_dump(void)
{
	for (int i = 0; i < SO->trainers; i++)
		soak_dump_pub("trainer", i, &S->t[i]);
	for (int i = 0; i < SO->ranks; i++)
		soak_dump_pub("rank", i, &S->r[i]);
	for (int i = 0; i < SO->collectors; i++)
		harness_log("collector %d: %llu views, %llu reconnects, torn %llu, backward "
		            "%llu%s%s", i, (unsigned long long)S->c[i].views,
		            (unsigned long long)S->c[i].reconnects,
		            (unsigned long long)S->c[i].torn,
		            (unsigned long long)S->c[i].backward, S->c[i].err[0] ? ": " : "",
		            S->c[i].err);
	harness_broker_dump_log(&SB, 20);
}

static uint64_t soak_sum_views(void)
{
	uint64_t n = 0;

	for (int i = 0; i < SO->collectors; i++)
		n += atomic_load(&S->c[i].views);
	return n;
}

/* Publisher k: trainer k, then rank k - trainers of the group. */
static _Atomic uint64_t *soak_commits(int k)
{
	return k < SO->trainers ? &S->t[k].commits : &S->r[k - SO->trainers].commits;
}

static bool soak_all_trainers_past(const uint64_t *snap, uint64_t more)
{
	for (int k = 0; k < SO->trainers + SO->ranks; k++)
		if (atomic_load(soak_commits(k)) < snap[k] + more)
			return false;
	return true;
}

static bool soak_all_collectors_at(const uint64_t *v)
{
	for (int ci = 0; ci < SO->collectors; ci++)
		for (int m = 0; m < soak_models(); m++)
			if (atomic_load(&S->c[ci].last[m]) < v[m])
				return false;
	return true;
}

/* No slot granted, no publisher, no subscriber once every client is gone. */
static void soak_check_books(void)
{
	const struct wsync_ctl_header *h = ctl_map(&SB);
	const struct wsync_ctl_model *t;

	TEST_ASSERT_MSG(h != NULL, "the control segment of '%s' is gone", SB.name);
	t = (const void *)((const char *)h + h->models_offset);
	for (uint32_t i = 0; i < h->max_models; i++) {
		struct wsync_ctl_model *e = (struct wsync_ctl_model *)&t[i];

		if (atomic_load(&e->state) != WSYNC_MODEL_READY)
			continue;
		TEST_ASSERT_MSG(atomic_load(&e->publisher) == 0 &&
		                atomic_load(&e->subscribers) == 0,
		                "model '%s' still has publisher %u and %u subscribers with "
		                "every client gone", e->name, atomic_load(&e->publisher),
		                atomic_load(&e->subscribers));
		for (uint32_t k = 0; k < e->n_slots; k++)
			TEST_ASSERT_MSG(atomic_load(&e->slot_state[k]) != WSYNC_SLOT_GRANTED,
			                "model '%s': slot %u still granted with every client gone",
			                e->name, k);
	}
	ctl_unmap(h);
}

static void soak_kill_rank(pid_t *rp, int i)
{
	kill(rp[i], SIGKILL);
	harness_wait_status(rp[i], HARNESS_WAIT_MS);
	rp[i] = harness_fork(soak_rank, (void *)(intptr_t)i);
}

void soak_run(const struct soak_opts *o, struct soak_result *r)
{
	pid_t tp[SOAK_MAX_T], cp[SOAK_MAX_C], rp[SOAK_MAX_R];
	uint64_t x, snap[SOAK_MAX_T + SOAK_MAX_R], want[SOAK_MAX_M] = { 0 };
	int64_t deadline;

	TEST_ASSERT(o->trainers >= 1 && o->trainers <= SOAK_MAX_T);
	TEST_ASSERT(o->collectors >= 1 && o->collectors <= SOAK_MAX_C);
	TEST_ASSERT(o->ranks == 0 || (o->ranks >= 2 && o->ranks <= SOAK_MAX_R));
	SO = o;
	memset(r, 0, sizeof(*r));
	r->seed = o->seed ? o->seed : (uint64_t)harness_real_ns() ^ (uint64_t)getpid();
	x = r->seed | 1;
	printf("soak: seed %llu (SOAK_SEED=%llu repeats the sequence of kill choices), %d s, %d "
	       "trainers, a group of %d ranks, %d collectors\n", (unsigned long long)r->seed,
	       (unsigned long long)r->seed, o->seconds, o->trainers, o->ranks, o->collectors);
	fflush(stdout);
	S = mmap(NULL, sizeof(*S), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	TEST_ASSERT(S != MAP_FAILED);
	memset(S, 0, sizeof(*S));

	TEST_ASSERT(harness_broker_start(&SB, NULL) == 0);
	for (int i = 0; i < o->trainers; i++)
		tp[i] = harness_fork(soak_trainer, (void *)(intptr_t)i);
	for (int i = 0; i < o->ranks; i++)
		rp[i] = harness_fork(soak_rank, (void *)(intptr_t)i);
	for (int i = 0; i < o->collectors; i++)
		cp[i] = harness_fork(soak_collector, (void *)(intptr_t)i);
	SOAK_UNTIL(soak_sum_views() >= (uint64_t)o->collectors * 2, "the soak never got going");

	deadline = harness_mono_ns() + (int64_t)o->seconds * HARNESS_S;
	while (harness_mono_ns() < deadline) {
		harness_sleep_ms(20 + (int)(rng_next(&x) % 250));
		uint64_t dice = rng_next(&x) % 100;

		if (dice < (uint64_t)o->broker_kills) {
			harness_broker_kill(&SB);
			if (rng_next(&x) % 2)
				harness_sleep_ms((int)(rng_next(&x) % 300));
			TEST_ASSERT_MSG(harness_broker_restart(&SB) == 0,
			                "the broker did not restart after kill %llu",
			                (unsigned long long)r->kills_broker + 1);
			r->kills_broker++;
		} else if (dice < (uint64_t)o->broker_kills + (100 - (uint64_t)o->broker_kills) / 3 &&
		           o->ranks && rng_next(&x) % 2) {
			/* a rank of the group, wherever it is in its begin/commit */
			int i = (int)(rng_next(&x) % (uint64_t)o->ranks);

			soak_kill_rank(rp, i);
			r->kills_rank++;
		} else if (dice < (uint64_t)o->broker_kills + (100 - (uint64_t)o->broker_kills) / 3) {
			int i = (int)(rng_next(&x) % (uint64_t)o->trainers);

			kill(tp[i], SIGKILL);
			harness_wait_status(tp[i], HARNESS_WAIT_MS);
			tp[i] = harness_fork(soak_trainer, (void *)(intptr_t)i);
			r->kills_trainer++;
		} else {
			int i = (int)(rng_next(&x) % (uint64_t)o->collectors);

			kill(cp[i], SIGKILL);
			harness_wait_status(cp[i], HARNESS_WAIT_MS);
			cp[i] = harness_fork(soak_collector, (void *)(intptr_t)i);
			r->kills_collector++;
		}
		faults_broker_alive(&SB, "a kill in the soak");
	}
	if (o->ranks && !r->kills_rank) {      /* every run kills a rank at least once */
		soak_kill_rank(rp, (int)(rng_next(&x) % (uint64_t)o->ranks));
		r->kills_rank++;
	}

	/* Everyone recovers: every trainer commits again, and every collector
	 * then reaches what the trainers committed. */
	for (int k = 0; k < o->trainers + o->ranks; k++)
		snap[k] = atomic_load(soak_commits(k));
	SOAK_UNTIL(soak_all_trainers_past(snap, 3), "a trainer or a rank did not recover");
	for (int i = 0; i < o->trainers; i++)
		want[i] = atomic_load(&S->t[i].last_version);
	for (int i = 0; i < o->ranks; i++)     /* the group's newest complete version */
		if (atomic_load(&S->r[i].last_version) > want[o->trainers])
			want[o->trainers] = atomic_load(&S->r[i].last_version);
	SOAK_UNTIL(soak_all_collectors_at(want), "a collector did not recover");

	atomic_store(&S->stop, 1);
	for (int i = 0; i < o->trainers; i++)
		harness_expect_exit0(tp[i], "a soak trainer");
	for (int i = 0; i < o->ranks; i++)
		harness_expect_exit0(rp[i], "a soak rank");
	for (int i = 0; i < o->collectors; i++)
		harness_expect_exit0(cp[i], "a soak collector");
	SOAK_UNTIL(faults_ctl_sessions(&SB) == 0, "sessions remain after every client left");
	soak_check_books();
	/* The live generation only: its directory, ctl, per model its layout
	 * and slabs (model pages are memfds). */
	int segs = harness_shm_leftovers(&SB, 0);
	TEST_ASSERT_MSG(segs == 2 + soak_models() * (1 + WSYNC_DEFAULT_SLOTS),
	                "%d entries in /dev/shm, expected %d (older generations left?)",
	                segs, 2 + soak_models() * (1 + WSYNC_DEFAULT_SLOTS));
	harness_broker_finish(&SB);

	for (int i = 0; i < o->trainers; i++) {
		r->commits += S->t[i].commits;
		r->backward += S->t[i].backward;
	}
	for (int i = 0; i < o->ranks; i++)
		r->backward += S->r[i].backward;
	if (o->ranks) {
		r->group_versions = S->r[0].commits;
		r->group_dropped = S->r[0].dropped;
	}
	for (int i = 0; i < o->collectors; i++) {
		r->views += S->c[i].views;
		r->reconnects += S->c[i].reconnects;
		r->torn += S->c[i].torn;
		r->backward += S->c[i].backward;
	}
	printf("soak: seed %llu: kills broker %llu trainer %llu rank %llu collector %llu; %llu "
	       "commits, group: %llu versions, %llu dropped (seen by rank 0); %llu views "
	       "verified, %llu collector reconnects; torn %llu, backward %llu\n",
	       (unsigned long long)r->seed, (unsigned long long)r->kills_broker,
	       (unsigned long long)r->kills_trainer, (unsigned long long)r->kills_rank,
	       (unsigned long long)r->kills_collector, (unsigned long long)r->commits,
	       (unsigned long long)r->group_versions, (unsigned long long)r->group_dropped,
	       (unsigned long long)r->views,
	       (unsigned long long)r->reconnects, (unsigned long long)r->torn,
	       (unsigned long long)r->backward);
	fflush(stdout);
	if (r->torn || r->backward)
		soak_dump();
	TEST_ASSERT_MSG(r->torn == 0, "%llu torn views", (unsigned long long)r->torn);
	TEST_ASSERT_MSG(r->backward == 0, "%llu backward versions", (unsigned long long)r->backward);
	munmap(S, sizeof(*S));
}
