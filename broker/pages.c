/* broker/pages.c — choosing the pages behind slabs: hugetlb, THP or 4 KiB. */
#include "pages.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "shm/hugepages.h"

#define RESERVE_HINT  "echo 512 > /proc/sys/vm/nr_hugepages"

/* The kernel has 2 MiB hugetlb pages and lets us make memfds of them (a
 * container may not): one page-less memfd says. */
static bool hugetlb_supported(void)
{
	int fd;

	if (access(WSYNC_HUGETLB_SYSFS, F_OK) < 0)
		return false;
	fd = memfd_create("wsync-probe", MFD_CLOEXEC | MFD_HUGETLB | (21u << 26));
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

const char *pages_name(enum wsync_slab_pages kind)
{
	switch (kind) {
	case WSYNC_PAGES_HUGETLB: return "2 MiB hugetlb";
	case WSYNC_PAGES_THP:     return "2 MiB transparent huge";
	default:                  return "4 KiB";
	}
}

uint64_t pages_seg_bytes(enum wsync_slab_pages kind, uint64_t bytes)
{
	return kind == WSYNC_PAGES_4K ? bytes : wsync_seg_round(bytes, WSYNC_HUGE_PAGE);
}

int pages_start(struct broker *b, char *err, size_t errlen)
{
	char mode[32];
	long free_pages, total;

	wsync_thp_shmem_mode(mode, sizeof(mode));
	b->thp_ok = wsync_thp_shmem_usable(mode);
	b->hugetlb_ok = hugetlb_supported();
	if (b->cfg.huge_pages == CONFIG_HUGE_OFF) {
		b->thp_ok = b->hugetlb_ok = false;
		log_info("slabs on 4 KiB pages (--huge-pages off)");
		return 0;
	}
	free_pages = b->hugetlb_ok ? wsync_hugetlb_free() : -1;
	total = b->hugetlb_ok ? wsync_file_long(WSYNC_HUGETLB_SYSFS "nr_hugepages") : -1;
	if (free_pages > 0) {
		log_info("slabs on 2 MiB hugetlb pages (%ld of %ld free); a model that does "
		         "not fit in the free ones %s", free_pages, total,
		         b->thp_ok ? "goes on transparent huge pages" :
		         b->cfg.huge_pages == CONFIG_HUGE_ON ? "is refused (--huge-pages on)" :
		         "goes on 4 KiB pages");
		return 0;
	}
	if (b->thp_ok) {
		log_info("slabs on 2 MiB transparent huge pages where the kernel has them "
		         "(shmem_enabled %s; no hugetlb pages free)", mode);
		return 0;
	}
	if (b->cfg.huge_pages == CONFIG_HUGE_ON) {
		snprintf(err, errlen, "--huge-pages on: no huge pages to be had: %s, and "
		         "shmem_enabled is %s; reserve hugetlb pages first (as root): %s",
		         !b->hugetlb_ok ? "this kernel offers no 2 MiB hugetlb pages" :
		         "no 2 MiB hugetlb page is free", mode[0] ? mode : "unknown",
		         RESERVE_HINT);
		return -ENOENT;
	}
	log_info("slabs on 4 KiB pages (no hugetlb pages free, shmem_enabled %s): every "
	         "process mapping a slab sets up 262144 page-table entries per GiB of it "
	         "(512 on 2 MiB pages), paid at its first map and by the write guard's "
	         "mprotect at every publish; for huge pages (1 GiB of them, as root): %s",
	         mode[0] ? mode : "unknown", RESERVE_HINT);
	return 0;
}

int pages_pick(const struct broker *b, const char *model, uint64_t bytes,
               uint32_t n_slots, enum wsync_slab_pages *out, char *why, size_t whylen)
{
	uint64_t need = n_slots * (pages_seg_bytes(WSYNC_PAGES_HUGETLB, bytes) / WSYNC_HUGE_PAGE);
	long free_pages = b->hugetlb_ok ? wsync_hugetlb_free() : -1;

	*out = WSYNC_PAGES_4K;
	if (b->cfg.huge_pages == CONFIG_HUGE_OFF)
		return 0;
	if (free_pages >= 0 && (uint64_t)free_pages >= need) {
		*out = WSYNC_PAGES_HUGETLB;
		return 0;
	}
	if (b->thp_ok) {
		*out = WSYNC_PAGES_THP;
		return 0;
	}
	if (b->cfg.huge_pages == CONFIG_HUGE_ON) {
		snprintf(why, whylen, "model '%s' needs %" PRIu64 " huge pages of 2 MiB and %ld "
		         "are free (--huge-pages on); reserve more as root: echo N > "
		         "/proc/sys/vm/nr_hugepages", model, need, free_pages < 0 ? 0 : free_pages);
		return -ENOSPC;
	}
	if (free_pages > 0)
		log_info("model '%s' needs %" PRIu64 " hugetlb pages, %ld are free: "
		         "on 4 KiB pages", model, need, free_pages);
	return 0;
}

bool pages_fallback(const struct broker *b, const char *model, int err,
                    enum wsync_slab_pages *kind)
{
	enum wsync_slab_pages next = b->thp_ok ? WSYNC_PAGES_THP : WSYNC_PAGES_4K;

	/* Free pages were counted, but another process (or broker) may have
	 * taken them since: fallocate said ENOSPC. */
	if (*kind != WSYNC_PAGES_HUGETLB || (err != -ENOSPC && err != -ENOMEM) ||
	    (b->cfg.huge_pages == CONFIG_HUGE_ON && next == WSYNC_PAGES_4K))
		return false;
	log_warn("model '%s': hugetlb pages ran out while making its slabs; on %s pages",
	         model, pages_name(next));
	*kind = next;
	return true;
}
