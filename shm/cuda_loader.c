/* shm/cuda_loader.c — dlopen the CUDA driver; see cuda_loader.h. */
#include "cuda_loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WSYNC_CUDA_DEFAULT_LIB "libcuda.so.1"

void wsync_cuda_version_text(int version, char *buf, size_t len)
{
	snprintf(buf, len, "%d.%d", version / 1000, version % 1000 / 10);
}

void wsync_cuda_unload(struct wsync_cuda *cu)
{
	if (cu->lib)
		dlclose(cu->lib);
	memset(cu, 0, sizeof(*cu));
}

#ifdef WSYNC_HAVE_CUDA_H

/* One entry: by cuGetProcAddress_v2 when the driver has it, else by its
 * versioned symbol. 0, or -ENOTSUP with why filled. */
static int entry_resolve(struct wsync_cuda *cu, PFN_cuGetProcAddress_v12000 gpa,
                         const char *name, int version, const char *symbol, void **out,
                         char *why, size_t whylen)
{
	CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	char ver[16];
	CUresult r;

	*out = NULL;
	if (!gpa) {
		*out = dlsym(cu->lib, symbol);
		if (*out)
			return 0;
		snprintf(why, whylen, "the CUDA driver %s lacks the entry point %s",
		         cu->path, symbol);
		return -ENOTSUP;
	}
	r = gpa(name, out, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
	if (r == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && *out)
		return 0;
	*out = NULL;
	wsync_cuda_version_text(version, ver, sizeof(ver));
	snprintf(why, whylen, "the CUDA driver %s has no entry point %s of CUDA %s (%s, "
	         "error %d)", cu->path, name, ver,
	         status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? "version not sufficient"
	                                                              : "symbol not found",
	         (int)r);
	return -ENOTSUP;
}

static int entries_resolve(struct wsync_cuda *cu, char *why, size_t whylen)
{
	PFN_cuGetProcAddress_v12000 gpa = NULL;
	void *fn;
	int err;

	/* cuGetProcAddress_v2 is 12.0. Each entry is asked for at the version
	 * of its typedef, never above the driver's (checked at load). */
	if (cu->driver_version >= 12000)
		gpa = (PFN_cuGetProcAddress_v12000)dlsym(cu->lib, "cuGetProcAddress_v2");
	cu->by_proc_address = gpa != NULL;
#define WSYNC_CUDA_RESOLVE(name, version, symbol) \
	_Static_assert(version <= WSYNC_CUDA_MIN_DRIVER, #name " is newer than the oldest driver"); \
	err = entry_resolve(cu, gpa, #name, version, #symbol, &fn, why, whylen); \
	if (err) \
		return err; \
	cu->api.cu_##name = (PFN_##name##_v##version)fn;
	WSYNC_CUDA_ENTRIES(WSYNC_CUDA_RESOLVE)
#undef WSYNC_CUDA_RESOLVE
	return 0;
}

int wsync_cuda_load(struct wsync_cuda *cu, char *why, size_t whylen)
{
	PFN_cuDriverGetVersion_v2020 get_version;
	/* a path handed to dlopen: never from the environment of a privileged
	 * process */
	const char *path = secure_getenv("WSYNC_LIBCUDA");
	char have[16], need[16];
	CUresult r;
	int err;

	memset(cu, 0, sizeof(*cu));
	if (!path || !*path)
		path = WSYNC_CUDA_DEFAULT_LIB;
	cu->path = path;
	cu->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!cu->lib) {
		snprintf(why, whylen, "no CUDA driver: %s", dlerror());   /* names the path */
		memset(cu, 0, sizeof(*cu));
		return -ENOENT;
	}
	cu->path = path;
	/* cuDriverGetVersion has had one ABI since 2.2 and works before cuInit. */
	get_version = (PFN_cuDriverGetVersion_v2020)dlsym(cu->lib, "cuDriverGetVersion");
	if (!get_version || get_version(&cu->driver_version) != CUDA_SUCCESS) {
		snprintf(why, whylen, "%s is not a usable CUDA driver (no cuDriverGetVersion)",
		         path);
		err = -ENOTSUP;
		goto out_close;
	}
	if (cu->driver_version < WSYNC_CUDA_MIN_DRIVER) {
		wsync_cuda_version_text(cu->driver_version, have, sizeof(have));
		wsync_cuda_version_text(WSYNC_CUDA_MIN_DRIVER, need, sizeof(need));
		snprintf(why, whylen, "the CUDA driver %s is version %s; wsync needs %s or newer",
		         path, have, need);
		err = -ENOTSUP;
		goto out_close;
	}
	err = entries_resolve(cu, why, whylen);
	if (err)
		goto out_close;
	r = cu->api.cu_cuInit(0);
	if (r == CUDA_ERROR_NO_DEVICE)
		return 0;                      /* a driver, no GPU: device_count 0 */
	if (r == CUDA_SUCCESS)
		r = cu->api.cu_cuDeviceGetCount(&cu->device_count);
	if (r != CUDA_SUCCESS) {
		const char *name = NULL;

		cu->api.cu_cuGetErrorName(r, &name);
		snprintf(why, whylen, "the CUDA driver %s failed to initialise: %s", path,
		         name ? name : "unknown error");
		err = -EIO;
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
