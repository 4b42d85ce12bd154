/*
 * tests/fakecuda/fc_internal.h — shared state of the fake driver's files:
 * fakecuda.c (configuration, devices, contexts, errors, call counts,
 * cuGetProcAddress),
 * fc_mem.c (VMM, cuMemAlloc, host registration, pointer attributes) and
 * fc_stream.c (streams, events, copies).
 *
 * Locking: fc_lock guards the configuration and every registry of fc_mem.c;
 * fc_stream.c has its own lock for queues and events. No function takes
 * both at once. A CUdevice is an ordinal as this process sees it (after
 * CUDA_VISIBLE_DEVICES); fc_phys() maps it to the physical device.
 */
#ifndef WSYNC_TESTS_FC_INTERNAL_H
#define WSYNC_TESTS_FC_INTERNAL_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fakecuda.h"

struct fc_config {
	int      n_phys;                              /* FAKECUDA_DEVICES */
	int      n_vis;                               /* after CUDA_VISIBLE_DEVICES */
	int      vis[FAKECUDA_MAX_DEVICES];           /* visible ordinal -> physical */
	bool     peer[FAKECUDA_MAX_DEVICES][FAKECUDA_MAX_DEVICES];  /* physical */
	int      driver_version;
	uint64_t mem_budget;                          /* bytes per device */
	uint64_t mem_used[FAKECUDA_MAX_DEVICES];      /* physical */
	bool     no_vmm, no_fd;
	unsigned copy_delay_us;
};

struct CUctx_st {
	int      dev;                                 /* visible ordinal */
	unsigned retains;
};

extern pthread_mutex_t  fc_lock;
extern struct fc_config fc_cfg;
extern bool             fc_initialised;
extern struct CUctx_st  fc_primary[FAKECUDA_MAX_DEVICES];
extern __thread CUcontext fc_current;

/* Every API function starts here: counts the call for FAKECUDA_FAIL/DIE,
 * and, with need_init, fails before cuInit. */
CUresult fc_enter(const char *name, bool need_init);
#define FC_ENTER(name) do { CUresult r_ = fc_enter(name, true); if (r_) return r_; } while (0)
/* CUDA_ERROR_INVALID_CONTEXT unless this thread has a current context. */
CUresult fc_need_ctx(void);
bool     fc_dev_valid(CUdevice dev);
int      fc_phys(CUdevice dev);
/* The visible ordinal of a physical device, or -1. */
int      fc_vis_of_phys(int phys);

/*
 * fc_mem.c: [p, p+n) as device memory that device `by` (a visible ordinal:
 * the device of the context issuing the copy) may read, or write when
 * write is set: CUDA_SUCCESS, or CUDA_ERROR_INVALID_VALUE if it is not one
 * mapped range or cuMemAlloc allocation, or if the mapping's access for
 * `by` (cuMemSetAccess, per device as on a GPU) does not allow it.
 * cuMemAlloc memory is reachable from every device, as the driver routes
 * copies of it itself.
 */
CUresult fc_mem_check(CUdeviceptr p, size_t n, bool write, int by);
/* Whether [p, p+n) of host memory is pinned for work issued in ctx: inside
 * one cuMemHostRegister range made with CU_MEMHOSTREGISTER_PORTABLE, or
 * made while ctx was current. Other host memory is pageable there. */
bool     fc_host_pinned(const void *p, size_t n, CUcontext ctx);
void     fc_mem_live(struct fakecuda_live *out);

/* fc_stream.c */
void     fc_stream_live(struct fakecuda_live *out);
void     fc_stream_reset(void);

#endif
