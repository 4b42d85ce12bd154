/*
 * broker/adopt.c — a new broker generation, adopting the last one's data.
 *
 * Trust: every segment of a generation lives in its private directory
 * /dev/shm/wsync.<uid>.<name>.<random>/ (0700, shm/segment.h), named in
 * <rundir>/<name>.state (the run dir is ours and 0700). Adoption reads the
 * directory the state file names only after checking it (ours, 0700, not
 * a symlink) and each object in it (a regular file of ours, one link, no
 * group or other write bit); anything else is refused, logged and never
 * read. Nothing another uid placed in /dev/shm is opened.
 *
 * Invariant: a broker never writes an object of an older generation. Old
 * objects are only read (with pread, never mapped: a read cannot fault),
 * the latest version of each model is copied into fresh objects of the new
 * generation, and the old directory is removed. Old mappings stay valid,
 * so a collector still reading a view from before the restart is never
 * torn, and the new broker need not know about it.
 *
 * Crash safety: the new generation is built in a new directory and the
 * state file is switched to it (rename) only when every model is in place.
 * A crash before that leaves the old state valid: the next start adopts
 * from it again and sweeps the half-made directory.
 *
 * Versions: the hwm of each model carries over (it was stored before any
 * grant left the old broker). The adopted latest is the broker-validated
 * one of the control segment (model pages are not read: they are memfds a
 * publisher writes); it keeps its version unless a higher version was
 * granted, in which case it is republished as hwm + 1: versions never go
 * down and are never reused. With --group, and on huge pages (broker/
 * pages.h), slabs are sealed memfds that die with the broker: version
 * numbers are adopted, data is not (trainers republish).
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
#include <sys/stat.h>
#include <unistd.h>

#include "fault.h"
#include "ctl.h"
#include "gpu_slab.h"
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

/* Opens an old object (checked, see above) and checks its size: fd or -errno. */
static int old_open(const struct broker *b, int old_dirfd, const char *name, uint64_t want)
{
	char why[160];
	int64_t size;
	int fd = wsync_seg_open_checked(old_dirfd, name, b->uid, why, sizeof(why));

	if (fd < 0) {
		if (fd != -ENOENT)
			log_warn("old segment not trusted: %s", why);
		return fd;
	}
	size = wsync_seg_size(fd);
	if (size < 0 || (uint64_t)size != want) {
		close(fd);
		return size < 0 ? (int)size : -EINVAL;
	}
	return fd;
}

/* ---- the old control segment ------------------------------------------------ */

/* The previous generation's directory, checked, and a copy of its control
 * segment; NULL (and *old_dirfd -1) to start afresh. */
static void *old_ctl_read(const struct broker *b, int *old_dirfd, char *dir, size_t dirlen)
{
	char why[WSYNC_ERRMSG_MAX];
	uint64_t len;
	void *buf;
	int fd, dfd, err;

	*old_dirfd = -1;
	dir[0] = '\0';
	err = ctl_read_state(b->state_path, b->uid, dir, dirlen, why, sizeof(why));
	if (err) {
		if (err != -ENOENT)
			log_warn("%s; starting afresh", why);
		dir[0] = '\0';
		return NULL;
	}
	if (!wsync_seg_dir_name_ours(dir, b->uid, b->cfg.name)) {
		log_warn("%s names '%.64s', not a directory of this instance; starting afresh",
		         b->state_path, dir);
		dir[0] = '\0';
		return NULL;
	}
	dfd = wsync_seg_dir_open(dir, b->uid, why, sizeof(why));
	if (dfd < 0) {
		if (dfd != -ENOENT)
			log_warn("the previous generation's directory %s/%s is not trusted: %s; "
			         "starting afresh", WSYNC_SHM_DIR, dir, why);
		return NULL;
	}
	/* a broker before the session bounds table left a shorter one */
	len = CTL_BYTES;
	fd = old_open(b, dfd, CTL_SEG_NAME, len);
	if (fd == -EINVAL) {
		len = CTL_BYTES_NO_BOUNDS;
		fd = old_open(b, dfd, CTL_SEG_NAME, len);
	}
	if (fd < 0) {
		if (fd != -ENOENT)
			log_warn("old control segment in %s/%s not adopted: %s; starting afresh",
			         WSYNC_SHM_DIR, dir, strerror(-fd));
		goto out_close_dir;
	}
	buf = fault_malloc(CTL_BYTES);
	if (!buf)
		goto out_close;
	memset((char *)buf + len, 0, CTL_BYTES - len);
	err = fd_read_all(fd, buf, len);
	if (err) {
		log_warn("cannot read the old control segment: %s; starting afresh",
		         strerror(-err));
		goto out_free;
	}
	if (ctl_validate(buf, len, b->uid, why, sizeof(why))) {
		log_warn("old control segment not adopted: %s; starting afresh", why);
		goto out_free;
	}
	close(fd);
	*old_dirfd = dfd;
	return buf;

out_free:
	free(buf);
out_close:
	close(fd);
out_close_dir:
	close(dfd);
	return NULL;
}

