/* broker/model.c — model table entries and the segments behind them. */
#include "model.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "ctl.h"
#include "gpu_slab.h"
#include "log.h"
#include "mover.h"
#include "pages.h"
#include "state.h"
#include "uids.h"
#include "shm/clock.h"
#include "shm/futex.h"
#include "shm/segment.h"

struct model *model_find(const struct broker *b, const char *name)
{
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++)
		if (b->models[i] && !strncmp(b->models[i]->name, name, WSYNC_NAME_MAX))
			return b->models[i];
	return NULL;
}

struct model *model_get(const struct broker *b, uint32_t id)
{
	return id < WSYNC_MAX_MODELS ? b->models[id] : NULL;
}

#define SEG_LAYOUT (-1)

/* Names in the generation's directory: "m<id>.layout", "m<id>.s<k>". */
static void seg_name(uint32_t id, int slot_or_layout, char *buf, size_t len)
{
	if (slot_or_layout == SEG_LAYOUT)
		snprintf(buf, len, "m%u.layout", id);
	else
		snprintf(buf, len, "m%u.s%d", id, slot_or_layout);
}

/* Slabs are files in the private directory (adoptable after a restart),
 * except with --group: then sealed memfds, which a publisher of another
 * uid holding a read-write fd cannot truncate under the collectors; and on
 * huge pages: memfds too (broker/pages.h). */
static bool slabs_named(const struct broker *b, const struct model *m)
{
	return !b->cfg.has_group && m->slab_pages == WSYNC_PAGES_4K && !m->gpu_unbacked;
}

/* The host slab of a device model without a host mirror: nobody writes or
 * reads it (the library refuses host views of such models), so it is an
 * empty sealed memfd of the slab's size, costing no memory. It exists so
 * that slots, grants and pins work as for every model. */
static int slab_create_unbacked(uint64_t bytes)
{
	int fd, err;

	if (fault_hit(FAULT_SEG, "unbacked slab"))
		return -ENOSPC;
	fd = memfd_create("wsync-slab-unbacked", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)bytes) < 0 || fchmod(fd, 0600) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

static int slab_create(struct broker *b, const struct model *m, uint32_t k, uint64_t bytes)
{
	char seg[32];

	if (m->gpu_unbacked)
		return slab_create_unbacked(bytes);
	if (m->slab_pages != WSYNC_PAGES_4K)
		return fault_memfd_create_huge("wsync-slab", bytes, m->slab_pages);
	if (!slabs_named(b, m))
		return fault_memfd_create("wsync-slab", bytes);
	seg_name(m->id, (int)k, seg, sizeof(seg));
	return fault_seg_create_at(b->seg_dirfd, seg, bytes);
}

static void seg_unlink(const struct broker *b, const struct model *m, int slot_or_layout)
{
	char seg[32];

	if (b->seg_dirfd < 0 || (slot_or_layout != SEG_LAYOUT && !slabs_named(b, m)))
		return;
	seg_name(m->id, slot_or_layout, seg, sizeof(seg));
	unlinkat(b->seg_dirfd, seg, 0);
}

static struct model *model_alloc(uint32_t id, const char *name)
{
	struct model *m = fault_calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->members = fault_calloc(WSYNC_MAX_SESSIONS, sizeof(*m->members));
	if (!m->members) {
		free(m);
		return NULL;
	}
	m->id = id;
	m->owner = (uid_t)WSYNC_OWNER_NONE;
	snprintf(m->name, sizeof(m->name), "%s", name);
	m->page_fd = m->page_ro_fd = m->layout_ro_fd = -1;
	for (uint32_t i = 0; i < WSYNC_MAX_SLOTS; i++)
		m->slab_fd[i] = m->slab_ro_fd[i] = -1;
	return m;
}

static void ctl_entry_reset(struct wsync_ctl_model *e, uint32_t id)
{
	atomic_store(&e->state, WSYNC_MODEL_FREE);
	e->id = id;
	memset(e->name, 0, sizeof(e->name));
	e->bytes = 0;
	e->n_tensors = e->n_slots = 0;
	e->layout_hash = 0;
	e->n_devices = e->dev_flags = 0;
	e->dev_bytes = 0;
	memset(e->dev_uuid, 0, sizeof(e->dev_uuid));
	atomic_store(&e->hwm_version, 0);
	atomic_store(&e->latest, 0);
	atomic_store(&e->commits, 0);
	atomic_store(&e->aborts, 0);
	atomic_store(&e->busy, 0);
	atomic_store(&e->last_step, 0);
	atomic_store(&e->last_commit_ns, 0);
	atomic_store(&e->publisher, 0);
	atomic_store(&e->subscribers, 0);
	atomic_store(&e->grant, 0);
	atomic_store(&e->incarnation, 0);
	atomic_store(&e->base_incarnation, 0);
	e->owner_uid = WSYNC_OWNER_NONE;
	atomic_store(&e->checksum_failures, 0);
	atomic_store(&e->stats_commits, 0);
	for (uint32_t i = 0; i < WSYNC_MAX_SLOTS; i++)
		atomic_store(&e->slot_state[i], WSYNC_SLOT_FREE);
}

