/*
 * broker/gpu_slab.h — device slabs: one VMM allocation per slot per GPU.
 *
 * A device model (PUB_OPEN with devices) gets, on each of its GPUs and for
 * each slot, one cuMemCreate allocation exportable as a POSIX fd, sized to
 * the slab rounded up to the GPUs' granularity and exported once: one fd
 * per slab, never one per tensor. The broker keeps the handle and the fd
 * for the model's life and passes dups of the fd to clients (GPU_ATTACH);
 * each client imports, maps and sets its own access. Dropping the model
 * releases the handles and closes the fds: the driver frees the memory
 * when the last mapping anywhere goes, so a collector still mapping an old
 * slot is never torn.
 *
 * The broker never launches work, copies or synchronises on a GPU while
 * it serves. It creates no context unless the driver refuses to allocate
 * without one; then it retains the GPU's primary context, makes it current
 * only around the allocation, and logs it once (released at shutdown). The
 * one exception is at startup, before the first client is accepted: a
 * device model adopted from the last broker with a host mirror gets its
 * latest version copied back onto its GPUs (gpu_slabs_load), each in that
 * GPU's primary context, retained for the copy and released after it.
 */
#ifndef WSYNC_BROKER_GPU_SLAB_H
#define WSYNC_BROKER_GPU_SLAB_H

#include <stddef.h>
#include <stdint.h>

#include "shm/layout.h"

struct gpu_slabs {
	uint32_t n_devices;
	uint32_t dev_flags;              /* enum wsync_dev_flags */
	uint32_t n_slots;
	uint64_t dev_bytes;              /* one slot on one GPU */
	uint8_t  uuid[WSYNC_MODEL_GPUS][16];
	int      index[WSYNC_MODEL_GPUS];            /* in the broker's inventory */
	uint64_t handle[WSYNC_MODEL_GPUS][WSYNC_MAX_SLOTS];
	int      fd[WSYNC_MODEL_GPUS][WSYNC_MAX_SLOTS];
};

/*
 * Allocates and exports n_slots slabs of bytes on each GPU named. 0, or
 * -ENODEV (no such GPU served here, no driver, a duplicate), -ENOSPC (a GPU
 * is out of memory), -EIO (another driver error) with a reason in why;
 * nothing stays allocated on failure.
 */
int  gpu_slabs_create(const uint8_t (*uuids)[16], uint32_t n_devices, uint32_t dev_flags,
                      uint64_t bytes, uint32_t n_slots, const char *model,
                      struct gpu_slabs **out, char *why, size_t whylen);
void gpu_slabs_free(struct gpu_slabs *g);
/*
 * Copies `bytes` of host memory into slot `slot` on every GPU of g
 * (synchronously: adoption, before serving). 0, or -EIO (-ENOSPC) with
 * the GPU and the driver's error in why; a slot that failed on some GPU
 * must not be published.
 */
int  gpu_slabs_load(const struct gpu_slabs *g, uint32_t slot, const void *host,
                    uint64_t bytes, char *why, size_t whylen);
/* Releases the primary contexts allocation needed (broker shutdown). */
void gpu_slabs_shutdown(void);

#endif
