/*
 * libclient/sub_attach.c — mapping a model's layout and slabs for reading.
 *
 * Done once per subscription: at sub_open if the model is READY, else by the
 * first acquire that finds a version (one ATTACH round trip); and again when
 * the model is given new memory because a publisher of another uid took it
 * over (broker/model.c model_rotate), which a reader learns from the ctl
 * entry's incarnation. The layout is copied out of shared memory and checked
 * against the canonical placement, so no offset written by another process
 * can point a view outside its slab. The result is published in sub->maps
 * (seq_cst), then the page, then the incarnation; a maps is never changed,
 * only replaced. Readers use them without a lock under a hazard record's
 * guard (sub.c, wsync_sub_guard); a replaced page and maps are retired and
 * unmapped once no record guards the page (wsync_sub_reclaim: at each
 * follow, and when a record is put, after a membarrier that stands in for
 * the fence the readers' guards do without), so a view taken from them
 * stays valid while it is held, and a collector that follows its model
 * through many moves keeps only what its held views point into. A reader
 * checks the entry's incarnation against the maps' own, so it never reads
 * new memory's latest through old slabs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "conn.h"
#include "maps.h"
#include "shm/errmsg.h"
#include "sub_attach.h"

void wsync_sub_maps_free(struct sub_maps *m)
{
	if (!m)
		return;
	/* the page is the subscription's (sub_open) or its retired list's */
	for (uint32_t i = 0; i < WSYNC_MAX_SLOTS; i++)
		if (m->slabs[i])
			munmap((void *)m->slabs[i], m->map_bytes);
	wsync_name_index_free(&m->index);
	free(m->tensors);
	free(m);
}

/* The descriptors must be exactly what wsync_layout_compute places. */
static int layout_verify(const struct wsync_sub *s, struct sub_maps *m)
{
	char why[WSYNC_ERRMSG_LEN - 160];
	wsync_tensor_desc *canon;
	uint64_t bytes;
	int err;

	canon = calloc(m->n_tensors, sizeof(*canon));
	if (!canon)
		return wsync_fail(-ENOMEM, "model '%s': out of memory for the layout", s->model);
	err = wsync_layout_compute(m->tensors, m->n_tensors, canon, &bytes, why, sizeof(why));
	if (err) {
		err = wsync_fail(-EPROTO, "model '%s': layout from the broker is invalid: %s",
		                 s->model, why);
		goto out_free;
	}
	if (bytes != m->bytes) {
		err = wsync_fail(-EPROTO, "model '%s': layout needs %llu bytes, slabs have %llu",
		                 s->model, (unsigned long long)bytes,
		                 (unsigned long long)m->bytes);
		goto out_free;
	}
	for (size_t i = 0; i < m->n_tensors; i++) {
		if (canon[i].offset != m->tensors[i].offset) {
			err = wsync_fail(-EPROTO, "model '%s': tensor %zu at offset %llu, "
			                 "expected %llu", s->model, i,
			                 (unsigned long long)m->tensors[i].offset,
			                 (unsigned long long)canon[i].offset);
			goto out_free;
		}
	}
	err = 0;
out_free:
	free(canon);
	return err;
}

