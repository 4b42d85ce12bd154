/*
 * gpu_startup — wsyncd --gpus: with the fake driver (3 GPUs, peers 0<->1)
 * the broker logs once the driver version, each GPU with its UUID, VMM and
 * fd support, and the peer matrix, serves every GPU by default and holds no
 * CUDA context or device memory (the fake's report at exit); --gpus picks
 * GPUs by UUID or by ordinal as the broker sees them (after its own
 * CUDA_VISIBLE_DEVICES); a named GPU that is absent, or that cannot export
 * memory, stops the start with exit 1 and says why; GPUs without POSIX-fd
 * handles are left out of "all" with a warning; without a driver
 * (WSYNC_LIBCUDA=/nonexistent), without GPUs, or with --gpus none the
 * broker says so once and serves host models as before.
 */
#include "tests/lib/harness.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/cuda_discover.h"

static char logbuf[65536], out[16384];

static int count_of(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	return n;
}

/* The harness allows 8 brokers per test: runs without arguments restart
 * this one, with the environment of the moment; refusals use its name. */
static struct broker plain;

/* Starts a broker with up to two extra arguments, checks that a host
 * model still works, stops it cleanly and returns its log. */
static const char *serve_and_stop(struct broker *b, const char *a1, const char *a2)
{
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	uint64_t version;

	if (b == &plain && plain.name[0]) {
		TEST_ASSERT(truncate(plain.log, 0) == 0);
		TEST_ASSERT(harness_broker_restart(&plain) == 0);
	} else {
		TEST_ASSERT(harness_broker_start(b, a1, a2, NULL) == 0);
	}
	TEST_OK(harness_connect(b, "gpu-check", &c));
	TEST_OK(harness_pub_open_2t(c, "host", 0, &p));
	TEST_OK(harness_publish(p, 1, 5 * HARNESS_S, &version));
	wsync_pub_close(p);
	wsync_close(c);
	harness_broker_finish(b);
	harness_read_file(b->log, logbuf, sizeof logbuf);
	harness_log("log:\n%s", logbuf);
	return logbuf;
}

/* Runs wsyncd with --gpus spec as the plain instance; it must exit 1. */
static const char *refused(const char *spec)
{
	char *argv[] = { (char *)harness_wsyncd_path(), "--name", plain.name, "--gpus",
	                 (char *)spec, NULL };
	int st;

	TEST_ASSERT(plain.name[0]);
	st = harness_run(argv, out, sizeof out, 10000);
	harness_log("--gpus %s: %s; output: %s", spec, harness_status_str(st), out);
	TEST_ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "--gpus %s: %s", spec,
	                harness_status_str(st));
	return out;
}

static void env_clear(void)
{
	static const char *const names[] = {
		"FAKECUDA_DEVICES", "FAKECUDA_PEERS", "FAKECUDA_NO_FD", "FAKECUDA_REPORT",
		"CUDA_VISIBLE_DEVICES", "WSYNC_LIBCUDA",
	};

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		unsetenv(names[i]);
}

