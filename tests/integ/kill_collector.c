/*
 * kill_collector — a collector killed with SIGKILL while it holds a view
 * loses its pin: on a 2-slot model the view blocks the trainer (begin with
 * timeout 0 is -EBUSY); once the collector is killed the trainer reuses every
 * slot (commits more versions than there are slots, each begin succeeding
 * within its timeout), and another collector still reads intact versions.
 */
#include "tests/lib/harness.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MODEL "killc.policy"

static struct broker B;
static struct chan to_parent;

static int doomed_collector(void *arg)
{
	(void)arg;
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	TEST_OK(harness_connect(&B, "doomed-collector", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_wait(s, 0, 10 * HARNESS_S, &v));
	TEST_ASSERT(harness_verify_view(&v) == 0);
	chan_send(&to_parent, v.version);
	for (;;)
		pause();                               /* holds the view until killed */
}

int main(void)
{
	chan_open(&to_parent);
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);

	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	TEST_OK(harness_connect(&B, "killc-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 2, &p));
	uint64_t v1 = 0, v2 = 0;
	TEST_OK(harness_publish(p, 1, HARNESS_S, &v1));

	pid_t child = harness_fork(doomed_collector, NULL);
	TEST_EQ_U64(chan_recv(&to_parent, child), v1);

	/* v1's slot is pinned, v2 becomes the latest: nothing left to grant */
	TEST_OK(harness_publish(p, 2, HARNESS_S, &v2));
	wsync_slab slab;
	memset(&slab, 0, sizeof slab);
	TEST_RC(wsync_pub_begin(p, 0, &slab), -EBUSY);

	kill(child, SIGKILL);
	int st = harness_wait_status(child, HARNESS_WAIT_MS);
	TEST_ASSERT_MSG(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
	                "collector ended with %s", harness_status_str(st));

	/* every slot is usable again: 3 x 2 versions through a 2-slot model */
	wsync_client *rc = NULL;
	wsync_sub *s = NULL;
	TEST_OK(harness_connect(&B, "killc-reader", &rc));
	TEST_OK(wsync_sub_open(rc, MODEL, &s));
	uint64_t last = v2;
	for (int i = 0; i < 6; i++) {
		uint64_t v = 0;
		TEST_OK(harness_publish(p, 10 + (uint64_t)i, 5 * HARNESS_S, &v));
		TEST_GT_U64(v, last);
		last = v;
		wsync_view view;
		TEST_OK(wsync_sub_acquire(s, &view));
		TEST_EQ_U64(view.version, v);
		TEST_EQ_U64(view.step, 10 + (uint64_t)i);
		TEST_ASSERT(harness_verify_view(&view) == 0);
		wsync_sub_release(s, &view);
	}

	wsync_sub_close(s);
	wsync_close(rc);
	wsync_pub_close(p);
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
