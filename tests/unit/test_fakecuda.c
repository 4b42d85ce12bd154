/*
 * test_fakecuda — the fake CUDA driver (tests/fakecuda) does what the GPU
 * tests rely on: every simulated function's happy path; only versioned
 * names for functions with a _v2 ABI (a dlsym of a legacy name fails) and
 * cuGetProcAddress_v2 picks the entry for a version; memory exported as an
 * fd is the same memory in another process; a PROT_READ mapping faults on
 * write; an asynchronous copy is not there before a synchronise and is
 * after it; FAKECUDA_* settings, failure and death injection; every test
 * ends with all live counters at zero. And strict where the driver is: VMM
 * access per device (a copy issued from a device without access fails,
 * access cannot be given to a device that does not reach the memory), host
 * memory pinned only for its context unless portable (else the copy is a
 * synchronous pageable one), unregistration in that context, events
 * recorded only on streams of their own context; 2D copies; call counts.
 *
 * Linked against the fake (as a program is against libcuda.so.1). Built
 * without the toolkit's cuda.h it skips.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#ifndef WSYNC_HAVE_CUDA_H
int main(void)
{
	printf("SKIP: built without the CUDA Toolkit's cuda.h; no fake driver\n");
	return 77;
}
#else
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/fakecuda/fakecuda.h"

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

#define MiB ((size_t)1 << 20)
#define GRAN FAKECUDA_GRANULARITY
#define CU_OK(expr) assert_int_equal((expr), CUDA_SUCCESS)

static const char *const fc_envs[] = {
	"FAKECUDA_DEVICES", "FAKECUDA_PEERS", "FAKECUDA_DRIVER_VERSION", "FAKECUDA_MEM_MB",
	"FAKECUDA_FAIL", "FAKECUDA_DIE", "FAKECUDA_NO_VMM", "FAKECUDA_NO_FD",
	"FAKECUDA_COPY_DELAY_US", "CUDA_VISIBLE_DEVICES",
};

/* A fresh driver configured by "NAME=value" strings, NULL-terminated. */
static void driver_start(const char *kv, ...)
{
	va_list ap;

	for (size_t i = 0; i < sizeof(fc_envs) / sizeof(fc_envs[0]); i++)
		unsetenv(fc_envs[i]);
	va_start(ap, kv);
	for (const char *s = kv; s; s = va_arg(ap, const char *))
		putenv((char *)s);
	va_end(ap);
	assert_int_equal(fakecuda_reset(), 0);
	CU_OK(cuInit(0));
}

static void assert_nothing_live(void)
{
	struct fakecuda_live l;

	fakecuda_live(&l);
	assert_int_equal(l.allocations, 0);
	assert_int_equal(l.exports, 0);
	assert_int_equal(l.mappings, 0);
	assert_int_equal(l.reservations, 0);
	assert_int_equal(l.mem_allocs, 0);
	assert_int_equal(l.host_registrations, 0);
	assert_int_equal(l.streams, 0);
	assert_int_equal(l.events, 0);
	assert_int_equal(l.contexts, 0);
}

static int teardown(void **state)
{
	(void)state;
	CU_OK(cuCtxSetCurrent(NULL));
	assert_nothing_live();
	return 0;
}

static CUmemAllocationProp prop_on(int dev)
{
	CUmemAllocationProp p;

	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = dev;
	return p;
}

/* A mapped device buffer: reserve, map and set access on one handle. */
struct dbuf {
	CUmemGenericAllocationHandle h;
	CUdeviceptr p;
	size_t size;
};

static void dbuf_map(struct dbuf *b, CUmemGenericAllocationHandle h, size_t size, int dev,
                     CUmemAccess_flags access)
{
	CUmemAccessDesc d = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, dev }, .flags = access };

	b->h = h;
	b->size = size;
	CU_OK(cuMemAddressReserve(&b->p, size, 0, 0, 0));
	assert_int_equal(b->p % GRAN, 0);
	CU_OK(cuMemMap(b->p, size, 0, h, 0));
	CU_OK(cuMemSetAccess(b->p, size, &d, 1));
}

