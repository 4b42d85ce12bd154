/*
 * shm/cuda_loader.h — the CUDA driver API, loaded at run time.
 *
 * One binary works with and without GPUs: libcuda.so.1 (or $WSYNC_LIBCUDA,
 * e.g. the fake driver of the tests) is dlopen()ed on demand, and every
 * entry point wsync needs is resolved once into a struct of typed pointers.
 *
 * Resolution: through cuGetProcAddress_v2, asking for each entry with the
 * CUDA version of the ABI its pointer is typed for (PFN_cuMemcpyDtoDAsync_v3020
 * is asked for at 3020), so a newer driver or toolkit that adds another ABI
 * of a function never hands us one of a different signature; drivers older
 * than 12.0 lack cuGetProcAddress_v2, and there each entry is dlsym()ed by
 * its explicit versioned name ("cuMemcpyDtoDAsync_v2"). A plain dlsym of an unversioned name is never
 * done for a function with a _v2: the unversioned symbol is the legacy
 * 32-bit ABI. Built without the toolkit's cuda.h, loading fails with
 * -ENOSYS and says so; the struct then holds no entry points.
 */
#ifndef WSYNC_SHM_CUDA_LOADER_H
#define WSYNC_SHM_CUDA_LOADER_H

#include <stddef.h>

#ifdef WSYNC_HAVE_CUDA_H
#include <cuda.h>
#include <cudaTypedefs.h>

/* The oldest driver wsync runs on: cuDeviceGetUuid_v2 is 11.4. */
#define WSYNC_CUDA_MIN_DRIVER 11040

/*
 * X(name, version, symbol): the field `name` has the type of the ABI
 * introduced in `version` (PFN_name_vVERSION, cudaTypedefs.h); `symbol` is
 * the exported name of that ABI, for drivers without cuGetProcAddress_v2.
 */
#define WSYNC_CUDA_ENTRIES(X) \
	X(cuInit,                          2000, cuInit) \
	X(cuDeviceGetCount,                2000, cuDeviceGetCount) \
	X(cuDeviceGet,                     2000, cuDeviceGet) \
	X(cuDeviceGetName,                 2000, cuDeviceGetName) \
	X(cuDeviceGetUuid,                11040, cuDeviceGetUuid_v2) \
	X(cuDeviceGetAttribute,            2000, cuDeviceGetAttribute) \
	X(cuDeviceTotalMem,                3020, cuDeviceTotalMem_v2) \
	X(cuDeviceCanAccessPeer,           4000, cuDeviceCanAccessPeer) \
	X(cuDevicePrimaryCtxRetain,        7000, cuDevicePrimaryCtxRetain) \
	X(cuDevicePrimaryCtxRelease,      11000, cuDevicePrimaryCtxRelease_v2) \
	X(cuCtxSetCurrent,                 4000, cuCtxSetCurrent) \
	X(cuCtxGetCurrent,                 4000, cuCtxGetCurrent) \
	X(cuMemGetAllocationGranularity,  10020, cuMemGetAllocationGranularity) \
	X(cuMemCreate,                    10020, cuMemCreate) \
	X(cuMemRelease,                   10020, cuMemRelease) \
	X(cuMemExportToShareableHandle,   10020, cuMemExportToShareableHandle) \
	X(cuMemImportFromShareableHandle, 10020, cuMemImportFromShareableHandle) \
	X(cuMemAddressReserve,            10020, cuMemAddressReserve) \
	X(cuMemAddressFree,               10020, cuMemAddressFree) \
	X(cuMemMap,                       10020, cuMemMap) \
	X(cuMemUnmap,                     10020, cuMemUnmap) \
	X(cuMemSetAccess,                 10020, cuMemSetAccess) \
	X(cuMemcpyDtoD,                    3020, cuMemcpyDtoD_v2) \
	X(cuMemcpyHtoD,                    3020, cuMemcpyHtoD_v2) \
	X(cuMemcpyDtoH,                    3020, cuMemcpyDtoH_v2) \
	X(cuMemcpyDtoDAsync,               3020, cuMemcpyDtoDAsync_v2) \
	X(cuMemcpyHtoDAsync,               3020, cuMemcpyHtoDAsync_v2) \
	X(cuMemcpyDtoHAsync,               3020, cuMemcpyDtoHAsync_v2) \
	X(cuMemcpy2DAsync,                 3020, cuMemcpy2DAsync_v2) \
	X(cuMemcpyPeerAsync,               4000, cuMemcpyPeerAsync) \
	X(cuStreamCreate,                  2000, cuStreamCreate) \
	X(cuStreamDestroy,                 4000, cuStreamDestroy_v2) \
	X(cuStreamSynchronize,             2000, cuStreamSynchronize) \
	X(cuEventCreate,                   2000, cuEventCreate) \
	X(cuEventRecord,                   2000, cuEventRecord) \
	X(cuEventSynchronize,              2000, cuEventSynchronize) \
	X(cuEventDestroy,                  4000, cuEventDestroy_v2) \
	X(cuMemHostRegister,               6050, cuMemHostRegister_v2) \
	X(cuMemHostUnregister,             4000, cuMemHostUnregister) \
	X(cuPointerGetAttribute,           4000, cuPointerGetAttribute) \
	X(cuGetErrorString,                6000, cuGetErrorString) \
	X(cuGetErrorName,                  6000, cuGetErrorName)

/* cuda.h renames several of these names (cuMemcpyDtoDAsync ->
 * cuMemcpyDtoDAsync_v2); fields are named with a cu_ prefix so that the
 * macros never rewrite them: cu->cu_cuMemCreate(...). */
#define WSYNC_CUDA_FIELD(name, version, symbol) PFN_##name##_v##version cu_##name;
struct wsync_cuda_api {
	WSYNC_CUDA_ENTRIES(WSYNC_CUDA_FIELD)
};
#undef WSYNC_CUDA_FIELD
#else
struct wsync_cuda_api {
	char unused;                     /* compiled out: no entry points */
};
#endif

struct wsync_cuda {
	void *lib;
	const char *path;                /* what was loaded: $WSYNC_LIBCUDA or libcuda.so.1 */
	int   driver_version;            /* e.g. 12040 */
	int   device_count;              /* 0: a driver but no GPU */
	int   by_proc_address;           /* 1: through cuGetProcAddress_v2;
	                                    0: by versioned dlsym names */
	struct wsync_cuda_api api;
};

/*
 * Loads and initialises the driver (cuInit; no context is created):
 *   0        loaded; device_count may be 0 (a driver without GPUs)
 *   -ENOENT  no driver library (none installed, or $WSYNC_LIBCUDA missing)
 *   -ENOTSUP the driver is older than WSYNC_CUDA_MIN_DRIVER, or lacks an
 *            entry point wsync needs
 *   -EIO     the driver refused to initialise
 *   -ENOSYS  built without the CUDA Toolkit's cuda.h
 * with a reason for humans in why.
 */
int  wsync_cuda_load(struct wsync_cuda *cu, char *why, size_t whylen);
void wsync_cuda_unload(struct wsync_cuda *cu);
/* "12.4" from 12040. */
void wsync_cuda_version_text(int version, char *buf, size_t len);

#endif
