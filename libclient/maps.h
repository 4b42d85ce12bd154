/* libclient/maps.h — mapping the segments the broker hands over (maps.c). */
#ifndef WSYNC_MAPS_H
#define WSYNC_MAPS_H

#include <stdint.h>

#include "shm/layout.h"

/*
 * Maps bytes of fd after checking the object is at least that large (so a
 * short object is an -EPROTO now, not a SIGBUS later). Does not close fd.
 */
int wsync_map_fd(int fd, uint64_t bytes, int writable, int populate,
                 const char *what, void **out);
/*
 * Maps a slab of bytes (what views see), populated unless told not to (the
 * empty host slabs of device-only models). On huge pages the mapping is
 * longer: munmap and mprotect take *map_bytes, the length every slab of
 * the model must share: 0 before the model's first slab (then it is set),
 * checked against each later one (-EPROTO if it differs).
 */
int wsync_map_slab(int fd, uint64_t bytes, int writable, int populate, uint64_t *map_bytes,
                   void **out);
/* Checks a model page's magic, layout version and model id. */
int wsync_page_check(const struct wsync_model_page *pg, uint32_t model_id,
                     const char *model);

#endif /* WSYNC_MAPS_H */
