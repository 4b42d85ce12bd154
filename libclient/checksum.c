/*
 * libclient/checksum.c — per-version slab checksums (see checksum.h).
 *
 * The publisher forms the checksum in pub_publish() (pub_commit.c) before
 * it stores the slot metadata and moves `latest`, so the checksum is
 * published with the version (the seq_cst store of `latest` releases it).
 * Most blocks were hashed by wsync_slab_copy_tensors as it wrote them
 * (copy_engine.c), so the commit only hashes what was written otherwise. A
 * collector reads the stored checksum while it pins the slot, like the
 * step: the metadata of a pinned slot does not change.
 *
 * Why blocks: XXH3 of a whole slab is one sequential pass, which a copy
 * split across threads cannot feed in order; a hash per block can be
 * formed by whichever thread copies the block, and combining them is a few
 * KiB more of hashing. A block is a whole MiB so that the combining stays
 * small and every block of a copy is long enough for the fused loop.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "checksum.h"
#include "client.h"
#include "shm/errmsg.h"
#include "sub_attach.h"
#include "xxh3_copy.h"

static uint64_t nonzero(uint64_t h)
{
	return h ? h : 1;
}

uint64_t wsync_sum_combine(const uint64_t *hash, size_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return nonzero(n == 1 ? hash[0] : XXH3_64bits(hash, n * sizeof(*hash)));
#else
	XXH3_state_t st;

	if (n == 1)
		return nonzero(hash[0]);
	XXH3_64bits_reset(&st);
	for (size_t k = 0; k < n; k++) {
		uint64_t le = __builtin_bswap64(hash[k]);

		XXH3_64bits_update(&st, &le, sizeof(le));
	}
	return nonzero(XXH3_64bits_digest(&st));
#endif
}

uint64_t wsync_checksum(const void *data, size_t len)
{
	return wsync_checksum_threads(data, len, 1);
}

uint64_t wsync_checksum_threads(const void *data, size_t len, unsigned threads)
{
	size_t n = copy_blocks(len);
	uint64_t *hash, sum;

	if (n <= 1)
		return nonzero(xxh3_hash(data, len));
	hash = malloc(n * sizeof(*hash));
	if (!hash)
		return 1;
	copy_hash_blocks(data, len, hash, NULL, threads);
	sum = wsync_sum_combine(hash, n);
	free(hash);
	return sum;
}

struct sum_blocks *sum_blocks_new(uint64_t bytes)
{
	struct sum_blocks *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->n = copy_blocks(bytes);
	s->hash = calloc(s->n ? s->n : 1, sizeof(*s->hash));
	s->ok = calloc(s->n ? s->n : 1, sizeof(*s->ok));
	if (!s->hash || !s->ok) {
		sum_blocks_free(s);
		return NULL;
	}
	return s;
}

void sum_blocks_free(struct sum_blocks *s)
{
	if (!s)
		return;
	free(s->hash);
	free((void *)s->ok);
	free(s);
}

void sum_blocks_claim(struct sum_blocks *s, uint64_t tag)
{
	/* Two threads copying into a fresh slab at once may both clear; a
	 * block cleared after another thread hashed it is only hashed again
	 * at commit. */
	if (atomic_exchange(&s->tag, tag) == tag)
		return;
	for (size_t k = 0; k < s->n; k++)
		atomic_store_explicit(&s->ok[k], 0, memory_order_relaxed);
}

void sum_blocks_forget(struct sum_blocks *s, uint64_t tag, uint64_t off, uint64_t len)
{
	if (!s || !len || atomic_load(&s->tag) != tag)
		return;
	for (size_t k = off / WSYNC_SUM_BLOCK; k < s->n && k <= (off + len - 1) / WSYNC_SUM_BLOCK; k++)
		atomic_store_explicit(&s->ok[k], 0, memory_order_relaxed);
}

uint64_t sum_blocks_finish(struct sum_blocks *s, uint64_t tag, const void *base,
                           uint64_t bytes)
{
	sum_blocks_claim(s, tag);
	copy_hash_blocks(base, bytes, s->hash, s->ok, 0);
	return wsync_sum_combine(s->hash, s->n);
}

int wsync_view_checksum(const wsync_view *v, uint64_t *out)
{
	const struct wsync_sub *s;
	const struct sub_maps *m;

	if (!v || !v->priv_sub || v->priv_slot >= WSYNC_MAX_SLOTS || !out)
		return wsync_fail(-EINVAL, "checksum: not a live view");
	s = v->priv_sub;
	if (v->priv_hazard >= WSYNC_MAX_VIEWS ||
	    !(m = atomic_load_explicit(&s->c->hz[v->priv_hazard].maps, memory_order_relaxed)))
		return wsync_fail(-EINVAL, "checksum: not a live view");
	/* the page of the view's memory: after a move, the subscription's page
	 * names the slot's checksum of another version */
	*out = atomic_load_explicit(&m->page->slots[v->priv_slot].checksum,
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
		                  "checksum (WSYNC_PUB_NO_CHECKSUM, a device model or a "
		                  "group)", v->priv_sub->model, (unsigned long long)v->version);
	got = wsync_checksum_threads(v->base, v->bytes, 0);
	if (got == want)
		return 0;
	/* for monitors: the broker sums these per model (layout.h) */
	{
		struct wsync_client *c = v->priv_sub->c;
		uint32_t id = v->priv_sub->model_id;

		if (id < WSYNC_MAX_MODELS)
			atomic_fetch_add_explicit(&c->session->verify_failed[id], 1,
			                          memory_order_relaxed);
	}
	return wsync_fail(-EBADMSG, "model '%s' version %llu: slab checksum %016llx, "
	                  "published %016llx: the slab changed after its publisher "
	                  "hashed it", v->priv_sub->model, (unsigned long long)v->version,
	                  (unsigned long long)got, (unsigned long long)want);
}
