/* libclient/sub_attach.h — a subscription's maps of its model's layout and
 * slabs (sub_attach.c). */
#ifndef WSYNC_SUB_ATTACH_H
#define WSYNC_SUB_ATTACH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/layout.h"
#include "shm/tensor_layout.h"
#include "sub.h"
#include "wsync.h"

/* Immutable once published in sub->maps: layout copy and slab mappings. */
struct sub_maps {
	uint32_t n_slots;
	uint64_t bytes;
	uint64_t map_bytes;              /* of each slab mapping (wsync_map_slab) */
	size_t n_tensors;
	wsync_tensor_desc *tensors;      /* private, validated copy */
	struct wsync_name_index index;
	const void *slabs[WSYNC_MAX_SLOTS];
	bool device_only;                /* a device model without host mirror:
	                                    host views are refused */
};


/* Maps the layout and slabs; fds[0] = layout, then n_slots slabs. Consumes
 * (closes) every fd in fds on every path. */
int wsync_sub_attach_fds(struct wsync_sub *s, uint32_t n_slots, uint32_t n_tensors,
                         uint64_t bytes, uint64_t layout_bytes,
                         int *fds, int n_fds);
/* ATTACH round trip by deadline_ns (-1: the reply limit); takes the lock. */
int wsync_sub_attach(struct wsync_sub *s, int64_t deadline_ns);
void wsync_sub_maps_free(struct sub_maps *m);

#endif /* WSYNC_SUB_ATTACH_H */