int model_declare(struct broker *b, const char *name, int id, uint64_t hwm,
                  struct model **out, char *why, size_t whylen)
{
	struct model *m;
	void *map;
	int err;

	if (id < 0) {
		for (id = 0; id < WSYNC_MAX_MODELS && b->models[id]; id++)
			;
		if (id == WSYNC_MAX_MODELS) {
			snprintf(why, whylen, "model '%s': the broker's model table is full "
			         "(%d models)", name, WSYNC_MAX_MODELS);
			return -ENOSPC;
		}
	}
	if (id >= WSYNC_MAX_MODELS || b->models[id])
		return -EEXIST;
	if (hwm > MODEL_VERSION_MAX)
		hwm = MODEL_VERSION_MAX;
	m = model_alloc((uint32_t)id, name);
	if (!m) {
		snprintf(why, whylen, "model '%s': out of memory", name);
		return -ENOMEM;
	}
	/* A sealed memfd: nobody holding its read-write fd can truncate it
	 * under the collectors (or the broker) mapping it. */
	err = fault_memfd_create("wsync-page", WSYNC_PAGE);
	if (err < 0)
		goto out_free;
	m->page_fd = err;
	err = wsync_seg_reopen_ro(m->page_fd);
	if (err < 0)
		goto out_unlink;
	m->page_ro_fd = err;
	err = fault_seg_map(m->page_fd, WSYNC_PAGE, 1, 1, &map);
	if (err)
		goto out_close_ro;
	m->page = map;
	m->page->magic = WSYNC_MAGIC_PAGE;
	m->page->layout_version = WSYNC_LAYOUT_VERSION;
	m->page->model_id = m->id;
	m->page->generation = b->generation;
	m->hwm = hwm;
	m->latest = wsync_latest_pack(hwm, WSYNC_SLOT_NONE);
	atomic_store(&m->page->latest, m->latest);

	m->state = WSYNC_MODEL_DECLARED;
	m->incarnation = m->base_incarnation = ++b->incarnations;
	m->ctl = ctl_model(b, m->id);
	ctl_entry_reset(m->ctl, m->id);
	snprintf(m->ctl->name, sizeof(m->ctl->name), "%s", name);
	atomic_store(&m->ctl->hwm_version, hwm);
	atomic_store(&m->ctl->latest, m->latest);
	atomic_store(&m->ctl->base_incarnation, m->base_incarnation);
	atomic_store(&m->ctl->incarnation, m->incarnation);
	atomic_store(&m->ctl->state, WSYNC_MODEL_DECLARED);
	b->models[m->id] = m;
	*out = m;
	log_info("model '%s' declared (id %u, versions above %llu)", name, m->id,
	         (unsigned long long)hwm);
	return 0;

out_close_ro:
	close(m->page_ro_fd);
out_unlink:
	close(m->page_fd);
out_free:
	free(m->members);
	free(m);
	if (err == -ENOSPC)
		snprintf(why, whylen, "model '%s': %s is full", name, WSYNC_SHM_DIR);
	else
		snprintf(why, whylen, "model '%s': cannot create its model page: %s",
		         name, strerror(-err));
	return err;
}

static int layout_write(int fd, const wsync_tensor_desc *t, uint32_t n,
                        uint64_t bytes, uint64_t hash, const struct model_devices *dev)
{
	struct wsync_layout_header h;
	ssize_t err;

	memset(&h, 0, sizeof(h));
	h.magic = WSYNC_MAGIC_LAYOUT;
	h.layout_version = WSYNC_LAYOUT_VERSION;
	h.n_tensors = n;
	h.bytes = bytes;
	h.hash = hash;
	h.n_devices = dev ? dev->n : 0;
	h.dev_flags = dev ? dev->flags : 0;
	err = wsync_pwrite_all(fd, &h, sizeof(h), 0);
	if (!err)
		err = wsync_pwrite_all(fd, t, (size_t)n * sizeof(*t), sizeof(h));
	return (int)err;
}

static void slabs_remove(const struct broker *b, struct model *m, uint32_t n, bool unlink_them)
{
	for (uint32_t k = 0; k < n; k++) {
		if (m->slab_ro_fd[k] >= 0)
			close(m->slab_ro_fd[k]);
		if (m->slab_fd[k] >= 0)
			close(m->slab_fd[k]);
		m->slab_fd[k] = m->slab_ro_fd[k] = -1;
		if (unlink_them)
			seg_unlink(b, m, (int)k);
	}
}

/* The n_slots slabs of m, rw and ro fds; on failure none is left. */
static int slabs_create(struct broker *b, struct model *m, uint64_t bytes, uint32_t n_slots)
{
	uint32_t k;
	int fd, err;

	for (k = 0; k < n_slots; k++) {
		fd = slab_create(b, m, k, bytes);
		if (fd < 0) {
			err = fd;
			goto out_slabs;
		}
		m->slab_fd[k] = fd;
		m->slab_ro_fd[k] = wsync_seg_reopen_ro(fd);
		if (m->slab_ro_fd[k] < 0) {
			err = m->slab_ro_fd[k];
			k++;
			goto out_slabs;
		}
	}
	return 0;

out_slabs:
	slabs_remove(b, m, k, true);
	return err;
}