static void dbuf_new(struct dbuf *b, size_t size, int dev)
{
	CUmemAllocationProp prop = prop_on(dev);
	CUmemGenericAllocationHandle h;

	CU_OK(cuMemCreate(&h, size, &prop, 0));
	dbuf_map(b, h, size, dev, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
}

static void dbuf_free(struct dbuf *b)
{
	CU_OK(cuMemUnmap(b->p, b->size));
	CU_OK(cuMemAddressFree(b->p, b->size));
	CU_OK(cuMemRelease(b->h));
}

static CUcontext ctx_enter(int dev)
{
	CUcontext ctx;

	CU_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_OK(cuCtxSetCurrent(ctx));
	return ctx;
}

static void ctx_leave(int dev)
{
	CU_OK(cuCtxSetCurrent(NULL));
	CU_OK(cuDevicePrimaryCtxRelease_v2(dev));
}

/* ---- devices, versions, names ------------------------------------------ */

static void test_devices_and_attributes(void **state)
{
	CUuuid u0, u0b, u1;
	char name[64];
	int v, n, can;
	size_t total;

	(void)state;
	driver_start(NULL);
	CU_OK(cuDriverGetVersion(&v));
	assert_int_equal(v, 12040);
	CU_OK(cuDeviceGetCount(&n));
	assert_int_equal(n, 2);
	CU_OK(cuDeviceGet(&v, 1));
	assert_int_equal(v, 1);
	assert_int_equal(cuDeviceGet(&v, 2), CUDA_ERROR_INVALID_DEVICE);
	CU_OK(cuDeviceGetName(name, sizeof(name), 1));
	assert_string_equal(name, "Fake CUDA Device 1");
	CU_OK(cuDeviceGetUuid_v2(&u0, 0));
	CU_OK(cuDeviceGetUuid_v2(&u0b, 0));
	CU_OK(cuDeviceGetUuid_v2(&u1, 1));
	assert_memory_equal(u0.bytes, u0b.bytes, 16);
	assert_memory_not_equal(u0.bytes, u1.bytes, 16);
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
	assert_int_equal(v, 1);
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1));
	assert_int_equal(v, 1);
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1));
	assert_int_equal(v, 0x27);
	CU_OK(cuDeviceTotalMem_v2(&total, 0));
	assert_int_equal(total, 1024 * MiB);
	CU_OK(cuDeviceCanAccessPeer(&can, 0, 1));
	assert_int_equal(can, 1);
	CU_OK(cuDeviceCanAccessPeer(&can, 1, 1));
	assert_int_equal(can, 0);
}

