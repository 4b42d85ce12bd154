/*
 * endpoint — how clients find a broker: wsync_connect(NULL) uses
 * $WSYNC_ENDPOINT and wsync_default_endpoint says so; without it the default
 * is <XDG_RUNTIME_DIR>/wsync/default.sock; a broker started without --socket
 * listens at <XDG_RUNTIME_DIR>/wsync/<name>.sock and a client reaches it by
 * its instance name; a NULL client name is fine; no broker at a path gives
 * -ENOENT/-ECONNREFUSED with a message, and so does a stale socket file;
 * wsync_default_endpoint refuses a buffer too small with -ENAMETOOLONG; the
 * version and error strings are there.
 */
#include "tests/lib/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void expect_no_broker(const char *endpoint)
{
	wsync_client *c = NULL;
	int rc = wsync_connect(endpoint, "nobody-home", &c);
	TEST_ASSERT_MSG(rc == -ENOENT || rc == -ECONNREFUSED,
	                "connect to %s without a broker: %d (%s): %s", endpoint, rc,
	                wsync_strerror(rc), wsync_errmsg());
	TEST_ASSERT(c == NULL);
	TEST_ASSERT(wsync_errmsg()[0] != 0);
}

int main(void)
{
	char buf[512], want[512];

	/* strings */
	char ver[32];
	snprintf(ver, sizeof ver, "%d.%d.%d", WSYNC_VERSION_MAJOR, WSYNC_VERSION_MINOR,
	         WSYNC_VERSION_PATCH);
	TEST_ASSERT(strcmp(wsync_version_string(), ver) == 0);
	const int codes[] = { 0, -EINVAL, -ETIMEDOUT, -ENOTCONN, -EBUSY, -ENOSPC, -EPROTO, -12345 };
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
		const char *s = wsync_strerror(codes[i]);
		TEST_ASSERT_MSG(s && s[0], "no text for %d", codes[i]);
	}

	/* a broker at its default socket, reached by instance name */
	struct broker B;
	TEST_ASSERT(harness_broker_start(&B, HARNESS_DEFAULT_SOCKET, NULL) == 0);
	snprintf(want, sizeof want, "%s/wsync/%s.sock", B.dir, B.name);
	TEST_ASSERT_MSG(strcmp(B.sock, want) == 0, "harness: %s", B.sock);
	wsync_client *c = NULL;
	TEST_OK(wsync_connect(B.name, "by-name", &c));
	wsync_close(c);
	TEST_OK(wsync_connect(B.sock, NULL, &c));           /* NULL client name */
	wsync_close(c);

	/* NULL endpoint: $WSYNC_ENDPOINT (the harness set it to B's socket) */
	TEST_ASSERT(strcmp(getenv("WSYNC_ENDPOINT"), B.sock) == 0);
	TEST_OK(wsync_default_endpoint(buf, sizeof buf));
	TEST_ASSERT_MSG(strcmp(buf, B.sock) == 0, "default endpoint %s, WSYNC_ENDPOINT %s", buf,
	                B.sock);
	TEST_OK(wsync_connect(NULL, NULL, &c));
	wsync_close(c);
	char tiny[8];
	TEST_RC(wsync_default_endpoint(tiny, sizeof tiny), -ENAMETOOLONG);

	/* without WSYNC_ENDPOINT: the default instance under XDG_RUNTIME_DIR */
	unsetenv("WSYNC_ENDPOINT");
	TEST_OK(wsync_default_endpoint(buf, sizeof buf));
	snprintf(want, sizeof want, "%s/wsync/default.sock", B.dir);
	TEST_ASSERT_MSG(strcmp(buf, want) == 0, "default endpoint %s, expected %s", buf, want);
	expect_no_broker(NULL);                  /* no "default" broker in this directory */
	expect_no_broker("default");

	/* nobody there */
	snprintf(want, sizeof want, "%s/nothing-here.sock", B.dir);
	expect_no_broker(want);
	expect_no_broker("no-such-instance");

	/* a stale socket file. Right after a SIGKILL the kernel may still be
	 * tearing down the dead broker's io_uring, whose pending accept can take
	 * a connection and drop it (the client then says -ENOTCONN); wait for
	 * that to pass, then it must be "no broker". */
	harness_broker_kill(&B);
	int64_t deadline = harness_mono_ns() + 2 * HARNESS_S;
	for (;;) {
		int rc = wsync_connect(B.sock, "early", &c);
		TEST_ASSERT_MSG(rc != 0, "connected to a dead broker");
		if (rc != -ENOTCONN || harness_mono_ns() > deadline)
			break;
		harness_sleep_ms(5);
	}
	expect_no_broker(B.sock);
	expect_no_broker(B.name);
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	TEST_OK(wsync_connect(B.name, "by-name-again", &c));
	wsync_close(c);
	harness_broker_finish(&B);
	return 0;
}
