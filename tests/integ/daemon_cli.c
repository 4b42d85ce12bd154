/*
 * daemon_cli — wsyncd's command line: --help exits 0 and names every flag,
 * --version exits 0 with the version; an unknown flag exits 2 with a message
 * and invalid flag values are refused without starting; a second broker of
 * the same name exits 1 saying it is already running and leaves the first
 * one serving; a socket file left by a SIGKILLed broker does not prevent a
 * restart (and the restarted broker cleans up what the killed one left);
 * --shm-limit 1M makes a 4 MiB model's pub_open fail with -ENOSPC while
 * small models fit, and a refused model does not use up the limit;
 * --max-slots bounds the slots a model may ask for.
 */
#include "tests/lib/harness.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char out[16384];

static int run(const char *what, char *const argv[])
{
	int st = harness_run(argv, out, sizeof out, 10000);
	harness_log("%s: %s; output: %.300s", what, harness_status_str(st), out);
	TEST_ASSERT_MSG(st != -1, "%s: still running after 10 s", what);
	TEST_ASSERT_MSG(WIFEXITED(st), "%s: %s", what, harness_status_str(st));
	return WEXITSTATUS(st);
}

static void publish_and_read(const struct broker *b, const char *model, uint64_t step)
{
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	wsync_sub *s = NULL;
	wsync_view v;
	TEST_OK(harness_connect(b, "cli-check", &c));
	TEST_OK(harness_pub_open_2t(c, model, 0, &p));
	TEST_OK(wsync_sub_open(c, model, &s));
	uint64_t version = 0;
	TEST_OK(harness_publish(p, step, 5 * HARNESS_S, &version));
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, version);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_pub_close(p);
	wsync_close(c);
}

static int open_f32(wsync_client *c, const char *model, uint64_t elems, uint32_t slots)
{
	wsync_tensor_desc d;
	harness_desc(&d, "w", WSYNC_F32, 1, &elems);
	wsync_model_opts o;
	memset(&o, 0, sizeof o);
	o.slots = slots;
	wsync_pub *p = NULL;
	int rc = wsync_pub_open(c, model, &d, 1, &o, &p);
	if (rc == 0) {
		uint64_t v;
		rc = harness_publish(p, 1, 5 * HARNESS_S, &v);
		wsync_pub_close(p);
	}
	return rc;
}

int main(void)
{
	const char *wsyncd = harness_wsyncd_path();
	TEST_ASSERT_MSG(wsyncd != NULL, "no wsyncd binary");

	/* ---- --help, --version, bad flags ---- */
	TEST_EQ_U64(run("--help", (char *[]){ (char *)wsyncd, "--help", NULL }), 0);
	const char *flags[] = { "--name", "--socket", "--shm-limit", "--max-slots", "--group",
	                        "--log-level" };
	for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
		TEST_CONTAINS(out, flags[i]);

	TEST_EQ_U64(run("--version", (char *[]){ (char *)wsyncd, "--version", NULL }), 0);
	TEST_CONTAINS(out, wsync_version_string());

	/* every refusal below names an instance of this test, so a broker that
	 * wrongly starts cannot touch anything else (and is cleaned up) */
	struct broker spare;
	TEST_ASSERT(harness_broker_prepare(&spare, NULL) == 0);
	TEST_EQ_U64(run("unknown flag", (char *[]){ (char *)wsyncd, "--name", spare.name,
	                "--socket", spare.sock, "--no-such-flag", NULL }), 2);
	TEST_ASSERT_MSG(out[0] != 0, "an unknown flag is refused without a message");
	const char *bad[][2] = {
		{ "--max-slots", "1" }, { "--max-slots", "33" }, { "--max-slots", "lots" },
		{ "--shm-limit", "plenty" }, { "--shm-limit", "-5M" }, { "--log-level", "loud" },
		{ "--group", "no-such-group-wsync-test" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char what[64];
		snprintf(what, sizeof what, "%s %s", bad[i][0], bad[i][1]);
		int code = run(what, (char *[]){ (char *)wsyncd, "--name", spare.name, "--socket",
		               spare.sock, (char *)bad[i][0], (char *)bad[i][1], NULL });
		TEST_ASSERT_MSG(code != 0, "%s accepted", what);
		TEST_ASSERT_MSG(out[0] != 0, "%s refused without a message", what);
	}
	TEST_ASSERT(harness_shm_leftovers(&spare, 1) == 0);

	/* ---- one broker per name ---- */
	struct broker B;
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	TEST_EQ_U64(run("a second broker of the same name", (char *[]){ (char *)wsyncd, "--name",
	                B.name, "--socket", B.sock, NULL }), 1);
	TEST_ASSERT_MSG(strcasestr(out, "already running") != NULL,
	                "the second broker does not say the name is already running: \"%s\"", out);
	char other_sock[sizeof B.sock + 8];
	snprintf(other_sock, sizeof other_sock, "%s/other.sock", B.dir);
	TEST_EQ_U64(run("a second broker of the same name, another socket", (char *[]){
	                (char *)wsyncd, "--name", B.name, "--socket", other_sock, NULL }), 1);
	TEST_ASSERT(strcasestr(out, "already running") != NULL);
	publish_and_read(&B, "cli.policy", 1);

	/* ---- a stale socket file does not prevent a restart ---- */
	harness_broker_kill(&B);
	struct stat stbuf;
	TEST_ASSERT_MSG(stat(B.sock, &stbuf) == 0 && S_ISSOCK(stbuf.st_mode),
	                "the killed broker's socket file is gone; nothing stale to test");
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	publish_and_read(&B, "cli.policy", 2);
	harness_broker_finish(&B);

	/* ---- --shm-limit and --max-slots ---- */
	struct broker L;
	TEST_ASSERT(harness_broker_start(&L, "--shm-limit", "1M", "--max-slots", "3",
	                             "--log-level", "debug", NULL) == 0);
	wsync_client *c = NULL;
	TEST_OK(harness_connect(&L, "cli-limits", &c));
	TEST_OK(open_f32(c, "cli.small", 1000, 2));                 /* 2 x 4 KiB */
	TEST_RC(open_f32(c, "cli.huge", 1024 * 1024, 2), -ENOSPC);  /* 2 x 4 MiB */
	TEST_ASSERT(wsync_errmsg()[0] != 0);
	TEST_RC(open_f32(c, "cli.huge", 1024 * 1024, 2), -ENOSPC);
	/* the refusals used none of the limit: 2 x 384 KiB still fit beside 8 KiB */
	TEST_OK(open_f32(c, "cli.medium", 96 * 1024, 2));
	TEST_RC(open_f32(c, "cli.more", 96 * 1024, 2), -ENOSPC);
	TEST_RC(open_f32(c, "cli.slots", 10, 4), -EINVAL);
	TEST_OK(open_f32(c, "cli.slots", 10, 3));
	wsync_close(c);
	harness_broker_finish(&L);
	return 0;
}
