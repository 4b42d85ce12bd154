/*
 * cutoff_views — a client whose session the broker ends while the client
 * runs (here: too many invalid messages) is told so: acquire and wait fail
 * with -ECONNRESET and never hand out a view, and a view it held from
 * before answers wsync_view_check() with -ECONNRESET once the broker may
 * reuse its slab. Before the cut, wsync_view_check() says 0. Other clients
 * go on publishing and reading.
 */
#include "tests/lib/harness.h"

#include <sys/socket.h>
#include <unistd.h>

#include "libclient/client.h"

static struct broker B;

int main(void)
{
	wsync_client *t = NULL, *x = NULL, *y = NULL;
	wsync_pub *p = NULL;
	wsync_sub *sx = NULL, *sy = NULL;
	wsync_view held, v;
	uint64_t version = 0;
	char junk[64];

	if (harness_broker_start(&B, NULL))
		return 1;
	TEST_OK(harness_connect(&B, "trainer", &t));
	TEST_OK(harness_pub_open_2t(t, "cut.m", 2, &p));
	TEST_OK(harness_publish(p, 1, HARNESS_S, &version));
	TEST_OK(harness_connect(&B, "victim", &x));
	TEST_OK(wsync_sub_open(x, "cut.m", &sx));
	TEST_OK(harness_connect(&B, "bystander", &y));
	TEST_OK(wsync_sub_open(y, "cut.m", &sy));

	TEST_OK(wsync_sub_acquire(sx, &held));
	TEST_OK(wsync_view_check(&held));

	/* garbage on the victim's socket until the broker ends the session */
	memset(junk, 0xa5, sizeof(junk));
	for (int i = 0; i < 40; i++)
		if (send(x->sock, junk, sizeof(junk), MSG_NOSIGNAL) < 0)
			break;
	{
		int64_t deadline = harness_mono_ns() + 10 * HARNESS_S;

		while (client_session_live(x)) {
			TEST_ASSERT_MSG(harness_mono_ns() < deadline,
			                "the broker did not end the session in 10 s");
			harness_sleep_ms(10);
		}
	}
	/* the broker no longer counts the victim's pin: the slot is reused */
	for (uint64_t step = 2; step <= 5; step++)
		TEST_OK(harness_publish(p, step, HARNESS_S, &version));

	TEST_RC(wsync_view_check(&held), -ECONNRESET);
	TEST_CONTAINS(wsync_errmsg(), "ended this client's session");
	TEST_RC(wsync_sub_acquire(sx, &v), -ECONNRESET);
	TEST_RC(wsync_sub_wait(sx, held.version, 100 * HARNESS_MS, &v), -ECONNRESET);
	wsync_sub_release(sx, &held);

	/* everyone else goes on */
	TEST_OK(wsync_sub_wait(sy, 0, HARNESS_S, &v));
	TEST_EQ_U64(v.version, version);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	TEST_OK(wsync_view_check(&v));
	wsync_sub_release(sy, &v);

	wsync_close(x);
	wsync_close(y);
	wsync_close(t);
	harness_broker_finish(&B);
	return 0;
}
