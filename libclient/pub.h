/*
 * libclient/pub.h — a publisher (struct wsync_pub) and what pub.c, its
 * lowest file, gives the others: pub_commit.c and pub_grant.c build on it,
 * gpu_pub.c on those. pub.c says what a publisher may write, and when.
 */
#ifndef WSYNC_PUB_H
#define WSYNC_PUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "client.h"
#include "conn.h"
#include "shm/layout.h"
#include "shm/tensor_layout.h"
#include "wsync.h"

struct gpu_pub;
struct sum_blocks;
struct sum_hasher;

/* A grant {slot, version}: held by a begun slab, or prefetched from a
 * COMMIT_OK with the slab's fd when the broker sent one. */
struct pub_grant {
	bool     valid;
	uint32_t slot;
	uint64_t version;
	int      fd;                     /* -1 = map the cached slot */
};


/* Closes a grant's fd (if it came with one) and forgets the grant. */
static inline void pub_grant_drop(struct pub_grant *g)
{
	if (g->fd >= 0)
		close(g->fd);
	g->fd = -1;
	g->valid = false;
}


struct wsync_pub {
	struct wsync_client *c;
	struct client_handle handle;     /* in c->handles */
	char model[WSYNC_NAME_MAX];
	uint32_t model_id, n_slots;
	uint64_t bytes;
	uint64_t map_bytes;              /* of each slab mapping (wsync_map_slab) */
	size_t n_tensors;
	wsync_tensor_desc *tensors;      /* canonical, with offsets */
	struct wsync_name_index index;
	struct wsync_model_page *page;   /* rw */
	const struct wsync_ctl_model *entry;  /* ro: says whether we still publish */
	uint64_t incarnation;
	void *slabs[WSYNC_MAX_SLOTS];    /* cached rw mappings, NULL = none */
	bool guarded;                    /* slabs read-only outside a grant */
	bool unguarded;                  /* WSYNC_PUB_UNGUARDED: never guarded */
	/* one rank of a group (group_size > 1): the broker books a version when
	 * every rank committed it, so commit neither writes the page nor
	 * returns before then; no grant is prefetched */
	uint32_t group_size, rank;
	wsync_shard *parts;              /* this rank's declaration */
	size_t n_parts;
	/* a checksum with every version (checksum.h): the default for host
	 * models; sums holds the blocks library copies hashed as they wrote,
	 * sums_spare the last version's while the hasher finishes it (a
	 * commit swaps them when it defers its checksum) */
	bool checksum, checksum_asked;   /* asked: WSYNC_PUB_CHECKSUM */
	struct sum_blocks *sums, *sums_spare;
	struct sum_hasher *hasher;       /* NULL until a checksum is deferred */
	uint32_t group_slot;             /* a rank: the slot of its last COMMIT,
	                                    which its COMMIT_OK may ask it to hash */

	/* a device model (entry->n_devices): begin/commit through the _gpu
	 * calls; device_only: no host mirror, the host slabs are never
	 * touched. gpu[d]: the model's slots on its GPU d, mapped writable
	 * at the first wsync_pub_begin_gpu (gpu_pub.c), which sets
	 * gpu_release to unmap them when the publisher closes. */
	bool device_model, device_only;
	bool gpu_begun;                  /* the begun slab came from begin_gpu */
	uint32_t gpu_src;                /* the GPU it was begun on */
	struct gpu_pub *gpu;
	void (*gpu_release)(struct wsync_pub *p);  /* NULL = nothing mapped */
	uint32_t req_devices, req_dev_flags;     /* what the open asked for */
	uint8_t  req_uuid[WSYNC_MAX_DEVICES][16];

	uint64_t last_committed;         /* grants must carry a newer version */
	uint32_t max_lead;               /* wsync_pub_set_max_lead, 0 = none */
	uint64_t lead_ok;                /* the highest lead floor met (pub_lead.c) */
	bool     begun;
	struct pub_grant cur;            /* the begun slab's grant */

	/* under c->lock: the outstanding async commit (COMMIT_OK or ERROR) */
	struct conn_await ack;           /* ack.seq 0 = none outstanding */
	uint64_t ack_version;            /* version the async commit carries */
	struct pub_grant next;           /* prefetched grant */
	/* under c->lock: a BEGIN whose answer (GRANT or ERROR) did not come by
	 * the caller's deadline; the next begin collects it instead of asking
	 * again */
	struct conn_await begin_wait;    /* begin_wait.seq 0 = none outstanding */
};


/* begin's max_lead wait (pub_lead.c), before any lock is taken. */
int wsync_pub_lead_wait(struct wsync_pub *p, int64_t deadline);

/* Until the checksum the publisher is still forming after a commit is
 * stored: of slot only, or of any slot (WSYNC_SLOT_NONE). Before the slot
 * is written again, and at close. */
void wsync_pub_sum_settle(struct wsync_pub *p, uint32_t slot);

/* Makes a guarded publisher's slab read-only again (commit, abort). */
void wsync_pub_guard(struct wsync_pub *p, uint32_t slot);

#endif /* WSYNC_PUB_H */
