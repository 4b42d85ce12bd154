/*
 * broker/adopt.c — a new broker generation, adopting the last one's data.
 *
 * Invariant: a broker never writes an object of an older generation. Old
 * objects are only read (with pread, never mapped: a client holding a
 * writable fd could have truncated one, and a read cannot fault), the
 * latest version of each model is copied into fresh objects of the new
 * generation, and the old names are unlinked. Old mappings stay valid, so a
 * collector still reading a view from before the restart is never torn,
 * and the new broker need not know about it.
 *
 * Crash safety: the new control segment is built under a temporary name and
 * renamed over the old one only when every model is in place. A crash
 * before the rename leaves the old control segment valid: the next start
 * adopts from it again, replacing the half-made objects of the aborted
 * attempt (same generation number, same names).
 *
 * Versions: the hwm of each model carries over (it was stored before any
 * grant left the old broker). The adopted latest keeps its version unless a
 * higher version was granted, in which case it is republished as hwm + 1:
 * versions never go down and are never reused.
 */
#include "adopt.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fault.h"
#include "ctl.h"
#include "log.h"
#include "model.h"
#include "state.h"
#include "shm/proto.h"
#include "shm/segment.h"
#include "shm/tensor_layout.h"

/* Reads exactly len bytes of an object from offset 0: 0 or -errno. */
static int fd_read_all(int fd, void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;     /* truncated under us */
		done += (size_t)n;
	}
	return 0;
}

/* Opens an old object read-only and checks its size: fd or -errno. */
static int old_open(const char *name, uint64_t want)
{
	int64_t size;
	int fd = wsync_seg_open(name, 0);

	if (fd < 0)
		return fd;
	size = wsync_seg_size(fd);
	if (size < 0 || (uint64_t)size != want) {
		close(fd);
		return size < 0 ? (int)size : -EINVAL;
	}
	return fd;
}

/* ---- the old control segment ------------------------------------------------ */

static void *old_ctl_read(const struct broker *b)
{
	char name[WSYNC_SHM_NAME_MAX], why[160];
	void *buf;
	int fd, err;

	if (ctl_name(b, name, sizeof(name)))
		return NULL;
	fd = wsync_seg_open(name, 0);
	if (fd < 0) {
		if (fd != -ENOENT)
			log_warn("cannot open the old control segment %s: %s; starting afresh",
			         name, strerror(-fd));
		return NULL;
	}
	buf = fault_malloc(CTL_BYTES);
	if (!buf) {
		close(fd);
		return NULL;
	}
	if (wsync_seg_size(fd) != (int64_t)CTL_BYTES) {
		log_warn("old control segment %s has %lld bytes, not %llu; starting afresh",
		         name, (long long)wsync_seg_size(fd), (unsigned long long)CTL_BYTES);
		goto out_free;
	}
	err = fd_read_all(fd, buf, CTL_BYTES);
	if (err) {
		log_warn("cannot read the old control segment %s: %s; starting afresh",
		         name, strerror(-err));
		goto out_free;
	}
	if (ctl_validate(buf, CTL_BYTES, b->uid, why, sizeof(why))) {
		log_warn("old control segment %s not adopted: %s; starting afresh", name, why);
		goto out_free;
	}
	close(fd);
	return buf;

out_free:
	free(buf);
	close(fd);
	return NULL;
}

/* ---- one model ---------------------------------------------------------------- */

