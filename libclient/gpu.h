/*
 * libclient/gpu.h — the process's CUDA driver, loaded once (gpu.c), and
 * what its failures become.
 */
#ifndef WSYNC_GPU_H
#define WSYNC_GPU_H

#include "shm/cuda_loader.h"

/* The process's driver (loaded once, kept): 0, or -errno with the detail
 * set, naming `what`. */
int wsync_gpu_driver(const char *what, const struct wsync_cuda **out);

#ifdef WSYNC_HAVE_CUDA_H
/* "CUDA_ERROR_..." for r. */
const char *wsync_cu_name(const struct wsync_cuda *cu, CUresult r);
/* The error code a driver failure becomes (-ENOSPC, -ENODEV, -EIO). */
int wsync_cu_errno(CUresult r);
#endif

#endif /* WSYNC_GPU_H */
