/*
 * foreign_takeover — a publisher of another uid is never handed writable
 * memory a collector may be reading, whoever wrote it last
 * (docs/INVARIANTS.md section 11).
 *
 * As root, with --group: the trainer (the broker's uid) publishes steps 1
 * and 2 and closes its publisher; a collector holds a view of each. Then a
 * process of uid 65534 opens the model as publisher (allowed: same layout,
 * nobody publishes it) with the raw protocol and writes garbage through
 * every slab fd it is handed: at PUB_OPEN (none, the slots hold versions)
 * and with its grant (a free slot of the new memory the model moved to).
 * The held views keep their bytes and wsync_view_verify stays 0; a new
 * view of the latest carries step 2's bytes. It then forges the slot
 * metadata (checksum, step) and `latest` of the page it was handed: the
 * held views still verify (their page is the one it never had). Once it
 * left, the trainer publishes step 3, read verified. Before the fix the
 * broker handed it the trainer's page and slabs in place and every held
 * view failed (-EBADMSG). Needs root (to become another uid); skipped
 * otherwise.
 */
#include "tests/lib/harness.h"
#include "tests/lib/raw.h"

#include <grp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#define MODEL "foreign.policy"
#define SLAB_BYTES 36864

static struct broker B;
static uid_t other_uid;
static gid_t other_gid;
static struct chan up, down;

static void scribble(void *slab, uint64_t salt)
{
	uint64_t *w = slab;

	for (size_t i = 0; i < SLAB_BYTES / 8; i++)
		w[i] = 0xeeeeeeeeeeeeeeeeull ^ salt ^ i;
}

static void *map_rw(int fd, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	TEST_ASSERT(p != MAP_FAILED);
	return p;
}

static int intruder(void *arg)
{
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS, handed;
	struct wsync_model_page *page;
	wsync_tensor_desc d[2];
	union wsync_msg_any m;
	struct raw r;
	uint32_t id;

	(void)arg;
	TEST_ASSERT(setgroups(0, NULL) == 0);
	TEST_ASSERT(setgid(other_gid) == 0);
	TEST_ASSERT(setuid(other_uid) == 0);
	prctl(PR_SET_DUMPABLE, 1);
	harness_model_2t(d);
	raw_hello(&r, &B, "intruder");
	TEST_OK(raw_pub_open_fds(&r, MODEL, d, 2, 4, NULL, &id, fds, &nfds));
	page = map_rw(fds[0], WSYNC_PAGE);
	handed = nfds - 1;
	for (int k = 1; k < nfds; k++)
		scribble(map_rw(fds[k], SLAB_BYTES), (uint64_t)k);
	raw_init(&r, &m, WSYNC_MSG_BEGIN);
	m.begin.m.model_id = id;
	nfds = WSYNC_MSG_MAX_FDS;
	raw_request(r.fd, &m, sizeof m.begin, NULL, 0, WSYNC_MSG_GRANT, fds, &nfds);
	for (int k = 0; k < nfds; k++)
		scribble(map_rw(fds[k], SLAB_BYTES), 100 + (uint64_t)k);
	harness_log("intruder: %d slab fds with PUB_OPEN_OK, %d with its grant of slot %u",
	            handed, nfds, m.grant.slot);
	chan_send(&up, (uint64_t)handed);
	chan_recv(&down, getppid());
	/* the page it was handed: every slot's metadata and `latest` */
	for (uint32_t k = 0; k < WSYNC_MAX_SLOTS; k++) {
		atomic_store(&page->slots[k].checksum, 0x1234567812345678ull ^ k);
		atomic_store(&page->slots[k].step, 666);
	}
	atomic_store(&page->latest, wsync_latest_pack(1u << 20, 1));
	chan_send(&up, 1);
	chan_recv(&down, getppid());
	raw_close(&r);
	return 0;
}

