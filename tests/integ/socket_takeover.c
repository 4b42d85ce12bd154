/*
 * socket_takeover — a broker never takes over or deletes another broker's
 * socket, and never loosens the run directory its user's instances share.
 *
 * 1. Two brokers, two names, one --socket: the second refuses to start,
 *    saying the socket is in use by another broker and naming its pid (from
 *    SO_PEERCRED); the first keeps serving.
 * 2. A broker whose socket path was taken over by someone else's socket
 *    (renamed away, a new listener bound there) leaves that socket in place
 *    when it stops: it unlinks only the inode it bound.
 * 3. --group leaves the run directory 0700 (it used to become 0750 and
 *    group-owned, opening every instance's files to the group); a start
 *    tightens a 0755 one to 0700 and leaves a 0711 one (search only, made
 *    for another --group instance's socket directory) as it is.
 * 4. A run directory another uid created is refused with a message naming
 *    it and its owner (root only: the directory is chowned to uid 65534).
 */
#include "tests/lib/harness.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[16384];

static int run_wsyncd(const char *what, const char *name, const char *sock)
{
	char *argv[] = { (char *)harness_wsyncd_path(), "--name", (char *)name,
	                 "--socket", (char *)sock, NULL };
	int st = harness_run(argv, out, sizeof out, 10000);
	harness_log("%s: %s; output: %.300s", what, harness_status_str(st), out);
	TEST_ASSERT_MSG(st != -1 && WIFEXITED(st), "%s: %s", what, harness_status_str(st));
	return WEXITSTATUS(st);
}

static void two_brokers_one_socket(void)
{
	struct broker A, spare;
	char want[64];
	TEST_ASSERT(harness_broker_start(&A, NULL) == 0);
	TEST_ASSERT(harness_broker_prepare(&spare, NULL) == 0);
	TEST_EQ_U64(run_wsyncd("a second broker on the first one's socket", spare.name, A.sock), 1);
	TEST_CONTAINS(out, "in use by another broker");
	snprintf(want, sizeof want, "pid %d", (int)A.pid);
	TEST_CONTAINS(out, want);
	harness_publish_and_read(&A, "takeover.policy", 1);
	harness_broker_finish(&A);
}

static void foreign_socket_survives_stop(void)
{
	struct broker X;
	struct sockaddr_un sa;
	struct stat mine, after;
	char moved[sizeof X.sock + 8];
	TEST_ASSERT(harness_broker_start(&X, NULL) == 0);
	snprintf(moved, sizeof moved, "%s.moved", X.sock);
	TEST_ASSERT(rename(X.sock, moved) == 0);
	int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	TEST_ASSERT(l >= 0);
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, X.sock, strlen(X.sock) + 1);
	TEST_ASSERT(bind(l, (struct sockaddr *)&sa, sizeof sa) == 0);
	TEST_ASSERT(stat(X.sock, &mine) == 0);
	TEST_ASSERT(harness_broker_stop(&X) == 0);
	TEST_ASSERT_MSG(stat(X.sock, &after) == 0 && after.st_ino == mine.st_ino,
	                "the stopping broker deleted a socket that was not its own");
	close(l);
	unlink(X.sock);
	unlink(moved);
}

static void group_keeps_rundir_private(void)
{
	struct broker G;
	char rundir[sizeof G.dir + 8];
	struct stat st;
	if (harness_broker_start(&G, "--group", "0", NULL) != 0)
		harness_fail(__FILE__, __LINE__, "a --group broker did not start");
	snprintf(rundir, sizeof rundir, "%s/wsync", G.dir);
	TEST_ASSERT(stat(rundir, &st) == 0);
	TEST_ASSERT_MSG((st.st_mode & 07777) == 0700, "--group left the shared run directory "
	                "%s mode %04o", rundir, (unsigned)(st.st_mode & 07777));
	TEST_ASSERT(harness_broker_stop(&G) == 0);
	/* a looser one is tightened; 0711 (another --group instance's) is kept */
	static const unsigned before[] = { 0755, 0711 }, after[] = { 0700, 0711 };
	for (int i = 0; i < 2; i++) {
		TEST_ASSERT(chmod(rundir, before[i]) == 0);
		TEST_ASSERT(harness_broker_restart(&G) == 0);
		TEST_ASSERT(stat(rundir, &st) == 0);
		TEST_ASSERT_MSG((st.st_mode & 07777) == after[i], "run directory %04o became "
		                "%04o, expected %04o", before[i], (unsigned)(st.st_mode & 07777),
		                after[i]);
		TEST_ASSERT(harness_broker_stop(&G) == 0);
	}
	TEST_ASSERT(harness_broker_restart(&G) == 0);
	harness_broker_finish(&G);
}

static void foreign_rundir_refused(void)
{
	struct broker F;
	char rundir[sizeof F.dir + 8];
	if (geteuid() != 0) {
		harness_log("not root: the foreign run directory case is skipped");
		return;
	}
	TEST_ASSERT(harness_broker_prepare(&F, NULL) == 0);
	snprintf(rundir, sizeof rundir, "%s/wsync", F.dir);
	TEST_ASSERT(mkdir(rundir, 0777) == 0 && chown(rundir, 65534, 65534) == 0);
	TEST_EQ_U64(run_wsyncd("a run directory of uid 65534", F.name, F.sock), 1);
	TEST_CONTAINS(out, rundir);
	TEST_CONTAINS(out, "owned by uid 65534");
}

int main(void)
{
	two_brokers_one_socket();
	foreign_socket_survives_stop();
	group_keeps_rundir_private();
	foreign_rundir_refused();
	return 0;
}
