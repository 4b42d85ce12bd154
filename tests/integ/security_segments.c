/*
 * security_segments — least privilege, checked from the outside:
 *  1. The instance has one entry in /dev/shm, its private directory, mode
 *     0700 and owned by the broker's uid; every object in it (control,
 *     layout, slabs; model pages are memfds) is a regular file of mode 0600
 *     owned by that uid, with and without --group; the socket is never open
 *     to others.
 *  2. As root: a process of another uid (65534) that is not in --group is
 *     refused at connect with -EPERM and a message, and receives no fds; a
 *     process of that uid whose *supplementary* groups include --group's
 *     (primary gid elsewhere, so SO_PEERGROUPS decides) is admitted and
 *     reads the weights. Skipped (77) when not root.
 *  3. Client-supplied indices are bounds-checked: a session writes pins
 *     naming nonexistent models and slots (and garbage) into its session
 *     page, and sends requests with model ids 63, 64 and 0xffffffff; each
 *     request gets an ERROR, and a publisher keeps getting grants (the
 *     broker scans those pins at every grant) for 3 x slots versions.
 */
#include "tests/lib/faults.h"

#include <dirent.h>
#include <grp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm/layout.h"

#define MODEL "sec.policy"
#define NOBODY 65534
#define OTHER_GID 54321             /* a primary gid that is not --group's */

static struct broker B;
static gid_t group_gid;
static uint64_t published;

