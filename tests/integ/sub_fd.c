/*
 * sub_fd — wsync_sub_fd is an fd for poll loops: it is not readable before
 * any commit (nor when the model merely gets its publisher, nor when another
 * model is committed), becomes readable after a commit from another process,
 * is drained by acquire and by wait, and becomes readable again on the next
 * commit. The same fd is returned every time.
 */
#include "tests/lib/harness.h"

#include <poll.h>
#include <string.h>

#define MODEL "fd.policy"
#define OTHER "fd.other"

static struct broker B;
static struct chan to_child, to_parent;

enum { OPEN = 1, COMMIT_ONE, COMMIT_OTHER, COMMIT_TWO, DONE };

static int trainer(void *arg)
{
	(void)arg;
	wsync_client *c = NULL;
	wsync_pub *p = NULL, *q = NULL;
	TEST_OK(harness_connect(&B, "fd-trainer", &c));
	uint64_t step = 0, v = 0;
	for (;;) {
		uint64_t cmd = chan_recv(&to_child, 0);
		switch (cmd) {
		case OPEN:
			TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
			TEST_OK(harness_pub_open_2t(c, OTHER, 0, &q));
			break;
		case COMMIT_ONE:
			TEST_OK(harness_publish(p, ++step, 5 * HARNESS_S, &v));
			break;
		case COMMIT_TWO:
			TEST_OK(harness_publish(p, ++step, 5 * HARNESS_S, &v));
			TEST_OK(harness_publish(p, ++step, 5 * HARNESS_S, &v));
			break;
		case COMMIT_OTHER:
			TEST_OK(harness_publish(q, 500, 5 * HARNESS_S, NULL));
			break;
		case DONE:
			wsync_pub_close(q);
			wsync_pub_close(p);
			wsync_close(c);
			return 0;
		}
		chan_send(&to_parent, v);
	}
}

static int readable(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r;
	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	TEST_ASSERT(r >= 0);
	TEST_ASSERT_MSG(!(p.revents & (POLLERR | POLLNVAL)), "poll revents 0x%x", p.revents);
	return r > 0 && (p.revents & POLLIN);
}

int main(void)
{
	chan_open(&to_child);
	chan_open(&to_parent);
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	pid_t child = harness_fork(trainer, NULL);

	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	TEST_OK(harness_connect(&B, "fd-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	int fd = wsync_sub_fd(s);
	TEST_ASSERT_MSG(fd >= 0, "wsync_sub_fd: %d (%s): %s", fd, wsync_strerror(fd), wsync_errmsg());
	TEST_EQ_U64(wsync_sub_fd(s), fd);

	/* nothing yet */
	TEST_ASSERT(!readable(fd, 0));
	TEST_ASSERT(!readable(fd, 100));
	chan_send(&to_child, OPEN);
	chan_recv(&to_parent, child);
	TEST_ASSERT_MSG(!readable(fd, 100), "readable when the model only got a publisher");

	/* a commit makes it readable; acquire drains it */
	chan_send(&to_child, COMMIT_ONE);
	uint64_t v1 = chan_recv(&to_parent, child);
	TEST_ASSERT_MSG(readable(fd, HARNESS_WAIT_MS), "not readable after a commit");
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, v1);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	TEST_ASSERT_MSG(!readable(fd, 0), "still readable after acquire");
	wsync_sub_release(s, &v);
	TEST_ASSERT(!readable(fd, 0));

	/* another model's commit is not ours */
	chan_send(&to_child, COMMIT_OTHER);
	chan_recv(&to_parent, child);
	TEST_ASSERT_MSG(!readable(fd, 100), "readable after a commit of another model");

	/* two commits, one wake-up; wait drains it */
	chan_send(&to_child, COMMIT_TWO);
	uint64_t v3 = chan_recv(&to_parent, child);
	TEST_ASSERT_MSG(readable(fd, HARNESS_WAIT_MS), "not readable after two commits");
	TEST_OK(wsync_sub_wait(s, v1, 0, &v));
	TEST_EQ_U64(v.version, v3);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	TEST_ASSERT_MSG(!readable(fd, 0), "still readable after wait");
	wsync_sub_release(s, &v);

	/* and again */
	chan_send(&to_child, COMMIT_ONE);
	uint64_t v4 = chan_recv(&to_parent, child);
	TEST_ASSERT(readable(fd, HARNESS_WAIT_MS));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, v4);
	wsync_sub_release(s, &v);
	TEST_ASSERT(!readable(fd, 0));

	chan_send(&to_child, DONE);
	harness_expect_exit0(child, "trainer");
	wsync_sub_close(s);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
