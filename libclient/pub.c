/*
 * libclient/pub.c — a publisher: open (declare the layout, map the model
 * page and the slabs), the write guard, close.
 *
 * The invariant served by the publisher files is the first of the design:
 * the bytes of a view never change while a reader holds it. The broker
 * keeps it by granting a slot for writing only when the slot is not
 * `latest` and no hazard pins it; the publisher keeps its part by writing
 * nothing but
 *
 *   - the slab of its current grant (pub_grant.c; mapped writable only
 *     while granted: commit and abort mprotect it read-only again through
 *     wsync_pub_guard, so a stray write after commit faults in the trainer
 *     instead of changing a published version),
 *   - page->slots[slot] of that grant, then
 *   - page->latest = pack(granted version, granted slot), then page->seq
 *     (pub_commit.c says in which order, and why).
 *
 * The broker writes `latest` only to restore it after a bad commit, and seq
 * and flags at shutdown; collectors never write the page (their mapping is
 * read-only).
 *
 * Files of the publisher, lowest first: pub.c (this handle), pub_commit.c
 * (publishing a version and the broker's acknowledgement, which carries the
 * next grant), pub_grant.c (begin: the prefetched grant, or a BEGIN).
 */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "checksum.h"
#include "client.h"
#include "conn.h"
#include "maps.h"
#include "pub.h"
#include "shm/cuda_discover.h"
#include "shm/errmsg.h"
#include "shm/segment.h"
#include "shm/shard.h"

/* The options struct is ABI: new fields take reserved space, never more. */
static_assert(sizeof(wsync_model_opts) == 56, "wsync_model_opts size");
static_assert(offsetof(wsync_model_opts, devices) == 24, "wsync_model_opts devices");

/* Checksums are on unless WSYNC_PUB_NO_CHECKSUM says no; for a rank of a
 * group only when WSYNC_PUB_CHECKSUM asks (the broker may then ask it to
 * hash a complete version: a read of the other ranks' parts, which back to
 * back costs a group publish several times its copy), and for a device
 * model only when WSYNC_PUB_CHECKSUM asks (pub_declare). */
static bool pub_wants_checksum(const wsync_model_opts *o)
{
	if (o && (o->flags & WSYNC_PUB_NO_CHECKSUM))
		return false;
	return !o || o->group_size <= 1 || (o->flags & WSYNC_PUB_CHECKSUM);
}

void wsync_pub_sum_settle(struct wsync_pub *p, uint32_t slot)
{
	sum_hasher_wait(p->hasher, slot);
}

/* Read-only again outside a grant, for a guarded publisher. */
void wsync_pub_guard(struct wsync_pub *p, uint32_t slot)
{
	/* Only a guard against stray writes: a failure here (VMA limit) does
	 * not make the published version any less valid. */
	if (p->guarded && p->slabs[slot])
		(void)mprotect(p->slabs[slot], p->map_bytes, PROT_READ);
}

#define PUB_FLAGS_KNOWN (WSYNC_PUB_UNGUARDED | WSYNC_PUB_CHECKSUM | WSYNC_PUB_GUARDED | \
                         WSYNC_PUB_REPLACE | WSYNC_PUB_NO_CHECKSUM)

