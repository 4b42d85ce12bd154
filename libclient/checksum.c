/*
 * libclient/checksum.c — per-version slab checksums (see checksum.h).
 *
 * The publisher hashes its begun slab in pub_publish() (pub_commit.c),
 * before it stores the slot metadata and moves `latest`, so the checksum is
 * published with the version (the seq_cst store of `latest` releases it).
 * A collector reads it
 * while it pins the slot, like the step: the metadata of a pinned slot does
 * not change. Hashing costs one read pass over the slab (docs/BENCHMARKS.md
 * has the figure next to memcpy), which is why it is opt-in per model.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "checksum.h"
#include "shm/errmsg.h"
#include "sub.h"

uint64_t wsync_checksum(const void *data, size_t len)
{
	uint64_t h = XXH3_64bits(data, len);

	return h ? h : 1;
}

int wsync_view_checksum(const wsync_view *v, uint64_t *out)
{
	const struct wsync_sub *s;

	if (!v || !v->priv_sub || v->priv_slot >= WSYNC_MAX_SLOTS || !out)
		return wsync_fail(-EINVAL, "checksum: not a live view");
	s = v->priv_sub;
	*out = atomic_load_explicit(&sub_page(s)->slots[v->priv_slot].checksum,
	                            memory_order_relaxed);
	return 0;
}

int wsync_view_verify(const wsync_view *v)
{
	uint64_t want = 0, got;
	int err = wsync_view_checksum(v, &want);

	if (err)
		return err;
	if (!want)
		return wsync_fail(-ENODATA, "model '%s' version %llu: published without a "
		                  "checksum (WSYNC_PUB_CHECKSUM)", v->priv_sub->model,
		                  (unsigned long long)v->version);
	got = wsync_checksum(v->base, v->bytes);
	if (got != want)
		return wsync_fail(-EBADMSG, "model '%s' version %llu: slab checksum %016llx, "
		                  "published %016llx: the slab changed after its commit",
		                  v->priv_sub->model, (unsigned long long)v->version,
		                  (unsigned long long)got, (unsigned long long)want);
	return 0;
}