int model_make_ready(struct broker *b, struct model *m, wsync_tensor_desc *tensors,
                     uint32_t n_tensors, uint64_t bytes, uint64_t hash,
                     uint32_t n_slots, const struct model_devices *dev,
                     char *why, size_t whylen)
{
	bool unbacked = dev && dev->n && !(dev->flags & WSYNC_DEV_HOST_MIRROR);
	char seg[32];
	uint64_t need, avail, lbytes;
	enum wsync_slab_pages pages;
	bool huge_short = false;         /* slabs on huge pages failed */
	int err, fd;

	if (m->state != WSYNC_MODEL_DECLARED || n_slots < WSYNC_MIN_SLOTS ||
	    n_slots > WSYNC_MAX_SLOTS || !n_tensors || n_tensors > WSYNC_MAX_TENSORS)
		return -EINVAL;
	/* an unbacked slab holds nothing: no pages to pick, nothing counted */
	pages = WSYNC_PAGES_4K;
	err = unbacked ? 0 : pages_pick(b, m->name, bytes, n_slots, &pages, why, whylen);
	if (err)
		return err;
	m->gpu_unbacked = unbacked;
	need = pages_seg_bytes(pages, bytes);
	if (!need || need > UINT64_MAX / n_slots) {
		snprintf(why, whylen, "model '%s': %u slots of %llu bytes overflow", m->name,
		         n_slots, (unsigned long long)bytes);
		return -EINVAL;
	}
	need = unbacked ? 0 : need * n_slots;
	m->slab_pages = pages;
	avail = b->cfg.shm_limit > b->shm_used ? b->cfg.shm_limit - b->shm_used : 0;
	if (need > avail) {
		snprintf(why, whylen, "model '%s' needs %llu bytes, %llu of the limit %llu "
		         "are free", m->name, (unsigned long long)need,
		         (unsigned long long)avail, (unsigned long long)b->cfg.shm_limit);
		return -ENOSPC;
	}

	lbytes = sizeof(struct wsync_layout_header) + (uint64_t)n_tensors * sizeof(*tensors);
	seg_name(m->id, SEG_LAYOUT, seg, sizeof(seg));
	fd = fault_seg_create_at(b->seg_dirfd, seg, lbytes);
	if (fd < 0) {
		err = fd;
		goto out_why;
	}
	err = layout_write(fd, tensors, n_tensors, bytes, hash, dev);
	if (!err) {
		m->layout_ro_fd = wsync_seg_reopen_ro(fd);
		if (m->layout_ro_fd < 0)
			err = m->layout_ro_fd;
	}
	close(fd);
	if (err)
		goto out_unlink_layout;

	err = slabs_create(b, m, bytes, n_slots);
	if (err && pages_fallback(b, m->name, err, &pages)) {
		m->slab_pages = pages;
		err = slabs_create(b, m, bytes, n_slots);
	}
	if (err) {
		huge_short = pages != WSYNC_PAGES_4K;
		goto out_layout;
	}
	need = unbacked ? 0 : pages_seg_bytes(pages, bytes) * n_slots;
	if (dev && dev->n) {
		err = gpu_slabs_create(dev->uuid, dev->n, dev->flags, bytes, n_slots, m->name,
		                       &m->gpu, why, whylen);
		if (err) {
			slabs_remove(b, m, n_slots, true);
			close(m->layout_ro_fd);
			m->layout_ro_fd = -1;
			seg_unlink(b, m, SEG_LAYOUT);
			m->gpu_unbacked = false;
			return err;
		}
		m->ctl->n_devices = dev->n;
		m->ctl->dev_flags = dev->flags;
		m->ctl->dev_bytes = m->gpu->dev_bytes;
		memcpy(m->ctl->dev_uuid, dev->uuid, (size_t)dev->n * 16);
	}

	m->tensors = tensors;
	m->n_tensors = n_tensors;
	m->bytes = bytes;
	m->seg_bytes = pages_seg_bytes(pages, bytes);
	m->hash = hash;
	m->layout_bytes = lbytes;
	m->accounted = need;
	memset(&m->books, 0, sizeof(m->books));
	m->books.n_slots = n_slots;
	b->shm_used += need;
	atomic_store(&b->ctl->shm_used, b->shm_used);

	m->ctl->bytes = bytes;
	m->ctl->n_tensors = n_tensors;
	m->ctl->n_slots = n_slots;
	m->ctl->layout_hash = hash;
	m->ctl->slab_pages = pages;
	for (uint32_t i = 0; i < WSYNC_MAX_SLOTS; i++)
		atomic_store(&m->ctl->slot_state[i], WSYNC_SLOT_FREE);
	m->state = WSYNC_MODEL_READY;
	atomic_store(&m->ctl->state, WSYNC_MODEL_READY);
	log_info("model '%s' ready: %u tensors, %u slots of %llu bytes on %s pages", m->name,
	         n_tensors, n_slots, (unsigned long long)bytes, pages_name(pages));
	return 0;

out_layout:
	close(m->layout_ro_fd);
	m->layout_ro_fd = -1;
out_unlink_layout:
	seg_unlink(b, m, SEG_LAYOUT);
out_why:
	if (err == -ENOSPC && huge_short)
		snprintf(why, whylen, "model '%s' needs %llu bytes of %s pages and they ran "
		         "out while making its slabs", m->name, (unsigned long long)need,
		         pages_name(pages));
	else if (err == -ENOSPC)
		snprintf(why, whylen, "model '%s' needs %llu bytes: %s is full (%llu of "
		         "the limit %llu are free)", m->name, (unsigned long long)need,
		         WSYNC_SHM_DIR, (unsigned long long)avail,
		         (unsigned long long)b->cfg.shm_limit);
	else
		snprintf(why, whylen, "model '%s': cannot create its segments: %s",
		         m->name, strerror(-err));
	return err;
}