static int opts_check(const struct wsync_client *c, const char *model,
                      const wsync_model_opts *o)
{
	if (!o)
		return 0;
	if (o->flags & ~(uint32_t)PUB_FLAGS_KNOWN)
		return wsync_fail(-EINVAL, "model '%s': unknown opts.flags 0x%x",
		                  model, o->flags & ~(uint32_t)PUB_FLAGS_KNOWN);
	if ((o->flags & WSYNC_PUB_UNGUARDED) && (o->flags & WSYNC_PUB_GUARDED))
		return wsync_fail(-EINVAL, "model '%s': opts.flags asks for both "
		                  "WSYNC_PUB_GUARDED and WSYNC_PUB_UNGUARDED", model);
	if ((o->flags & WSYNC_PUB_CHECKSUM) && (o->flags & WSYNC_PUB_NO_CHECKSUM))
		return wsync_fail(-EINVAL, "model '%s': opts.flags asks for both "
		                  "WSYNC_PUB_CHECKSUM and WSYNC_PUB_NO_CHECKSUM", model);
	for (size_t i = 0; i < sizeof(o->reserved) / sizeof(o->reserved[0]); i++)
		if (o->reserved[i])
			return wsync_fail(-EINVAL, "model '%s': opts.reserved[%zu] must be 0",
			                  model, i);
	if (o->reserved32)
		return wsync_fail(-EINVAL, "model '%s': opts.reserved32 must be 0", model);
	if (o->group_size > WSYNC_MAX_RANKS ||
	    (o->group_size > 1 ? o->rank >= o->group_size
	                       : o->rank != 0 || o->group_timeout_ms != 0))
		return wsync_fail(-EINVAL, "model '%s': rank %u of a group of %u (1..%d ranks; "
		                  "a group deadline needs a group)", model, o->rank,
		                  o->group_size, WSYNC_MAX_RANKS);
	if (o->n_devices > WSYNC_MAX_DEVICES || (o->n_devices && !o->devices))
		return wsync_fail(-EINVAL, "model '%s': %u devices (at most %d, and a list)",
		                  model, o->n_devices, WSYNC_MAX_DEVICES);
	if (o->device_flags & ~(uint32_t)WSYNC_DEV_HOST_MIRROR)
		return wsync_fail(-EINVAL, "model '%s': unknown opts.device_flags 0x%x", model,
		                  o->device_flags);
	if (o->device_flags && !o->n_devices)
		return wsync_fail(-EINVAL, "model '%s': opts.device_flags without devices", model);
	if (o->n_devices && !(o->device_flags & WSYNC_DEV_HOST_MIRROR) &&
	    (o->flags & (WSYNC_PUB_CHECKSUM | WSYNC_PUB_GUARDED)))
		return wsync_fail(-EINVAL, "model '%s': checksums and the write guard work on "
		                  "host slabs: a device model needs WSYNC_DEV_HOST_MIRROR for them",
		                  model);
	if (o->slots && (o->slots < WSYNC_MIN_SLOTS || o->slots > c->max_slots))
		return wsync_fail(-EINVAL, "model '%s': %u slots, the broker allows %d..%u",
		                  model, o->slots, WSYNC_MIN_SLOTS, c->max_slots);
	return 0;
}

/* The layout memfd the broker reads the descriptors from. */
/* The memfd the broker reads the descriptors from, then this rank's
 * parts if it is one of a group. */
static int layout_memfd(const struct wsync_pub *p)
{
	size_t len = p->n_tensors * sizeof(wsync_tensor_desc);
	size_t plen = p->n_parts * sizeof(wsync_shard);
	int fd = wsync_memfd_create("wsync-layout", len + plen), err;

	if (fd < 0)
		return wsync_fail(fd, "model '%s': layout memfd: %s", p->model, strerror(-fd));
	err = wsync_pwrite_all(fd, p->tensors, len, 0);
	if (!err && plen)
		err = wsync_pwrite_all(fd, p->parts, plen, (off_t)len);
	if (err) {
		close(fd);
		return wsync_fail(err, "model '%s': writing the layout memfd: %s", p->model,
		                  strerror(-err));
	}
	return fd;
}

static void pub_free(struct wsync_pub *p)
{
	/* the hasher reads a slab mapped below */
	sum_hasher_free(p->hasher);
	if (p->gpu_release)
		p->gpu_release(p);
	for (uint32_t i = 0; i < WSYNC_MAX_SLOTS; i++)
		if (p->slabs[i])
			munmap(p->slabs[i], p->map_bytes);
	if (p->page)
		munmap(p->page, sizeof(*p->page));
	if (p->next.valid && p->next.fd >= 0)
		close(p->next.fd);
	wsync_name_index_free(&p->index);
	sum_blocks_free(p->sums);
	sum_blocks_free(p->sums_spare);
	free(p->parts);
	free(p->tensors);
	free(p);
}

/* CLOSE(pub), not waiting for its answer (a close must not wait for a
 * broker that may be stopped): the broker handles it before anything this
 * client sends later, and drops us anyway when the socket closes. */
static void pub_close_remote(struct wsync_pub *p)
{
	union wsync_msg_any m;

	wsync_msg_init(&m.hdr, WSYNC_MSG_CLOSE, 0);
	m.close.m.model_id = p->model_id;
	m.close.what = WSYNC_CLOSE_PUB;
	(void)wsync_conn_post(p->c, &m);
}

/*
 * Maps and populates every slab the broker sent with PUB_OPEN_OK, so that
 * the page-table work of a first publish (tens of times a copy of the slab
 * on 4 KiB pages) is paid here, once, and not inside a begin. A broker that
 * sends no slab fds (an older one) leaves the mapping to the first grant of
 * each slot.
 */