/* The old layout, re-validated as if a publisher had just sent it. */
static int old_layout_read(const struct broker *b, uint64_t old_gen, uint32_t id,
                           const struct wsync_ctl_model *e, wsync_tensor_desc **out,
                           uint64_t *bytes, uint64_t *hash)
{
	char name[WSYNC_SHM_NAME_MAX];
	struct wsync_layout_header h;
	wsync_tensor_desc *in = NULL, *canon = NULL;
	uint64_t lbytes = sizeof(h) + (uint64_t)e->n_tensors * sizeof(*in);
	int fd, err;

	err = wsync_seg_name_layout(name, sizeof(name), b->uid, b->cfg.name, old_gen, id);
	if (err)
		return err;
	fd = old_open(name, lbytes);
	if (fd < 0)
		return fd;
	in = fault_malloc(lbytes);
	canon = fault_malloc((size_t)e->n_tensors * sizeof(*canon));
	err = in && canon ? fd_read_all(fd, in, lbytes) : -ENOMEM;
	close(fd);
	if (err)
		goto out_free;
	memcpy(&h, in, sizeof(h));
	if (h.magic != WSYNC_MAGIC_LAYOUT || h.layout_version != WSYNC_LAYOUT_VERSION ||
	    h.n_tensors != e->n_tensors || h.bytes != e->bytes || h.hash != e->layout_hash) {
		err = -EINVAL;
		goto out_free;
	}
	err = wsync_layout_compute((wsync_tensor_desc *)((char *)in + sizeof(h)),
	                           e->n_tensors, canon, bytes, NULL, 0);
	if (err || *bytes != e->bytes)
		goto out_inval;
	*hash = wsync_layout_hash(canon, e->n_tensors);
	if (*hash != e->layout_hash)
		goto out_inval;
	free(in);
	*out = canon;
	return 0;

out_inval:
	err = -EINVAL;
out_free:
	free(in);
	free(canon);
	return err;
}

/* The old model page, copied: 0 or -errno. */
static int old_page_read(const struct broker *b, uint64_t old_gen, uint32_t id,
                         struct wsync_model_page *page)
{
	char name[WSYNC_SHM_NAME_MAX];
	int fd, err;

	err = wsync_seg_name_page(name, sizeof(name), b->uid, b->cfg.name, old_gen, id);
	if (err)
		return err;
	fd = old_open(name, WSYNC_PAGE);
	if (fd < 0)
		return fd;
	err = fd_read_all(fd, page, WSYNC_PAGE);
	close(fd);
	if (err)
		return err;
	if (page->magic != WSYNC_MAGIC_PAGE || page->layout_version != WSYNC_LAYOUT_VERSION ||
	    page->model_id != id || page->generation != old_gen)
		return -EINVAL;
	return 0;
}

/* Copies old slab `slot` into slab 0 of m: 0 or -errno. */
static int old_slab_copy(const struct broker *b, uint64_t old_gen, struct model *m,
                         uint32_t slot)
{
	char name[WSYNC_SHM_NAME_MAX];
	void *dst;
	int fd, err;

	err = wsync_seg_name_slab(name, sizeof(name), b->uid, b->cfg.name, old_gen,
	                          m->id, slot);
	if (err)
		return err;
	fd = old_open(name, m->bytes);
	if (fd < 0)
		return fd;
	err = fault_seg_map(m->slab_fd[0], m->bytes, 1, 0, &dst);
	if (!err) {
		err = fd_read_all(fd, dst, m->bytes);
		munmap(dst, m->bytes);
	}
	close(fd);
	return err;
}

/*
 * The latest to adopt: the page's value if it names a slot and a version
 * the old broker could have granted (a commit may have been stored but not
 * yet confirmed when it died), else the last validated one.
 */
static uint64_t adopt_pick_latest(const struct wsync_ctl_model *e,
                                  const struct wsync_model_page *page, bool page_ok)
{
	uint64_t validated = atomic_load(&e->latest);
	uint64_t hwm = atomic_load(&e->hwm_version);

	if (page_ok) {
		uint64_t pl = atomic_load(&page->latest);
		uint64_t v = wsync_latest_version(pl);

		if (wsync_latest_slot(pl) < e->n_slots && v > 0 && v <= hwm &&
		    v >= wsync_latest_version(validated))
			return pl;
	}
	if (wsync_latest_slot(validated) < e->n_slots && wsync_latest_version(validated) > 0)
		return validated;
	return wsync_latest_pack(0, WSYNC_SLOT_NONE);
}