static void move_unqueue(struct broker *b, struct model_move *mv);

/*
 * m goes while it is moving. On the worker, its move is discarded once done
 * (model_move_finish: -EIDRM). Queued, it is taken off the queue now, its
 * copy never made, and whoever waits for it is answered as for a model
 * removed mid-move (handle_pub_open_moved): the PUB_OPEN with -EIDRM, the
 * CLOSE that made it with CLOSE_OK (through the outbox: this is a state
 * module).
 */
static void move_forget_model(struct broker *b, struct model *m)
{
	struct model_move *mv = m->move;

	m->move = NULL;
	mv->m = NULL;
	if (mv == b->move)
		return;
	move_unqueue(b, mv);
	if (mv->requester)
		outbox_error(&b->out, mv->requester, mv->open.hdr.seq, WSYNC_MSG_PUB_OPEN, -EIDRM,
		             "the model was deleted while it waited to move to new memory");
	if (mv->closer) {
		union wsync_msg_any ok;

		memset(&ok, 0, sizeof(ok));
		wsync_msg_init(&ok.hdr, WSYNC_MSG_CLOSE_OK, mv->close.hdr.seq);
		ok.close_ok.model_id = mv->close.close.m.model_id;
		outbox_reply(&b->out, mv->closer, &ok);
	}
	log_info("model '%s': its queued move to new memory is dropped: the model is removed",
	         m->name);
	model_move_free(mv);
}

static void model_release(struct broker *b, struct model *m, bool unlink_them)
{
	if (m->state == WSYNC_MODEL_READY) {
		gpu_slabs_free(m->gpu);
		m->gpu = NULL;
		slabs_remove(b, m, m->books.n_slots, unlink_them);
		if (m->layout_ro_fd >= 0)
			close(m->layout_ro_fd);
		if (unlink_them)
			seg_unlink(b, m, SEG_LAYOUT);
		b->shm_used -= m->accounted;
		if (b->ctl)
			atomic_store(&b->ctl->shm_used, b->shm_used);
	}
	if (m->page)
		munmap(m->page, WSYNC_PAGE);
	if (m->page_ro_fd >= 0)
		close(m->page_ro_fd);
	if (m->page_fd >= 0)
		close(m->page_fd);
	if (b->models[m->id] == m)
		b->models[m->id] = NULL;
	if (m->move)
		move_forget_model(b, m);
	if (m->group)   /* groups end with their last rank, before this */
		log_error("model '%s': freed with a publisher group still open", m->name);
	/* a big layout leaves the heap grown: the tick gives it back */
	if ((uint64_t)m->n_tensors * sizeof(*m->tensors) >= MODEL_TRIM_BYTES)
		b->trim_due = true;
	free(m->tensors);
	free(m->members);
	free(m);
}

void model_undeclare(struct broker *b, struct model *m, const char *why)
{
	/* Versions handed out under this name must stay below the next ones. */
	if (m->hwm && (!b->floors ||
	               state_floor_raise(b->floors, m->name, m->hwm, m->owner,
	                                 m->owner != (uid_t)WSYNC_OWNER_NONE &&
	                                 !uids_trusted(b, m->owner))))
		log_warn("model '%s': its version floor %llu could not be kept", m->name,
		         (unsigned long long)m->hwm);
	if (b->ctl)
		ctl_entry_reset(m->ctl, m->id);
	log_info("model '%s' removed (id %u): %s", m->name, m->id, why);
	model_release(b, m, true);
}

bool model_drop_if_unused(struct broker *b, struct model *m)
{
	if (m->n_members || !model_awaited(m))
		return false;
	/* A layout and slabs without a version hold nothing anyone can read:
	 * a client that opened publishers and left must not keep table entries
	 * and slab memory from everybody else. */
	model_undeclare(b, m, m->state == WSYNC_MODEL_DECLARED ?
	                "never published and nobody has it open" :
	                "no version was ever committed and nobody has it open");
	return true;
}

void model_delete(struct broker *b, struct model *m, const char *why)
{
	if (m->n_members)
		log_error("model '%s': deleted with %u members left", m->name, m->n_members);
	m->n_members = 0;
	m->subscribers = 0;
	/* subscribers learn from the entry (incarnation 0), then wake */
	atomic_store(&m->ctl->base_incarnation, 0);
	atomic_store(&m->ctl->incarnation, 0);
	atomic_store(&m->ctl->state, WSYNC_MODEL_FREE);
	model_wake(m);
	model_undeclare(b, m, why);
}

