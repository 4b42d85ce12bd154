/* broker/gpu_slab.c — device slabs: allocation, export, release; see gpu_slab.h. */
#include "gpu_slab.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault.h"
#include "gpu.h"
#include "log.h"

#ifdef WSYNC_HAVE_CUDA_H

/* Primary contexts retained because the driver would not allocate without
 * one; indexed like the inventory. */
static CUcontext ctx_held[WSYNC_GPU_MAX];

static const char *cu_name(const struct wsync_cuda *cu, CUresult r)
{
	const char *name = NULL;

	cu->api.cu_cuGetErrorName(r, &name);
	return name ? name : "unknown CUDA error";
}

static CUresult create_one(const struct wsync_cuda *cu, int idx, size_t size,
                           CUmemGenericAllocationHandle *h)
{
	const struct wsync_gpu_info *g = &gpu_inventory()->dev[idx];
	CUmemAllocationProp prop;
	CUcontext prev = NULL;
	CUresult r;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = g->ordinal;
	r = cu->api.cu_cuMemCreate(h, size, &prop, 0);
	if (r != CUDA_ERROR_INVALID_CONTEXT)
		return r;
	if (!ctx_held[idx]) {
		CUdevice dev;

		r = cu->api.cu_cuDeviceGet(&dev, g->ordinal);
		if (r == CUDA_SUCCESS)
			r = cu->api.cu_cuDevicePrimaryCtxRetain(&ctx_held[idx], dev);
		if (r != CUDA_SUCCESS)
			return r;
		log_info("gpu %d: the driver allocates only in a context: holding the GPU's "
		         "primary context (no work is ever run in it)", idx);
	}
	cu->api.cu_cuCtxGetCurrent(&prev);
	r = cu->api.cu_cuCtxSetCurrent(ctx_held[idx]);
	if (r == CUDA_SUCCESS)
		r = cu->api.cu_cuMemCreate(h, size, &prop, 0);
	cu->api.cu_cuCtxSetCurrent(prev);
	return r;
}

/* The inventory index of each UUID, checked: served here, no duplicates. */
static int devices_resolve(const uint8_t (*uuids)[16], uint32_t n, int *index,
                           const char *model, char *why, size_t whylen)
{
	const struct wsync_gpu_inventory *inv = gpu_inventory();

	for (uint32_t i = 0; i < n; i++) {
		char text[WSYNC_GPU_UUID_TEXT];
		int found = -1;

		wsync_gpu_uuid_format(uuids[i], text, sizeof(text));
		for (int d = 0; d < inv->count; d++)
			if (!memcmp(inv->dev[d].uuid, uuids[i], 16))
				found = d;
		for (uint32_t j = 0; j < i; j++)
			if (!memcmp(uuids[j], uuids[i], 16)) {
				snprintf(why, whylen, "model '%s': GPU %s is listed twice", model,
				         text);
				return -EINVAL;
			}
		if (found < 0 || !gpu_selected(found)) {
			snprintf(why, whylen, "model '%s': GPU %s is %s", model, text,
			         found < 0 ? (inv->count ? "not on this machine (or hidden from "
			                      "the broker by its CUDA_VISIBLE_DEVICES)"
			                      : "not served: this broker has no GPU (its log says why)")
			                   : "not served by this broker (--gpus, or it cannot "
			                     "export memory)");
			return -ENODEV;
		}
		index[i] = found;
	}
	return 0;
}

int gpu_slabs_create(const uint8_t (*uuids)[16], uint32_t n_devices, uint32_t dev_flags,
                     uint64_t bytes, uint32_t n_slots, const char *model,
                     struct gpu_slabs **out, char *why, size_t whylen)
{
	const struct wsync_cuda *cu = gpu_driver();
	const struct wsync_gpu_inventory *inv = gpu_inventory();
	struct gpu_slabs *g;
	uint64_t gran = 0;
	CUresult r = CUDA_SUCCESS;
	uint32_t d = 0, k = 0;
	int err;