static int pub_map_slabs(struct wsync_pub *p, const int *fds, int n_fds)
{
	if (n_fds <= 0)
		return 0;
	if ((uint32_t)n_fds != p->n_slots)
		return wsync_fail(-EPROTO, "model '%s': PUB_OPEN_OK with %d slab fds for %u "
		                  "slots", p->model, n_fds, p->n_slots);
	for (uint32_t k = 0; k < p->n_slots; k++) {
		void *addr;
		int err = wsync_map_slab(fds[k], p->bytes, 1, !p->device_only,
		                         &p->map_bytes, &addr);

		if (err)
			return err;
		p->slabs[k] = addr;
		/* A slot that never held a version (nobody reads it; only we will
		 * be granted it) is written once now: on virtual machines the
		 * first write to fresh memory costs ten times a copy (the host
		 * backs the page then), and this is the time to pay it. Not by a
		 * rank of a group: the other ranks may be granted that slot and
		 * write their parts while this one is still opening. */
		if (p->group_size <= 1 && !p->device_only &&
		    atomic_load_explicit(&p->entry->slot_state[k], memory_order_acquire) ==
		    WSYNC_SLOT_FREE)
			memset(addr, 0, p->bytes);
		wsync_pub_guard(p, k);
	}
	return 0;
}

/* wsync_close of the client closes what is still open through this. */
static void pub_handle_close(struct client_handle *h)
{
	wsync_pub_close((struct wsync_pub *)((char *)h - offsetof(struct wsync_pub, handle)));
}

/* PUB_OPEN with the layout memfd; maps the model page and the slabs from
 * the reply. */
static int pub_declare(struct wsync_pub *p, uint32_t slots, bool replace,
                       uint32_t group_timeout_ms)
{
	struct wsync_client *c = p->c;
	union wsync_msg_any m;
	struct conn_reply rep;
	const struct wsync_msg_pub_open_ok *ok = &rep.msg.pub_open_ok;
	void *page;
	int fd, err;

	fd = layout_memfd(p);
	if (fd < 0)
		return fd;
	wsync_msg_init(&m.hdr, WSYNC_MSG_PUB_OPEN, 0);
	memcpy(m.pub_open.model, p->model, sizeof(m.pub_open.model));
	m.pub_open.n_tensors = (uint32_t)p->n_tensors;
	m.pub_open.slots = slots;
	m.pub_open.bytes = p->bytes;
	m.pub_open.layout_hash = wsync_layout_hash(p->tensors, p->n_tensors);
	m.pub_open.flags = (replace ? WSYNC_OPEN_REPLACE : 0) |
	                   (p->group_size > 1 && p->checksum ? WSYNC_OPEN_CHECKSUM : 0);
	m.pub_open.n_devices = p->req_devices;
	m.pub_open.dev_flags = p->req_dev_flags;
	memcpy(m.pub_open.devices, p->req_uuid, sizeof(m.pub_open.devices));
	if (p->group_size > 1) {
		m.pub_open.group_size = (uint16_t)p->group_size;
		m.pub_open.rank = (uint16_t)p->rank;
		m.pub_open.n_parts = (uint32_t)p->n_parts;
		m.pub_open.group_timeout_ms = group_timeout_ms;
	}

	client_lock(c);
	err = wsync_conn_call(c, &m, &fd, 1, WSYNC_MSG_PUB_OPEN_OK, &rep);
	close(fd);
	if (err)
		goto out_unlock;
	if (ok->bytes != p->bytes || rep.n_fds < 1) {
		err = wsync_fail(-EPROTO, "model '%s': PUB_OPEN_OK with %llu bytes and %d fds, "
		                 "expected %llu bytes and the model page", p->model,
		                 (unsigned long long)ok->bytes, rep.n_fds,
		                 (unsigned long long)p->bytes);
		goto out_close_remote;
	}
	p->model_id = ok->model_id;
	p->entry = client_ctl_model(c, p->model_id);
	p->incarnation = ok->incarnation;
	p->n_slots = ok->n_slots;
	/* the broker checked the devices against the model's: its entry says */
	p->device_model = p->entry->n_devices != 0;
	p->device_only = p->device_model &&
	                 !(p->entry->dev_flags & WSYNC_DEV_HOST_MIRROR);
	/* A device model's bytes are hashed only when asked for (its host
	 * mirror, at commit; docs/GPU.md): a hash of device memory needs a
	 * kernel of its own. */
	if (p->device_model && !p->checksum_asked)
		p->checksum = false;
	if (p->checksum && (!(p->sums = sum_blocks_new(p->bytes)) ||
	                    !(p->sums_spare = sum_blocks_new(p->bytes)))) {
		err = wsync_fail(-ENOMEM, "model '%s': out of memory for its checksum's "
		                 "block list", p->model);
		goto out_close_remote;
	}
	/* On 2 MiB hugetlb pages the write guard costs two walks of 512 times
	 * fewer entries (0.1 ms for 256 MiB, docs/HUGEPAGES.md): there it is
	 * on unless WSYNC_PUB_UNGUARDED says no. */
	if (p->entry->slab_pages == WSYNC_PAGES_HUGETLB && !p->unguarded)
		p->guarded = true;
	err = wsync_map_fd(rep.fds[0], sizeof(*p->page), 1, 0, "model page", &page);
	if (err)
		goto out_close_remote;
	p->page = page;
	err = wsync_page_check(p->page, p->model_id, p->model);
	if (err)
		goto out_close_remote;
	err = pub_map_slabs(p, rep.fds + 1, rep.n_fds - 1);
	if (err)
		goto out_close_remote;
	wsync_reply_close_fds(&rep, 0);
	wsync_client_handle_add(c, &p->handle, pub_handle_close);
	client_unlock(c);
	return 0;

out_close_remote:
	wsync_reply_close_fds(&rep, 0);
	pub_close_remote(p);
out_unlock:
	client_unlock(c);
	return err;
}