static void test_configuration_from_environment(void **state)
{
	CUuuid phys1, vis0;
	int n, v, can;

	(void)state;
	driver_start("FAKECUDA_DEVICES=3", "FAKECUDA_PEERS=01,12", "FAKECUDA_DRIVER_VERSION=11080",
	             NULL);
	CU_OK(cuDriverGetVersion(&v));
	assert_int_equal(v, 11080);
	CU_OK(cuDeviceGetCount(&n));
	assert_int_equal(n, 3);
	CU_OK(cuDeviceCanAccessPeer(&can, 0, 1));
	assert_int_equal(can, 1);
	CU_OK(cuDeviceCanAccessPeer(&can, 1, 0));
	assert_int_equal(can, 0);
	CU_OK(cuDeviceCanAccessPeer(&can, 1, 2));
	assert_int_equal(can, 1);
	CU_OK(cuDeviceCanAccessPeer(&can, 0, 2));
	assert_int_equal(can, 0);
	CU_OK(cuDeviceGetUuid_v2(&phys1, 1));

	/* CUDA_VISIBLE_DEVICES renumbers; an invalid entry ends the list. */
	driver_start("FAKECUDA_DEVICES=3", "CUDA_VISIBLE_DEVICES=1,0,7,2", NULL);
	CU_OK(cuDeviceGetCount(&n));
	assert_int_equal(n, 2);
	CU_OK(cuDeviceGetUuid_v2(&vis0, 0));
	assert_memory_equal(vis0.bytes, phys1.bytes, 16);

	driver_start("FAKECUDA_PEERS=none", "FAKECUDA_NO_FD=1", NULL);
	CU_OK(cuDeviceCanAccessPeer(&can, 0, 1));
	assert_int_equal(can, 0);
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
	assert_int_equal(v, 1);
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0));
	assert_int_equal(v, 0);

	driver_start("FAKECUDA_NO_VMM=1", NULL);
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
	assert_int_equal(v, 0);
	CUmemAllocationProp prop = prop_on(0);
	CUmemGenericAllocationHandle h;
	assert_int_equal(cuMemCreate(&h, GRAN, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
}

static void test_visible_devices_by_uuid_prefix(void **state)
{
	CUuuid u2, vis0;
	char env[64];
	int n;

	(void)state;
	driver_start("FAKECUDA_DEVICES=3", NULL);
	CU_OK(cuDeviceGetUuid_v2(&u2, 2));
	snprintf(env, sizeof(env), "CUDA_VISIBLE_DEVICES=GPU-%02x%02x%02x", u2.bytes[0] & 0xff,
	         u2.bytes[1] & 0xff, u2.bytes[2] & 0xff);
	driver_start("FAKECUDA_DEVICES=3", env, NULL);
	CU_OK(cuDeviceGetCount(&n));
	assert_int_equal(n, 1);
	CU_OK(cuDeviceGetUuid_v2(&vis0, 0));
	assert_memory_equal(vis0.bytes, u2.bytes, 16);
}

static void test_not_initialised_and_errors(void **state)
{
	const char *s;
	int n;

	(void)state;
	driver_start(NULL);
	assert_int_equal(fakecuda_reset(), 0);
	assert_int_equal(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
	CU_OK(cuDriverGetVersion(&n));          /* allowed before cuInit */
	CU_OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
	assert_string_equal(s, "CUDA_ERROR_OUT_OF_MEMORY");
	CU_OK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
	assert_string_equal(s, "invalid argument");
	assert_int_equal(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuInit(0));
}

/* ---- names and cuGetProcAddress_v2 ------------------------------------- */

static void test_legacy_names_absent(void **state)
{
	static const char *const legacy[] = {
		"cuMemcpyDtoDAsync", "cuMemcpyDtoD", "cuMemcpyHtoD", "cuMemcpyDtoH",
		"cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemAlloc", "cuMemFree",
		"cuStreamDestroy", "cuEventDestroy", "cuMemHostRegister", "cuMemcpy2DAsync",
		"cuDevicePrimaryCtxRelease", "cuDeviceTotalMem", "cuGetProcAddress",
	};
	char v2[64];

	(void)state;
	for (size_t i = 0; i < sizeof(legacy) / sizeof(legacy[0]); i++) {
		snprintf(v2, sizeof(v2), "%s_v2", legacy[i]);
		if (dlsym(RTLD_DEFAULT, legacy[i]))
			fail_msg("the fake exports the legacy name %s", legacy[i]);
		if (!dlsym(RTLD_DEFAULT, v2))
			fail_msg("the fake lacks %s", v2);
	}
}

static void test_get_proc_address(void **state)
{
	CUdriverProcAddressQueryResult st;
	void *fn;

	(void)state;
	driver_start(NULL);
	CU_OK(cuGetProcAddress_v2("cuMemcpyDtoDAsync", &fn, 12040, 0, &st));
	assert_ptr_equal(fn, (void *)cuMemcpyDtoDAsync_v2);
	assert_int_equal(st, CU_GET_PROC_ADDRESS_SUCCESS);
	CU_OK(cuGetProcAddress_v2("cuMemcpy2DAsync", &fn, 12040, 0, &st));
	assert_ptr_equal(fn, (void *)cuMemcpy2DAsync_v2);
	CU_OK(cuGetProcAddress_v2("cuMemCreate", &fn, 11000, 0, &st));
	assert_ptr_equal(fn, (void *)cuMemCreate);
	CU_OK(cuGetProcAddress_v2("cuDeviceGetUuid", &fn, 11040, 0, &st));
	assert_ptr_equal(fn, (void *)cuDeviceGetUuid_v2);
	CU_OK(cuGetProcAddress_v2("cuDeviceGetUuid", &fn, 10000, 0, &st));
	assert_ptr_equal(fn, dlsym(RTLD_DEFAULT, "cuDeviceGetUuid"));
	/* too old a version for VMM; a name that does not exist; a suffixed name */
	assert_int_equal(cuGetProcAddress_v2("cuMemCreate", &fn, 10000, 0, &st), CUDA_ERROR_NOT_FOUND);
	assert_int_equal(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	assert_int_equal(cuGetProcAddress_v2("cuNoSuchThing", &fn, 12040, 0, &st), CUDA_ERROR_NOT_FOUND);
	assert_int_equal(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	assert_int_equal(cuGetProcAddress_v2("cuMemAlloc_v2", &fn, 12040, 0, &st), CUDA_ERROR_NOT_FOUND);
	/* a version above the driver's is refused */
	assert_int_equal(cuGetProcAddress_v2("cuInit", &fn, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE);
}

/* ---- VMM memory ----------------------------------------------------------- */

static void test_vmm_create_export_import_map(void **state)
{
	CUmemAllocationProp prop = prop_on(1);
	CUmemGenericAllocationHandle imp;
	struct dbuf a, b;
	struct fakecuda_live l;
	size_t gran;
	int fd, dev;

	(void)state;
	driver_start(NULL);
	CU_OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	assert_int_equal(gran, GRAN);
	assert_int_equal(cuMemCreate(&imp, GRAN + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	dbuf_new(&a, 2 * GRAN, 1);
	memset((void *)a.p, 0x5a, a.size);
	CU_OK(cuPointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a.p + 100));
	assert_int_equal(dev, 1);

	CU_OK(cuMemExportToShareableHandle(&fd, a.h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CU_OK(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
	                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	fakecuda_live(&l);
	assert_int_equal(l.allocations, 2);
	assert_int_equal(l.exports, 1);
	close(fd);
	dbuf_map(&b, imp, 2 * GRAN, 1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	assert_int_equal(((unsigned char *)b.p)[GRAN + 7], 0x5a);
	((unsigned char *)b.p)[3] = 0x11;                      /* same pages */
	assert_int_equal(((unsigned char *)a.p)[3], 0x11);
	fakecuda_live(&l);
	assert_int_equal(l.mappings, 2);
	assert_int_equal(l.reservations, 2);
	assert_int_equal(l.exports, 0);

	/* a reservation that is still mapped cannot be freed; a handle released
	 * while mapped lives on until the unmap */
	assert_int_equal(cuMemAddressFree(a.p, a.size), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemRelease(a.h));
	assert_int_equal(cuMemRelease(a.h), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(((unsigned char *)a.p)[5], 0x5a);
	CU_OK(cuMemUnmap(a.p, a.size));
	CU_OK(cuMemAddressFree(a.p, a.size));
	dbuf_free(&b);
}

static void test_memory_budget(void **state)
{
	CUmemAllocationProp prop = prop_on(0);
	CUmemGenericAllocationHandle h1, h2, h3;

	(void)state;
	driver_start("FAKECUDA_MEM_MB=4", NULL);
	CU_OK(cuMemCreate(&h1, GRAN, &prop, 0));
	CU_OK(cuMemCreate(&h2, GRAN, &prop, 0));
	assert_int_equal(cuMemCreate(&h3, GRAN, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
	prop.location.id = 1;                                   /* per device */
	CU_OK(cuMemCreate(&h3, GRAN, &prop, 0));
	CU_OK(cuMemRelease(h1));
	prop.location.id = 0;
	CU_OK(cuMemCreate(&h1, GRAN, &prop, 0));
	CU_OK(cuMemRelease(h1));
	CU_OK(cuMemRelease(h2));
	CU_OK(cuMemRelease(h3));
}

static int send_fd(int sock, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	char byte = 'f';
	struct iovec iov = { &byte, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
	                     .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &mh, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	char byte;
	struct iovec iov = { &byte, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
	                     .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;
	int fd;

	if (recvmsg(sock, &mh, 0) != 1 || !(c = CMSG_FIRSTHDR(&mh)) || c->cmsg_type != SCM_RIGHTS)
		return -1;
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

/* In a child: import the fd from sock, map it with access, check the first
 * byte is want; write 0x77 at byte 1 if it may. Exit 0 when all held. */
static void __attribute__((noreturn)) child_import(int sock, CUmemAccess_flags access,
                                                  unsigned char want, bool write_after)
{
	CUmemGenericAllocationHandle h;
	struct dbuf b;
	int fd = recv_fd(sock);

	if (fd < 0 || cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
	                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		_exit(10);
	close(fd);
	dbuf_map(&b, h, GRAN, 0, access);
	if (((volatile unsigned char *)b.p)[0] != want)
		_exit(11);
	if (write_after)
		((volatile unsigned char *)b.p)[1] = 0x77;  /* faults if read-only */
	dbuf_free(&b);
	_exit(0);
}

static pid_t fork_importer(int sv[2], CUmemAccess_flags access, unsigned char want, bool write)
{
	pid_t pid;

	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);      /* cmocka's handler would catch the fault */
		close(sv[0]);
		child_import(sv[1], access, want, write);
	}
	close(sv[1]);
	return pid;
}

static void share_with_child(CUmemAccess_flags access, int *status, unsigned char *byte1)
{
	struct dbuf a;
	int sv[2], fd;
	pid_t pid = fork_importer(sv, access, 0xc3, true);

	dbuf_new(&a, GRAN, 0);
	memset((void *)a.p, 0xc3, a.size);
	CU_OK(cuMemExportToShareableHandle(&fd, a.h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	assert_int_equal(send_fd(sv[0], fd), 0);
	close(fd);
	close(sv[0]);
	assert_int_equal(waitpid(pid, status, 0), pid);
	*byte1 = ((unsigned char *)a.p)[1];
	dbuf_free(&a);
}

static void test_exported_fd_shares_memory_across_processes(void **state)
{
	unsigned char byte1;
	int status;

	(void)state;
	driver_start(NULL);
	share_with_child(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, &status, &byte1);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(byte1, 0x77);                  /* the child's write is here */
}

static void test_read_only_mapping_faults_on_write(void **state)
{
	unsigned char byte1;
	int status;

	(void)state;
	driver_start(NULL);
	share_with_child(CU_MEM_ACCESS_FLAGS_PROT_READ, &status, &byte1);
	assert_true(WIFSIGNALED(status));              /* it read 0xc3, then faulted */
	assert_int_equal(WTERMSIG(status), SIGSEGV);
	assert_int_equal(byte1, 0xc3);
}

/* ---- copies, streams, events ----------------------------------------------- */

static void test_async_copy_needs_synchronise(void **state)
{
	struct dbuf src, dst;
	CUstream s;
	CUevent ev;

	(void)state;
	driver_start(NULL);
	ctx_enter(0);
	dbuf_new(&src, GRAN, 0);
	dbuf_new(&dst, GRAN, 0);
	memset((void *)src.p, 0xab, GRAN);
	memset((void *)dst.p, 0x00, GRAN);
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));

	fakecuda_hold_streams(true);
	CU_OK(cuMemcpyDtoDAsync_v2(dst.p, src.p, GRAN, s));
	CU_OK(cuEventRecord(ev, s));
	assert_int_equal(((unsigned char *)dst.p)[0], 0x00);   /* not copied yet */
	assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
	assert_int_equal(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
	fakecuda_hold_streams(false);
	CU_OK(cuEventSynchronize(ev));
	for (size_t i = 0; i < GRAN; i += 4096)
		assert_int_equal(((unsigned char *)dst.p)[i], 0xab);
	CU_OK(cuStreamSynchronize(s));
	CU_OK(cuStreamQuery(s));

	CU_OK(cuEventDestroy_v2(ev));
	CU_OK(cuStreamDestroy_v2(s));
	dbuf_free(&src);
	dbuf_free(&dst);
	ctx_leave(0);
}

/* CU_STREAM_LEGACY and CU_STREAM_PER_THREAD name the NULL stream: work
 * queued on NULL is pending through them and done after synchronising one. */
static void test_default_stream_handles(void **state)
{
	struct dbuf src, dst;

	(void)state;
	driver_start(NULL);
	ctx_enter(0);
	dbuf_new(&src, GRAN, 0);
	dbuf_new(&dst, GRAN, 0);
	memset((void *)src.p, 0xcd, GRAN);
	memset((void *)dst.p, 0x00, GRAN);

	fakecuda_hold_streams(true);
	CU_OK(cuMemcpyDtoDAsync_v2(dst.p, src.p, GRAN, NULL));
	assert_int_equal(cuStreamQuery(CU_STREAM_LEGACY), CUDA_ERROR_NOT_READY);
	assert_int_equal(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
	fakecuda_hold_streams(false);
	CU_OK(cuStreamSynchronize(CU_STREAM_LEGACY));
	assert_int_equal(((unsigned char *)dst.p)[GRAN - 1], 0xcd);
	CU_OK(cuStreamQuery(NULL));

	dbuf_free(&src);
	dbuf_free(&dst);
	ctx_leave(0);
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* A copy delayed by FAKECUDA_COPY_DELAY_US is complete after a synchronise,
 * which therefore took at least the delay (a lower bound only). */
static void test_copy_delay(void **state)
{
	struct dbuf src, dst;
	uint64_t t0;
	CUstream s;

	(void)state;
	driver_start("FAKECUDA_COPY_DELAY_US=20000", NULL);
	ctx_enter(1);
	dbuf_new(&src, GRAN, 1);
	dbuf_new(&dst, GRAN, 1);
	memset((void *)src.p, 0x42, GRAN);
	memset((void *)dst.p, 0, GRAN);
	CU_OK(cuStreamCreate(&s, 0));
	t0 = now_us();
	CU_OK(cuMemcpyDtoDAsync_v2(dst.p, src.p, GRAN, s));
	CU_OK(cuStreamSynchronize(s));
	assert_true(now_us() - t0 >= 4 * 20000);
	assert_int_equal(((unsigned char *)dst.p)[GRAN - 1], 0x42);
	CU_OK(cuStreamDestroy_v2(s));
	dbuf_free(&src);
	dbuf_free(&dst);
	ctx_leave(1);
}

/* With a delay and no synchronise, a reader sees old bytes, then a copy in
 * progress (new at the start, old at the end), as on a GPU. Whether the
 * reader was quick enough to see them depends on scheduling, so they are
 * asserted only when the reads provably came before the copy could finish;
 * otherwise the test says so and proves only the end state. */
static void test_missing_synchronise_shows_stale_and_torn_data(void **state)
{
	const unsigned delay_us = 100000;        /* before each quarter */
	volatile unsigned char *d;
	struct dbuf src, dst;
	bool torn = false;
	uint64_t t0, t1;
	unsigned char first;
	CUstream s;

	(void)state;
	if (UNDER_TSAN) {                       /* these reads race by design */
		print_message("not run under ThreadSanitizer\n");
		return;
	}
	driver_start("FAKECUDA_COPY_DELAY_US=100000", NULL);
	ctx_enter(0);
	dbuf_new(&src, GRAN, 0);
	dbuf_new(&dst, GRAN, 0);
	memset((void *)src.p, 0xee, GRAN);
	memset((void *)dst.p, 0x00, GRAN);
	d = (volatile unsigned char *)dst.p;
	CU_OK(cuStreamCreate(&s, 0));
	t0 = now_us();
	CU_OK(cuMemcpyDtoDAsync_v2(dst.p, src.p, GRAN, s));
	first = d[0];
	t1 = now_us();
	if (t1 - t0 < delay_us)
		assert_int_equal(first, 0x00);                  /* stale */
	else
		print_message("stale read came after the delay (%llu us): not checked\n",
		              (unsigned long long)(t1 - t0));
	while (cuStreamQuery(s) == CUDA_ERROR_NOT_READY) {
		torn |= d[0] == 0xee && d[GRAN - 1] == 0x00;
		usleep(1000);
	}
	print_message("torn state %s\n", torn ? "seen" : "not sampled (busy machine)");
	CU_OK(cuStreamSynchronize(s));
	assert_int_equal(d[0], 0xee);
	assert_int_equal(d[GRAN - 1], 0xee);
	CU_OK(cuStreamDestroy_v2(s));
	dbuf_free(&src);
	dbuf_free(&dst);
	ctx_leave(0);
}

static void test_every_copy_kind(void **state)
{
	unsigned char host[4096], back[4096];
	struct dbuf d0, d1, ro;
	CUcontext c0, c1;
	CUdeviceptr m;
	CUstream s;
	int fd, dev;

	(void)state;
	driver_start(NULL);
	CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
	c0 = ctx_enter(0);
	for (size_t i = 0; i < sizeof(host); i++)
		host[i] = (unsigned char)(i * 7);
	dbuf_new(&d0, GRAN, 0);
	dbuf_new(&d1, GRAN, 1);
	CU_OK(cuStreamCreate(&s, 0));

	CU_OK(cuMemHostRegister_v2(host, sizeof(host), CU_MEMHOSTREGISTER_READ_ONLY));
	assert_int_equal(cuMemHostRegister_v2(host, 16, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
	CU_OK(cuMemcpyHtoD_v2(d0.p, host, sizeof(host)));
	CU_OK(cuMemcpyPeerAsync(d1.p, c1, d0.p, c0, sizeof(host), s));
	/* d1 is GPU 1's, with access for GPU 1 only: not from GPU 0's stream */
	assert_int_equal(cuMemcpyDtoHAsync_v2(back, d1.p, sizeof(host), s),
	                 CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemSetAccess(d1.p, d1.size, &(CUmemAccessDesc){
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READ }, 1));
	CU_OK(cuMemcpyDtoHAsync_v2(back, d1.p, sizeof(host), s));
	CU_OK(cuStreamSynchronize(s));
	assert_memory_equal(back, host, sizeof(host));
	CU_OK(cuMemHostUnregister(host));
	assert_int_equal(cuMemHostUnregister(host), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);

	CU_OK(cuMemAlloc_v2(&m, 8192));
	CU_OK(cuPointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, m));
	assert_int_equal(dev, 0);
	CU_OK(cuMemcpyDtoD_v2(m, d1.p, sizeof(host)));
	CU_OK(cuMemcpyHtoDAsync_v2(m + 4096, host, 16, NULL));      /* the NULL stream */
	CU_OK(cuStreamSynchronize(NULL));
	memset(back, 0, sizeof(back));
	CU_OK(cuMemcpyDtoH_v2(back, m, sizeof(back)));
	assert_memory_equal(back, host, sizeof(host));
	CU_OK(cuMemFree_v2(m));
	assert_int_equal(cuMemFree_v2(m), CUDA_ERROR_INVALID_VALUE);

	/* host memory is not device memory; read-only device memory is no target */
	assert_int_equal(cuMemcpyDtoD_v2((uintptr_t)back, d0.p, 16), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemExportToShareableHandle(&fd, d0.h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CUmemGenericAllocationHandle h;
	CU_OK(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
	                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fd);
	dbuf_map(&ro, h, GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
	assert_int_equal(cuMemcpyHtoD_v2(ro.p, host, 16), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemcpyDtoH_v2(back, ro.p, 16));
	dbuf_free(&ro);

	CU_OK(cuStreamDestroy_v2(s));
	dbuf_free(&d0);
	dbuf_free(&d1);
	ctx_leave(0);
	CU_OK(cuDevicePrimaryCtxRelease_v2(1));
	/* without a context */
	assert_int_equal(cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
	assert_int_equal(cuDevicePrimaryCtxRelease_v2(1), CUDA_ERROR_INVALID_CONTEXT);
}

/* ---- strict where the driver is ---------------------------------------- */

static CUmemAccessDesc access_for(int dev, CUmemAccess_flags flags)
{
	return (CUmemAccessDesc){ .location = { CU_MEM_LOCATION_TYPE_DEVICE, dev },
	                          .flags = flags };
}

/* VMM access is per device: a copy is checked against the device of the
 * context that issues it, and access can be given only to a device that
 * reaches the memory's GPU. */
static void test_access_is_per_device(void **state)
{
	CUmemAccessDesc ro0 = access_for(0, CU_MEM_ACCESS_FLAGS_PROT_READ);
	unsigned char back[64];
	struct dbuf d0, d1;
	CUcontext c0, c1;
	CUstream s0, s1;

	(void)state;
	driver_start("FAKECUDA_DEVICES=3", "FAKECUDA_PEERS=01,10", NULL);
	CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
	c0 = ctx_enter(0);
	dbuf_new(&d0, GRAN, 0);
	dbuf_new(&d1, GRAN, 1);                 /* read-write for GPU 1 only */
	memset((void *)d1.p, 0x3c, 64);
	CU_OK(cuStreamCreate(&s0, 0));
	CU_OK(cuCtxSetCurrent(c1));
	CU_OK(cuStreamCreate(&s1, 0));
	CU_OK(cuCtxSetCurrent(c0));

	/* from GPU 0: its own stream, the NULL stream, a synchronous copy */
	assert_int_equal(cuMemcpyDtoDAsync_v2(d0.p, d1.p, 64, s0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(cuMemcpyDtoDAsync_v2(d0.p, d1.p, 64, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(cuMemcpyDtoH_v2(back, d1.p, 64), CUDA_ERROR_INVALID_VALUE);
	/* the same copy on GPU 1's stream: GPU 1 reads its own memory, but it
	 * has no access to d0 (GPU 0's, for GPU 0 only) either */
	assert_int_equal(cuMemcpyDtoDAsync_v2(d0.p, d1.p, 64, s1), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemcpyDtoHAsync_v2(back, d1.p, 64, s1));
	CU_OK(cuStreamSynchronize(s1));
	assert_int_equal(back[63], 0x3c);

	/* read access for GPU 0: it reads, it still cannot write */
	CU_OK(cuMemSetAccess(d1.p, d1.size, &ro0, 1));
	CU_OK(cuMemcpyDtoDAsync_v2(d0.p, d1.p, 64, s0));
	CU_OK(cuStreamSynchronize(s0));
	assert_int_equal(((unsigned char *)d0.p)[0], 0x3c);
	assert_int_equal(cuMemcpyDtoDAsync_v2(d1.p, d0.p, 64, s0), CUDA_ERROR_INVALID_VALUE);
	/* GPU 1 kept its read-write access (access is set per device) */
	CU_OK(cuCtxSetCurrent(c1));
	CU_OK(cuMemcpyHtoD_v2(d1.p, back, 16));
	CU_OK(cuCtxSetCurrent(c0));

	/* GPU 2 reaches neither: no access can be given to it */
	assert_int_equal(cuMemSetAccess(d1.p, d1.size, &(CUmemAccessDesc){
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, 2 },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READ }, 1), CUDA_ERROR_INVALID_DEVICE);

	/* a peer copy checks each end with its own context's device */
	CU_OK(cuMemcpyPeerAsync(d0.p, c0, d1.p, c1, 64, s0));
	assert_int_equal(cuMemcpyPeerAsync(d0.p, c1, d1.p, c1, 64, s0), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuStreamSynchronize(s0));

	CU_OK(cuStreamDestroy_v2(s0));
	CU_OK(cuStreamDestroy_v2(s1));
	dbuf_free(&d0);
	dbuf_free(&d1);
	ctx_leave(0);
	CU_OK(cuDevicePrimaryCtxRelease_v2(1));
}

/* Host memory registered without CU_MEMHOSTREGISTER_PORTABLE is pinned for
 * its context only: an asynchronous copy from another context's stream is
 * a synchronous pageable copy (counted); a portable one stays
 * asynchronous everywhere. */
static void test_host_pinned_per_context(void **state)
{
	static unsigned char host[2][4096];
	struct dbuf d1;
	CUcontext c0, c1;
	CUstream s0, s1;
	uint64_t before;

	(void)state;
	driver_start(NULL);
	CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
	c0 = ctx_enter(0);
	CU_OK(cuStreamCreate(&s0, 0));
	CU_OK(cuMemHostRegister_v2(host[0], sizeof(host[0]), 0));
	CU_OK(cuMemHostRegister_v2(host[1], sizeof(host[1]), CU_MEMHOSTREGISTER_PORTABLE));
	CU_OK(cuCtxSetCurrent(c1));
	CU_OK(cuStreamCreate(&s1, 0));
	dbuf_new(&d1, GRAN, 1);
	memset(host[0], 0x61, sizeof(host[0]));
	memset(host[1], 0x62, sizeof(host[1]));

	/* pinned for GPU 0's context, used on GPU 1's stream: synchronous */
	before = fakecuda_pageable_copies();
	fakecuda_hold_streams(true);
	CU_OK(cuMemcpyHtoDAsync_v2(d1.p + 4096, host[1], 4096, s1));   /* portable: queued */
	assert_int_equal(((unsigned char *)d1.p)[4096], 0);
	assert_int_equal(fakecuda_pageable_copies(), before);
	fakecuda_hold_streams(false);
	CU_OK(cuMemcpyHtoDAsync_v2(d1.p, host[0], 4096, s1));
	assert_int_equal(fakecuda_pageable_copies(), before + 1);
	assert_int_equal(((unsigned char *)d1.p)[4095], 0x61);      /* done on return */
	assert_int_equal(((unsigned char *)d1.p)[4096], 0x62);      /* stream order kept */
	/* never registered: pageable anywhere */
	CU_OK(cuMemcpyDtoHAsync_v2(host[0] + 8, d1.p + 4096, 8, s1));
	assert_int_equal(fakecuda_pageable_copies(), before + 2);

	/* unregistering: a context, and for a registration that is not
	 * portable the one that made it */
	assert_int_equal(cuMemHostUnregister(host[0]), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	CU_OK(cuMemHostUnregister(host[1]));                       /* portable: from GPU 1 */
	CU_OK(cuCtxSetCurrent(NULL));
	assert_int_equal(cuMemHostUnregister(host[0]), CUDA_ERROR_INVALID_CONTEXT);
	CU_OK(cuCtxSetCurrent(c0));
	CU_OK(cuMemHostUnregister(host[0]));

	CU_OK(cuStreamDestroy_v2(s0));
	CU_OK(cuStreamDestroy_v2(s1));
	dbuf_free(&d1);
	ctx_leave(0);
	CU_OK(cuDevicePrimaryCtxRelease_v2(1));
}

/* An event is recorded only on a stream of the context it was made in. */
static void test_event_record_needs_its_context(void **state)
{
	CUcontext c0, c1;
	CUstream s1;
	CUevent ev;

	(void)state;
	driver_start(NULL);
	CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
	c0 = ctx_enter(0);
	CU_OK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));     /* GPU 0's */
	CU_OK(cuCtxSetCurrent(c1));
	CU_OK(cuStreamCreate(&s1, 0));
	assert_int_equal(cuEventRecord(ev, s1), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(cuEventRecord(ev, NULL), CUDA_ERROR_INVALID_HANDLE); /* GPU 1 current */
	CU_OK(cuCtxSetCurrent(c0));
	CU_OK(cuEventRecord(ev, NULL));
	assert_int_equal(cuEventRecord(ev, s1), CUDA_ERROR_INVALID_HANDLE);
	CU_OK(cuEventSynchronize(ev));
	CU_OK(cuEventDestroy_v2(ev));
	CU_OK(cuStreamDestroy_v2(s1));
	ctx_leave(0);
	CU_OK(cuDevicePrimaryCtxRelease_v2(1));
}

/* cuMemcpy2DAsync: rows from one pitch to another, device and pinned host
 * ends, asynchronous like the others, pitches checked; each call counted. */
static void test_copy_2d(void **state)
{
	static unsigned char host[64 * 100], back[32 * 100];
	struct dbuf a, b;
	CUDA_MEMCPY2D m;
	CUstream s;
	uint64_t calls;

	(void)state;
	driver_start(NULL);
	ctx_enter(0);
	dbuf_new(&a, GRAN, 0);
	dbuf_new(&b, GRAN, 0);
	for (size_t i = 0; i < sizeof(host); i++)
		host[i] = (unsigned char)(i * 13 + 1);
	CU_OK(cuMemHostRegister_v2(back, sizeof(back), CU_MEMHOSTREGISTER_PORTABLE));
	CU_OK(cuMemcpyHtoD_v2(a.p, host, sizeof(host)));
	CU_OK(cuStreamCreate(&s, 0));
	calls = fakecuda_calls("cuMemcpy2DAsync_v2");

	/* columns 8..39 of 100 rows of 64 bytes, packed into rows of 32 */
	memset(&m, 0, sizeof(m));
	m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	m.srcDevice = a.p;
	m.srcXInBytes = 8;
	m.srcPitch = 64;
	m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	m.dstDevice = b.p;
	m.dstPitch = 32;
	m.WidthInBytes = 32;
	m.Height = 100;
	fakecuda_hold_streams(true);
	CU_OK(cuMemcpy2DAsync_v2(&m, s));
	assert_int_equal(((unsigned char *)b.p)[0], 0);            /* not yet */
	fakecuda_hold_streams(false);
	CU_OK(cuStreamSynchronize(s));
	for (size_t r = 0; r < 100; r++)
		assert_memory_equal((unsigned char *)b.p + r * 32, host + r * 64 + 8, 32);

	/* device to pinned host, one row down */
	m.srcXInBytes = 0;
	m.srcDevice = b.p;
	m.srcPitch = 32;
	m.srcY = 1;
	m.dstMemoryType = CU_MEMORYTYPE_HOST;
	m.dstHost = back;
	m.dstDevice = 0;
	m.Height = 99;
	CU_OK(cuMemcpy2DAsync_v2(&m, s));
	CU_OK(cuStreamSynchronize(s));
	assert_memory_equal(back, host + 64 + 8, 32);
	assert_memory_equal(back + 98 * 32, host + 99 * 64 + 8, 32);
	assert_int_equal(fakecuda_calls("cuMemcpy2DAsync_v2"), calls + 2);

	/* a pitch below the row, a pitch over CU_DEVICE_ATTRIBUTE_MAX_PITCH, a
	 * span past the mapping, and an array end are refused */
	m.srcPitch = 16;
	assert_int_equal(cuMemcpy2DAsync_v2(&m, s), CUDA_ERROR_INVALID_VALUE);
	m.srcPitch = (size_t)INT32_MAX + 1;
	assert_int_equal(cuMemcpy2DAsync_v2(&m, s), CUDA_ERROR_INVALID_VALUE);
	m.srcPitch = GRAN;
	m.Height = 2;
	assert_int_equal(cuMemcpy2DAsync_v2(&m, s), CUDA_ERROR_INVALID_VALUE);
	m.srcMemoryType = CU_MEMORYTYPE_ARRAY;
	m.srcPitch = 32;
	assert_int_equal(cuMemcpy2DAsync_v2(&m, s), CUDA_ERROR_INVALID_VALUE);

	CU_OK(cuMemHostUnregister(back));
	CU_OK(cuStreamDestroy_v2(s));
	dbuf_free(&a);
	dbuf_free(&b);
	ctx_leave(0);
}

/* ---- injection ----------------------------------------------------------- */

static void test_failure_injection(void **state)
{
	CUmemAllocationProp prop = prop_on(0);
	CUmemGenericAllocationHandle h1, h2;
	CUdeviceptr p;

	(void)state;
	driver_start("FAKECUDA_FAIL=cuMemCreate:2,cuMemAddressReserve:1:2", NULL);
	CU_OK(cuMemCreate(&h1, GRAN, &prop, 0));
	assert_int_equal(cuMemCreate(&h2, GRAN, &prop, 0), CUDA_ERROR_UNKNOWN);
	CU_OK(cuMemCreate(&h2, GRAN, &prop, 0));
	assert_int_equal(cuMemAddressReserve(&p, GRAN, 0, 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemRelease(h1));
	CU_OK(cuMemRelease(h2));
}

static void test_die_injection(void **state)
{
	int status, n;
	pid_t pid;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		driver_start("FAKECUDA_DIE=cuDeviceGetCount:2", NULL);
		if (cuDeviceGetCount(&n))
			_exit(10);
		cuDeviceGetCount(&n);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGKILL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_devices_and_attributes, teardown),
		cmocka_unit_test_teardown(test_configuration_from_environment, teardown),
		cmocka_unit_test_teardown(test_visible_devices_by_uuid_prefix, teardown),
		cmocka_unit_test_teardown(test_not_initialised_and_errors, teardown),
		cmocka_unit_test_teardown(test_legacy_names_absent, teardown),
		cmocka_unit_test_teardown(test_get_proc_address, teardown),
		cmocka_unit_test_teardown(test_vmm_create_export_import_map, teardown),
		cmocka_unit_test_teardown(test_memory_budget, teardown),
		cmocka_unit_test_teardown(test_exported_fd_shares_memory_across_processes, teardown),
		cmocka_unit_test_teardown(test_read_only_mapping_faults_on_write, teardown),
		cmocka_unit_test_teardown(test_async_copy_needs_synchronise, teardown),
		cmocka_unit_test_teardown(test_default_stream_handles, teardown),
		cmocka_unit_test_teardown(test_copy_delay, teardown),
		cmocka_unit_test_teardown(test_missing_synchronise_shows_stale_and_torn_data, teardown),
		cmocka_unit_test_teardown(test_every_copy_kind, teardown),
		cmocka_unit_test_teardown(test_access_is_per_device, teardown),
		cmocka_unit_test_teardown(test_host_pinned_per_context, teardown),
		cmocka_unit_test_teardown(test_event_record_needs_its_context, teardown),
		cmocka_unit_test_teardown(test_copy_2d, teardown),
		cmocka_unit_test_teardown(test_failure_injection, teardown),
		cmocka_unit_test_teardown(test_die_injection, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