/* Copies the descriptors out of the layout segment behind fd. */
static int layout_load(const struct wsync_sub *s, struct sub_maps *m, int fd,
                       uint64_t layout_bytes)
{
	const struct wsync_layout_header *h;
	size_t need = sizeof(*h) + m->n_tensors * sizeof(wsync_tensor_desc);
	void *addr;
	int err;

	if (layout_bytes < need)
		return wsync_fail(-EPROTO, "model '%s': layout of %llu bytes cannot hold %zu "
		                  "tensors", s->model, (unsigned long long)layout_bytes,
		                  m->n_tensors);
	err = wsync_map_fd(fd, need, 0, 0, "layout", &addr);
	if (err)
		return err;
	h = addr;
	if (h->magic != WSYNC_MAGIC_LAYOUT || h->layout_version != WSYNC_LAYOUT_VERSION ||
	    h->n_tensors != m->n_tensors || h->bytes != m->bytes) {
		err = wsync_fail(-EPROTO, "model '%s': layout header does not match (magic, "
		                 "version %u, %u tensors, %llu bytes)", s->model,
		                 h->layout_version, h->n_tensors, (unsigned long long)h->bytes);
		goto out_unmap;
	}
	m->tensors = malloc(m->n_tensors * sizeof(*m->tensors));
	if (!m->tensors) {
		err = wsync_fail(-ENOMEM, "model '%s': out of memory for the layout", s->model);
		goto out_unmap;
	}
	memcpy(m->tensors, h + 1, m->n_tensors * sizeof(*m->tensors));
	m->layout_hash = h->hash;
	if (wsync_layout_hash(m->tensors, m->n_tensors) != h->hash) {
		err = wsync_fail(-EPROTO, "model '%s': layout hash does not match its "
		                 "descriptors", s->model);
		goto out_unmap;
	}
	err = 0;
out_unmap:
	munmap(addr, need);
	return err;
}

static int slabs_map(const struct wsync_sub *s, struct sub_maps *m, const int *fds)
{
	for (uint32_t i = 0; i < m->n_slots; i++) {
		void *addr;
		/* the host slabs of a device-only model are empty: mapped so that
		 * slots work alike, never populated (that would back them) */
		int err = wsync_map_slab(fds[i], m->bytes, 0, !m->device_only, &m->map_bytes,
		                         &addr);

		if (err) {
			char why[WSYNC_ERRMSG_LEN];

			/* the detail is in the buffer we are about to format */
			snprintf(why, sizeof(why), "%s", wsync_errmsg_get());
			return wsync_fail(err, "model '%s': slot %u: %s", s->model, i, why);
		}
		m->slabs[i] = addr;
	}
	return 0;
}

/* Builds maps from fds[0] = layout, then n_slots slabs (closed by the
 * caller), for page and incarnation. */
static int maps_build(struct wsync_sub *s, uint32_t n_slots, uint32_t n_tensors,
                      uint64_t bytes, uint64_t layout_bytes, const int *fds, int n_fds,
                      const struct wsync_model_page *page, uint64_t incarnation,
                      struct sub_maps **out)
{
	struct sub_maps *m;
	int err;

	if (n_slots < WSYNC_MIN_SLOTS || n_slots > WSYNC_MAX_SLOTS || n_tensors == 0 ||
	    n_tensors > WSYNC_MAX_TENSORS || bytes == 0 || bytes % WSYNC_PAGE ||
	    (uint64_t)n_fds < 1 + (uint64_t)n_slots)
		return wsync_fail(-EPROTO, "model '%s': %u slots, %u tensors, %llu bytes with %d "
		                  "fds from the broker", s->model, n_slots, n_tensors,
		                  (unsigned long long)bytes, n_fds);
	m = calloc(1, sizeof(*m));
	if (!m)
		return wsync_fail(-ENOMEM, "model '%s': out of memory", s->model);
	m->n_slots = n_slots;
	m->n_tensors = n_tensors;
	m->bytes = bytes;
	m->page = page;
	m->incarnation = incarnation;
	/* the ctl entry is written by the broker alone, before READY */
	m->device_only = s->entry->n_devices &&
	                 !(s->entry->dev_flags & WSYNC_DEV_HOST_MIRROR);
	err = layout_load(s, m, fds[0], layout_bytes);
	if (!err)
		err = layout_verify(s, m);
	if (!err) {
		err = wsync_name_index_build(&m->index, m->tensors, m->n_tensors);
		if (err)
			err = wsync_fail(err == -EEXIST ? -EPROTO : err, "model '%s': tensor name "
			                 "index: %s", s->model, strerror(-err));
	}
	if (!err)
		err = slabs_map(s, m, fds + 1);
	if (err) {
		wsync_sub_maps_free(m);
		return err;
	}
	*out = m;
	return 0;
}

