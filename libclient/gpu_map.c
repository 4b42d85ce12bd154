/*
 * libclient/gpu_map.c — a device model's slots on one GPU, mapped in this
 * process; see gpu_map.h.
 *
 * Each slot arrives as one exported VMM fd (GPU_ATTACH_OK). It is imported,
 * mapped into its own reservation and given access, then the fd and the
 * imported handle are dropped: the mapping alone keeps the memory alive, in
 * this process, for as long as it stays mapped, whatever the broker does.
 * Access is per device on a GPU: a copy issued on a stream of a GPU that
 * was not given access fails, a kernel there faults, even in this process.
 * So every mapping grants its GPU and every GPU of the process that can
 * reach it peer to peer (cuDeviceCanAccessPeer), and remembers which
 * (g->reach): a collector's mapping PROT_READ, so a stray write from its
 * kernels faults there instead of changing the weights (a guard against
 * bugs, as with host slabs: the same uid could map it writable), and copies
 * from its view into a buffer on another GPU run; a publisher's read-write,
 * so its fan-out copies run from the GPU it wrote the version on. A GPU
 * that cannot reach the mapping's cannot be given access at all: a copy to
 * it is refused with -EXDEV (wsync_gpu_map_reachable) before the driver
 * would fail it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "gpu.h"
#include "gpu_map.h"
#include "shm/cuda_discover.h"
#include "shm/errmsg.h"

int wsync_gpu_model_device(const struct wsync_ctl_model *e, const char *model,
                           const char *uuid, uint32_t *device)
{
	uint8_t want[16];
	uint32_t n;

	if (!uuid || wsync_gpu_uuid_parse(uuid, want))
		return wsync_fail(-EINVAL, "model '%s': '%.64s' is not a GPU UUID (wsync_gpu_uuid "
		                  "gives it for an ordinal)", model, uuid ? uuid : "(null)");
	if (atomic_load_explicit(&e->state, memory_order_acquire) != WSYNC_MODEL_READY)
		return wsync_fail(-ENODATA, "model '%s' has no layout yet (no publisher opened "
		                  "it)", model);
	n = e->n_devices;
	if (n == 0)
		return wsync_fail(-ENODEV, "model '%s' is a host model: take host views "
		                  "(wsync_sub_acquire) and copy them to the GPU "
		                  "(wsync_view_copy_to_device)", model);
	for (uint32_t i = 0; i < n && i < WSYNC_MAX_DEVICES; i++)
		if (!memcmp(e->dev_uuid[i], want, 16)) {
			*device = i;
			return 0;
		}
	return wsync_fail(-ENODEV, "model '%s' is not on GPU %s (it lives on %u GPU%s; copy "
	                  "a view from one of them with wsync_dview_copy_to_device)", model,
	                  uuid, n, n == 1 ? "" : "s");
}

#ifdef WSYNC_HAVE_CUDA_H

/* This process's ordinal and device of a GPU, by UUID; -ENODEV if hidden. */
static int device_find(const struct wsync_cuda *cu, const uint8_t uuid[16], int *ordinal,
                       CUdevice *dev)
{
	for (int i = 0; i < cu->device_count; i++) {
		CUuuid u;

		if (cu->api.cu_cuDeviceGet(dev, i) == CUDA_SUCCESS &&
		    cu->api.cu_cuDeviceGetUuid(&u, *dev) == CUDA_SUCCESS &&
		    !memcmp(u.bytes, uuid, 16)) {
			*ordinal = i;
			return 0;
		}
	}
	return -ENODEV;
}

/* Access descriptors: the GPU itself and every GPU here that reaches it
 * peer to peer, read-write for a publisher, read-only for a collector;
 * g->reach says which. */
