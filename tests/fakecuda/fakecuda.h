/*
 * tests/fakecuda/fakecuda.h — the test controls of the fake CUDA driver.
 *
 * $(BUILD)/tests/fakecuda/libcuda.so.1 implements, on host memory and
 * memfds, the CUDA driver API functions wsync uses (cuda.h signatures, the
 * versioned names the real driver exports, cuGetProcAddress_v2). Tests load
 * it through WSYNC_LIBCUDA or link it directly. docs/GPU.md lists what it
 * simulates and what only a real GPU can verify.
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

/* Fills *out. */
void fakecuda_live(struct fakecuda_live *out);
/* Forgets the configuration and the call counts, re-reads the environment
 * at the next cuInit: 0, or -EBUSY while anything is live. */
int  fakecuda_reset(void);
/* While held, stream workers start no operation: a copy issued then stays
 * undone, deterministically, until release. */
void fakecuda_hold_streams(bool hold);

#endif
