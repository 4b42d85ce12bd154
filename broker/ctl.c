/* broker/ctl.c — creating, installing and validating the control segment. */
#include "ctl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fault.h"
#include "log.h"
#include "shm/clock.h"
#include "shm/segment.h"

static_assert(CTL_BYTES % WSYNC_PAGE == 0, "control segment is whole pages");

int ctl_name(const struct broker *b, char *buf, size_t len)
{
	return wsync_seg_name_ctl(buf, len, b->uid, b->cfg.name);
}

int ctl_tmp_name(const struct broker *b, char *buf, size_t len)
{
	int n = snprintf(buf, len, "/wsync.%u.%s.ctl.new", (unsigned)b->uid, b->cfg.name);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int ctl_create(struct broker *b)
{
	struct wsync_ctl_header *h;
	char name[WSYNC_SHM_NAME_MAX];
	void *map;
	int fd, ro, err;

	err = ctl_tmp_name(b, name, sizeof(name));
	if (err)
		return err;
	shm_unlink(name);                 /* left over by a start that crashed */
	fd = fault_seg_create(name, CTL_BYTES);
	if (fd < 0)
		return fd;
	ro = wsync_seg_reopen_ro(fd);
	if (ro < 0) {
		err = ro;
		goto out_unlink;
	}
	err = fault_seg_map(fd, CTL_BYTES, 1, 1, &map);
	if (err)
		goto out_close_ro;

	h = map;
	h->magic = WSYNC_MAGIC_CTL;
	h->layout_version = WSYNC_LAYOUT_VERSION;
	h->header_bytes = sizeof(*h);
	h->total_bytes = CTL_BYTES;
	h->generation = b->generation;
	atomic_store(&h->state, WSYNC_BROKER_STARTING);
	h->broker_pid = (uint32_t)b->pid;
	h->uid = (uint32_t)b->uid;
	h->max_slots = b->cfg.max_slots;
	h->max_models = WSYNC_MAX_MODELS;
	h->max_sessions = WSYNC_MAX_SESSIONS;
	h->models_offset = CTL_MODELS_OFFSET;
	h->sessions_offset = CTL_SESSIONS_OFFSET;
	h->started_ns = b->started_ns;
	atomic_store(&h->heartbeat_ns, wsync_real_ns());
	h->shm_limit = b->cfg.shm_limit;
	snprintf(h->name, sizeof(h->name), "%s", b->cfg.name);

	b->ctl = h;
	b->ctl_fd = fd;
	b->ctl_ro_fd = ro;
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++)
		ctl_model(b, i)->id = i;
	return 0;

out_close_ro:
	close(ro);
out_unlink:
	shm_unlink(name);
	close(fd);
	return err;
}

int ctl_install(struct broker *b)
{
	char tmp[WSYNC_SHM_NAME_MAX], name[WSYNC_SHM_NAME_MAX];
	char from[WSYNC_SHM_NAME_MAX + 16], to[WSYNC_SHM_NAME_MAX + 16];

	if (ctl_tmp_name(b, tmp, sizeof(tmp)) || ctl_name(b, name, sizeof(name)))
		return -ENAMETOOLONG;
	snprintf(from, sizeof(from), "%s%s", WSYNC_SHM_DIR, tmp);
	snprintf(to, sizeof(to), "%s%s", WSYNC_SHM_DIR, name);
	/* rename(2) replaces the old segment atomically; clients of the old
	 * generation keep their mapping of it. */
	if (rename(from, to) < 0)
		return -errno;
	return 0;
}

void ctl_destroy(struct broker *b, bool unlink_it)
{
	char name[WSYNC_SHM_NAME_MAX];

	if (b->ctl) {
		munmap(b->ctl, CTL_BYTES);
		b->ctl = NULL;
	}
	if (b->ctl_ro_fd >= 0)
		close(b->ctl_ro_fd);
	if (b->ctl_fd >= 0)
		close(b->ctl_fd);
	b->ctl_fd = b->ctl_ro_fd = -1;
	if (unlink_it && !ctl_name(b, name, sizeof(name)))
		shm_unlink(name);
}

int ctl_validate(const void *buf, size_t len, uid_t uid, char *why, size_t whylen)
{
	const struct wsync_ctl_header *h = buf;

	if (len < sizeof(*h)) {
		snprintf(why, whylen, "it has %zu bytes, less than its header", len);
		return -EINVAL;
	}
	if (h->magic != WSYNC_MAGIC_CTL) {
		snprintf(why, whylen, "bad magic 0x%016llx", (unsigned long long)h->magic);
		return -EINVAL;
	}
	if (h->layout_version != WSYNC_LAYOUT_VERSION) {
		snprintf(why, whylen, "layout version %u, this broker has %u",
		         h->layout_version, WSYNC_LAYOUT_VERSION);
		return -EINVAL;
	}
	if (h->uid != (uint32_t)uid) {
		snprintf(why, whylen, "it belongs to uid %u", h->uid);
		return -EINVAL;
	}
	if (h->header_bytes != sizeof(*h) || h->total_bytes != CTL_BYTES ||
	    len != CTL_BYTES || h->max_models != WSYNC_MAX_MODELS ||
	    h->max_sessions != WSYNC_MAX_SESSIONS ||
	    h->models_offset != CTL_MODELS_OFFSET ||
	    h->sessions_offset != CTL_SESSIONS_OFFSET) {
		snprintf(why, whylen, "its sizes or offsets differ from this broker's");
		return -EINVAL;
	}
	if (h->generation == 0 || h->generation >= UINT64_MAX / 2) {
		snprintf(why, whylen, "generation %llu out of range",
		         (unsigned long long)h->generation);
		return -EINVAL;
	}
	return 0;
}