void model_destroy(struct broker *b, struct model *m, bool unlink_them)
{
	uint32_t latest = wsync_latest_slot(m->latest);

	/* What the next start adopts is each model's latest version: the
	 * other slabs need not wait in /dev/shm for it. */
	if (!unlink_them && m->state == WSYNC_MODEL_READY)
		for (uint32_t k = 0; k < m->books.n_slots; k++)
			if (k != latest)
				seg_unlink(b, m, (int)k);
	model_release(b, m, unlink_them);
}

/* ---- fresh memory for a publisher of another uid --------------------------- */

/*
 * The worker's part of a move (mover.c says what it may touch): new slabs,
 * named "m<id>.s<k>.next" when slabs are named (renamed over the old ones
 * when the move is applied), and the copy of the latest version into its
 * slot. Reads and writes only mv; calls no fault injection and no log.
 */
/* CPU time of the calling thread, ns: what a move costs the machine,
 * whether it waited for a core or not (the mover runs niced). */
static int64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void move_work(void *arg)
{
	struct model_move *mv = arg;
	int64_t t0 = thread_cpu_ns();
	char seg[40];
	void *dst;
	uint32_t k;

	mv->err = 0;
	for (k = 0; k < mv->n; k++) {
		snprintf(seg, sizeof(seg), "m%u.s%u.next", mv->id, k);
		if (mv->pages != WSYNC_PAGES_4K)
			mv->fd[k] = wsync_memfd_create_huge("wsync-slab", mv->bytes, mv->pages);
		else if (!mv->named)
			mv->fd[k] = wsync_memfd_create("wsync-slab", mv->bytes);
		else
			mv->fd[k] = wsync_seg_create_at(mv->dirfd, seg, mv->bytes);
		mv->ro[k] = mv->fd[k] < 0 ? -1 : wsync_seg_reopen_ro(mv->fd[k]);
		if (mv->fd[k] < 0 || mv->ro[k] < 0) {
			mv->err = mv->fd[k] < 0 ? mv->fd[k] : mv->ro[k];
			if (mv->fd[k] >= 0)
				close(mv->fd[k]);
			if (mv->fd[k] >= 0 && mv->named)
				unlinkat(mv->dirfd, seg, 0);
			mv->fd[k] = -1;
			break;
		}
	}
	if (!mv->err && mv->src) {
		mv->err = wsync_seg_map(mv->fd[mv->latest], mv->seg_bytes, 1, 0, &dst);
		if (!mv->err) {
			memcpy(dst, mv->src, mv->bytes);
			munmap(dst, mv->seg_bytes);
		}
	}
	if (mv->src)
		munmap(mv->src, mv->seg_bytes);
	mv->src = NULL;
	if (mv->err) {
		while (k-- > 0) {
			close(mv->fd[k]);
			close(mv->ro[k]);
			mv->fd[k] = mv->ro[k] = -1;
			if (mv->named) {
				snprintf(seg, sizeof(seg), "m%u.s%u.next", mv->id, k);
				unlinkat(mv->dirfd, seg, 0);
			}
		}
	}
	mv->work_ns = thread_cpu_ns() - t0;
}

/* The new slabs of a move that is not applied (its work done). */
static void move_discard(struct model_move *mv)
{
	char seg[40];

	for (uint32_t k = 0; k < mv->n; k++) {
		if (mv->fd[k] < 0)
			continue;
		close(mv->fd[k]);
		close(mv->ro[k]);
		mv->fd[k] = mv->ro[k] = -1;
		if (mv->named) {
			snprintf(seg, sizeof(seg), "m%u.s%u.next", mv->id, k);
			unlinkat(mv->dirfd, seg, 0);
		}
	}
}

void model_move_free(struct model_move *mv)
{
	if (!mv)
		return;
	if (mv->m && mv->m->move == mv)
		mv->m->move = NULL;
	if (mv->src)                     /* a queued move that never ran */
		munmap(mv->src, mv->seg_bytes);
	free(mv->parts);
	free(mv);
}

static void move_unqueue(struct broker *b, struct model_move *mv)
{
	for (struct model_move **at = &b->move_queue; *at; at = &(*at)->next) {
		if (*at == mv) {
			*at = mv->next;
			mv->next = NULL;
			return;
		}
	}
}

struct model_move *model_move_dequeue(struct broker *b)
{
	struct model_move *mv = b->move_queue;

	if (mv) {
		b->move_queue = mv->next;
		mv->next = NULL;
	}
	return mv;
}

static void move_forget_peer(struct model_move *mv, const struct peer *p)
{
	if (mv->requester == p)
		mv->requester = NULL;
	if (mv->closer == p)
		mv->closer = NULL;
}

void model_move_forget_peer(struct broker *b, const struct peer *p)
{
	if (b->move)
		move_forget_peer(b->move, p);
	for (struct model_move *mv = b->move_queue; mv; mv = mv->next)
		move_forget_peer(mv, p);
}

/* A move of m, ready for move_work: what it needs of m copied, the latest
 * slab mapped (no pages touched: the worker reads them). Injected segment
 * faults strike here, on the loop (fault.c is the loop's). */
static int move_prepare(struct broker *b, struct model *m, const char *reason,
                        struct model_move **out)
{
	struct model_move *mv;
	int err;