static void without_driver(void)
{
	struct broker b;

	env_clear();
	setenv("WSYNC_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
	serve_and_stop(&plain, NULL, NULL);
	TEST_EQ_U64(count_of(logbuf, "info: gpu: "), 1);
#ifdef WSYNC_HAVE_CUDA_H
	TEST_CONTAINS(logbuf, "gpu: no CUDA driver: /nonexistent/libcuda.so.1");
#else
	TEST_CONTAINS(logbuf, "GPU support is compiled out");
#endif
	TEST_CONTAINS(logbuf, "serving host models only");
	TEST_CONTAINS(refused("0"), "--gpus 0: ");

	serve_and_stop(&b, "--gpus", "none");
	TEST_CONTAINS(logbuf, "gpu: disabled (--gpus none); serving host models only");
}

#ifdef WSYNC_HAVE_CUDA_H
static char fake[4096], report[4096];

static void fake_env(const char *devices, const char *peers)
{
	env_clear();
	setenv("WSYNC_LIBCUDA", fake, 1);
	setenv("FAKECUDA_DEVICES", devices, 1);
	if (peers)
		setenv("FAKECUDA_PEERS", peers, 1);
}

/* The UUIDs the fake shows this process. */
static void fake_uuids(struct wsync_gpu_inventory *inv)
{
	struct wsync_cuda cu;
	char why[256];

	TEST_ASSERT_MSG(wsync_cuda_load(&cu, why, sizeof why) == 0, "%s", why);
	TEST_ASSERT_MSG(wsync_cuda_discover(&cu, inv, why, sizeof why) == 0, "%s", why);
	wsync_cuda_unload(&cu);
}

static void with_fake_driver(void)
{
	struct wsync_gpu_inventory inv;
	char line[8192];
	struct broker b;

	fake_env("3", "01,10");
	fake_uuids(&inv);
	TEST_EQ_U64(inv.count, 3);
	snprintf(report, sizeof report, "/tmp/wsync-gpu-startup-%d.report", (int)getpid());
	setenv("FAKECUDA_REPORT", report, 1);
	serve_and_stop(&plain, NULL, NULL);
	snprintf(line, sizeof line, "gpu: CUDA driver 12.4 (%s), 3 GPUs", fake);
	TEST_CONTAINS(logbuf, line);
	TEST_EQ_U64(count_of(logbuf, "gpu: CUDA driver"), 1);
	for (int i = 0; i < 3; i++) {
		snprintf(line, sizeof line, "gpu %d: %s 'Fake CUDA Device %d' pci 0000:%02x:00 "
		         "mem 1 GiB vmm yes fd yes granularity 2 MiB", i, inv.dev[i].uuid_text, i,
		         0x17 + 0x10 * i);
		TEST_CONTAINS(logbuf, line);
	}
	TEST_CONTAINS(logbuf, "gpu: peer access 0>1 1>0\n");
	TEST_CONTAINS(logbuf, "gpu: serving device models on GPU 0,1,2\n");
	/* the broker held no context and no device memory */
	TEST_CONTAINS(harness_read_file(report, out, sizeof out),
	              "allocations=0 exports=0 mappings=0 reservations=0 mem_allocs=0 "
	              "host_registrations=0 streams=0 events=0 contexts=0");
	unlink(report);
	unsetenv("FAKECUDA_REPORT");

	/* by UUID (any case, GPU- optional) and by ordinal */
	snprintf(line, sizeof line, "%s,0", inv.dev[2].uuid_text + 4);
	for (char *p = line; *p; p++)
		*p = (char)(*p >= 'a' && *p <= 'f' ? *p - 32 : *p);
	serve_and_stop(&b, "--gpus", line);
	TEST_CONTAINS(logbuf, "gpu: serving device models on GPU 0,2\n");

	/* ordinals are the broker's own, after its CUDA_VISIBLE_DEVICES */
	setenv("CUDA_VISIBLE_DEVICES", "2", 1);
	serve_and_stop(&b, "--gpus", "0");
	snprintf(line, sizeof line, "gpu 0: %s 'Fake CUDA Device 2'", inv.dev[2].uuid_text);
	TEST_CONTAINS(logbuf, line);
	TEST_CONTAINS(logbuf, "gpu: CUDA driver 12.4");
	TEST_CONTAINS(logbuf, "1 GPU\n");
	TEST_CONTAINS(logbuf, "gpu: serving device models on GPU 0\n");
	TEST_CONTAINS(refused(inv.dev[1].uuid_text), "--gpus: no GPU 'GPU-");
	unsetenv("CUDA_VISIBLE_DEVICES");

	TEST_CONTAINS(refused("3"), "--gpus: no GPU '3' here (3 found;");
	TEST_CONTAINS(refused("GPU-00000000-0000-0000-0000-000000000000"),
	              "no GPU 'GPU-00000000-0000-0000-0000-000000000000' here");

	/* GPUs that cannot export memory as an fd */
	setenv("FAKECUDA_NO_FD", "1", 1);
	serve_and_stop(&plain, NULL, NULL);
	TEST_CONTAINS(logbuf, "vmm yes fd no\n");
	TEST_CONTAINS(logbuf, "warn: gpu 1: no POSIX-fd handles; not used for device models");
	TEST_CONTAINS(logbuf, "gpu: no GPU can export memory; serving host models only");
	TEST_CONTAINS(refused("1"), "GPU 1 (GPU-");
	TEST_CONTAINS(out, "cannot export memory as a file descriptor (VMM without POSIX-fd handles)");

	/* a driver without GPUs */
	fake_env("0", NULL);
	serve_and_stop(&plain, NULL, NULL);
	snprintf(line, sizeof line, "gpu: CUDA driver 12.4 (%s), no GPU; serving host models "
	         "only", fake);
	TEST_CONTAINS(logbuf, line);
	TEST_CONTAINS(refused("0"), "shows no GPU");
}
#endif

int main(void)
{
#ifdef WSYNC_HAVE_CUDA_H
	harness_fakecuda_path(fake, sizeof fake);
	with_fake_driver();
#endif
	without_driver();
	return 0;
}
