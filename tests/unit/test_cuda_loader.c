/*
 * test_cuda_loader — shm/cuda_loader and shm/cuda_discover against the fake
 * driver ($BUILD/tests/fakecuda/libcuda.so.1 through WSYNC_LIBCUDA): every
 * entry point resolves, to the versioned ABI (cuMemcpyDtoDAsync_v2, never
 * the legacy symbol), through cuGetProcAddress_v2 at the driver's version,
 * or by versioned dlsym names on a driver older than 12.0; a missing
 * driver, an old driver, a missing entry point and a failing cuInit are
 * refused with a clear reason; a driver without GPUs loads with none.
 * Discovery lists names, UUIDs (text form), VMM and fd support,
 * granularity and the peer matrix, creates no context and leaks nothing;
 * GPUs are found by UUID or ordinal.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm/cuda_discover.h"
#include "shm/cuda_loader.h"

static void test_uuid_text_and_find(void **state)
{
	struct wsync_gpu_inventory inv;
	uint8_t u[16];
	char text[WSYNC_GPU_UUID_TEXT];

	(void)state;
	for (int i = 0; i < 16; i++)
		u[i] = (uint8_t)(0xa0 + i);
	wsync_gpu_uuid_format(u, text, sizeof(text));
	assert_string_equal(text, "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
	memset(&inv, 0, sizeof(inv));
	inv.count = 2;
	snprintf(inv.dev[1].uuid_text, sizeof(inv.dev[1].uuid_text), "%s", text);
	snprintf(inv.dev[0].uuid_text, sizeof(inv.dev[0].uuid_text),
	         "GPU-00000000-0000-0000-0000-000000000000");
	assert_int_equal(wsync_gpu_find(&inv, text), 1);
	assert_int_equal(wsync_gpu_find(&inv, "A0A1A2A3-A4A5-A6A7-A8A9-AAABACADAEAF"), 1);
	assert_int_equal(wsync_gpu_find(&inv, "GPU-a0a1a2a3"), -1);    /* no prefixes */
	assert_int_equal(wsync_gpu_find(&inv, "0"), 0);
	assert_int_equal(wsync_gpu_find(&inv, "2"), -1);
	assert_int_equal(wsync_gpu_find(&inv, "1x"), -1);
	assert_int_equal(wsync_gpu_find(&inv, ""), -1);
	inv.peer[0][1] = true;
	wsync_gpu_peers_text(&inv, text, sizeof(text));
	assert_string_equal(text, "0>1");
	inv.peer[0][1] = false;
	wsync_gpu_peers_text(&inv, text, sizeof(text));
	assert_string_equal(text, "none");
}

#ifdef WSYNC_HAVE_CUDA_H
#include <dlfcn.h>

#include "tests/fakecuda/fakecuda.h"

static char fake_path[4096];

static const char *const fc_envs[] = {
	"FAKECUDA_DEVICES", "FAKECUDA_PEERS", "FAKECUDA_DRIVER_VERSION", "FAKECUDA_MEM_MB",
	"FAKECUDA_FAIL", "FAKECUDA_DIE", "FAKECUDA_NO_VMM", "FAKECUDA_NO_FD",
	"CUDA_VISIBLE_DEVICES",
};

/* WSYNC_LIBCUDA at the fake driver, configured by "NAME=value" strings.
 * The fake reads them at cuInit; it is unloaded between loads. */
static void fake_env(const char *kv, ...)
{
	va_list ap;

	for (size_t i = 0; i < sizeof(fc_envs) / sizeof(fc_envs[0]); i++)
		unsetenv(fc_envs[i]);
	setenv("WSYNC_LIBCUDA", fake_path, 1);
	va_start(ap, kv);
	for (const char *s = kv; s; s = va_arg(ap, const char *))
		putenv((char *)s);
	va_end(ap);
}

static int load_ok(struct wsync_cuda *cu)
{
	char why[512] = "";
	int err = wsync_cuda_load(cu, why, sizeof(why));

	if (err)
		fail_msg("wsync_cuda_load: %d: %s", err, why);
	return 0;
}

static void assert_load_fails(int want, const char *reason)
{
	struct wsync_cuda cu;
	char why[512] = "";

	assert_int_equal(wsync_cuda_load(&cu, why, sizeof(why)), want);
	if (!strstr(why, reason))
		fail_msg("reason \"%s\" does not contain \"%s\"", why, reason);
	assert_null(cu.lib);
}

