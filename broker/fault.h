/*
 * broker/fault.h — fault injection for tests, inert unless asked for.
 *
 * Every heap allocation of the broker goes through fault_malloc & co., every
 * shared-memory object it creates through fault_seg_create and every mapping
 * of one through fault_seg_map. Each kind counts its calls; when the
 * environment names a call, that one call fails as the real one would:
 *
 *   WSYNC_FAULT_ALLOC=N    the N-th allocation returns NULL (ENOMEM)
 *   WSYNC_FAULT_SEG=N      the N-th segment creation fails with -ENOSPC
 *                          (as a full /dev/shm makes ftruncate/fallocate fail)
 *   WSYNC_FAULT_MAP=N      the N-th mapping fails with -ENOMEM
 *   WSYNC_FAULT_SUBMIT=N   the N-th submit of a full SQ (loop.c, sqe_get)
 *                          fails with -EBUSY, and so does every retry until
 *                          the loop reaps the CQ: what the kernel does while
 *                          completions wait in its overflow list
 *   WSYNC_HELLO_TIMEOUT_MS how long a connection may stay silent before its
 *                          HELLO (default 2000; checked at the 1 s tick)
 *
 * Counting starts at 1 with the process; each injection is logged at warn
 * level ("fault injection: ..."), so a test can tell whether its N was
 * reached. Without these variables the wrappers are the plain calls.
 *
 * Only a broker built with -DWSYNC_FAULT_INJECTION ($(BUILD)/tests/
 * wsyncd-fault, for the fault tests) reads these variables; in the real
 * wsyncd fault_hit is always false and the HELLO deadline is the default.
 */
#ifndef WSYNC_BROKER_FAULT_H
#define WSYNC_BROKER_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/segment.h"

enum fault_kind {
	FAULT_ALLOC,
	FAULT_SEG,
	FAULT_MAP,
	FAULT_SUBMIT,
	FAULT_KIND_END,
};

/* Counts one call of kind k at site; true if this call must fail. */
bool  fault_hit(enum fault_kind k, const char *site);

void *fault_malloc(size_t n);
void *fault_calloc(size_t n, size_t size);
void *fault_realloc(void *p, size_t n);
void *fault_aligned_alloc(size_t align, size_t n);

/* wsync_seg_create_at / wsync_memfd_create / wsync_seg_map, or the injected
 * failure. */
int   fault_seg_create_at(int dirfd, const char *name, uint64_t bytes);
int   fault_memfd_create(const char *label, uint64_t bytes);
int   fault_memfd_create_huge(const char *label, uint64_t bytes, enum wsync_slab_pages kind);
int   fault_seg_map(int fd, uint64_t bytes, int writable, int populate, void **out);

/* The HELLO deadline in ns: WSYNC_HELLO_TIMEOUT_MS if set and valid, else
 * dflt_ns. */
int64_t fault_hello_wait_ns(int64_t dflt_ns);

#endif