/* ---- one model ---------------------------------------------------------------- */

/* The old layout, re-validated as if a publisher had just sent it. */
static int old_layout_read(const struct broker *b, int old_dirfd, uint32_t id,
                           const struct wsync_ctl_model *e, wsync_tensor_desc **out,
                           uint64_t *bytes, uint64_t *hash)
{
	char name[32];
	struct wsync_layout_header h;
	wsync_tensor_desc *in = NULL, *canon = NULL;
	uint64_t lbytes = sizeof(h) + (uint64_t)e->n_tensors * sizeof(*in);
	int fd, err;

	snprintf(name, sizeof(name), "m%u.layout", id);
	fd = old_open(b, old_dirfd, name, lbytes);
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

/* Copies old slab `slot` into slab 0 of m (and, for a device model, from
 * there onto slot 0 of each of its GPUs): 0 or -errno. */
static int old_slab_copy(const struct broker *b, int old_dirfd, struct model *m,
                         uint32_t slot)
{
	char name[32], why[WSYNC_ERRMSG_MAX];
	void *dst;
	int fd, err;

	snprintf(name, sizeof(name), "m%u.s%u", m->id, slot);
	fd = old_open(b, old_dirfd, name, m->bytes);
	if (fd < 0)
		return fd;
	/* the new slab may be on huge pages: mapped whole */
	err = fault_seg_map(m->slab_fd[0], m->seg_bytes, 1, 0, &dst);
	if (!err) {
		err = fd_read_all(fd, dst, m->bytes);
		if (!err && m->gpu && (err = gpu_slabs_load(m->gpu, 0, dst, m->bytes, why,
		                                            sizeof(why))))
			log_warn("model '%s': %s", m->name, why);
		munmap(dst, m->seg_bytes);
	}
	close(fd);
	return err;
}

/* The latest to adopt: the last one the broker validated, if it names a
 * slot and a version. */
static uint64_t adopt_pick_latest(const struct wsync_ctl_model *e)
{
	uint64_t validated = atomic_load(&e->latest);

	if (wsync_latest_slot(validated) < e->n_slots && wsync_latest_version(validated) > 0)
		return validated;
	return wsync_latest_pack(0, WSYNC_SLOT_NONE);
}

static int adopt_ready(struct broker *b, int old_dirfd, struct model *m,
                       const struct wsync_ctl_model *e)
{
	struct model_devices dev = { .n = e->n_devices, .flags = e->dev_flags,
	                             .uuid = e->dev_uuid };
	wsync_tensor_desc *tensors;
	uint64_t bytes, hash, latest, v;
	uint32_t slot;
	char why[WSYNC_ERRMSG_MAX];
	int err;

	if (e->n_slots < WSYNC_MIN_SLOTS || e->n_slots > WSYNC_MAX_SLOTS ||
	    e->n_tensors < 1 || e->n_tensors > WSYNC_MAX_TENSORS || !e->bytes ||
	    e->bytes % WSYNC_PAGE) {
		log_warn("model '%s': old entry has impossible sizes; declared only", m->name);
		return -EINVAL;
	}
	err = old_layout_read(b, old_dirfd, m->id, e, &tensors, &bytes, &hash);
	if (err) {
		log_warn("model '%s': old layout not adopted (%s); declared only", m->name,
		         strerror(-err));
		return err;
	}
	/* VMM memory has no name a new process could open: it lived as long as
	 * the old broker's handles and the clients' mappings. A host mirror
	 * holds the latest version, and is copied back onto new device slabs
	 * (old_slab_copy); without one there is nothing to restore from. */
	if (e->n_devices && (!(e->dev_flags & WSYNC_DEV_HOST_MIRROR) ||
	                     e->n_devices > WSYNC_MODEL_GPUS)) {
		free(tensors);
		log_info("model '%s': lived on %u GPU%s without a host mirror, whose memory "
		         "ended with the last broker; declared only (its trainer publishes it "
		         "again, versions go on above v%" PRIu64 ")", m->name, e->n_devices,
		         e->n_devices == 1 ? "" : "s", (uint64_t)atomic_load(&e->hwm_version));
		return -ENODEV;
	}
	err = model_make_ready(b, m, tensors, e->n_tensors, bytes, hash, e->n_slots,
	                       e->n_devices ? &dev : NULL, why, sizeof(why));
	if (err) {
		free(tensors);
		log_warn("%s; declared only", why);
		return err;
	}
	latest = adopt_pick_latest(e);
	slot = wsync_latest_slot(latest);
	if (slot == WSYNC_SLOT_NONE)
		return 0;
	if (b->cfg.has_group || e->slab_pages != WSYNC_PAGES_4K) {
		log_info("model '%s': v%" PRIu64 " not adopted: its slabs were memfds (%s) "
		         "that ended with the last broker; the next version is above it",
		         m->name, wsync_latest_version(latest),
		         b->cfg.has_group ? "--group" : "on huge pages");
		return 0;
	}
	err = old_slab_copy(b, old_dirfd, m, slot);
	if (err) {
		log_warn("model '%s': latest v%" PRIu64 " (slot %u) could not be copied: %s; "
		         "it starts without a version", m->name, wsync_latest_version(latest),
		         slot, strerror(-err));
		return 0;
	}
	v = wsync_latest_version(latest);
	if (m->hwm > v)
		v = model_next_version(m);   /* a higher version was granted: go above */
	else
		model_set_hwm(m, v);
	if (!v)
		return 0;
	atomic_store(&m->page->slots[0].step, atomic_load(&e->last_step));
	atomic_store(&m->page->slots[0].published_ns, atomic_load(&e->last_commit_ns));
	atomic_store(&m->page->slots[0].version, v);
	model_set_slot(m, 0, WSYNC_SLOT_LATEST, v);
	atomic_store(&m->page->latest, wsync_latest_pack(v, 0));
	model_set_latest(m, wsync_latest_pack(v, 0));
	log_info("model '%s': adopted v%" PRIu64 " (was v%" PRIu64 " in slot %u)%s", m->name,
	         v, wsync_latest_version(latest), slot,
	         m->gpu ? ", restored onto its GPUs from its host mirror" : "");
	return 0;
}

static bool adopt_model(struct broker *b, int old_dirfd, uint32_t id,
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
	if (state == WSYNC_MODEL_READY) {
		adopt_ready(b, old_dirfd, m, e);
		/* an entry of a broker before owners: the broker's own */
		if (m->state == WSYNC_MODEL_READY)
			model_set_owner(m, e->owner_uid == WSYNC_OWNER_NONE ? b->uid
			                                                    : (uid_t)e->owner_uid);
	}
	return true;
}

/* ---- the old generation's clients ------------------------------------------- */

/*
 * Tells the clients of the generation just adopted that it will never move
 * again: they map its control segment, and its state word is the one they
 * check at every acquire. A pwrite of the aligned word: a client reads
 * either the old state or SUPERSEDED, and both say "not running" to it.
 */
static void old_ctl_supersede(const struct broker *b, int old_dirfd)
{
	const uint32_t state = WSYNC_BROKER_SUPERSEDED;
	struct stat st;
	int fd = openat(old_dirfd, CTL_SEG_NAME, O_WRONLY | O_NOFOLLOW | O_NONBLOCK |
	                O_CLOEXEC);

	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == b->uid &&
	    st.st_nlink == 1 && ((uint64_t)st.st_size == CTL_BYTES ||
	                         (uint64_t)st.st_size == CTL_BYTES_NO_BOUNDS) &&
	    pwrite(fd, &state, sizeof(state), offsetof(struct wsync_ctl_header, state)) ==
	    (ssize_t)sizeof(state))
		log_debug("told the old generation's clients it was superseded");
	close(fd);
}