static size_t access_build(const struct wsync_cuda *cu, struct gpu_map *g,
                           CUmemAccessDesc *desc)
{
	CUmemAccess_flags flags = g->writable ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	                                      : CU_MEM_ACCESS_FLAGS_PROT_READ;
	size_t n = 0;

	g->reach = 0;
	for (int i = 0; i < cu->device_count && i < 64 && n < WSYNC_GPU_MAX; i++) {
		CUdevice other;
		int can = i == g->ordinal;

		if (!can && (cu->api.cu_cuDeviceGet(&other, i) != CUDA_SUCCESS ||
		             cu->api.cu_cuDeviceCanAccessPeer(&can, other, g->dev) !=
		             CUDA_SUCCESS))
			can = 0;
		if (!can)
			continue;
		desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		desc[n].location.id = i;
		desc[n++].flags = flags;
		g->reach |= 1ull << i;
	}
	return n;
}

int wsync_gpu_map_reachable(const struct wsync_cuda *cu, const struct gpu_map *g,
                            uint64_t other, const char *what)
{
	int ordinal = -1;
	CUdevice dev;
	CUuuid u;
	char text[WSYNC_GPU_UUID_TEXT] = "?";

	if (cu->api.cu_cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
	                                     (CUdeviceptr)other) != CUDA_SUCCESS ||
	    ordinal < 0 || (ordinal < 64 && (g->reach >> ordinal & 1)))
		return 0;
	if (cu->api.cu_cuDeviceGet(&dev, ordinal) == CUDA_SUCCESS &&
	    cu->api.cu_cuDeviceGetUuid(&u, dev) == CUDA_SUCCESS)
		wsync_gpu_uuid_format((const uint8_t *)u.bytes, text, sizeof(text));
	return wsync_fail(-EXDEV, "%s: the view is on GPU %d (%s), the destination on GPU %d "
	                  "(%s), which cannot reach it peer to peer, so it has no access to "
	                  "the view: copy on a GPU that reaches it, take the view on the "
	                  "destination's GPU if the model lives there, or copy a host view "
	                  "(WSYNC_DEV_HOST_MIRROR) with wsync_view_copy_to_device", what,
	                  g->ordinal, g->uuid_text, ordinal, text);
}

static void slot_unmap(const struct wsync_cuda *cu, struct gpu_map *g, uint32_t k)
{
	if (!g->base[k])
		return;
	cu->api.cu_cuMemUnmap(g->base[k], g->dev_bytes);
	cu->api.cu_cuMemAddressFree(g->base[k], g->dev_bytes);
	g->base[k] = 0;
}

/* Imports fd (not closed here) as slot k. */
static int slot_map(const struct wsync_cuda *cu, struct gpu_map *g, uint32_t k, int fd,
                    const char *model)
{
	CUmemAccessDesc desc[WSYNC_GPU_MAX];
	CUmemGenericAllocationHandle h;
	CUdeviceptr ptr = 0;
	const char *step = "importing";
	CUresult r;

	r = cu->api.cu_cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
	                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (r != CUDA_SUCCESS)
		goto out_fail;
	step = "reserving an address range for";
	r = cu->api.cu_cuMemAddressReserve(&ptr, g->dev_bytes, 0, 0, 0);
	if (r != CUDA_SUCCESS)
		goto out_release;
	step = "mapping";
	r = cu->api.cu_cuMemMap(ptr, g->dev_bytes, 0, h, 0);
	if (r != CUDA_SUCCESS)
		goto out_free;
	step = "setting access to";
	r = cu->api.cu_cuMemSetAccess(ptr, g->dev_bytes, desc, access_build(cu, g, desc));
	if (r != CUDA_SUCCESS)
		goto out_unmap;
	cu->api.cu_cuMemRelease(h);           /* the mapping keeps the memory */
	g->base[k] = ptr;
	return 0;

out_unmap:
	cu->api.cu_cuMemUnmap(ptr, g->dev_bytes);
out_free:
	cu->api.cu_cuMemAddressFree(ptr, g->dev_bytes);
out_release:
	cu->api.cu_cuMemRelease(h);
out_fail:
	return wsync_fail(wsync_cu_errno(r), "model '%s': %s slot %u on GPU %d: %s", model,
	                  step, k, g->ordinal, wsync_cu_name(cu, r));
}