	if (!cu) {
		snprintf(why, whylen, "model '%s' asks for GPUs: this broker serves none (no "
		         "CUDA driver, no GPU that can export memory, or --gpus none; its log "
		         "says which)", model);
		return -ENODEV;
	}
	if (n_devices == 0 || n_devices > WSYNC_MODEL_GPUS || n_slots > WSYNC_MAX_SLOTS)
		return -EINVAL;
	g = fault_calloc(1, sizeof(*g));
	if (!g) {
		snprintf(why, whylen, "model '%s': out of memory", model);
		return -ENOMEM;
	}
	for (d = 0; d < WSYNC_MODEL_GPUS; d++)
		for (k = 0; k < WSYNC_MAX_SLOTS; k++)
			g->fd[d][k] = -1;
	err = devices_resolve(uuids, n_devices, g->index, model, why, whylen);
	if (err) {
		free(g);
		return err;
	}
	g->n_devices = n_devices;
	g->dev_flags = dev_flags;
	g->n_slots = n_slots;
	memcpy(g->uuid, uuids, (size_t)n_devices * 16);
	for (d = 0; d < n_devices; d++)
		if (inv->dev[g->index[d]].granularity > gran)
			gran = inv->dev[g->index[d]].granularity;
	if (!gran || bytes > UINT64_MAX - gran) {
		free(g);
		snprintf(why, whylen, "model '%s': no allocation granularity for its GPUs", model);
		return -EIO;
	}
	g->dev_bytes = (bytes + gran - 1) / gran * gran;

	for (d = 0; d < n_devices; d++) {
		for (k = 0; k < n_slots; k++) {
			CUmemGenericAllocationHandle h = 0;
			int fd = -1;

			r = create_one(cu, g->index[d], g->dev_bytes, &h);
			if (r != CUDA_SUCCESS)
				goto out_free;
			r = cu->api.cu_cuMemExportToShareableHandle(
				&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
			if (r != CUDA_SUCCESS) {
				cu->api.cu_cuMemRelease(h);
				goto out_free;
			}
			g->handle[d][k] = h;
			g->fd[d][k] = fd;
		}
	}
	log_info("model '%s': %u slots of %llu bytes on each of %u GPU%s", model, n_slots,
	         (unsigned long long)g->dev_bytes, n_devices, n_devices == 1 ? "" : "s");
	*out = g;
	return 0;

out_free:
	{
		char text[WSYNC_GPU_UUID_TEXT];

		wsync_gpu_uuid_format(uuids[d], text, sizeof(text));
		err = r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOSPC : -EIO;
		snprintf(why, whylen, "model '%s': allocating slot %u (%llu bytes) on GPU %s: "
		         "%s%s", model, k, (unsigned long long)g->dev_bytes, text,
		         cu_name(cu, r), err == -ENOSPC ? " (the GPU is full)" : "");
	}
	gpu_slabs_free(g);
	return err;
}

void gpu_slabs_free(struct gpu_slabs *g)
{
	const struct wsync_cuda *cu = gpu_driver();

	if (!g)
		return;
	for (uint32_t d = 0; d < WSYNC_MODEL_GPUS; d++)
		for (uint32_t k = 0; k < WSYNC_MAX_SLOTS; k++) {
			if (g->fd[d][k] >= 0)
				close(g->fd[d][k]);
			if (g->handle[d][k] && cu)
				cu->api.cu_cuMemRelease(g->handle[d][k]);
		}
	free(g);
}

/* Maps slot `slot` of GPU d of g in the GPU's primary context (current),
 * copies host into it, and unmaps. */
static CUresult load_one(const struct wsync_cuda *cu, const struct gpu_slabs *g, uint32_t d,
                         uint32_t slot, int ordinal, const void *host, uint64_t bytes)
{
	CUmemAccessDesc access = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, ordinal },
	                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUdeviceptr ptr = 0;
	CUresult r;

