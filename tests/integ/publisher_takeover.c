/*
 * publisher_takeover — every write right ends (DESIGN invariant 11). With
 * --group, a process of another uid publishes the model while its trainer
 * restarts, closes its publisher and keeps the rw mappings of the page and
 * the slab it was handed (with its grant: a slab holding a version is never
 * handed to another uid); it then writes garbage through them as fast as
 * it can. Its write right ends when it leaves: the broker gives the model
 * new memory (logged), its latest version copied; the trainer (the broker's
 * uid) opens the model again and publishes on. A collector that
 * subscribed before all of it, and one that subscribes after, read 300
 * versions: every view carries exactly its own step's bytes (before the
 * fix a collector counted tens of thousands of views with foreign words),
 * never a version going down. Needs root (to become another uid); skipped
 * otherwise.
 */
#include "tests/lib/harness.h"
#include "tests/lib/raw.h"

#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define MODEL "takeover.policy"
#define VERSIONS 300

static struct broker B;
static uid_t other_uid;
static gid_t other_gid;
static struct chan up;

/* The other uid: publishes once, leaves, and keeps scribbling through the
 * mappings it kept, until killed. */
static int intruder(void *arg)
{
	wsync_tensor_desc d[2];
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;
	uint64_t *slab[WSYNC_MAX_SLOTS];
	struct wsync_model_page *page;
	union wsync_msg_any m;
	struct raw r;
	uint32_t id;
	size_t words;
	int n;

	(void)arg;
	TEST_ASSERT(setgroups(0, NULL) == 0);
	TEST_ASSERT(setgid(other_gid) == 0);
	TEST_ASSERT(setuid(other_uid) == 0);
	prctl(PR_SET_DUMPABLE, 1);
	harness_model_2t(d);
	raw_hello(&r, &B, "intruder");
	TEST_OK(raw_pub_open_fds(&r, MODEL, d, 2, 4, NULL, &id, fds, &nfds));
	/* the page only: the slots hold the trainer's versions, so each slab
	 * comes with the grant of its (free) slot */
	TEST_ASSERT_MSG(nfds == 1, "PUB_OPEN_OK of a model holding versions carried %d slab "
	                "fds to another uid", nfds - 1);
	page = mmap(NULL, WSYNC_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	TEST_ASSERT(page != MAP_FAILED);
	words = 36864 / 8;
	n = 0;
	/* one honest version of its own: the pattern of step 2 */
	raw_init(&r, &m, WSYNC_MSG_BEGIN);
	m.begin.m.model_id = id;
	nfds = WSYNC_MSG_MAX_FDS;
	raw_request(r.fd, &m, sizeof m.begin, NULL, 0, WSYNC_MSG_GRANT, fds, &nfds);
	TEST_ASSERT((m.grant.flags & WSYNC_GRANT_HAS_FD) && nfds == 1);
	slab[n] = mmap(NULL, words * 8, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	TEST_ASSERT(slab[n] != MAP_FAILED);
	n++;
	{
		uint32_t slot = m.grant.slot;
		uint64_t version = m.grant.version;

		TEST_ASSERT(slot < 4);
		harness_fill(slab[0], words * 8, 2);
		atomic_store(&page->slots[slot].version, version);
		atomic_store(&page->slots[slot].step, 2);
		atomic_store(&page->slots[slot].published_ns, harness_real_ns());
		raw_init(&r, &m, WSYNC_MSG_COMMIT);
		m.commit.m.model_id = id;
		m.commit.slot = slot;
		m.commit.version = version;
		m.commit.step = 2;
		raw_request(r.fd, &m, sizeof m.commit, NULL, 0, WSYNC_MSG_COMMIT_OK, NULL, NULL);
	}
	raw_init(&r, &m, WSYNC_MSG_CLOSE);
	m.close.m.model_id = id;
	m.close.what = WSYNC_CLOSE_PUB;
	raw_request(r.fd, &m, sizeof m.close, NULL, 0, WSYNC_MSG_CLOSE_OK, NULL, NULL);
	chan_send(&up, (uint64_t)n);
	for (uint64_t i = 0;; i++) {
		for (int k = 0; k < n; k++)
			for (size_t w = 0; w < words; w += 61)
				slab[k][w] = 0xbadc0ffee0ddf00dull ^ i;
		atomic_store(&page->latest, wsync_latest_pack(1000000 + i, (uint32_t)(i % 4)));
		atomic_store(&page->slots[i % 4].step, 777);
	}
	return 0;
}

/* Reads until the trainer's last step, checking every view. */
static int collector(void *arg)
{
	const char *name = arg;
	wsync_client *c;
	wsync_sub *s;
	wsync_view v;
	uint64_t seen = 0;
	int views = 0;

	TEST_OK(harness_connect(&B, name, &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	chan_send(&up, 1);
	for (;;) {
		int err = wsync_sub_wait(s, seen, 10 * HARNESS_S, &v);

		TEST_ASSERT_MSG(err == 0, "%s: wait: %d %s", name, err, wsync_errmsg());
		TEST_ASSERT_MSG(v.version > seen, "%s: v%llu after v%llu", name,
		                (unsigned long long)v.version, (unsigned long long)seen);
		TEST_ASSERT_MSG(harness_verify_view(&v) == 0, "%s: v%llu step %llu has foreign "
		                "words", name, (unsigned long long)v.version,
		                (unsigned long long)v.step);
		views++;
		seen = v.version;
		if (v.step == 1000 + VERSIONS) {
			wsync_sub_release(s, &v);
			break;
		}
		wsync_sub_release(s, &v);
	}
	harness_log("%s: %d views, all clean", name, views);
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

int main(void)
{
	char log[65536];
	wsync_client *c;
	wsync_pub *p;
	pid_t bad, early, late;
	int skip = harness_other_user("publish as another uid", &other_uid, &other_gid);

	if (skip)
		return skip;
	TEST_ASSERT(harness_broker_start(&B, HARNESS_OTHER_USERS, NULL) == 0);
	TEST_OK(harness_connect(&B, "trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 4, &p));
	TEST_OK(harness_publish(p, 1, HARNESS_S, NULL));
	chan_open(&up);
	early = harness_fork(collector, "early-collector");
	chan_recv(&up, early);
	/* the trainer restarts; meanwhile the other uid publishes and leaves */
	wsync_pub_close(p);
	bad = harness_fork(intruder, NULL);
	TEST_ASSERT(chan_recv(&up, bad) >= 1);
	harness_sleep_ms(50);
	TEST_OK(harness_pub_open_2t(c, MODEL, 4, &p));
	late = harness_fork(collector, "late-collector");
	chan_recv(&up, late);
	for (uint64_t step = 1001; step <= 1000 + VERSIONS; step++)
		TEST_OK(harness_publish(p, step, 5 * HARNESS_S, NULL));
	harness_expect_exit0(early, "the collector that subscribed before");
	harness_expect_exit0(late, "the collector that subscribed after");
	kill(bad, SIGKILL);
	harness_wait_status(bad, 5000);
	TEST_CONTAINS(harness_read_file(B.log, log, sizeof log), "new memory");
	wsync_pub_close(p);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