static int adopt_ready(struct broker *b, uint64_t old_gen, struct model *m,
                       const struct wsync_ctl_model *e)
{
	struct wsync_model_page *page;
	wsync_tensor_desc *tensors;
	uint64_t bytes, hash, latest, v;
	uint32_t slot;
	bool page_ok;
	char why[WSYNC_ERRMSG_MAX];
	int err;

	if (e->n_slots < WSYNC_MIN_SLOTS || e->n_slots > WSYNC_MAX_SLOTS ||
	    e->n_tensors < 1 || e->n_tensors > WSYNC_MAX_TENSORS || !e->bytes ||
	    e->bytes % WSYNC_PAGE) {
		log_warn("model '%s': old entry has impossible sizes; declared only", m->name);
		return -EINVAL;
	}
	err = old_layout_read(b, old_gen, m->id, e, &tensors, &bytes, &hash);
	if (err) {
		log_warn("model '%s': old layout not adopted (%s); declared only", m->name,
		         strerror(-err));
		return err;
	}
	err = model_make_ready(b, m, tensors, e->n_tensors, bytes, hash, e->n_slots,
	                       why, sizeof(why));
	if (err) {
		free(tensors);
		log_warn("%s; declared only", why);
		return err;
	}
	page = fault_aligned_alloc(WSYNC_PAGE, WSYNC_PAGE);
	if (!page)
		return -ENOMEM;
	page_ok = old_page_read(b, old_gen, m->id, page) == 0;
	latest = adopt_pick_latest(e, page, page_ok);
	slot = wsync_latest_slot(latest);
	if (slot == WSYNC_SLOT_NONE)
		goto out_free;
	err = old_slab_copy(b, old_gen, m, slot);
	if (err) {
		log_warn("model '%s': latest v%" PRIu64 " (slot %u) could not be copied: %s; "
		         "it starts without a version", m->name, wsync_latest_version(latest),
		         slot, strerror(-err));
		goto out_free;
	}
	v = wsync_latest_version(latest);
	if (m->hwm > v)
		v = model_next_version(m);   /* a higher version was granted: go above */
	else
		model_set_hwm(m, v);
	if (!v)
		goto out_free;
	if (page_ok) {
		atomic_store(&m->page->slots[0].step, atomic_load(&page->slots[slot].step));
		atomic_store(&m->page->slots[0].published_ns,
		             atomic_load(&page->slots[slot].published_ns));
	}
	atomic_store(&m->page->slots[0].version, v);
	model_set_slot(m, 0, WSYNC_SLOT_LATEST, v);
	atomic_store(&m->page->latest, wsync_latest_pack(v, 0));
	model_set_latest(m, wsync_latest_pack(v, 0));
	log_info("model '%s': adopted v%" PRIu64 " (was v%" PRIu64 " in slot %u)", m->name,
	         v, wsync_latest_version(latest), slot);
out_free:
	free(page);
	return 0;
}

static bool adopt_model(struct broker *b, uint64_t old_gen, uint32_t id,
                        const struct wsync_ctl_model *e)
{
	uint32_t state = atomic_load(&e->state);
	uint64_t hwm, floor;
	char why[WSYNC_ERRMSG_MAX];
	struct model *m;

	if (state == WSYNC_MODEL_FREE)
		return false;
	if (!memchr(e->name, '\0', sizeof(e->name)) ||
	    !wsync_name_valid(e->name, sizeof(e->name)) || e->id != id ||
	    (state != WSYNC_MODEL_DECLARED && state != WSYNC_MODEL_READY)) {
		log_warn("old model entry %u is damaged; not adopted", id);
		return false;
	}
	hwm = atomic_load(&e->hwm_version);
	if (wsync_latest_version(atomic_load(&e->latest)) > hwm)
		hwm = wsync_latest_version(atomic_load(&e->latest));
	floor = state_floor(b->floors, e->name);
	if (floor > hwm)
		hwm = floor;
	if (model_declare(b, e->name, (int)id, hwm, &m, why, sizeof(why))) {
		log_warn("%s; not adopted", why);
		return false;
	}
	atomic_store(&m->ctl->commits, atomic_load(&e->commits));
	atomic_store(&m->ctl->aborts, atomic_load(&e->aborts));
	atomic_store(&m->ctl->busy, atomic_load(&e->busy));
	atomic_store(&m->ctl->last_step, atomic_load(&e->last_step));
	atomic_store(&m->ctl->last_commit_ns, atomic_load(&e->last_commit_ns));
	if (state == WSYNC_MODEL_READY)
		adopt_ready(b, old_gen, m, e);
	return true;
}