	r = cu->api.cu_cuMemAddressReserve(&ptr, g->dev_bytes, 0, 0, 0);
	if (r != CUDA_SUCCESS)
		return r;
	r = cu->api.cu_cuMemMap(ptr, g->dev_bytes, 0, g->handle[d][slot], 0);
	if (r == CUDA_SUCCESS) {
		r = cu->api.cu_cuMemSetAccess(ptr, g->dev_bytes, &access, 1);
		if (r == CUDA_SUCCESS)
			r = cu->api.cu_cuMemcpyHtoD(ptr, host, bytes);
		cu->api.cu_cuMemUnmap(ptr, g->dev_bytes);
	}
	cu->api.cu_cuMemAddressFree(ptr, g->dev_bytes);
	return r;
}

int gpu_slabs_load(const struct gpu_slabs *g, uint32_t slot, const void *host,
                   uint64_t bytes, char *why, size_t whylen)
{
	const struct wsync_cuda *cu = gpu_driver();
	const struct wsync_gpu_inventory *inv = gpu_inventory();
	CUresult r = CUDA_ERROR_NOT_INITIALIZED;
	uint32_t d = 0;

	if (cu && slot < g->n_slots && bytes <= g->dev_bytes)
		r = CUDA_SUCCESS;
	for (d = 0; r == CUDA_SUCCESS && d < g->n_devices; d++) {
		int ordinal = inv->dev[g->index[d]].ordinal;
		CUcontext ctx, prev = NULL;
		CUdevice dev;

		r = cu->api.cu_cuDeviceGet(&dev, ordinal);
		if (r == CUDA_SUCCESS)
			r = cu->api.cu_cuDevicePrimaryCtxRetain(&ctx, dev);
		if (r != CUDA_SUCCESS)
			break;
		cu->api.cu_cuCtxGetCurrent(&prev);
		r = cu->api.cu_cuCtxSetCurrent(ctx);
		if (r == CUDA_SUCCESS)
			r = load_one(cu, g, d, slot, ordinal, host, bytes);
		cu->api.cu_cuCtxSetCurrent(prev);
		cu->api.cu_cuDevicePrimaryCtxRelease(dev);
		if (r != CUDA_SUCCESS)
			break;
	}
	if (r == CUDA_SUCCESS)
		return 0;
	{
		char text[WSYNC_GPU_UUID_TEXT] = "?";

		if (d < g->n_devices)
			wsync_gpu_uuid_format(g->uuid[d], text, sizeof(text));
		snprintf(why, whylen, "copying slot %u back onto GPU %s: %s", slot, text,
		         cu ? cu_name(cu, r) : "no CUDA driver");
	}
	return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOSPC : -EIO;
}

void gpu_slabs_shutdown(void)
{
	const struct wsync_cuda *cu = gpu_driver();
	const struct wsync_gpu_inventory *inv = gpu_inventory();

	for (int i = 0; i < WSYNC_GPU_MAX; i++) {
		CUdevice dev;

		if (!ctx_held[i])
			continue;
		if (cu && i < inv->count && cu->api.cu_cuDeviceGet(&dev, inv->dev[i].ordinal) ==
		    CUDA_SUCCESS)
			cu->api.cu_cuDevicePrimaryCtxRelease(dev);
		ctx_held[i] = NULL;
	}
}

#else /* without cuda.h: no device models */

int gpu_slabs_create(const uint8_t (*uuids)[16], uint32_t n_devices, uint32_t dev_flags,
                     uint64_t bytes, uint32_t n_slots, const char *model,
                     struct gpu_slabs **out, char *why, size_t whylen)
{
	(void)uuids;
	(void)n_devices;
	(void)dev_flags;
	(void)bytes;
	(void)n_slots;
	(void)out;
	snprintf(why, whylen, "model '%s' asks for GPUs: this broker was built without "
	         "the CUDA Toolkit headers and serves host models only", model);
	return -ENODEV;
}

void gpu_slabs_free(struct gpu_slabs *g)
{
	free(g);
}

int gpu_slabs_load(const struct gpu_slabs *g, uint32_t slot, const void *host,
                   uint64_t bytes, char *why, size_t whylen)
{
	(void)g;
	(void)slot;
	(void)host;
	(void)bytes;
	snprintf(why, whylen, "built without the CUDA Toolkit headers");
	return -ENODEV;
}

void gpu_slabs_shutdown(void)
{
}

#endif