int wsync_sub_attach_fds(struct wsync_sub *s, uint32_t n_slots, uint32_t n_tensors,
                         uint64_t bytes, uint64_t layout_bytes,
                         int *fds, int n_fds)
{
	struct sub_maps *m;
	int err;

	err = maps_build(s, n_slots, n_tensors, bytes, layout_bytes, fds, n_fds, sub_page(s),
	                 atomic_load_explicit(&s->incarnation, memory_order_relaxed), &m);
	if (!err)
		atomic_store_explicit(&s->maps, m, memory_order_release);
	for (int i = 0; i < n_fds; i++)
		close(fds[i]);
	return err;
}

/* Keeps what a follow replaced mapped while something guards it. */
static int retire(struct wsync_sub *s, const struct wsync_model_page *page,
                  struct sub_maps *m)
{
	struct sub_retired *r = calloc(1, sizeof(*r));

	if (!r)
		return wsync_fail(-ENOMEM, "model '%s': out of memory", s->model);
	r->page = page;
	r->maps = m;
	r->next = s->retired;
	s->retired = r;
	atomic_fetch_add_explicit(&s->n_retired, 1, memory_order_relaxed);
	return 0;
}

/* Whether a record guards r: by its maps, or by its page (a guard taken
 * before the model was READY names the page, sub.c wsync_sub_guard). */
static bool retired_guarded(struct wsync_client *c, const struct sub_retired *r)
{
	for (uint32_t i = 0; i < WSYNC_MAX_VIEWS; i++) {
		const void *g = atomic_load(&c->hz[i].guard);

		if (g && (g == (const void *)r->page || g == (const void *)r->maps))
			return true;
	}
	return false;
}

/*
 * Makes every guard a thread of this process stored before now visible to
 * the scan that follows: readers store their guards without a fence
 * (sub.c, wsync_sub_guard), and membarrier runs a full barrier on every CPU
 * running one of our threads (wsync_process_barrier, client.c). Private
 * expedited needs a registration (wsync_sub_open makes it); false when no
 * barrier could be had: then nothing is freed (retired memory stays mapped
 * until close).
 */
static bool reclaim_barrier(void)
{
	return wsync_process_barrier();
}

void wsync_sub_register_barrier(void)
{
#ifdef SYS_membarrier
	(void)syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0);
#endif
}

/* Whether a scan now could free anything: a guard seen naming a retired
 * entry keeps it whatever else the scan would see, so when every entry
 * looks guarded the barrier is not worth its system call. */
static bool reclaim_candidates(struct wsync_sub *s)
{
	for (struct sub_retired *r = s->retired; r; r = r->next)
		if (!retired_guarded(s->c, r))
			return true;
	return false;
}

/* The scan loads every guard (seq_cst) after the new page and maps were
 * published (seq_cst) and after reclaim_barrier: wsync_sub_guard's comment
 * says why a page no guard names is no longer read by anyone. */
void wsync_sub_reclaim(struct wsync_sub *s)
{
	struct sub_retired **pp = &s->retired;

	if (!reclaim_candidates(s) || !reclaim_barrier())
		return;
	while (*pp) {
		struct sub_retired *r = *pp;

		if (retired_guarded(s->c, r)) {
			pp = &r->next;
			continue;
		}
		*pp = r->next;
		if (r->page)
			munmap((void *)r->page, sizeof(*r->page));
		wsync_sub_maps_free(r->maps);
		free(r);
		atomic_fetch_sub_explicit(&s->n_retired, 1, memory_order_relaxed);
	}
}

void wsync_sub_retired_free(struct wsync_sub *s)
{
	while (s->retired) {
		struct sub_retired *r = s->retired;

		s->retired = r->next;
		if (r->page)
			munmap((void *)r->page, sizeof(*r->page));
		wsync_sub_maps_free(r->maps);
		free(r);
	}
	atomic_store_explicit(&s->n_retired, 0, memory_order_relaxed);
}

