/*
 * libclient/checksum.h — per-version slab checksums (WSYNC_PUB_CHECKSUM).
 *
 * A publisher whose model was opened with WSYNC_PUB_CHECKSUM hashes the whole
 * slab (XXH3-64) at commit and stores the hash in the slot's metadata with
 * the version (struct wsync_slot_meta.checksum; 0 = none, so a hash that
 * comes out 0 is stored as 1). Collectors check a view with
 * wsync_view_verify().
 */
#ifndef WSYNC_CLIENT_CHECKSUM_H
#define WSYNC_CLIENT_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#include "wsync.h"

/* XXH3-64 of len bytes as stored in slot metadata (never 0). */
uint64_t wsync_checksum(const void *data, size_t len);
/* The stored checksum of a view's version (0 = none); -EINVAL for a view
 * that is not live. */
int wsync_view_checksum(const wsync_view *v, uint64_t *out);

#endif
