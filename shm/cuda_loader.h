/*
 * shm/cuda_loader.h — the CUDA driver API, loaded at run time.
 *
 * One binary works with and without GPUs: libcuda.so.1 (or $WSYNC_LIBCUDA,
 * e.g. a fake driver in tests) is dlopen()ed on first use, and the entry
 * points wsync needs are resolved by name. Built without the CUDA Toolkit's
 * cuda.h, loading fails with -ENOSYS and a message saying so.
 */
#ifndef WSYNC_SHM_CUDA_LOADER_H
#define WSYNC_SHM_CUDA_LOADER_H

#include <stddef.h>

struct wsync_cuda {
	void *lib;
	int   driver_version;
	int   device_count;
	/* entry points, typed in cuda_loader.c; NULL until loaded */
	void *cuInit, *cuDriverGetVersion, *cuDeviceGetCount;
};

/* Loads and initialises the driver: 0, -ENOENT (no library), -ENOSYS (built
 * without cuda.h), or -EIO (the driver refused to initialise); a reason in
 * why. */
int  wsync_cuda_load(struct wsync_cuda *cu, char *why, size_t whylen);
void wsync_cuda_unload(struct wsync_cuda *cu);

#endif