/*
 * What ATTACH_OK brought (page, layout, slabs), for the model's incarnation
 * ok->incarnation: mapped and published, the current ones retired. Caller
 * holds the lock; closes nothing (the caller closes rep's fds).
 */
static int attach_install(struct wsync_sub *s, const struct wsync_msg_attach_ok *ok,
                          const struct conn_reply *rep)
{
	struct sub_maps *m = NULL, *old = atomic_load_explicit(&s->maps, memory_order_relaxed);
	const struct wsync_model_page *old_page = sub_page(s);
	void *page;
	int err;

	if (rep->n_fds < 2 + (int)ok->n_slots)
		return wsync_fail(-EPROTO, "model '%s': ATTACH_OK with %d fds for %u slots",
		                  s->model, rep->n_fds, ok->n_slots);
	if (ok->incarnation == atomic_load_explicit(&s->incarnation, memory_order_relaxed)) {
		/* the first maps of the memory the subscription already has */
		err = maps_build(s, ok->n_slots, ok->n_tensors, ok->bytes, ok->layout_bytes,
		                 rep->fds + 1, rep->n_fds - 1, old_page, ok->incarnation, &m);
		if (!err)
			atomic_store_explicit(&s->maps, m, memory_order_release);
		return err;
	}
	err = wsync_map_fd(rep->fds[0], sizeof(struct wsync_model_page), 0, 0, "model page",
	                   &page);
	if (err)
		return err;
	err = wsync_page_check(page, s->model_id, s->model);
	if (!err)
		err = maps_build(s, ok->n_slots, ok->n_tensors, ok->bytes, ok->layout_bytes,
		                 rep->fds + 1, rep->n_fds - 1, page, ok->incarnation, &m);
	if (!err && old && m->layout_hash != old->layout_hash)
		err = wsync_fail(-EIDRM, "model '%s' was replaced with another layout; "
		                 "subscribe again", s->model);
	if (!err)
		err = retire(s, old_page, old);
	if (err) {
		wsync_sub_maps_free(m);
		munmap(page, sizeof(struct wsync_model_page));
		return err;
	}
	atomic_store(&s->maps, m);
	atomic_store(&s->page, (const struct wsync_model_page *)page);
	atomic_store_explicit(&s->incarnation, ok->incarnation, memory_order_release);
	wsync_sub_reclaim(s);
	return 0;
}

int wsync_sub_attach(struct wsync_sub *s, int64_t deadline_ns)
{
	struct wsync_client *c = s->c;
	union wsync_msg_any m;
	struct conn_reply rep;
	const struct wsync_msg_attach_ok *ok = &rep.msg.attach_ok;
	int err;

	client_lock(c);
	/* another thread may have attached, or followed, while we waited */
	err = wsync_sub_check_model(s);
	if (err < 0 || (err == 0 && atomic_load_explicit(&s->maps, memory_order_acquire))) {
		client_unlock(c);
		return err;
	}
	wsync_msg_init(&m.hdr, WSYNC_MSG_ATTACH, 0);
	m.attach.m.model_id = s->model_id;
	err = wsync_conn_call_by(c, &m, NULL, 0, WSYNC_MSG_ATTACH_OK, deadline_ns, NULL, &rep);
	if (err) {
		client_unlock(c);
		return err;
	}
	if (ok->model_id != s->model_id)
		err = wsync_fail(-EPROTO, "model '%s': ATTACH_OK names model %u, not %u",
		                 s->model, ok->model_id, s->model_id);
	else if (ok->incarnation != atomic_load(&s->entry->incarnation) ||
	         atomic_load(&s->entry->base_incarnation) != s->base_incarnation)
		/* it moved again meanwhile, or went (deleted, perhaps its id
		 * reused by another model): the caller looks again */
		err = wsync_sub_check_model(s) < 0 ? -EIDRM : -EAGAIN;
	if (!err)
		err = attach_install(s, ok, &rep);
	wsync_reply_close_fds(&rep, 0);
	client_unlock(c);
	return err;
}
