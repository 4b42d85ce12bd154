/*
 * tests/fakecuda/fakecuda.h — the test controls of the fake CUDA driver.
 *
 * $(BUILD)/tests/fakecuda/libcuda.so.1 implements, on host memory and
 * memfds, the CUDA driver API functions wsync uses (cuda.h signatures, the
 * versioned names the real driver exports, cuGetProcAddress_v2). Tests load
 * it through WSYNC_LIBCUDA or link it directly. docs/GPU.md lists what it
 * simulates and what only a real GPU can verify.
 *
 * Strict where the driver is (a lenient fake hides bugs a GPU shows):
 *   - VMM access is per device: cuMemSetAccess grants one device at a time
 *     (a device that cannot reach the memory's GPU peer to peer is refused,
 *     CUDA_ERROR_INVALID_DEVICE), and a copy is checked against the access
 *     of the device that issues it: the device of the stream's context, or
 *     of the current context for the NULL stream and synchronous copies.
 *     A copy from a device without access fails (CUDA_ERROR_INVALID_VALUE).
 *     The host sees the widest access any device has (no kernels here).
 *   - host memory is pinned only for the context that registered it,
 *     unless registered CU_MEMHOSTREGISTER_PORTABLE; an asynchronous copy
 *     with a pageable host end runs synchronously, as the driver's does
 *     (fakecuda_pageable_copies() counts them);
 *   - cuMemHostUnregister needs a current context, and for a registration
 *     that is not portable the one that registered it;
 *   - cuEventRecord on a stream of another context than the event's is
 *     CUDA_ERROR_INVALID_HANDLE.
 *
 * Environment, read by cuInit (and fakecuda_reset):
 *   FAKECUDA_DEVICES=N          devices (default 2, at most FAKECUDA_MAX_DEVICES)
 *   FAKECUDA_PEERS=all|none|ij,...  peer access: "01,10" = 0 reaches 1, 1 reaches 0
 *   FAKECUDA_DRIVER_VERSION=V   cuDriverGetVersion (default 12040)
 *   FAKECUDA_MEM_MB=M           per-device budget for cuMemCreate/cuMemAlloc (1024)
 *   FAKECUDA_FAIL=name:N[:err],...  the N-th call of name returns err (999)
 *   FAKECUDA_DIE=name:N         the N-th call of name SIGKILLs the process
 *   FAKECUDA_NO_VMM=1, FAKECUDA_NO_FD=1  devices without VMM / POSIX-fd handles
 *   FAKECUDA_COPY_DELAY_US=U    asynchronous copies sleep U µs before each quarter
 *   FAKECUDA_REPORT=path        the live counts written to path at exit
 *   CUDA_VISIBLE_DEVICES        honoured as the driver does (indices or GPU-uuid prefixes)
 */
#ifndef WSYNC_TESTS_FAKECUDA_H
#define WSYNC_TESTS_FAKECUDA_H

#include <stdbool.h>
#include <stdint.h>

#define FAKECUDA_MAX_DEVICES 8
#define FAKECUDA_GRANULARITY ((size_t)2 << 20)

/* What is alive in this process; all zero once a program has freed
 * everything it made (primary contexts included). */
struct fakecuda_live {
	uint64_t allocations;       /* cuMemCreate handles and imports not yet freed */
	uint64_t exports;           /* exported fds still open in this process */
	uint64_t mappings;          /* cuMemMap ranges not unmapped */
	uint64_t reservations;      /* cuMemAddressReserve ranges not freed */
	uint64_t mem_allocs;        /* cuMemAlloc_v2 not freed */
	uint64_t host_registrations;
	uint64_t streams;
	uint64_t events;
	uint64_t contexts;          /* primary context retains not released */
};

typedef void (*fakecuda_live_fn)(struct fakecuda_live *out);
typedef int  (*fakecuda_reset_fn)(void);
typedef void (*fakecuda_hold_streams_fn)(bool hold);
typedef uint64_t (*fakecuda_calls_fn)(const char *name);
typedef uint64_t (*fakecuda_pageable_copies_fn)(void);

/* Fills *out. */
void fakecuda_live(struct fakecuda_live *out);
/* Forgets the configuration and the call counts, re-reads the environment
 * at the next cuInit: 0, or -EBUSY while anything is live. */
int  fakecuda_reset(void);
/* While held, stream workers start no operation: a copy issued then stays
 * undone, deterministically, until release. */
void fakecuda_hold_streams(bool hold);
/* How many times this process called the entry point exported as name
 * ("cuMemcpy2DAsync_v2"), since it loaded the fake or the last reset. */
uint64_t fakecuda_calls(const char *name);
/* Asynchronous copies that ran synchronously because their host memory was
 * not pinned for the issuing context, since load or the last reset. */
uint64_t fakecuda_pageable_copies(void);

#endif