	if (m->state != WSYNC_MODEL_READY || m->granted || m->gpu)
		return -EINVAL;
	mv = fault_calloc(1, sizeof(*mv));
	if (!mv)
		return -ENOMEM;
	mv->m = m;
	snprintf(mv->reason, sizeof(mv->reason), "%s", reason);
	mv->dirfd = b->seg_dirfd;
	mv->named = slabs_named(b, m);
	mv->id = m->id;
	mv->n = m->books.n_slots;
	mv->latest = wsync_latest_slot(m->latest);
	mv->pages = m->slab_pages;
	mv->bytes = m->bytes;
	mv->seg_bytes = m->seg_bytes;
	for (uint32_t k = 0; k < WSYNC_MAX_SLOTS; k++)
		mv->fd[k] = mv->ro[k] = -1;
	for (uint32_t k = 0; k < mv->n; k++) {
		if (fault_hit(FAULT_SEG, "a moved slab")) {
			err = -ENOSPC;
			goto out_free;
		}
	}
	if (mv->latest < mv->n) {
		err = fault_seg_map(m->slab_fd[mv->latest], m->seg_bytes, 0, 0, &mv->src);
		if (err)
			goto out_free;
	}
	*out = mv;
	return 0;

out_free:
	free(mv);
	return err;
}

static void move_why(const struct model_move *mv, int err, char *why, size_t whylen)
{
	snprintf(why, whylen, "model '%s': cannot give its new publisher memory of its own: "
	         "%s", mv->m ? mv->m->name : "?", strerror(-err));
}

/* Hands mv, prepared, to the worker: b->move. On failure mv is the
 * caller's still. */
static int move_submit(struct broker *b, struct model_move *mv)
{
	/* from the submit on, mv is the worker's until reaped: read it first */
	uint64_t copy = mv->src ? mv->bytes : 0;
	struct model *m = mv->m;
	int err;

	err = mover_submit(b->mover, move_work, mv);
	if (err)
		return err;
	b->move = mv;
	log_info("model '%s': %s: moving it to new memory (%llu bytes to copy, on the mover's "
	         "thread)", m->name, mv->reason, (unsigned long long)copy);
	return 0;
}

/* Submits mv, prepared, and makes it its model's move; on failure mv is
 * freed and why says so. */
static int move_begin(struct broker *b, struct model_move *mv, char *why, size_t whylen)
{
	struct model *m = mv->m;
	int err = move_submit(b, mv);

	if (err) {
		snprintf(why, whylen, "model '%s': cannot start its move: %s", m->name,
		         strerror(-err));
		model_move_free(mv);
		return err;
	}
	m->move = mv;
	return 0;
}

int model_move_start(struct broker *b, struct model *m, const char *reason, char *why,
                     size_t whylen)
{
	struct model_move *mv;
	int err;

	/* departures' moves queued first: a takeover does not pass them */
	if (b->move || b->move_queue || !b->mover || mover_busy(b->mover)) {
		snprintf(why, whylen, "model '%s' must move to new memory for this publisher, "
		         "and another model is moving (one move at a time): try again in a "
		         "moment", m->name);
		return -EBUSY;
	}
	err = move_prepare(b, m, reason, &mv);
	if (err) {
		snprintf(why, whylen, "model '%s': cannot give its new publisher memory of its "
		         "own: %s", m->name, strerror(-err));
		return err;
	}
	return move_begin(b, mv, why, whylen);
}

int model_move_leave(struct broker *b, struct model *m, uid_t uid, const char *reason,
                     char *why, size_t whylen)
{
	struct model_move *mv, **at;
	uint32_t ahead = 0;
	int err;

	if (m->move || !b->mover) {      /* nobody publishes a moving model */
		snprintf(why, whylen, "model '%s': cannot move it to new memory: %s", m->name,
		         m->move ? "it is moving already" : "no mover");
		return -EBUSY;
	}
	err = move_prepare(b, m, reason, &mv);
	if (err) {
		snprintf(why, whylen, "model '%s': cannot give it memory of its own after its "
		         "publisher left: %s", m->name, strerror(-err));
		return err;
	}
	mv->for_leave = true;
	mv->left_uid = uid;
	if (!b->move && !b->move_queue && !mover_busy(b->mover)) {
		return move_begin(b, mv, why, whylen);
	}
	/* The worker is busy: this one waits its turn, its old memory served
	 * meanwhile, rather than being copied here while every other client
	 * waits for the loop. */
	for (at = &b->move_queue; *at; at = &(*at)->next)
		ahead++;
	*at = mv;
	m->move = mv;
	if (b->ctl)
		atomic_fetch_add(&b->ctl->moves_queued, 1);
	log_info("model '%s': %s: its move to new memory waits for the mover's thread (%u "
	         "queued before it, 1 moving)", m->name, reason, ahead);
	return 0;
}

struct model_move *model_move_next(struct broker *b)
{
	struct model_move *mv;
	int err;

	if (b->move || !b->mover || !b->move_queue)
		return NULL;
	mv = model_move_dequeue(b);
	err = move_submit(b, mv);
	if (!err)
		return NULL;
	mv->err = err;                   /* finished as a failed copy */
	return mv;
}

/* A model page for m: the header, the validated latest, the latest slot's
 * metadata, the futex word moved on; its fds in *fd and *ro. */
