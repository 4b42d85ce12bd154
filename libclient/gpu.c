/*
 * libclient/gpu.c — naming GPUs: the UUID of "GPU ordinal N as this
 * process sees it".
 *
 * wsync names GPUs by UUID between processes (each may have its own
 * CUDA_VISIBLE_DEVICES, so ordinals differ); programs know their GPUs by
 * ordinal (torch.device("cuda:1")). The driver itself maps the ordinal,
 * honouring this process's CUDA_VISIBLE_DEVICES exactly as the program's
 * CUDA runtime does. The driver is loaded once per process (dlopen of
 * libcuda.so.1 or $WSYNC_LIBCUDA; cuInit; no context) and stays loaded.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "gpu.h"
#include "shm/cuda_discover.h"
#include "shm/cuda_loader.h"
#include "shm/errmsg.h"
#include "wsync.h"

static pthread_mutex_t gpu_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wsync_cuda gpu_cu;
static int gpu_loaded;

/* 0 with the driver loaded, or -errno with the detail message set. A
 * failure is not remembered: the next call tries again. */
static int driver_get(const char *what)
{
	char why[WSYNC_ERRMSG_LEN - 64];
	int err = 0;

	pthread_mutex_lock(&gpu_lock);
	if (!gpu_loaded) {
		err = wsync_cuda_load(&gpu_cu, why, sizeof(why));
		gpu_loaded = !err;
	}
	pthread_mutex_unlock(&gpu_lock);
	return err ? wsync_fail(err, "%s: %s", what, why) : 0;
}

int wsync_gpu_driver(const char *what, const struct wsync_cuda **out)
{
	int err = driver_get(what);

	if (!err)
		*out = &gpu_cu;
	return err;
}

#ifdef WSYNC_HAVE_CUDA_H
const char *wsync_cu_name(const struct wsync_cuda *cu, CUresult r)
{
	const char *name = NULL;

	cu->api.cu_cuGetErrorName(r, &name);
	return name ? name : "unknown CUDA error";
}

int wsync_cu_errno(CUresult r)
{
	switch (r) {
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOSPC;
	case CUDA_ERROR_INVALID_DEVICE:
	case CUDA_ERROR_NO_DEVICE:
		return -ENODEV;
	case CUDA_ERROR_NOT_SUPPORTED:
		return -ENOTSUP;
	default:
		return -EIO;
	}
}

/* Largest pitch a 2D copy takes (CU_DEVICE_ATTRIBUTE_MAX_PITCH of current
 * GPUs); rows further apart are copied one by one. */
#define PITCH_MAX ((uint64_t)INT32_MAX)

static CUresult copy_one(const struct wsync_cuda *cu, struct wsync_cu_end dst,
                         struct wsync_cu_end src, uint64_t len, CUstream stream)
{
	if (dst.host)
		return cu->api.cu_cuMemcpyDtoHAsync((void *)dst.at, src.at, len, stream);
	if (src.host)
		return cu->api.cu_cuMemcpyHtoDAsync(dst.at, (const void *)src.at, len, stream);
	return cu->api.cu_cuMemcpyDtoDAsync(dst.at, src.at, len, stream);
}

