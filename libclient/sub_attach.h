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

/* Immutable once published in sub->maps: layout copy, slab mappings, and
 * the model page and memory incarnation they belong to. Replaced (never
 * changed) when the subscription follows its model into new memory; the
 * old one is retired, and freed once no hazard record guards it. */
struct sub_maps {
	uint32_t n_slots;
	uint64_t bytes;
	uint64_t map_bytes;              /* of each slab mapping (wsync_map_slab) */
	size_t n_tensors;
	wsync_tensor_desc *tensors;      /* private, validated copy */
	uint64_t layout_hash;
	struct wsync_name_index index;
	const void *slabs[WSYNC_MAX_SLOTS];
	bool device_only;                /* a device model without host mirror:
	                                    host views are refused */
	const struct wsync_model_page *page;
	uint64_t incarnation;
};

/* The page to read with maps m (NULL: not READY yet, the subscription's). */
static inline const struct wsync_model_page *sub_maps_page(const struct wsync_sub *s,
                                                           const struct sub_maps *m)
{
	return m ? m->page : sub_page(s);
}

/* Maps the layout and slabs for the page and incarnation the subscription
 * has (sub_open); fds[0] = layout, then n_slots slabs. Consumes (closes)
 * every fd in fds on every path. */
int wsync_sub_attach_fds(struct wsync_sub *s, uint32_t n_slots, uint32_t n_tensors,
                         uint64_t bytes, uint64_t layout_bytes,
                         int *fds, int n_fds);
/*
 * ATTACH round trip by deadline_ns (-1: the reply limit); takes the lock.
 * Maps what the model has now: the first time it is READY, or after it was
 * given new memory (wsync_sub_check_model said WSYNC_SUB_MOVED): then the
 * page, layout and slabs are mapped anew and published for readers, and
 * what they replace is kept mapped while a hazard record guards it. 0 when
 * the subscription reads the model's current memory, -EIDRM when the model
 * is gone, or another -errno.
 */
int wsync_sub_attach(struct wsync_sub *s, int64_t deadline_ns);
void wsync_sub_maps_free(struct sub_maps *m);
/* Registers the process for the barrier wsync_sub_reclaim runs (once, at
 * the first subscription: the registration can take milliseconds). */
void wsync_sub_register_barrier(void);
/* Unmaps and frees what the subscription retired (at close). */
void wsync_sub_retired_free(struct wsync_sub *s);

#endif /* WSYNC_SUB_ATTACH_H */