static int page_create_next(const struct model *m, int *fd, int *ro,
                            struct wsync_model_page **out)
{
	uint32_t latest = wsync_latest_slot(m->latest);
	struct wsync_model_page *page;
	void *map;
	int err;

	*fd = fault_memfd_create("wsync-page", WSYNC_PAGE);
	if (*fd < 0)
		return *fd;
	*ro = wsync_seg_reopen_ro(*fd);
	err = *ro < 0 ? *ro : fault_seg_map(*fd, WSYNC_PAGE, 1, 1, &map);
	if (err) {
		if (*ro >= 0)
			close(*ro);
		close(*fd);
		return err;
	}
	page = map;
	page->magic = WSYNC_MAGIC_PAGE;
	page->layout_version = WSYNC_LAYOUT_VERSION;
	page->model_id = m->id;
	page->generation = m->page->generation;
	if (latest < WSYNC_MAX_SLOTS) {
		const struct wsync_slot_meta *from = &m->page->slots[latest];

		atomic_store(&page->slots[latest].version, m->books.version[latest]);
		atomic_store(&page->slots[latest].step, atomic_load(&m->ctl->last_step));
		atomic_store(&page->slots[latest].published_ns,
		             atomic_load(&m->ctl->last_commit_ns));
		/* the checksum is the earlier publisher's word: kept only while it
		 * says the same version, and still pending if it was (that
		 * publisher died hashing, or stores it in the old page: collectors
		 * that verify are told, libclient/checksum.c) */
		if (atomic_load(&from->version) == m->books.version[latest]) {
			atomic_store(&page->slots[latest].checksum, atomic_load(&from->checksum));
			atomic_store(&page->sum_pending[latest],
			             atomic_load(&m->page->sum_pending[latest]));
		}
	}
	atomic_store(&page->latest, m->latest);
	atomic_store(&page->seq, atomic_load(&m->page->seq) + 1);
	*out = page;
	return 0;
}

int model_move_finish(struct broker *b, struct model_move *mv, bool apply, char *why,
                      size_t whylen)
{
	struct model *m = mv->m;
	uint32_t n = mv->n, latest = mv->latest, k;
	struct wsync_model_page *page, *old_page;
	int64_t t0 = wsync_mono_ns(), now;
	int page_fd, page_ro, err;
	char from[40], to[32];

	if (m && m->move == mv)
		m->move = NULL;
	err = mv->err;
	if (!err && !m)
		err = -EIDRM;
	else if (!err && !apply)
		err = -ECANCELED;
	else if (!err && (m->state != WSYNC_MODEL_READY || m->granted || m->gpu ||
	                  m->books.n_slots != n || wsync_latest_slot(m->latest) != latest))
		err = -EAGAIN;              /* it changed while it moved */
	if (!err)
		err = page_create_next(m, &page_fd, &page_ro, &page);
	if (err) {
		move_discard(mv);
		if (err == -EIDRM)
			snprintf(why, whylen, "the model was deleted while it moved to new memory");
		else if (err == -EAGAIN)
			snprintf(why, whylen, "model '%s' changed while it moved to new memory: "
			         "try again", m->name);
		else
			move_why(mv, err, why, whylen);
		goto out_charge;
	}
	/* From here on nothing fails: the new memory takes the old's names
	 * and place, and collectors learn of it from the new incarnation. */
	for (k = 0; k < n && mv->named; k++) {
		snprintf(from, sizeof(from), "m%u.s%u.next", m->id, k);
		seg_name(m->id, (int)k, to, sizeof(to));
		renameat(b->seg_dirfd, from, b->seg_dirfd, to);
	}
	for (k = 0; k < n; k++) {
		/* the last fds of the old slabs: freeing them takes a while */
		mover_close(b->mover, m->slab_fd[k]);
		mover_close(b->mover, m->slab_ro_fd[k]);
		m->slab_fd[k] = mv->fd[k];
		m->slab_ro_fd[k] = mv->ro[k];
		mv->fd[k] = mv->ro[k] = -1;
		if (k != latest)
			model_set_slot(m, k, WSYNC_SLOT_FREE, 0);
	}
	old_page = m->page;
	close(m->page_fd);
	close(m->page_ro_fd);
	m->page = page;
	m->page_fd = page_fd;
	m->page_ro_fd = page_ro;
	m->incarnation = ++b->incarnations;
	atomic_store(&m->ctl->incarnation, m->incarnation);
	/* waiters asleep on the old page look again and find the new one */
	atomic_fetch_add(&old_page->seq, 1);
	wsync_futex_wake(&old_page->seq, INT32_MAX);
	munmap(old_page, WSYNC_PAGE);
	now = wsync_mono_ns();
	m->move_ns[m->moves++ % MODEL_MOVE_BUDGET] = now;   /* model_move_budget_left */
	log_info("model '%s': %s: new memory for the page and %u slots, the latest version "
	         "(%llu bytes) copied, in %.1f ms of CPU (%.1f ms of it on the broker's thread "
	         "once copied)", m->name, mv->reason, n,
	         latest < n ? (unsigned long long)m->bytes : 0ull,
	         (double)(mv->work_ns + now - t0) / 1e6, (double)(now - t0) / 1e6);
	m->has_writer = false;
	atomic_fetch_add(&b->ctl->moves, 1);

out_charge:
	/* The worker's time counts as the broker's: it is the memory
	 * bandwidth and the core every client shares. */
	now = wsync_mono_ns();
	(void)model_move_wait_ns(b, now);                  /* fills the bucket first */
	b->move_credit_ns -= mv->work_ns + (now - t0);
	return err;
}