/* ---- sweeping old objects ------------------------------------------------------ */

static const char *skip_digits(const char *p, uint64_t *v)
{
	uint64_t x = 0;

	if (!isdigit((unsigned char)*p))
		return NULL;
	while (isdigit((unsigned char)*p)) {
		if (x > (UINT64_MAX - 9) / 10)
			return NULL;
		x = x * 10 + (uint64_t)(*p++ - '0');
	}
	*v = x;
	return p;
}

/* "<gen>.m<id>.page|layout|s<k>" -> gen; 0 if the name is not of that form
 * (it may belong to another instance whose name extends ours). */
static uint64_t seg_generation(const char *rest)
{
	uint64_t gen, id, k;
	const char *p = skip_digits(rest, &gen);

	if (!p || p[0] != '.' || p[1] != 'm')
		return 0;
	p = skip_digits(p + 2, &id);
	if (!p || *p++ != '.')
		return 0;
	if (!strcmp(p, "page") || !strcmp(p, "layout"))
		return gen;
	if (p[0] == 's' && (p = skip_digits(p + 1, &k)) && !*p)
		return gen;
	return 0;
}

int adopt_sweep(const struct broker *b, uint64_t keep)
{
	char prefix[WSYNC_SHM_NAME_MAX];
	struct dirent *d;
	size_t plen;
	int removed = 0;
	DIR *dir;

	if (wsync_seg_prefix(prefix, sizeof(prefix), b->uid, b->cfg.name))
		return 0;
	plen = strlen(prefix);
	dir = opendir(WSYNC_SHM_DIR);
	if (!dir) {
		log_warn("cannot list %s: %s", WSYNC_SHM_DIR, strerror(errno));
		return 0;
	}
	while ((d = readdir(dir))) {
		const char *rest = d->d_name + plen;
		uint64_t gen;

		if (strncmp(d->d_name, prefix, plen))
			continue;
		/* ctl.new is an interrupted start's: always stale */
		if (strcmp(rest, "ctl.new")) {
			gen = seg_generation(rest);
			if (!gen || gen == keep)
				continue;
		}
		if (unlinkat(dirfd(dir), d->d_name, 0) == 0)
			removed++;
		else
			log_warn("cannot remove %s/%s: %s", WSYNC_SHM_DIR, d->d_name,
			         strerror(errno));
	}
	closedir(dir);
	return removed;
}

/* ---- startup ----------------------------------------------------------------- */

int adopt_start(struct broker *b, char *err, size_t errlen)
{
	struct wsync_ctl_header *old = old_ctl_read(b);
	uint64_t old_gen = old ? old->generation : 0;
	char tmp[WSYNC_SHM_NAME_MAX];
	int adopted = 0, removed, e;

	b->generation = old_gen + 1;
	/* Leftovers of an interrupted start (of this very generation) or of
	 * unknown generations go first; the old generation is still needed. */
	adopt_sweep(b, old_gen);
	e = ctl_create(b);
	if (e) {
		snprintf(err, errlen, "cannot create the control segment in %s: %s",
		         WSYNC_SHM_DIR, strerror(-e));
		free(old);
		return e;
	}
	for (uint32_t i = 0; old && i < WSYNC_MAX_MODELS; i++) {
		const struct wsync_ctl_model *em =
			(const struct wsync_ctl_model *)((const char *)old + CTL_MODELS_OFFSET) + i;

		adopted += adopt_model(b, old_gen, i, em);
	}
	free(old);
	e = ctl_install(b);
	if (e) {
		snprintf(err, errlen, "cannot install the control segment: %s", strerror(-e));
		for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++)
			if (b->models[i])
				model_destroy(b, b->models[i], true);
		ctl_destroy(b, false);
		if (!ctl_tmp_name(b, tmp, sizeof(tmp)))
			shm_unlink(tmp);
		return e;
	}
	removed = adopt_sweep(b, b->generation);
	if (old_gen)
		log_info("generation %" PRIu64 " adopted %d model(s) of generation %" PRIu64
		         "; %d old segment(s) removed", b->generation, adopted, old_gen, removed);
	else if (removed)
		log_info("removed %d stale segment(s) of this instance", removed);
	return adopted;
}
