/*
 * peer_auth — the socket admits only the broker's uid, or a group given with
 * --group: a process of another uid that can reach the socket file is refused
 * with -EPERM and a message (SO_PEERCRED, not file modes, decides); with
 * --group its members are admitted and read the weights through read-only
 * fds; the socket is never open to everyone. Needs root (to become another
 * uid); skipped otherwise.
 */
#include "tests/lib/harness.h"

#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define MODEL "auth.policy"

static struct broker B;
static uid_t other_uid;
static gid_t other_gid;
static uint64_t published;

static void become_other(void)
{
	TEST_ASSERT(setgroups(0, NULL) == 0);
	TEST_ASSERT(setgid(other_gid) == 0);
	TEST_ASSERT(setuid(other_uid) == 0);
	prctl(PR_SET_DUMPABLE, 1);   /* leak checkers need to inspect the process */
	TEST_ASSERT(getuid() == other_uid && geteuid() == other_uid);
}

static int stranger(void *arg)
{
	(void)arg;
	become_other();
	wsync_client *c = NULL;
	int rc = wsync_connect(B.sock, "stranger", &c);
	TEST_ASSERT_MSG(rc == -EPERM, "a process of uid %u connected: %d (%s)",
	                (unsigned)other_uid, rc, wsync_strerror(rc));
	TEST_ASSERT(c == NULL);
	TEST_ASSERT(wsync_errmsg()[0] != 0);
	harness_log("refused: %s", wsync_errmsg());
	return 0;
}

static int member(void *arg)
{
	(void)arg;
	become_other();
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	TEST_OK(wsync_connect(B.sock, "group-member", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, published);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	size_t pagesz = (size_t)sysconf(_SC_PAGESIZE);
	void *page = (void *)((uintptr_t)v.base & ~(uintptr_t)(pagesz - 1));
	TEST_ASSERT_MSG(mprotect(page, pagesz, PROT_READ | PROT_WRITE) != 0 && errno == EACCES,
	                "a group member could make its view writable");
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

static void publish(void)
{
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	TEST_OK(harness_connect(&B, "auth-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	TEST_OK(harness_publish(p, 7, HARNESS_S, &published));
	wsync_pub_close(p);
	wsync_close(c);
}

int main(void)
{
	int skip = harness_other_user("run a client", &other_uid, &other_gid);

	if (skip)
		return skip;

	/* without --group: another uid is refused even when it can reach the socket */
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	publish();
	struct stat st;
	TEST_ASSERT(stat(B.sock, &st) == 0);
	TEST_ASSERT_MSG((st.st_mode & 0007) == 0, "socket mode %o is open to everyone",
	                (unsigned)(st.st_mode & 0777));
	TEST_ASSERT(chmod(B.dir, 0755) == 0);
	TEST_ASSERT(chmod(B.sock, 0666) == 0);
	harness_expect_exit0(harness_fork(stranger, NULL), "the other uid's client");
	harness_broker_finish(&B);

	/* with --group: members are admitted, read-only */
	TEST_ASSERT(harness_broker_start(&B, "--group", "nogroup", NULL) == 0);
	publish();
	TEST_ASSERT(stat(B.sock, &st) == 0);
	TEST_ASSERT_MSG((st.st_mode & 0007) == 0, "socket mode %o is open to everyone",
	                (unsigned)(st.st_mode & 0777));
	TEST_ASSERT_MSG(st.st_gid == other_gid && (st.st_mode & 0060) == 0060,
	                "socket group %u mode %o: the group cannot connect", (unsigned)st.st_gid,
	                (unsigned)(st.st_mode & 0777));
	TEST_ASSERT(chmod(B.dir, 0755) == 0);    /* the test's own directory */
	harness_expect_exit0(harness_fork(member, NULL), "the group member's client");
	harness_broker_finish(&B);
	return 0;
}