/* Checks and keeps a group rank's parts (against the layout alone: the
 * broker checks them against the other ranks'). */
static int pub_take_parts(struct wsync_pub *p, const wsync_model_opts *o,
                          const wsync_shard *parts, size_t n_parts)
{
	char why[WSYNC_ERRMSG_LEN - 160];
	const wsync_shard *all[1] = { parts };
	int err;

	if (!parts || n_parts == 0 || n_parts > WSYNC_MAX_TENSORS)
		return wsync_fail(-EINVAL, "model '%s': rank %u of %u declares %zu parts "
		                  "(1..%d)", p->model, o->rank, o->group_size, n_parts,
		                  WSYNC_MAX_TENSORS);
	err = wsync_shards_check(p->tensors, p->n_tensors, all, &n_parts, 1, 0, why,
	                         sizeof(why));
	if (err)
		return wsync_fail(err, "model '%s': rank %u: %s", p->model, o->rank, why);
	p->parts = malloc(n_parts * sizeof(*p->parts));
	if (!p->parts)
		return wsync_fail(-ENOMEM, "model '%s': out of memory for %zu parts", p->model,
		                  n_parts);
	memcpy(p->parts, parts, n_parts * sizeof(*p->parts));
	p->n_parts = n_parts;
	p->group_size = o->group_size;
	p->rank = o->rank;
	return 0;
}

/* Parses the device UUIDs into the PUB_OPEN's form; duplicates refused. */
static int pub_take_devices(struct wsync_pub *p, const wsync_model_opts *o)
{
	for (uint32_t i = 0; i < o->n_devices; i++) {
		if (!o->devices[i] || wsync_gpu_uuid_parse(o->devices[i], p->req_uuid[i]))
			return wsync_fail(-EINVAL, "model '%s': device %u '%.64s' is not a GPU UUID "
			                  "(GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx; "
			                  "wsync_gpu_uuid() gives it for an ordinal)", p->model, i,
			                  o->devices[i] ? o->devices[i] : "(null)");
		for (uint32_t j = 0; j < i; j++)
			if (!memcmp(p->req_uuid[j], p->req_uuid[i], 16))
				return wsync_fail(-EINVAL, "model '%s': device %s is listed twice",
				                  p->model, o->devices[i]);
	}
	p->req_devices = o->n_devices;
	p->req_dev_flags = o->device_flags;
	return 0;
}

int wsync_pub_open(wsync_client *c, const char *model,
                   const wsync_tensor_desc *tensors, size_t n_tensors,
                   const wsync_model_opts *opts, wsync_pub **out)
{
	if (opts && opts->group_size > 1)
		return wsync_fail(-EINVAL, "model '%s': a rank of a group opens with "
		                  "wsync_pub_open_shard, saying which parts it writes",
		                  model ? model : "(null)");
	return wsync_pub_open_shard(c, model, tensors, n_tensors, opts, NULL, 0, out);
}

