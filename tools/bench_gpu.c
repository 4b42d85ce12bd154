/*
 * tools/bench_gpu.c — scenario "gpu": the rows device models will be
 * measured by (docs/GPU.md), each against a reference taken in the same
 * run on the same GPU:
 *
 *   device publish      pub_begin_gpu + device-to-device copy + commit of a
 *                       256 MiB model, against one cuMemcpyDtoD of 256 MiB
 *   peer fan-out        the commit reaching a second GPU's slot, against one
 *                       cuMemcpyPeer of the slab
 *   staged fan-out      the same without peer access (through pinned host
 *                       memory), against DtoH + HtoD of the slab
 *   acquire_gpu         acquire + release of a device view, against host
 *                       acquire + release
 *   copy_to_device      wsync_view_copy_to_device of a host slab (registered
 *                       read-only), against cuMemcpyHtoD from pinned memory
 *
 * Until device slabs exist, and on any machine without a real GPU (no
 * driver, no device, or the tests' fake driver), every row is skipped with
 * the reason, which never fails the bench.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>

#include "bench_common.h"
#include "shm/cuda_loader.h"

static const char *const gpu_rows[] = {
	"device publish 256 MiB",
	"peer fan-out to a 2nd GPU",
	"staged fan-out (no peer access)",
	"acquire_gpu + release",
	"view_copy_to_device 256 MiB",
};

#define N_GPU_ROWS (sizeof gpu_rows / sizeof gpu_rows[0])

/* Why there is nothing to measure on this machine; NULL if a GPU is there. */
static const char *no_gpu_reason(char *why, size_t len)
{
	struct wsync_cuda cu;
	bool fake, none;

	if (wsync_cuda_load(&cu, why, len))
		return why;
	fake = dlsym(cu.lib, "fakecuda_live") != NULL;
	none = cu.device_count == 0;
	wsync_cuda_unload(&cu);
	if (!fake && !none)
		return NULL;
	snprintf(why, len, "%s", fake ? "the driver is the tests' fake"
	                              : "the CUDA driver shows no device");
	return why;
}

int bench_gpu(struct bench *b)
{
	char why[512];
	const char *reason = no_gpu_reason(why, sizeof why);

	(void)b;
	for (size_t i = 0; i < N_GPU_ROWS; i++) {
		if (reason)
			row_skip("gpu", gpu_rows[i], "no GPU: %s", reason);
		else
			row_skip("gpu", gpu_rows[i], "device slabs are not implemented yet");
	}
	return 0;
}
