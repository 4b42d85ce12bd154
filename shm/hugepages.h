/*
 * shm/hugepages.h — what the kernel offers in 2 MiB pages (hugetlb pages in
 * the pool, shmem transparent huge pages), read from /proc and /sys; for
 * the broker (broker/pages.c), the bench and the tests that reserve pages.
 */
#ifndef WSYNC_SHM_HUGEPAGES_H
#define WSYNC_SHM_HUGEPAGES_H

#include <stdbool.h>
#include <stddef.h>

#define WSYNC_HUGETLB_SYSFS   "/sys/kernel/mm/hugepages/hugepages-2048kB/"
#define WSYNC_HUGETLB_FREE    WSYNC_HUGETLB_SYSFS "free_hugepages"
#define WSYNC_NR_HUGEPAGES    "/proc/sys/vm/nr_hugepages"
#define WSYNC_THP_SHMEM       "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

/* The non-negative number a file starts with, or -1. */
long wsync_file_long(const char *path);
/* Writes s to path, as to a sysctl: 0, or -1 with errno. Async-signal-safe
 * (for writing a setting back from a signal handler). */
int  wsync_file_write(const char *path, const char *s);
/* Free 2 MiB hugetlb pages, -1 where the kernel has none of that size. */
long wsync_hugetlb_free(void);
/* The selected word of shmem_enabled ("never", "advise", ...), "" if unknown. */
void wsync_thp_shmem_mode(char *buf, size_t len);
/* Whether memfd pages may come as transparent huge pages in that mode:
 * advise (through a MADV_HUGEPAGE mapping), within_size, always, force. */
bool wsync_thp_shmem_usable(const char *mode);

#endif