CUresult wsync_cu_copy_rows(const struct wsync_cuda *cu, struct wsync_cu_end dst,
                            struct wsync_cu_end src, uint64_t width, uint64_t rows,
                            CUstream stream)
{
	CUDA_MEMCPY2D m;
	CUresult r = CUDA_SUCCESS;

	if (!width || !rows)
		return CUDA_SUCCESS;
	if (rows == 1 || (dst.pitch == width && src.pitch == width))
		return copy_one(cu, dst, src, width * rows, stream);
	if (dst.pitch <= PITCH_MAX && src.pitch <= PITCH_MAX) {
		memset(&m, 0, sizeof(m));
		m.srcMemoryType = src.host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
		m.srcHost = src.host ? (const void *)src.at : NULL;
		m.srcDevice = src.host ? 0 : (CUdeviceptr)src.at;
		m.srcPitch = src.pitch;
		m.dstMemoryType = dst.host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
		m.dstHost = dst.host ? (void *)dst.at : NULL;
		m.dstDevice = dst.host ? 0 : (CUdeviceptr)dst.at;
		m.dstPitch = dst.pitch;
		m.WidthInBytes = width;
		m.Height = rows;
		return cu->api.cu_cuMemcpy2DAsync(&m, stream);
	}
	for (uint64_t i = 0; i < rows && r == CUDA_SUCCESS; i++) {
		struct wsync_cu_end d = dst, s = src;

		d.at += i * dst.pitch;
		s.at += i * src.pitch;
		r = copy_one(cu, d, s, width, stream);
	}
	return r;
}

int wsync_gpu_ordinal(const char *uuid)
{
	uint8_t want[16];
	int err;

	if (!uuid || wsync_gpu_uuid_parse(uuid, want))
		return wsync_fail(-EINVAL, "wsync_gpu_ordinal: '%.64s' is not a GPU UUID",
		                  uuid ? uuid : "(null)");
	err = driver_get("wsync_gpu_ordinal");
	if (err)
		return err;
	for (int i = 0; i < gpu_cu.device_count; i++) {
		CUdevice dev;
		CUuuid u;

		if (gpu_cu.api.cu_cuDeviceGet(&dev, i) == CUDA_SUCCESS &&
		    gpu_cu.api.cu_cuDeviceGetUuid(&u, dev) == CUDA_SUCCESS &&
		    !memcmp(u.bytes, want, 16))
			return i;
	}
	return wsync_fail(-ENODEV, "GPU %s is not visible in this process (%d GPUs; "
	                  "CUDA_VISIBLE_DEVICES counts)", uuid, gpu_cu.device_count);
}

int wsync_gpu_uuid(int ordinal, char *buf, size_t len)
{
	char text[WSYNC_GPU_UUID_TEXT];
	const char *name = NULL;
	CUdevice dev;
	CUuuid uuid;
	CUresult r;
	int err;

	if (!buf || len < WSYNC_GPU_UUID_LEN)
		return wsync_fail(-EINVAL, "wsync_gpu_uuid: the buffer needs %d bytes",
		                  WSYNC_GPU_UUID_LEN);
	err = driver_get("wsync_gpu_uuid");
	if (err)
		return err;
	if (ordinal < 0 || ordinal >= gpu_cu.device_count)
		return wsync_fail(-ENODEV, "wsync_gpu_uuid: no GPU %d in this process (%d "
		                  "visible; CUDA_VISIBLE_DEVICES counts)", ordinal,
		                  gpu_cu.device_count);
	r = gpu_cu.api.cu_cuDeviceGet(&dev, ordinal);
	if (r == CUDA_SUCCESS)
		r = gpu_cu.api.cu_cuDeviceGetUuid(&uuid, dev);
	if (r != CUDA_SUCCESS) {
		gpu_cu.api.cu_cuGetErrorName(r, &name);
		return wsync_fail(-EIO, "wsync_gpu_uuid: GPU %d: %s", ordinal,
		                  name ? name : "unknown CUDA error");
	}
	wsync_gpu_uuid_format((const uint8_t *)uuid.bytes, text, sizeof(text));
	memcpy(buf, text, sizeof(text));
	wsync_errmsg_clear();
	return 0;
}
#else
int wsync_gpu_ordinal(const char *uuid)
{
	(void)uuid;
	return driver_get("wsync_gpu_ordinal");
}

int wsync_gpu_uuid(int ordinal, char *buf, size_t len)
{
	(void)ordinal;
	(void)buf;
	(void)len;
	return driver_get("wsync_gpu_uuid");        /* says it is compiled out */
}
#endif
