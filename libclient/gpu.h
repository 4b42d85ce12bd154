/*
 * libclient/gpu.h — the process's CUDA driver, loaded once (gpu.c), what
 * its failures become, and copies of rows that the device files share.
 */
#ifndef WSYNC_GPU_H
#define WSYNC_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "shm/cuda_loader.h"

/* The process's driver (loaded once, kept): 0, or -errno with the detail
 * set, naming `what`. */
int wsync_gpu_driver(const char *what, const struct wsync_cuda **out);

#ifdef WSYNC_HAVE_CUDA_H
/* "CUDA_ERROR_..." for r. */
const char *wsync_cu_name(const struct wsync_cuda *cu, CUresult r);
/* The error code a driver failure becomes (-ENOSPC, -ENODEV, -EIO). */
int wsync_cu_errno(CUresult r);

/* One end of a copy of rows: device memory, or host memory. */
struct wsync_cu_end {
	bool      host;
	uintptr_t at;                    /* CUdeviceptr, or a host address */
	uint64_t  pitch;                 /* bytes from one row to the next */
};
/*
 * `rows` rows of `width` bytes from src to dst on stream, asynchronously:
 * one plain copy when they are contiguous at both ends, else one
 * cuMemcpy2DAsync, or (pitches over what a 2D copy takes) one copy per
 * row. Not host to host.
 */
CUresult wsync_cu_copy_rows(const struct wsync_cuda *cu, struct wsync_cu_end dst,
                            struct wsync_cu_end src, uint64_t width, uint64_t rows,
                            CUstream stream);
#endif

#endif /* WSYNC_GPU_H */
