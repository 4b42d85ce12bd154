/* shm/cuda_loader.c — dlopen the CUDA driver; see cuda_loader.h. */
#include "cuda_loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef WSYNC_HAVE_CUDA_H
#include <cuda.h>

typedef CUresult (*cu_init_fn)(unsigned int);
typedef CUresult (*cu_int_fn)(int *);

int wsync_cuda_load(struct wsync_cuda *cu, char *why, size_t whylen)
{
	/* a path handed to dlopen: never from the environment of a privileged
	 * process */
	const char *path = secure_getenv("WSYNC_LIBCUDA");
	int err = -EIO;

	memset(cu, 0, sizeof(*cu));
	if (!path || !*path)
		path = "libcuda.so.1";
	cu->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!cu->lib) {
		snprintf(why, whylen, "cannot load the CUDA driver %s: %s", path, dlerror());
		return -ENOENT;
	}
	cu->cuInit = dlsym(cu->lib, "cuInit");
	cu->cuDriverGetVersion = dlsym(cu->lib, "cuDriverGetVersion");
	cu->cuDeviceGetCount = dlsym(cu->lib, "cuDeviceGetCount");
	if (!cu->cuInit || !cu->cuDriverGetVersion || !cu->cuDeviceGetCount) {
		snprintf(why, whylen, "%s lacks cuInit/cuDriverGetVersion/cuDeviceGetCount", path);
		goto out_close;
	}
	if (((cu_init_fn)cu->cuInit)(0) != CUDA_SUCCESS ||
	    ((cu_int_fn)cu->cuDriverGetVersion)(&cu->driver_version) != CUDA_SUCCESS ||
	    ((cu_int_fn)cu->cuDeviceGetCount)(&cu->device_count) != CUDA_SUCCESS) {
		snprintf(why, whylen, "the CUDA driver %s failed to initialise", path);
		goto out_close;
	}
	return 0;

out_close:
	wsync_cuda_unload(cu);
	return err;
}
#else
int wsync_cuda_load(struct wsync_cuda *cu, char *why, size_t whylen)
{
	memset(cu, 0, sizeof(*cu));
	snprintf(why, whylen, "built without the CUDA Toolkit headers (cuda.h); "
	         "GPU support is compiled out");
	return -ENOSYS;
}
#endif

void wsync_cuda_unload(struct wsync_cuda *cu)
{
	if (cu->lib)
		dlclose(cu->lib);
	memset(cu, 0, sizeof(*cu));
}