static void check_view(const wsync_view *v, uint64_t step, const char *what)
{
	int err;

	TEST_ASSERT_MSG(v->step == step, "%s: step %llu, expected %llu", what,
	                (unsigned long long)v->step, (unsigned long long)step);
	TEST_ASSERT_MSG(harness_verify_view(v) == 0, "%s: the bytes of step %llu changed", what,
	                (unsigned long long)step);
	err = wsync_view_verify(v);
	TEST_ASSERT_MSG(err == 0, "%s: wsync_view_verify %d: %s", what, err, wsync_errmsg());
}

int main(void)
{
	wsync_client *c, *cc;
	wsync_pub *p;
	wsync_sub *s;
	wsync_view v1, v2, v;
	char log[65536], moved[96];
	uint64_t handed;
	pid_t bad;
	int skip = harness_other_user("publish a model of the broker's uid as another uid",
	                              &other_uid, &other_gid);

	if (skip)
		return skip;
	TEST_ASSERT(harness_broker_start(&B, HARNESS_OTHER_USERS, NULL) == 0);
	TEST_OK(harness_connect(&B, "trainer", &c));
	TEST_OK(harness_connect(&B, "collector", &cc));
	TEST_OK(harness_pub_open_2t(c, MODEL, 4, &p));
	TEST_OK(wsync_sub_open(cc, MODEL, &s));
	TEST_OK(harness_publish(p, 1, HARNESS_S, NULL));
	TEST_OK(wsync_sub_acquire(s, &v1));
	TEST_OK(harness_publish(p, 2, HARNESS_S, NULL));
	TEST_OK(wsync_sub_acquire(s, &v2));
	check_view(&v1, 1, "held view of step 1");
	check_view(&v2, 2, "held view of step 2");
	wsync_pub_close(p);                      /* the trainer restarts */

	chan_open(&up);
	chan_open(&down);
	bad = harness_fork(intruder, NULL);
	handed = chan_recv(&up, bad);
	check_view(&v1, 1, "held view of step 1 after the other uid's writes");
	check_view(&v2, 2, "held view of step 2 after the other uid's writes");
	TEST_OK(wsync_sub_acquire(s, &v));
	check_view(&v, 2, "new view of the latest after the other uid's writes");
	wsync_sub_release(s, &v);
	TEST_EQ_U64(handed, 0);                  /* no slab with PUB_OPEN_OK */
	chan_send(&down, 1);
	TEST_EQ_U64(chan_recv(&up, bad), 1);
	/* its page is not the one the held views read their checksums from */
	check_view(&v1, 1, "held view of step 1 after the other uid forged its page");
	check_view(&v2, 2, "held view of step 2 after the other uid forged its page");
	/* a new view of the latest: its bytes (its checksum word is on the
	 * page that publisher writes, docs/RELIABILITY.md) */
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_ASSERT_MSG(v.step == 2 || v.step == 666, "new view: step %llu",
	                (unsigned long long)v.step);
	TEST_ASSERT_MSG(harness_verify(v.base, v.bytes, 2) == 0,
	                "new view of the latest: the bytes of step 2 changed");
	wsync_sub_release(s, &v);
	chan_send(&down, 1);
	harness_expect_exit0(bad, "the other uid's publisher");

	/* the trainer goes on */
	TEST_OK(harness_pub_open_2t(c, MODEL, 4, &p));
	TEST_OK(harness_publish(p, 3, 5 * HARNESS_S, NULL));
	TEST_OK(wsync_sub_wait(s, v2.version, 5 * HARNESS_S, &v));
	check_view(&v, 3, "the trainer's next version");
	wsync_sub_release(s, &v);
	check_view(&v1, 1, "held view of step 1 at the end");
	check_view(&v2, 2, "held view of step 2 at the end");
	wsync_sub_release(s, &v1);
	wsync_sub_release(s, &v2);
	snprintf(moved, sizeof moved, "a publisher of uid %u follows one of uid %u",
	         (unsigned)other_uid, (unsigned)geteuid());
	TEST_CONTAINS(harness_read_file(B.log, log, sizeof log), moved);
	wsync_pub_close(p);
	wsync_sub_close(s);
	wsync_close(cc);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
