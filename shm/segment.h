/*
 * shm/segment.h — names, creation and mapping of shared-memory segments.
 * See shm/layout.h for what each segment holds.
 */
#ifndef WSYNC_SHM_SEGMENT_H
#define WSYNC_SHM_SEGMENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "layout.h"

#define WSYNC_SHM_DIR      "/dev/shm"
#define WSYNC_SHM_NAME_MAX 192

/* "wsync.<uid>.<instance>." — the prefix of every segment of an instance. */
int wsync_seg_prefix(char *buf, size_t len, uid_t uid, const char *instance);
/* "/wsync.<uid>.<instance>.ctl" (a name for shm_open, with the slash). */
int wsync_seg_name_ctl(char *buf, size_t len, uid_t uid, const char *instance);
/* "/wsync.<uid>.<instance>.<gen>.m<id>.page" / ".layout" / ".s<slot>" */
int wsync_seg_name_page(char *buf, size_t len, uid_t uid, const char *instance,
                        uint64_t gen, uint32_t model_id);
int wsync_seg_name_layout(char *buf, size_t len, uid_t uid, const char *instance,
                          uint64_t gen, uint32_t model_id);
int wsync_seg_name_slab(char *buf, size_t len, uid_t uid, const char *instance,
                        uint64_t gen, uint32_t model_id, uint32_t slot);

/*
 * Creates a new segment (O_EXCL, mode 0600), sizes it and reserves its memory
 * with fallocate, so a full /dev/shm is an -ENOSPC now, never a SIGBUS later.
 * Returns an O_RDWR fd (CLOEXEC) or -errno.
 */
int wsync_seg_create(const char *name, uint64_t bytes);
/* Opens an existing segment read-only or read-write: fd or -errno. */
int wsync_seg_open(const char *name, int writable);
/* A second fd on the same object, read-only (for handing to collectors). */
int wsync_seg_reopen_ro(int fd);
/*
 * Maps bytes of fd shared, read-only or read-write, prefaulted (MAP_POPULATE)
 * when populate. Returns 0 and *out, or -errno.
 */
int wsync_seg_map(int fd, uint64_t bytes, int writable, int populate, void **out);
/* Size of the object behind fd, or -errno. */
int64_t wsync_seg_size(int fd);

/* A sealed-size memfd of bytes (for session pages and layouts): fd or -errno. */
int wsync_memfd_create(const char *label, uint64_t bytes);

#endif
