/*
 * shm/segment.h — names, creation and mapping of shared-memory segments.
 * See shm/layout.h for what each segment holds.
 */
#ifndef WSYNC_SHM_SEGMENT_H
#define WSYNC_SHM_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "layout.h"

#define WSYNC_SHM_DIR      "/dev/shm"
#define WSYNC_SHM_NAME_MAX 192

/*
 * Every named segment of a broker generation lives in a private directory,
 * /dev/shm/wsync.<uid>.<instance>.<16 hex digits, random>/, made 0700 by
 * the broker: in world-writable /dev/shm nobody else can name, plant or
 * replace what is in it. Clients never open segments by name (their fds
 * come over the socket).
 */

/* "wsync.<uid>.<instance>." — the prefix of the instance's directories. */
int wsync_seg_prefix(char *buf, size_t len, uid_t uid, const char *instance);
/* "wsync.<uid>.<instance>.<tag as 16 hex digits>" */
int wsync_seg_dir_name(char *buf, size_t len, uid_t uid, const char *instance,
                       uint64_t tag);
/* True if name is exactly a directory name of this instance (the prefix and
 * 16 lower-case hex digits, nothing more). */
bool wsync_seg_dir_name_ours(const char *name, uid_t uid, const char *instance);
/* mkdir 0700 of a fresh random name (retried on EEXIST), its name in name:
 * an O_DIRECTORY fd, or -errno. */
int wsync_seg_dir_create(uid_t uid, const char *instance, char *name, size_t len);
/* Opens /dev/shm/<name> O_NOFOLLOW and checks it: a directory, owned by
 * uid, mode exactly 0700. fd, or -errno with the reason in why. */
int wsync_seg_dir_open(const char *name, uid_t uid, char *why, size_t whylen);
/* Removes a checked directory (as above) and the regular files in it. */
int wsync_seg_dir_remove(const char *name, uid_t uid);

/*
 * Creates name in dirfd (O_EXCL, O_NOFOLLOW, mode 0600, replacing a
 * leftover of the same name), sizes it and reserves its memory with
 * fallocate, so a full /dev/shm is an -ENOSPC now, never a SIGBUS later.
 * Returns an O_RDWR fd (CLOEXEC) or -errno.
 */
int wsync_seg_create_at(int dirfd, const char *name, uint64_t bytes);
/* Opens name in dirfd read-only (O_NOFOLLOW) for adoption, and trusts it
 * only if it is a regular file owned by uid with one link and no group or
 * other write bit: fd, or -errno with the reason in why. */
int wsync_seg_open_checked(int dirfd, const char *name, uid_t uid, char *why, size_t whylen);
/* A second fd on the same object, read-only (for handing to collectors). */
int wsync_seg_reopen_ro(int fd);
/*
 * Maps bytes of fd shared, read-only or read-write, prefaulted (MAP_POPULATE)
 * when populate. Returns 0 and *out, or -errno.
 */
int wsync_seg_map(int fd, uint64_t bytes, int writable, int populate, void **out);
/* Size of the object behind fd, or -errno. */
int64_t wsync_seg_size(int fd);
/* Writes all len bytes at offset at (EINTR retried): 0 or -errno. */
int wsync_pwrite_all(int fd, const void *buf, size_t len, off_t at);

/* A memfd of bytes, mode 0600, sealed against shrinking and growing (for
 * session pages, model pages and --group slabs): fd or -errno. */
int wsync_memfd_create(const char *label, uint64_t bytes);

/* ---- huge pages (docs/HUGEPAGES.md) ------------------------------------- */

#define WSYNC_HUGE_PAGE    (UINT64_C(2) << 20)   /* the one huge page size used */

/* bytes rounded up to a multiple of page (a power of two); 0 if that
 * overflows or bytes is 0. */
uint64_t wsync_seg_round(uint64_t bytes, uint64_t page);
/* The granularity of fd's object for mmap, munmap and mprotect lengths: the
 * huge page size of a hugetlbfs object (memfd MFD_HUGETLB included), else
 * WSYNC_PAGE. Positive, or -errno. */
int64_t wsync_seg_page_size(int fd);
/*
 * A memfd of bytes on huge pages, otherwise as wsync_memfd_create: bytes is
 * rounded up to WSYNC_HUGE_PAGE first (the object's size; callers map
 * wsync_seg_round(bytes, WSYNC_HUGE_PAGE)). HUGETLB takes reserved 2 MiB
 * pages, all allocated here: -ENOSPC when there are not enough, never a
 * SIGBUS at a client's first touch. THP allocates the memory here too, as
 * 2 MiB pages where the kernel has them (shmem_enabled advise: through a
 * MADV_HUGEPAGE mapping). fd or -errno.
 */
int wsync_memfd_create_huge(const char *label, uint64_t bytes, enum wsync_slab_pages kind);

#endif