int wsync_pub_open_shard(wsync_client *c, const char *model,
                         const wsync_tensor_desc *tensors, size_t n_tensors,
                         const wsync_model_opts *opts, const wsync_shard *parts,
                         size_t n_parts, wsync_pub **out)
{
	char why[WSYNC_ERRMSG_LEN - 160];
	struct wsync_pub *p;
	int err;

	if (!c || !model || !tensors || !out)
		return wsync_fail(-EINVAL, "wsync_pub_open: client, model, tensors and out "
		                  "must not be NULL");
	if (!wsync_name_valid(model, WSYNC_NAME_MAX))
		return wsync_fail(-EINVAL, "model name '%.128s' is invalid (1..%d of "
		                  "[A-Za-z0-9._:/-], not starting with '.' or '/')",
		                  model, WSYNC_NAME_MAX - 1);
	if (n_tensors == 0 || n_tensors > WSYNC_MAX_TENSORS)
		return wsync_fail(-EINVAL, "model '%s': %zu tensors, allowed 1..%d",
		                  model, n_tensors, WSYNC_MAX_TENSORS);
	err = opts_check(c, model, opts);
	if (err)
		return err;

	p = calloc(1, sizeof(*p));
	if (!p)
		return wsync_fail(-ENOMEM, "model '%s': out of memory", model);
	p->c = c;
	p->cur.fd = p->next.fd = -1;
	p->guarded = opts && (opts->flags & WSYNC_PUB_GUARDED);
	p->unguarded = opts && (opts->flags & WSYNC_PUB_UNGUARDED);
	p->checksum = pub_wants_checksum(opts);
	p->checksum_asked = opts && (opts->flags & WSYNC_PUB_CHECKSUM);
	snprintf(p->model, sizeof(p->model), "%s", model);
	p->n_tensors = n_tensors;
	p->tensors = calloc(n_tensors, sizeof(*p->tensors));
	if (!p->tensors) {
		err = wsync_fail(-ENOMEM, "model '%s': out of memory for %zu descriptors",
		                 model, n_tensors);
		goto out_free;
	}
	err = wsync_layout_compute(tensors, n_tensors, p->tensors, &p->bytes, why, sizeof(why));
	if (err) {
		err = wsync_fail(err, "model '%s': %s", model, why);
		goto out_free;
	}
	err = wsync_name_index_build(&p->index, p->tensors, n_tensors);
	if (err) {
		err = wsync_fail(err, "model '%s': tensor name index: %s", model, strerror(-err));
		goto out_free;
	}
	if (opts && opts->n_devices) {
		err = pub_take_devices(p, opts);
		if (err)
			goto out_free;
	}
	if (opts && opts->group_size > 1) {
		err = pub_take_parts(p, opts, parts, n_parts);
		if (err)
			goto out_free;
	} else if (n_parts) {
		err = wsync_fail(-EINVAL, "model '%s': parts given to a publisher that is not "
		                 "in a group (opts.group_size)", model);
		goto out_free;
	}
	err = pub_declare(p, opts ? opts->slots : 0,
	                  opts && (opts->flags & WSYNC_PUB_REPLACE),
	                  opts ? opts->group_timeout_ms : 0);
	if (err)
		goto out_free;
	*out = p;
	return 0;

out_free:
	pub_free(p);
	return err;
}

int wsync_slab_part(const wsync_slab *s, size_t i, wsync_slice *out)
{
	const struct wsync_pub *p;

	if (!s || !s->priv_pub || !out)
		return wsync_fail(-EINVAL, "wsync_slab_part: not a begun slab");
	p = s->priv_pub;
	if (i >= p->n_parts)
		return wsync_fail(-EINVAL, "model '%s': part %zu of %zu (this publisher %s)",
		                  p->model, i, p->n_parts,
		                  p->n_parts ? "declared fewer" : "is not a group rank");
	return wsync_shard_slice(&p->tensors[p->parts[i].tensor], &p->parts[i], out);
}

void wsync_pub_close(wsync_pub *p)
{
	struct wsync_client *c;

	if (!p)
		return;
	c = p->c;
	/* A checksum still being formed is stored while the model is ours: a
	 * model moved for its next publisher copies the page as it is. */
	wsync_pub_sum_settle(p, WSYNC_SLOT_NONE);
	/* Nothing here waits for the broker: CLOSE settles a begun slab (the
	 * grant is freed, or booked if it was published), and answers still
	 * to come for this publisher are dropped when they arrive. */
	if (p->begun) {
		wsync_pub_guard(p, p->cur.slot);
		p->begun = false;
	}
	client_lock(c);
	pub_close_remote(p);
	wsync_conn_await_cancel(c, &p->ack);
	wsync_conn_await_cancel(c, &p->begin_wait);
	wsync_client_handle_remove(c, &p->handle);
	client_unlock(c);
	pub_free(p);
}
