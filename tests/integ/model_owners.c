/*
 * model_owners — a model belongs to the uid that first published it: with
 * --group, another admitted uid cannot delete or replace a model it does
 * not own (-EPERM naming the owner), even while nobody publishes it; it can
 * delete its own; the broker's uid (and root) can delete any. Needs root
 * (to become another uid); skipped otherwise.
 */
#include "tests/lib/harness.h"

#include <grp.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

static struct broker B;
static uid_t other_uid;
static gid_t other_gid;

static int other(void *arg)
{
	wsync_tensor_desc d[2];
	wsync_model_opts o = { .flags = WSYNC_PUB_REPLACE };
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	uint64_t shape[1] = { 7 };

	(void)arg;
	TEST_ASSERT(setgroups(0, NULL) == 0);
	TEST_ASSERT(setgid(other_gid) == 0);
	TEST_ASSERT(setuid(other_uid) == 0);
	prctl(PR_SET_DUMPABLE, 1);
	TEST_OK(wsync_connect(B.sock, "other-user", &c));
	/* a finished run's final policy: nobody publishes it now */
	TEST_RC(wsync_model_delete(c, "own.root"), -EPERM);
	TEST_CONTAINS(wsync_errmsg(), "belongs to uid 0");
	harness_log("delete refused: %s", wsync_errmsg());
	/* nor taken over with another layout */
	harness_desc(&d[0], "other", WSYNC_F32, 1, shape);
	TEST_RC(wsync_pub_open(c, "own.root", d, 1, &o, &p), -EPERM);
	TEST_CONTAINS(wsync_errmsg(), "replace");
	/* its own model it can delete */
	TEST_OK(harness_pub_open_2t(c, "own.other", 0, &p));
	TEST_OK(harness_publish(p, 1, HARNESS_S, NULL));
	wsync_pub_close(p);
	TEST_OK(wsync_model_delete(c, "own.other"));
	/* and one it leaves behind */
	TEST_OK(harness_pub_open_2t(c, "own.left", 0, &p));
	TEST_OK(harness_publish(p, 1, HARNESS_S, NULL));
	wsync_pub_close(p);
	wsync_close(c);
	return 0;
}

int main(void)
{
	wsync_client *c;
	wsync_pub *p;
	int skip = harness_other_user("delete another user's model", &other_uid, &other_gid);

	if (skip)
		return skip;
	TEST_ASSERT(harness_broker_start(&B, HARNESS_OTHER_USERS, NULL) == 0);
	TEST_OK(harness_connect(&B, "trainer", &c));
	TEST_OK(harness_pub_open_2t(c, "own.root", 0, &p));
	TEST_OK(harness_publish(p, 1, HARNESS_S, NULL));
	wsync_pub_close(p);
	harness_expect_exit0(harness_fork(other, NULL), "the other user's client");
	/* the broker's uid deletes what another uid left */
	TEST_OK(wsync_model_delete(c, "own.left"));
	TEST_OK(wsync_model_delete(c, "own.root"));
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
