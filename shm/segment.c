/* shm/segment.c — naming, creating and mapping shared-memory segments. */
#include "segment.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
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

int wsync_seg_dir_name(char *buf, size_t len, uid_t uid, const char *instance,
                       uint64_t tag)
{
	return name_fmt(len, snprintf(buf, len, "wsync.%u.%s.%016llx", (unsigned)uid,
	                              instance, (unsigned long long)tag));
}

bool wsync_seg_dir_name_ours(const char *name, uid_t uid, const char *instance)
{
	char prefix[WSYNC_SHM_NAME_MAX];
	size_t plen;

	if (wsync_seg_prefix(prefix, sizeof(prefix), uid, instance))
		return false;
	plen = strlen(prefix);
	if (strncmp(name, prefix, plen) || strlen(name + plen) != 16)
		return false;
	for (const char *p = name + plen; *p; p++)
		if (!isxdigit((unsigned char)*p) || isupper((unsigned char)*p))
			return false;
	return true;
}

int wsync_seg_dir_create(uid_t uid, const char *instance, char *name, size_t len)
{
	int shm, fd, err;

	shm = open(WSYNC_SHM_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (shm < 0)
		return -errno;
	for (int tries = 0; tries < 16; tries++) {
		uint64_t tag;

		if (getrandom(&tag, sizeof(tag), 0) != (ssize_t)sizeof(tag)) {
			err = -EIO;
			goto out_close;
		}
		err = wsync_seg_dir_name(name, len, uid, instance, tag);
		if (err)
			goto out_close;
		if (mkdirat(shm, name, 0700) < 0) {
			err = -errno;
			if (err == -EEXIST)
				continue;        /* someone's, or a collision: another name */
			goto out_close;
		}
		fd = openat(shm, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			err = -errno;
			unlinkat(shm, name, AT_REMOVEDIR);
			goto out_close;
		}
		close(shm);
		return fd;
	}
	err = -EEXIST;
out_close:
	close(shm);
	return err;
}

/* st of a directory: ours, 0700 exactly, a directory. */
static int dir_check(const struct stat *st, uid_t uid, char *why, size_t whylen)
{
	if (!S_ISDIR(st->st_mode)) {
		snprintf(why, whylen, "it is not a directory");
		return -ENOTDIR;
	}
	if (st->st_uid != uid) {
		snprintf(why, whylen, "it is owned by uid %u, not %u", (unsigned)st->st_uid,
		         (unsigned)uid);
		return -EPERM;
	}
	if ((st->st_mode & 07777) != 0700) {
		snprintf(why, whylen, "its mode is %04o, not 0700",
		         (unsigned)(st->st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

int wsync_seg_dir_open(const char *name, uid_t uid, char *why, size_t whylen)
{
	struct stat st;
	int shm, fd, err;

	if (strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..")) {
		snprintf(why, whylen, "'%s' is not a name in %s", name, WSYNC_SHM_DIR);
		return -EINVAL;
	}
	shm = open(WSYNC_SHM_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (shm < 0) {
		snprintf(why, whylen, "cannot open %s: %s", WSYNC_SHM_DIR, strerror(errno));
		return -errno;
	}
	fd = openat(shm, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	err = fd < 0 ? -errno : 0;
	close(shm);
	if (err) {
		snprintf(why, whylen, err == -ELOOP || err == -ENOTDIR ?
		         "it is a symlink or not a directory" : "cannot open it: %s",
		         strerror(-err));
		return err;
	}
	if (fstat(fd, &st) < 0) {
		err = -errno;
		snprintf(why, whylen, "fstat: %s", strerror(-err));
		goto out_close;
	}
	err = dir_check(&st, uid, why, whylen);
	if (err)
		goto out_close;
	return fd;

out_close:
	close(fd);
	return err;
}

int wsync_seg_dir_remove(const char *name, uid_t uid)
{
	struct dirent *d;
	struct stat st;
	char why[64];
	DIR *dir;
	int fd, shm, err = 0;

	fd = wsync_seg_dir_open(name, uid, why, sizeof(why));
	if (fd < 0)
		return fd;
	dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return -errno;
	}
	while ((d = readdir(dir))) {
		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		/* Only what we could have made: regular files of ours. */
		if (fstatat(dirfd(dir), d->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) &&
		    unlinkat(dirfd(dir), d->d_name, 0) < 0)
			err = -errno;
	}
	closedir(dir);
	shm = open(WSYNC_SHM_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (shm < 0)
		return -errno;
	if (unlinkat(shm, name, AT_REMOVEDIR) < 0 && !err)
		err = -errno;
	close(shm);
	return err;
}

/* Reserves the object's memory now: on tmpfs, fallocate fails with ENOSPC
 * where a later page fault would have raised SIGBUS. hugetlbfs stops a long
 * fallocate with EINTR whenever signal_pending() (io_uring task work in the
 * broker counts): again, the pages it got stay. */
static int seg_reserve(int fd, uint64_t bytes)
{
	int err, tries = 0;

	if (bytes > (uint64_t)INT64_MAX)
		return -EFBIG;
	if (ftruncate(fd, (off_t)bytes) < 0)
		return -errno;
	if (!bytes)
		return 0;
	do
		err = posix_fallocate(fd, 0, (off_t)bytes);
	while (err == EINTR && ++tries < 1000);
	return err ? -ENOSPC : 0;
}

int wsync_seg_create_at(int dirfd, const char *name, uint64_t bytes)
{
	int fd, err;

	/* Our generation's names are ours alone: a leftover of a start that
	 * crashed in this very directory is replaced. */
	unlinkat(dirfd, name, 0);
	fd = openat(dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	err = seg_reserve(fd, bytes);
	if (err < 0)
		goto out_unlink;
	return fd;

out_unlink:
	unlinkat(dirfd, name, 0);
	close(fd);
	return err;
}

int wsync_seg_open_checked(int dirfd, const char *name, uid_t uid, char *why, size_t whylen)
{
	struct stat st;
	int fd, err;

	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		snprintf(why, whylen, "cannot open %s: %s", name, strerror(-err));
		return err;
	}
	if (fstat(fd, &st) < 0) {
		err = -errno;
		snprintf(why, whylen, "fstat %s: %s", name, strerror(-err));
		goto out_close;
	}
	err = -EPERM;
	if (!S_ISREG(st.st_mode))
		snprintf(why, whylen, "%s is not a regular file", name);
	else if (st.st_uid != uid)
		snprintf(why, whylen, "%s is owned by uid %u, not %u", name,
		         (unsigned)st.st_uid, (unsigned)uid);
	else if (st.st_nlink != 1)
		snprintf(why, whylen, "%s has %lu links, not 1", name,
		         (unsigned long)st.st_nlink);
	else if (st.st_mode & (S_IWGRP | S_IWOTH))
		snprintf(why, whylen, "%s is writable by others (mode %04o)", name,
		         (unsigned)(st.st_mode & 07777));
	else
		return fd;

out_close:
	close(fd);
	return err;
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

/* With shmem_enabled "advise", memory allocated without a mapping (the
 * fallocate in seg_reserve) comes in 4 KiB pages: fault it in first through
 * a MADV_HUGEPAGE mapping, so it comes as 2 MiB pages where the kernel has
 * them. Best effort: what this leaves out, seg_reserve allocates after. */
static void thp_prefault(int fd, uint64_t bytes)
{
	void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return;
#if defined(MADV_HUGEPAGE) && defined(MADV_POPULATE_WRITE)
	if (madvise(p, (size_t)bytes, MADV_HUGEPAGE) == 0)
		(void)madvise(p, (size_t)bytes, MADV_POPULATE_WRITE);
#endif
	munmap(p, (size_t)bytes);
}

static int memfd_make(const char *label, uint64_t bytes, unsigned int flags, bool thp)
{
	int fd, err;

	fd = memfd_create(label, MFD_CLOEXEC | MFD_ALLOW_SEALING | flags);
	if (fd < 0)
		return -errno;
	if (thp) {
		if (ftruncate(fd, (off_t)bytes) < 0) {
			err = -errno;
			goto out_close;
		}
		thp_prefault(fd, bytes);
	}
	err = seg_reserve(fd, bytes);
	if (err < 0)
		goto out_close;
	/* 0600: another uid holding a read-only fd cannot reopen it read-write
	 * through /proc/<pid>/fd (memfds are 0777 by default). */
	if (fchmod(fd, 0600) < 0) {
		err = -errno;
		goto out_close;
	}
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
		err = -errno;
		goto out_close;
	}
	return fd;

out_close:
	close(fd);
	return err;
}

int wsync_memfd_create(const char *label, uint64_t bytes)
{
	return memfd_make(label, bytes, 0, false);
}

#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21u << 26)     /* log2(2 MiB) << MFD_HUGE_SHIFT */
#endif
#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif

uint64_t wsync_seg_round(uint64_t bytes, uint64_t page)
{
	if (bytes == 0 || page == 0 || (page & (page - 1)) || bytes > UINT64_MAX - (page - 1))
		return 0;
	return (bytes + page - 1) & ~(page - 1);
}

int64_t wsync_seg_page_size(int fd)
{
	struct statfs sf;

	if (fstatfs(fd, &sf) < 0)
		return -errno;
	if ((uint32_t)sf.f_type == (uint32_t)HUGETLBFS_MAGIC && sf.f_bsize > WSYNC_PAGE &&
	    !((uint64_t)sf.f_bsize & ((uint64_t)sf.f_bsize - 1)))
		return (int64_t)sf.f_bsize;
	return WSYNC_PAGE;
}

int wsync_memfd_create_huge(const char *label, uint64_t bytes, enum wsync_slab_pages kind)
{
	uint64_t size = wsync_seg_round(bytes, WSYNC_HUGE_PAGE);

	if (!size)
		return -EINVAL;
	switch (kind) {
	case WSYNC_PAGES_HUGETLB:
		/* ftruncate to a multiple of the page size, fallocate takes
		 * every page from the pool now (ENOSPC when it is short) */
		return memfd_make(label, size, MFD_HUGETLB | MFD_HUGE_2MB, false);
	case WSYNC_PAGES_THP:
		return memfd_make(label, size, 0, true);
	default:
		return -EINVAL;
	}
}

int wsync_pwrite_all(int fd, const void *buf, size_t len, off_t at)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(fd, (const char *)buf + done, len - done, at + (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	return 0;
}