static void publish(uint64_t step)
{
	wsync_client *c = NULL;
	wsync_pub *p = NULL;

	TEST_OK(harness_connect(&B, "sec-trainer", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	TEST_OK(harness_publish(p, step, HARNESS_S, &published));
	wsync_pub_close(p);
	wsync_close(c);
}

static void check_modes(void)
{
	char dir[512];
	struct dirent *e;
	struct stat st;
	int n = 0;

	TEST_ASSERT(harness_seg_path(&B, "", dir, sizeof(dir)) == 0);
	TEST_ASSERT(lstat(dir, &st) == 0);
	TEST_ASSERT_MSG(S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700 &&
	                st.st_uid == geteuid(), "%s: mode %o uid %u", dir,
	                (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
	TEST_ASSERT_MSG(harness_shm_leftovers(&B, 0) >= 1, "no private directory");
	DIR *d = opendir(dir);
	TEST_ASSERT(d != NULL);
	while ((e = readdir(d))) {
		char path[1024];

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		TEST_ASSERT(lstat(path, &st) == 0);
		TEST_ASSERT_MSG(S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0600 &&
		                st.st_uid == geteuid(), "%s: mode %o uid %u", path,
		                (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
		n++;
	}
	closedir(d);
	TEST_ASSERT_MSG(n >= 1 + 1, "only %d segments found", n);
	TEST_ASSERT(stat(B.sock, &st) == 0);
	TEST_ASSERT_MSG((st.st_mode & 0007) == 0, "socket mode %o", (unsigned)(st.st_mode & 0777));
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	TEST_ASSERT(d != NULL);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static int stranger(void *arg)
{
	wsync_client *c = NULL;

	(void)arg;
	TEST_ASSERT(setgroups(0, NULL) == 0);
	TEST_ASSERT(setgid(OTHER_GID) == 0 && setuid(NOBODY) == 0);
	prctl(PR_SET_DUMPABLE, 1);
	int before = count_fds();
	TEST_RC(wsync_connect(B.sock, "stranger", &c), -EPERM);
	TEST_ASSERT(wsync_errmsg()[0] != 0);
	TEST_ASSERT_MSG(count_fds() == before, "a refused client holds %d more fds",
	                count_fds() - before);
	return 0;
}

static int member(void *arg)
{
	wsync_client *c = NULL;
	wsync_sub *s = NULL;
	wsync_view v;

	(void)arg;
	TEST_ASSERT(setgroups(1, &group_gid) == 0);          /* supplementary only */
	TEST_ASSERT(setgid(OTHER_GID) == 0 && setuid(NOBODY) == 0);
	prctl(PR_SET_DUMPABLE, 1);
	TEST_ASSERT(getgid() != group_gid);
	TEST_OK(wsync_connect(B.sock, "member", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, published);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_close(c);
	return 0;
}

static void bad_indices(void)
{
	static const uint32_t ids[] = { 63, 64, 0xffffffffu };
	union wsync_msg_any m, r;
	int fd, page_fd;
	struct wsync_session_page *page;
	uint32_t seq = 2;

	fd = faults_raw_connect(&B);
	faults_raw_hello(fd, 1, "pin-forger", NULL, &page_fd);
	page = mmap(NULL, WSYNC_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, page_fd, 0);
	TEST_ASSERT(page != MAP_FAILED);
	for (uint32_t i = 0; i < WSYNC_MAX_VIEWS; i++) {
		uint64_t pin;

		switch (i % 5) {
		case 0: pin = wsync_pin_pack(WSYNC_MAX_MODELS + i, 0); break;
		case 1: pin = wsync_pin_pack(0, WSYNC_MAX_SLOTS + i); break;
		case 2: pin = wsync_pin_pack(0xfffffffeu, 0xffffffffu); break;
		case 3: pin = ~(uint64_t)0; break;
		default: pin = wsync_pin_pack(i % 3, 200); break;
		}
		atomic_store(&page->hazards[i].pin, pin);
	}
	/* also SUB_OPEN the model so the broker scans this session's page */
	memset(&m, 0, sizeof(m));
	wsync_msg_init(&m.hdr, WSYNC_MSG_SUB_OPEN, seq++);
	snprintf(m.sub_open.model, sizeof(m.sub_open.model), "%s", MODEL);
	TEST_ASSERT(faults_raw_send(fd, &m, sizeof(m.sub_open), NULL, 0) == 0);
	int nf = WSYNC_MSG_MAX_FDS, f[WSYNC_MSG_MAX_FDS];
	TEST_ASSERT(faults_raw_recv(fd, &r, f, &nf, HARNESS_WAIT_MS) > 0 &&
	            r.hdr.type == WSYNC_MSG_SUB_OPEN_OK);
	for (int i = 0; i < nf; i++)
		close(f[i]);
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		static const uint32_t types[] = { WSYNC_MSG_ATTACH, WSYNC_MSG_BEGIN,
		                                  WSYNC_MSG_NOTIFY, WSYNC_MSG_CLOSE };
		for (size_t t = 0; t < 4; t++) {
			memset(&m, 0, sizeof(m));
			wsync_msg_init(&m.hdr, types[t], seq++);
			m.attach.m.model_id = ids[i];      /* same place in all four */
			if (types[t] == WSYNC_MSG_CLOSE)
				m.close.what = WSYNC_CLOSE_SUB;
			TEST_ASSERT(faults_raw_send(fd, &m, wsync_msg_size(types[t]), NULL, 0) == 0);
			TEST_ASSERT(faults_raw_recv(fd, &r, NULL, NULL, HARNESS_WAIT_MS) > 0);
			TEST_ASSERT_MSG(r.hdr.type == WSYNC_MSG_ERROR && r.error.err < 0,
			                "%s of model %u answered with type %u",
			                wsync_msg_name(types[t]), ids[i], r.hdr.type);
		}
	}
	/* the publisher gets grants through all those pins */
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	uint64_t v;
	TEST_OK(harness_connect(&B, "sec-trainer-2", &c));
	TEST_OK(harness_pub_open_2t(c, MODEL, 0, &p));
	for (int i = 0; i < 3 * WSYNC_DEFAULT_SLOTS; i++)
		TEST_OK(harness_publish(p, 50 + (uint64_t)i, 2 * HARNESS_S, &v));
	wsync_pub_close(p);
	wsync_close(c);
	faults_broker_alive(&B, "forged pins and out-of-range model ids");
	munmap(page, WSYNC_PAGE);
	close(page_fd);
	close(fd);
}

int main(void)
{
	struct group *gr = getgrnam("nogroup");

	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	publish(1);
	check_modes();
	bad_indices();
	faults_normal_client(&B, "the bounds checks");
	if (geteuid() == 0) {
		TEST_ASSERT(chmod(B.dir, 0755) == 0);
		TEST_ASSERT(chmod(B.sock, 0666) == 0);    /* only SO_PEERCRED stops it */
		harness_expect_exit0(harness_fork(stranger, NULL), "the other uid's client");
	}
	harness_broker_finish(&B);

	if (geteuid() != 0 || !gr) {
		printf("SKIP: the uid and group checks need root and a group 'nogroup' "
		       "(modes and bounds passed)\n");
		return HARNESS_SKIP;
	}
	group_gid = gr->gr_gid;
	TEST_ASSERT(harness_broker_start(&B, "--group", "nogroup", NULL) == 0);
	publish(2);
	check_modes();
	TEST_ASSERT(chmod(B.dir, 0755) == 0);
	harness_expect_exit0(harness_fork(member, NULL), "a member of --group");
	/* a different group is not enough, even where the file mode lets it in */
	TEST_ASSERT(chmod(B.sock, 0666) == 0);
	harness_expect_exit0(harness_fork(stranger, NULL), "the other uid's client");
	harness_broker_finish(&B);
	return 0;
}
