/*
 * squat_broker — a client never talks to a broker of another user: a socket
 * served by a process of another uid (it called listen() as that uid, as a
 * squatter who created our run directory first would) is refused with
 * -EPERM before any request is sent, naming the uid; a socket whose
 * directory belongs to another user or is writable by others is refused
 * too. With WSYNC_BROKER_UID naming that uid, the peer check passes (the
 * fake server then fails the protocol). Needs root (to play another uid):
 * skipped otherwise.
 */
#include "tests/lib/harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define SQUATTER_UID 40123

static char dir[64], path[128];

/* Listens as SQUATTER_UID on fd and accepts until killed; never answers. */
static int squatter(void *arg)
{
	int fd = *(int *)arg;

	if (setresgid(SQUATTER_UID, SQUATTER_UID, SQUATTER_UID) ||
	    setresuid(SQUATTER_UID, SQUATTER_UID, SQUATTER_UID))
		return 2;
	if (listen(fd, 16) < 0)
		return 3;
	for (;;) {
		int c = accept(fd, NULL, NULL);

		if (c >= 0)
			(void)write(c, "x", 1);   /* not a wsync message */
	}
}

int main(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	wsync_client *c = NULL;
	char uid_text[16];
	pid_t pid;
	int fd, rc;

	if (geteuid() != 0) {
		printf("skip: needs root to play another user\n");
		return HARNESS_SKIP;
	}
	snprintf(dir, sizeof(dir), "/tmp/wsync-squat-XXXXXX");
	TEST_ASSERT(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/default.sock", dir);
	TEST_ASSERT(strlen(path) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	TEST_ASSERT(fd >= 0);
	TEST_ASSERT(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	TEST_ASSERT(chmod(path, 0666) == 0);
	pid = harness_fork(squatter, &fd);
	close(fd);
	harness_sleep_ms(200);            /* let it listen */

	/* the directory is ours (root's, 0700): the peer check decides */
	rc = wsync_connect(path, "victim", &c);
	TEST_RC(rc, -EPERM);
	snprintf(uid_text, sizeof(uid_text), "uid %u", SQUATTER_UID);
	TEST_CONTAINS(wsync_errmsg(), uid_text);
	harness_log("refused: %s", wsync_errmsg());

	/* trusting that uid explicitly lets the check pass */
	snprintf(uid_text, sizeof(uid_text), "%u", SQUATTER_UID);
	setenv("WSYNC_BROKER_UID", uid_text, 1);
	rc = wsync_connect(path, "victim", &c);
	TEST_ASSERT_MSG(rc != -EPERM && rc != 0, "with WSYNC_BROKER_UID: %d (%s)", rc,
	                wsync_errmsg());
	unsetenv("WSYNC_BROKER_UID");

	/* a directory another user owns, or anyone may write, is refused */
	TEST_ASSERT(chown(dir, SQUATTER_UID, SQUATTER_UID) == 0);
	TEST_RC(wsync_connect(path, "victim", &c), -EPERM);
	TEST_CONTAINS(wsync_errmsg(), "belongs to another user");
	TEST_ASSERT(chown(dir, 0, 0) == 0);
	TEST_ASSERT(chmod(dir, 0777) == 0);
	TEST_RC(wsync_connect(path, "victim", &c), -EPERM);
	TEST_CONTAINS(wsync_errmsg(), "writable by others");

	kill(pid, SIGKILL);
	harness_wait_status(pid, 5000);
	unlink(path);
	rmdir(dir);
	return 0;
}