int wsync_gpu_map_attach(struct wsync_client *c, const char *model, uint32_t model_id,
                         const struct wsync_ctl_model *e, uint32_t device, bool writable,
                         int64_t deadline_ns, struct gpu_map **out)
{
	const struct wsync_msg_gpu_attach_ok *ok;
	const struct wsync_cuda *cu;
	char text[WSYNC_GPU_UUID_TEXT];
	union wsync_msg_any m;
	struct conn_reply rep;
	struct gpu_map *g;
	int err;

	err = wsync_gpu_driver("device slabs", &cu);
	if (err)
		return err;
	if (device >= e->n_devices || device >= WSYNC_MAX_DEVICES)
		return wsync_fail(-ENODEV, "model '%s' has no GPU %u", model, device);
	g = calloc(1, sizeof(*g));
	if (!g)
		return wsync_fail(-ENOMEM, "model '%s': out of memory", model);
	g->device = device;
	g->writable = writable;
	wsync_gpu_uuid_format(e->dev_uuid[device], text, sizeof(text));
	memcpy(g->uuid_text, text, sizeof(g->uuid_text));
	if (device_find(cu, e->dev_uuid[device], &g->ordinal, &g->dev)) {
		free(g);
		return wsync_fail(-ENODEV, "model '%s': GPU %s is not visible in this process "
		                  "(%d GPUs; CUDA_VISIBLE_DEVICES counts)", model, text,
		                  cu->device_count);
	}

	wsync_msg_init(&m.hdr, WSYNC_MSG_GPU_ATTACH, 0);
	m.gpu_attach.m.model_id = model_id;
	m.gpu_attach.device = device;
	err = wsync_conn_call_by(c, &m, NULL, 0, WSYNC_MSG_GPU_ATTACH_OK,
	                         wsync_conn_deadline(c, deadline_ns), NULL, &rep);
	if (err) {
		free(g);
		return err;
	}
	ok = &rep.msg.gpu_attach_ok;
	if (ok->model_id != model_id || ok->device != device || rep.n_fds < 0 ||
	    (uint32_t)rep.n_fds != ok->n_slots || ok->dev_bytes != e->dev_bytes) {
		err = wsync_fail(-EPROTO, "model '%s': GPU_ATTACH_OK for model %u GPU %u with %d "
		                 "fds for %u slots of %llu bytes", model, ok->model_id,
		                 ok->device, rep.n_fds, ok->n_slots,
		                 (unsigned long long)ok->dev_bytes);
		goto out_free;
	}
	g->n_slots = ok->n_slots;
	g->dev_bytes = ok->dev_bytes;
	for (uint32_t k = 0; k < g->n_slots; k++) {
		err = slot_map(cu, g, k, rep.fds[k], model);
		if (err)
			goto out_free;
	}
	wsync_reply_close_fds(&rep, 0);
	*out = g;
	return 0;

out_free:
	wsync_reply_close_fds(&rep, 0);
	wsync_gpu_map_free(g);
	return err;
}

void wsync_gpu_map_free(struct gpu_map *g)
{
	const struct wsync_cuda *cu;

	if (!g)
		return;
	if (!wsync_gpu_driver("device slabs", &cu))
		for (uint32_t k = 0; k < WSYNC_MAX_SLOTS; k++)
			slot_unmap(cu, g, k);
	free(g);
}

#else /* built without cuda.h */

int wsync_gpu_map_attach(struct wsync_client *c, const char *model, uint32_t model_id,
                         const struct wsync_ctl_model *e, uint32_t device, bool writable,
                         int64_t deadline_ns, struct gpu_map **out)
{
	const struct wsync_cuda *cu;

	(void)c;
	(void)model;
	(void)model_id;
	(void)e;
	(void)device;
	(void)writable;
	(void)deadline_ns;
	(void)out;
	return wsync_gpu_driver("device slabs", &cu);   /* -ENOSYS, saying why */
}

void wsync_gpu_map_free(struct gpu_map *g)
{
	(void)g;
}

#endif
