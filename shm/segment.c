/* shm/segment.c — naming, creating and mapping shared-memory segments. */
#include "segment.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int name_fmt(size_t len, int n)
{
	if (n < 0)
		return -EINVAL;
	return (size_t)n < len ? 0 : -ENAMETOOLONG;
}

int wsync_seg_prefix(char *buf, size_t len, uid_t uid, const char *instance)
{
	return name_fmt(len, snprintf(buf, len, "wsync.%u.%s.", (unsigned)uid, instance));
}

int wsync_seg_name_ctl(char *buf, size_t len, uid_t uid, const char *instance)
{
	return name_fmt(len, snprintf(buf, len, "/wsync.%u.%s.ctl", (unsigned)uid, instance));
}

static int name_model(char *buf, size_t len, uid_t uid, const char *instance,
                      uint64_t gen, uint32_t model_id, const char *what)
{
	return name_fmt(len, snprintf(buf, len, "/wsync.%u.%s.%llu.m%u.%s",
	                                   (unsigned)uid, instance,
	                                   (unsigned long long)gen, model_id, what));
}

int wsync_seg_name_page(char *buf, size_t len, uid_t uid, const char *instance,
                        uint64_t gen, uint32_t model_id)
{
	return name_model(buf, len, uid, instance, gen, model_id, "page");
}

int wsync_seg_name_layout(char *buf, size_t len, uid_t uid, const char *instance,
                          uint64_t gen, uint32_t model_id)
{
	return name_model(buf, len, uid, instance, gen, model_id, "layout");
}

int wsync_seg_name_slab(char *buf, size_t len, uid_t uid, const char *instance,
                        uint64_t gen, uint32_t model_id, uint32_t slot)
{
	char what[16];

	snprintf(what, sizeof(what), "s%u", slot);
	return name_model(buf, len, uid, instance, gen, model_id, what);
}

/* Reserves the object's memory now: on tmpfs, fallocate fails with ENOSPC
 * where a later page fault would have raised SIGBUS. */
static int seg_reserve(int fd, uint64_t bytes)
{
	if (bytes > (uint64_t)INT64_MAX)
		return -EFBIG;
	if (ftruncate(fd, (off_t)bytes) < 0)
		return -errno;
	if (bytes && posix_fallocate(fd, 0, (off_t)bytes) != 0)
		return -ENOSPC;
	return 0;
}

int wsync_seg_create(const char *name, uint64_t bytes)
{
	int fd, err;

	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	err = seg_reserve(fd, bytes);
	if (err < 0)
		goto out_unlink;
	return fd;

out_unlink:
	shm_unlink(name);
	close(fd);
	return err;
}

int wsync_seg_open(const char *name, int writable)
{
	int fd = shm_open(name, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0);

	return fd < 0 ? -errno : fd;
}

int wsync_seg_reopen_ro(int fd)
{
	char path[64];
	int ro;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	return ro < 0 ? -errno : ro;
}

int wsync_seg_map(int fd, uint64_t bytes, int writable, int populate, void **out)
{
	int prot = PROT_READ | (writable ? PROT_WRITE : 0);
	int flags = MAP_SHARED | (populate ? MAP_POPULATE : 0);
	void *p;

	if (bytes == 0 || bytes > (uint64_t)SIZE_MAX)
		return -EINVAL;
	p = mmap(NULL, (size_t)bytes, prot, flags, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*out = p;
	return 0;
}

int64_t wsync_seg_size(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	return st.st_size;
}

int wsync_memfd_create(const char *label, uint64_t bytes)
{
	int fd, err;

	fd = memfd_create(label, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	err = seg_reserve(fd, bytes);
	if (err < 0)
		goto out_close;
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
		err = -errno;
		goto out_close;
	}
	return fd;

out_close:
	close(fd);
	return err;
}