int model_rotate(struct broker *b, struct model *m, const char *reason, char *why,
                 size_t whylen)
{
	struct model_move *mv;
	int64_t t0 = wsync_mono_ns();
	int err;

	err = move_prepare(b, m, reason, &mv);
	if (err) {
		snprintf(why, whylen, "model '%s': cannot give its new publisher memory of its "
		         "own: %s", m->name, strerror(-err));
		return err;
	}
	model_move_work_here(b, mv);
	err = model_move_finish(b, mv, true, why, whylen);
	model_move_free(mv);
	b->moved_ns += wsync_mono_ns() - t0;    /* on this thread, not the uid's work */
	return err;
}

void model_move_work_here(struct broker *b, struct model_move *mv)
{
	move_work(mv);
	if (b->ctl)
		atomic_fetch_add(&b->ctl->moves_on_loop, 1);
}

int64_t model_move_wait_ns(struct broker *b, int64_t now_ns)
{
	if (!b->move_credit_at_ns)
		b->move_credit_ns = MODEL_MOVE_BURST_NS;
	else if (now_ns > b->move_credit_at_ns)
		b->move_credit_ns += (now_ns - b->move_credit_at_ns) / MODEL_MOVE_SHARE;
	if (b->move_credit_ns > MODEL_MOVE_BURST_NS)
		b->move_credit_ns = MODEL_MOVE_BURST_NS;
	b->move_credit_at_ns = now_ns;
	return b->move_credit_ns >= 0 ? 0 : -b->move_credit_ns * MODEL_MOVE_SHARE;
}

void model_withdraw_latest(struct model *m)
{
	uint32_t slot = wsync_latest_slot(m->latest);
	uint64_t none = wsync_latest_pack(m->hwm, WSYNC_SLOT_NONE);

	/* the entry first: collectors trust the page's word only while it
	 * equals the entry's (or the grant, none here) */
	model_set_latest(m, none);
	m->withdrawn = true;
	atomic_store(&m->page->latest, none);
	if (slot < m->books.n_slots)
		model_set_slot(m, slot, WSYNC_SLOT_OLD, m->books.version[slot]);
	model_wake(m);
}

void model_set_owner(struct model *m, uid_t uid)
{
	m->owner = uid;
	m->ctl->owner_uid = (uint32_t)uid;
}

void model_set_slot(struct model *m, uint32_t slot, uint32_t state, uint64_t version)
{
	if (slot >= m->books.n_slots)
		return;
	m->books.state[slot] = (uint8_t)state;
	m->books.version[slot] = version;
	atomic_store(&m->ctl->slot_state[slot], (uint8_t)state);
}

void model_set_latest(struct model *m, uint64_t latest)
{
	if (wsync_latest_slot(latest) != WSYNC_SLOT_NONE)
		m->withdrawn = false;
	m->latest = latest;
	atomic_store(&m->ctl->latest, latest);
}

void model_set_grant(struct model *m, uint64_t grant)
{
	atomic_store(&m->ctl->grant, grant);
}

void model_set_hwm(struct model *m, uint64_t hwm)
{
	if (hwm > MODEL_VERSION_MAX)
		hwm = MODEL_VERSION_MAX;
	m->hwm = hwm;
	atomic_store(&m->ctl->hwm_version, hwm);
}

uint64_t model_next_version(struct model *m)
{
	if (m->hwm >= MODEL_VERSION_MAX)
		return 0;
	model_set_hwm(m, m->hwm + 1);
	return m->hwm;
}

void model_wake(struct model *m)
{
	atomic_fetch_add(&m->page->seq, 1);
	wsync_futex_wake(&m->page->seq, INT32_MAX);
}

void model_close_page(struct model *m)
{
	atomic_fetch_or(&m->page->flags, WSYNC_PAGE_CLOSED);
	model_wake(m);
}

int model_add_member(struct model *m, struct peer *p)
{
	for (uint32_t i = 0; i < m->n_members; i++)
		if (m->members[i] == p)
			return 0;
	if (m->n_members >= WSYNC_MAX_SESSIONS)
		return -ENOSPC;
	m->members[m->n_members++] = p;
	return 0;
}

void model_remove_member(struct model *m, struct peer *p)
{
	for (uint32_t i = 0; i < m->n_members; i++) {
		if (m->members[i] == p) {
			m->members[i] = m->members[--m->n_members];
			m->members[m->n_members] = NULL;
			return;
		}
	}
}

bool model_devices_match(const struct model *m, const struct model_devices *dev)
{
	uint32_t n = dev ? dev->n : 0;

	if (!m->gpu)
		return n == 0;
	return n == m->gpu->n_devices && dev->flags == m->gpu->dev_flags &&
	       !memcmp(dev->uuid, m->gpu->uuid, (size_t)n * 16);
}
