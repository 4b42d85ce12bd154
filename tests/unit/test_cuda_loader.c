/*
 * test_cuda_loader — shm/cuda_loader and shm/cuda_discover against the fake
 * driver ($BUILD/tests/fakecuda/libcuda.so.1 through WSYNC_LIBCUDA): every
 * entry point resolves, to the versioned ABI (cuMemcpyDtoDAsync_v2, never
 * the legacy symbol), through cuGetProcAddress_v2 at its ABI's version,
 * or by versioned dlsym names on a driver older than 12.0; a missing
 * driver, an old driver, a missing entry point and a failing cuInit are
 * refused with a clear reason; a driver without GPUs loads with none.
 * Discovery lists names, UUIDs (text form), VMM and fd support,
 * granularity and the peer matrix, creates no context and leaks nothing;
 * GPUs are found by UUID or ordinal. The typed pointers drive a VMM round
 * trip, copies, a stream and an event, leaving nothing behind.
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
	assert_int_equal(cu.by_proc_address, 1);
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
	assert_int_equal(cu.by_proc_address, 0);
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
	assert_load_fails(-ENOTSUP, "has no entry point cuMemCreate of CUDA 10.2");
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

/* The typed pointers call the driver correctly: a VMM round trip (create,
 * export, import, reserve, map, read-only and read-write access), copies on
 * a stream with an event, and everything released, through cu.api only. */
static void test_entry_points_work(void **state)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
	                             .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
	                             .location = { CU_MEM_LOCATION_TYPE_DEVICE, 1 } };
	CUmemAccessDesc rw = { { CU_MEM_LOCATION_TYPE_DEVICE, 1 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUmemAccessDesc ro = { { CU_MEM_LOCATION_TYPE_DEVICE, 1 }, CU_MEM_ACCESS_FLAGS_PROT_READ };
	CUmemGenericAllocationHandle h, imp;
	unsigned char host[4096], back[4096];
	struct fakecuda_live live;
	fakecuda_live_fn live_fn;
	struct wsync_cuda cu;
	const struct wsync_cuda_api *a;
	CUdeviceptr pw, pr;
	CUcontext ctx;
	CUstream s;
	CUevent ev;
	size_t gran;
	int fd, dev;

	(void)state;
	fake_env(NULL);
	load_ok(&cu);
	a = &cu.api;
	for (size_t i = 0; i < sizeof(host); i++)
		host[i] = (unsigned char)(i * 13 + 1);
	assert_int_equal(a->cu_cuMemGetAllocationGranularity(&gran, &prop,
	                 CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemCreate(&h, gran, &prop, 0), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemExportToShareableHandle(&fd, h,
	                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
	                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), CUDA_SUCCESS);
	close(fd);
	assert_int_equal(a->cu_cuMemAddressReserve(&pw, gran, 0, 0, 0), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemAddressReserve(&pr, gran, 0, 0, 0), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemMap(pw, gran, 0, h, 0), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemMap(pr, gran, 0, imp, 0), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemRelease(h), CUDA_SUCCESS);      /* mappings keep it */
	assert_int_equal(a->cu_cuMemRelease(imp), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemSetAccess(pw, gran, &rw, 1), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemSetAccess(pr, gran, &ro, 1), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuPointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, pr),
	                 CUDA_SUCCESS);
	assert_int_equal(dev, 1);

	assert_int_equal(a->cu_cuDevicePrimaryCtxRetain(&ctx, 1), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuCtxSetCurrent(ctx), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemHostRegister(host, sizeof(host), 0), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemcpyHtoDAsync(pw, host, sizeof(host), s), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemcpyDtoDAsync(pw + sizeof(host), pr, sizeof(host), s), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuEventRecord(ev, s), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuEventSynchronize(ev), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemcpyDtoH(back, pr + sizeof(host), sizeof(back)), CUDA_SUCCESS);
	assert_memory_equal(back, host, sizeof(host));
	/* the read-only view is no copy target */
	assert_int_equal(a->cu_cuMemcpyHtoD(pr, host, 16), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(a->cu_cuStreamSynchronize(s), CUDA_SUCCESS);

	assert_int_equal(a->cu_cuMemHostUnregister(host), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuEventDestroy(ev), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuStreamDestroy(s), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuCtxSetCurrent(NULL), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemUnmap(pr, gran), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemUnmap(pw, gran), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemAddressFree(pr, gran), CUDA_SUCCESS);
	assert_int_equal(a->cu_cuMemAddressFree(pw, gran), CUDA_SUCCESS);
	live_fn = (fakecuda_live_fn)dlsym(cu.lib, "fakecuda_live");
	live_fn(&live);
	assert_int_equal(live.allocations + live.exports + live.mappings + live.reservations +
	                 live.host_registrations + live.streams + live.events + live.contexts, 0);
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
		cmocka_unit_test(test_entry_points_work),
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
