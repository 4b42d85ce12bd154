/* libclient/maps.c — mapping the segments the broker hands over. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "maps.h"
#include "shm/errmsg.h"
#include "shm/segment.h"

int wsync_map_fd(int fd, uint64_t bytes, int writable, int populate,
                 const char *what, void **out)
{
	int64_t size = wsync_seg_size(fd);
	int err;

	if (size < 0)
		return wsync_fail((int)size, "%s: fstat: %s", what, strerror((int)-size));
	/* A mapping past the object's end would raise SIGBUS on first touch. */
	if ((uint64_t)size < bytes)
		return wsync_fail(-EPROTO, "%s: segment of %lld bytes, expected %llu",
		                  what, (long long)size, (unsigned long long)bytes);
	err = wsync_seg_map(fd, bytes, writable, populate, out);
	if (err)
		return wsync_fail(err, "%s: mmap of %llu bytes: %s", what,
		                  (unsigned long long)bytes, strerror(-err));
#ifdef MADV_POPULATE_WRITE
	/* MAP_POPULATE maps a shared file's pages read-only (it does not dirty
	 * them), so every first write would still fault: fault them writable
	 * now. Kernels before 5.14 say EINVAL; the writes then fault later. */
	if (writable && populate)
		(void)madvise(*out, bytes, MADV_POPULATE_WRITE);
#endif
	return 0;
}

int wsync_map_slab(int fd, uint64_t bytes, int writable, int populate, uint64_t *map_bytes,
                   void **out)
{
	int64_t page = wsync_seg_page_size(fd);
	uint64_t len;
	int err;

	if (page < 0)
		return wsync_fail((int)page, "slab: fstatfs: %s", strerror((int)-page));
	/* hugetlb mappings, their munmap and mprotect included, come in whole
	 * huge pages; the broker sized the object so */
	len = wsync_seg_round(bytes, (uint64_t)page);
	if (!len || (*map_bytes && *map_bytes != len))
		return wsync_fail(-EPROTO, "slab: %llu bytes on %lld-byte pages, and the "
		                  "model's other slabs map %llu", (unsigned long long)bytes,
		                  (long long)page, (unsigned long long)*map_bytes);
	err = wsync_map_fd(fd, len, writable, populate, "slab", out);
	if (err)
		return err;
#ifdef MADV_HUGEPAGE
	/* A hint for slabs on transparent huge pages (shmem_enabled advise);
	 * nothing where the kernel gives tmpfs none. */
	if (page == WSYNC_PAGE)
		(void)madvise(*out, len, MADV_HUGEPAGE);
#endif
	*map_bytes = len;
	return 0;
}

int wsync_page_check(const struct wsync_model_page *pg, uint32_t model_id,
                     const char *model)
{
	if (pg->magic != WSYNC_MAGIC_PAGE)
		return wsync_fail(-EPROTO, "model '%s': page has a bad magic", model);
	if (pg->layout_version != WSYNC_LAYOUT_VERSION)
		return wsync_fail(-EPROTO, "model '%s': page layout version %u, library %u",
		                  model, pg->layout_version, WSYNC_LAYOUT_VERSION);
	if (pg->model_id != model_id)
		return wsync_fail(-EPROTO, "model '%s': page of model %u, expected %u",
		                  model, pg->model_id, model_id);
	return 0;
}
