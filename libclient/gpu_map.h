/*
 * libclient/gpu_map.h — a device model's slots on one GPU, mapped in this
 * process (gpu_map.c).
 *
 * A device model's slots on one of its GPUs are mapped in a process once
 * (struct gpu_map: import each exported VMM fd, reserve, map, set access)
 * and kept until the publisher or subscription closes: a version in a slot
 * already mapped costs no driver call. Publishers map writable on every GPU
 * of the model (they fan out to all of them, gpu_pub.c); collectors
 * read-only on the GPUs they ask for (gpu_sub.c).
 *
 * VMM access is per device: a copy or kernel on a GPU that was not given
 * access to a mapping fails (or faults) even within one process. A mapping
 * therefore grants access to its own GPU and to every GPU of this process
 * that reaches it peer to peer (`reach`); no other GPU can be given any.
 */
#ifndef WSYNC_GPU_MAP_H
#define WSYNC_GPU_MAP_H

#include <stdbool.h>
#include <stdint.h>

#include "client.h"
#include "shm/cuda_loader.h"
#include "shm/layout.h"
#include "wsync.h"

struct gpu_map;                      /* defined only with cuda.h */

#ifdef WSYNC_HAVE_CUDA_H
struct gpu_map {
	uint32_t device;                 /* index in the model's list */
	int      ordinal;                /* as this process sees the GPU */
	CUdevice dev;
	uint32_t n_slots;
	uint64_t dev_bytes;              /* one slot's mapping */
	bool     writable;
	uint64_t reach;                  /* bit i: GPU ordinal i may touch the
	                                    mapping (access granted) */
	char     uuid_text[WSYNC_GPU_UUID_LEN];   /* as wsync_gpu_uuid writes it */
	CUdeviceptr base[WSYNC_MAX_SLOTS];
};
#endif

/* The index in the model's device list (its ctl entry) of the GPU named by
 * uuid: 0 and *device, -ENODEV if the model is not on it or is a host
 * model, -ENODATA if the model has no layout yet, -EINVAL for a bad uuid. */
int  wsync_gpu_model_device(const struct wsync_ctl_model *e, const char *model,
                            const char *uuid, uint32_t *device);
/*
 * GPU_ATTACH round trip for the model's GPU `device` by deadline_ns
 * (CLOCK_MONOTONIC, -1 = the client's reply limit), then maps its slots
 * (read-only unless writable). -ENODEV if this process does not see that
 * GPU, -ETIMEDOUT past the deadline (the late reply is dropped). Caller
 * holds c->lock.
 */
int  wsync_gpu_map_attach(struct wsync_client *c, const char *model, uint32_t model_id,
                          const struct wsync_ctl_model *e, uint32_t device, bool writable,
                          int64_t deadline_ns, struct gpu_map **out);
/* Unmaps and frees (NULL is a no-op). */
void wsync_gpu_map_free(struct gpu_map *g);
#ifdef WSYNC_HAVE_CUDA_H
/*
 * Whether a copy from or to g's memory into device memory at `other` can be
 * issued: 0 when `other` is on g's GPU or on one that was given access (or
 * is not device memory the driver knows: then the driver decides), else
 * -EXDEV with the detail naming both GPUs, for `what`.
 */
int  wsync_gpu_map_reachable(const struct wsync_cuda *cu, const struct gpu_map *g,
                             uint64_t other, const char *what);
#endif

#endif /* WSYNC_GPU_MAP_H */