/* --fresh: the old generation's weights are not adopted, but its version
 * numbers stay the floors of their names. */
static void adopt_floors_only(struct broker *b, const struct wsync_ctl_header *old)
{
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		const struct wsync_ctl_model *e =
			(const struct wsync_ctl_model *)((const char *)old + CTL_MODELS_OFFSET) + i;
		uint64_t hwm = atomic_load(&e->hwm_version);
		uint64_t v = wsync_latest_version(atomic_load(&e->latest));

		if (atomic_load(&e->state) == WSYNC_MODEL_FREE || !memchr(e->name, '\0',
		    sizeof(e->name)) || !wsync_name_valid(e->name, sizeof(e->name)))
			continue;
		if (b->floors && state_floor_raise(b->floors, e->name, v > hwm ? v : hwm,
		                                     (uid_t)WSYNC_OWNER_NONE, false))
			log_warn("model '%s': its version floor could not be kept", e->name);
	}
}

/* ---- sweeping old directories ------------------------------------------------ */

int adopt_sweep(const struct broker *b, const char *keep)
{
	struct dirent *d;
	struct stat st;
	int removed = 0;
	DIR *dir;

	dir = opendir(WSYNC_SHM_DIR);
	if (!dir) {
		log_warn("cannot list %s: %s", WSYNC_SHM_DIR, strerror(errno));
		return 0;
	}
	while ((d = readdir(dir))) {
		int err;

		if (!wsync_seg_dir_name_ours(d->d_name, b->uid, b->cfg.name) ||
		    (keep && !strcmp(d->d_name, keep)) || !strcmp(d->d_name, b->seg_dir))
			continue;
		if (fstatat(dirfd(dir), d->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (!S_ISDIR(st.st_mode) || st.st_uid != b->uid) {
			log_warn("%s/%s is a %s of uid %u with this instance's prefix: ignored "
			         "(not ours)", WSYNC_SHM_DIR, d->d_name,
			         S_ISDIR(st.st_mode) ? "directory" : "file", (unsigned)st.st_uid);
			continue;
		}
		err = wsync_seg_dir_remove(d->d_name, b->uid);
		if (err)
			log_warn("cannot remove %s/%s: %s", WSYNC_SHM_DIR, d->d_name,
			         strerror(-err));
		else
			removed++;
	}
	closedir(dir);
	return removed;
}

/* ---- startup ----------------------------------------------------------------- */

int adopt_start(struct broker *b, char *err, size_t errlen)
{
	char old_dir[WSYNC_SHM_NAME_MAX];
	int old_dirfd, adopted = 0, removed, e;
	struct wsync_ctl_header *old = old_ctl_read(b, &old_dirfd, old_dir, sizeof(old_dir));
	uint64_t old_gen = old ? old->generation : 0;

	b->generation = old_gen + 1;
	/* Leftovers of interrupted starts go first; the old generation's
	 * directory is still needed. */
	adopt_sweep(b, old_dir[0] ? old_dir : NULL);
	e = wsync_seg_dir_create(b->uid, b->cfg.name, b->seg_dir, sizeof(b->seg_dir));
	if (e < 0) {
		snprintf(err, errlen, "cannot create a private directory in %s: %s",
		         WSYNC_SHM_DIR, strerror(-e));
		b->seg_dir[0] = '\0';
		goto out_free;
	}
	b->seg_dirfd = e;
	e = ctl_create(b);
	if (e) {
		snprintf(err, errlen, "cannot create the control segment in %s/%s: %s",
		         WSYNC_SHM_DIR, b->seg_dir, strerror(-e));
		wsync_seg_dir_remove(b->seg_dir, b->uid);
		close(b->seg_dirfd);
		b->seg_dirfd = -1;
		goto out_free;
	}
	if (old && b->cfg.fresh) {
		adopt_floors_only(b, old);
		log_info("--fresh: the weights of generation %" PRIu64 " are not adopted; its "
		         "version numbers stay the floors", old_gen);
	}
	for (uint32_t i = 0; old && !b->cfg.fresh && i < WSYNC_MAX_MODELS; i++) {
		const struct wsync_ctl_model *em =
			(const struct wsync_ctl_model *)((const char *)old + CTL_MODELS_OFFSET) + i;

		adopted += adopt_model(b, old_dirfd, i, em);
	}
	free(old);
	old = NULL;
	e = ctl_install(b);
	if (e) {
		snprintf(err, errlen, "cannot write %s: %s", b->state_path, strerror(-e));
		for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++)
			if (b->models[i])
				model_destroy(b, b->models[i], true);
		ctl_destroy(b, true);
		if (old_dirfd >= 0)
			close(old_dirfd);
		return e;
	}
	if (old_dirfd >= 0) {
		old_ctl_supersede(b, old_dirfd);
		close(old_dirfd);
	}
	removed = adopt_sweep(b, NULL);
	if (old_gen)
		log_info("generation %" PRIu64 " in %s/%s adopted %d model(s) of generation %"
		         PRIu64 "; %d old director%s removed", b->generation, WSYNC_SHM_DIR,
		         b->seg_dir, adopted, old_gen, removed, removed == 1 ? "y" : "ies");
	else if (removed)
		log_info("removed %d stale director%s of this instance", removed,
		         removed == 1 ? "y" : "ies");
	return adopted;

out_free:
	free(old);
	if (old_dirfd >= 0)
		close(old_dirfd);
	return e;
}
