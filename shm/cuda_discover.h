/*
 * shm/cuda_discover.h — what GPUs a loaded driver shows this process.
 *
 * Discovery creates no context: it only asks the driver about devices
 * (names, UUIDs, attributes, VMM granularity, peer access). Ordinals are
 * as this process sees them (after CUDA_VISIBLE_DEVICES); UUIDs are what
 * names a GPU between processes.
 */
#ifndef WSYNC_SHM_CUDA_DISCOVER_H
#define WSYNC_SHM_CUDA_DISCOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_loader.h"

#define WSYNC_GPU_MAX       16
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" and its NUL */
#define WSYNC_GPU_UUID_TEXT 41

struct wsync_gpu_info {
	int      ordinal;
	char     name[96];
	uint8_t  uuid[16];
	char     uuid_text[WSYNC_GPU_UUID_TEXT];
	bool     vmm;                      /* cuMemCreate and friends */
	bool     posix_fd;                 /* VMM memory exportable as an fd */
	size_t   granularity;              /* of a POSIX-fd VMM allocation; 0 without */
	size_t   total_mem;
	int      pci_domain, pci_bus, pci_device;
};

struct wsync_gpu_inventory {
	int  driver_version;
	int  count;                        /* devices listed (at most WSYNC_GPU_MAX) */
	int  count_all;                    /* devices the driver showed */
	struct wsync_gpu_info dev[WSYNC_GPU_MAX];
	bool peer[WSYNC_GPU_MAX][WSYNC_GPU_MAX];   /* [a][b]: a can access b's memory */
};

/* Fills inv from a loaded driver: 0, or -EIO with why filled. */
int  wsync_cuda_discover(const struct wsync_cuda *cu, struct wsync_gpu_inventory *inv,
                         char *why, size_t whylen);
/* The text form of a UUID, "GPU-" and 8-4-4-4-12 lower-case hex digits. */
void wsync_gpu_uuid_format(const uint8_t uuid[16], char *buf, size_t len);
/* Parses a UUID's text form (the 8-4-4-4-12 hex digits, "GPU-" optional,
 * any case) into 16 bytes: 0, or -EINVAL. */
int  wsync_gpu_uuid_parse(const char *s, uint8_t out[16]);
/* The device of inv named by s: a full UUID text (case ignored, "GPU-"
 * optional) or a decimal ordinal; its index in inv->dev, or -1. */
int  wsync_gpu_find(const struct wsync_gpu_inventory *inv, const char *s);
/* "0>1 1>0" for a peer matrix, "none" without any peer access. */
void wsync_gpu_peers_text(const struct wsync_gpu_inventory *inv, char *buf, size_t len);

#endif