static void assert_versioned_entries(struct wsync_cuda *cu)
{
#define CHECK_ENTRY(name, version, symbol) \
	if ((void *)cu->api.cu_##name != dlsym(cu->lib, #symbol) || !cu->api.cu_##name) \
		fail_msg("%s is not the driver's %s", #name, #symbol);
	WSYNC_CUDA_ENTRIES(CHECK_ENTRY)
#undef CHECK_ENTRY
	assert_null(dlsym(cu->lib, "cuMemcpyDtoDAsync"));   /* the fake has no legacy ABI */
}

static void test_loads_versioned_entries_through_get_proc_address(void **state)
{
	struct wsync_cuda cu;

	(void)state;
	fake_env("FAKECUDA_DEVICES=3", NULL);
	load_ok(&cu);
	assert_int_equal(cu.driver_version, 12040);
	/* asked at the driver's version: the fake refuses one above its own */
	assert_int_equal(cu.proc_version, 12040);
	assert_int_equal(cu.device_count, 3);
	assert_string_equal(cu.path, fake_path);
	assert_versioned_entries(&cu);
	wsync_cuda_unload(&cu);
	assert_null(cu.lib);
}

static void test_driver_before_12_resolves_versioned_names(void **state)
{
	struct wsync_cuda cu;

	(void)state;
	fake_env("FAKECUDA_DRIVER_VERSION=11080", NULL);
	load_ok(&cu);
	assert_int_equal(cu.driver_version, 11080);
	assert_int_equal(cu.proc_version, 0);
	assert_versioned_entries(&cu);
	wsync_cuda_unload(&cu);
}

static void test_refusals_say_why(void **state)
{
	(void)state;
	fake_env(NULL);
	setenv("WSYNC_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
	assert_load_fails(-ENOENT, "no CUDA driver: /nonexistent/libcuda.so.1");
	fake_env("FAKECUDA_DRIVER_VERSION=10020", NULL);
	assert_load_fails(-ENOTSUP, "is version 10.2; wsync needs 11.4 or newer");
	fake_env("FAKECUDA_FAIL=cuGetProcAddress_v2:14", NULL);
	assert_load_fails(-ENOTSUP, "has no entry point cuMemCreate for CUDA 12.4");
	fake_env("FAKECUDA_FAIL=cuInit:1", NULL);
	assert_load_fails(-EIO, "failed to initialise: CUDA_ERROR_UNKNOWN");
}

static void test_driver_without_gpus(void **state)
{
	struct wsync_gpu_inventory inv;
	struct wsync_cuda cu;
	char why[256];

	(void)state;
	fake_env("FAKECUDA_DEVICES=0", NULL);
	load_ok(&cu);
	assert_int_equal(cu.device_count, 0);
	assert_int_equal(wsync_cuda_discover(&cu, &inv, why, sizeof(why)), 0);
	assert_int_equal(inv.count, 0);
	wsync_cuda_unload(&cu);
}

static void test_discovery(void **state)
{
	struct wsync_gpu_inventory inv;
	struct fakecuda_live live;
	fakecuda_live_fn live_fn;
	struct wsync_cuda cu;
	char why[256], text[WSYNC_GPU_UUID_TEXT], peers[128];
	CUuuid u;

	(void)state;
	fake_env("FAKECUDA_DEVICES=3", "FAKECUDA_PEERS=01,10", NULL);
	load_ok(&cu);
	assert_int_equal(wsync_cuda_discover(&cu, &inv, why, sizeof(why)), 0);
	assert_int_equal(inv.driver_version, 12040);
	assert_int_equal(inv.count, 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(inv.dev[i].ordinal, i);
		assert_true(inv.dev[i].vmm);
		assert_true(inv.dev[i].posix_fd);
		assert_int_equal(inv.dev[i].granularity, FAKECUDA_GRANULARITY);
		assert_int_equal(cu.api.cu_cuDeviceGetUuid(&u, i), CUDA_SUCCESS);
		wsync_gpu_uuid_format((const uint8_t *)u.bytes, text, sizeof(text));
		assert_string_equal(inv.dev[i].uuid_text, text);
		assert_int_equal(wsync_gpu_find(&inv, text), i);
	}
	assert_string_equal(inv.dev[2].name, "Fake CUDA Device 2");
	wsync_gpu_peers_text(&inv, peers, sizeof(peers));
	assert_string_equal(peers, "0>1 1>0");
	/* no context, nothing else left behind */
	live_fn = (fakecuda_live_fn)dlsym(cu.lib, "fakecuda_live");
	assert_non_null(live_fn);
	live_fn(&live);
	assert_int_equal(live.contexts + live.allocations + live.streams + live.reservations, 0);
	wsync_cuda_unload(&cu);

	fake_env("FAKECUDA_NO_FD=1", "CUDA_VISIBLE_DEVICES=1", NULL);
	load_ok(&cu);
	assert_int_equal(wsync_cuda_discover(&cu, &inv, why, sizeof(why)), 0);
	assert_int_equal(inv.count, 1);
	assert_true(inv.dev[0].vmm);
	assert_false(inv.dev[0].posix_fd);
	assert_int_equal(inv.dev[0].granularity, 0);
	assert_string_equal(inv.dev[0].name, "Fake CUDA Device 1");
	wsync_cuda_unload(&cu);
}

int main(void)
{
	const char *build = getenv("BUILD");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_uuid_text_and_find),
		cmocka_unit_test(test_loads_versioned_entries_through_get_proc_address),
		cmocka_unit_test(test_driver_before_12_resolves_versioned_names),
		cmocka_unit_test(test_refusals_say_why),
		cmocka_unit_test(test_driver_without_gpus),
		cmocka_unit_test(test_discovery),
	};

	snprintf(fake_path, sizeof(fake_path), "%s/tests/fakecuda/libcuda.so.1",
	         build && *build ? build : "build");
	if (access(fake_path, R_OK) != 0) {
		printf("no fake driver at %s (make tests builds it)\n", fake_path);
		return 1;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
static void test_compiled_out(void **state)
{
	struct wsync_cuda cu;
	char why[256];

	(void)state;
	assert_int_equal(wsync_cuda_load(&cu, why, sizeof(why)), -ENOSYS);
	assert_non_null(strstr(why, "compiled out"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_uuid_text_and_find),
		cmocka_unit_test(test_compiled_out),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
