/*
 * broker/gpu.h — which GPUs this broker serves (--gpus), found at startup.
 *
 * At start the broker loads the CUDA driver (shm/cuda_loader), lists the
 * GPUs it shows this process (shm/cuda_discover) and logs them once: the
 * driver version, each GPU with its UUID, VMM and POSIX-fd support, and the
 * peer matrix, or that there is no driver or no GPU. It creates no context:
 * device slabs will need one only to allocate and export. A broker with no
 * usable GPU serves host models as before.
 *
 * --gpus all (the default) uses every GPU that can export memory as a file
 * descriptor and is quiet about there being none; --gpus none never loads
 * the driver; --gpus LIST names GPUs by UUID (GPU-xxxxxxxx-..., the form
 * nvidia-smi -L prints) or by ordinal as this broker sees them (after its
 * own CUDA_VISIBLE_DEVICES), comma-separated; a named GPU that is absent or
 * cannot export memory is a startup error.
 */
#ifndef WSYNC_BROKER_GPU_H
#define WSYNC_BROKER_GPU_H

#include <stdbool.h>

#include "shm/cuda_discover.h"

/* The longest --gpus value, its NUL included (config.c checks the syntax). */
#define GPU_SPEC_MAX 256

/* spec is "all", "none" or a comma-separated list of UUIDs and ordinals.
 * Discovers and logs; 0, or -1 after logging why the broker cannot start. */
int  gpu_start(const char *spec);
void gpu_stop(void);
/* The GPUs found, and whether one serves device models. */
const struct wsync_gpu_inventory *gpu_inventory(void);
bool gpu_selected(int index);
/* The loaded driver while a GPU is selected, else NULL. */
const struct wsync_cuda *gpu_driver(void);

#endif
