/*
 * broker/pages.h — which pages back a model's slabs (docs/HUGEPAGES.md).
 *
 * On 4 KiB pages every process that maps a slab builds 512 page-table
 * entries per 2 MiB of it, and every mprotect walks them: per-page work
 * proportional to the model. On 2 MiB pages it is one entry. So slabs go on
 * huge pages where the system has them (--huge-pages auto, the default):
 * reserved hugetlb pages when enough are free for the whole model, else
 * shmem transparent huge pages when shmem_enabled allows them, else 4 KiB
 * pages. Huge-page slabs are memfds sized to a multiple of 2 MiB; their
 * data does not survive a broker restart (version numbers do).
 */
#ifndef WSYNC_BROKER_PAGES_H
#define WSYNC_BROKER_PAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "broker.h"
#include "shm/segment.h"

/*
 * Looks at what the system offers and logs once what slabs will use (on 4
 * KiB pages: what that costs and the line that reserves huge pages). With
 * --huge-pages on and no huge pages to be had: -ENOENT, the reason in err.
 */
int pages_start(struct broker *b, char *err, size_t errlen);

/* The pages for a model of n_slots slabs of bytes each. With --huge-pages
 * on and too few huge pages: -ENOSPC, the reason in why. */
int pages_pick(const struct broker *b, const char *model, uint64_t bytes,
               uint32_t n_slots, enum wsync_slab_pages *out, char *why, size_t whylen);

/* Size of each slab object (what is mapped and counted against the limit). */
uint64_t pages_seg_bytes(enum wsync_slab_pages kind, uint64_t bytes);

/* After creating slabs on *kind failed with err: true and the next kind to
 * try (hugetlb pages ran out under --huge-pages auto), else false. */
bool pages_fallback(const struct broker *b, const char *model, int err,
                    enum wsync_slab_pages *kind);

/* "4 KiB", "2 MiB hugetlb", "2 MiB THP": for log lines. */
const char *pages_name(enum wsync_slab_pages kind);

#endif
