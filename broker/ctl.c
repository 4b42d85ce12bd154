/* broker/ctl.c — creating, installing and validating the control segment. */
#include "ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fault.h"
#include "log.h"
#include "shm/clock.h"
#include "shm/segment.h"
#include "slots.h"

static_assert(CTL_BYTES % WSYNC_PAGE == 0, "control segment is whole pages");

/*
 * The broker holds a robust, process-shared mutex in the header for its
 * whole life: when it dies the kernel walks its robust list and marks the
 * mutex's word FUTEX_OWNER_DIED, before the process's sockets close, so a
 * client learns of the death with a load (layout.h, broker_alive). Not
 * fatal if it cannot be held: clients then poll their socket as before.
 * The mapping stays until ctl_destroy, which unlocks first, so the kernel
 * never writes through a stale list entry.
 */
static void ctl_hold_alive(struct broker *b, struct wsync_ctl_header *h)
{
	pthread_mutex_t *mu = (pthread_mutex_t *)(void *)h->broker_alive;
	pthread_mutexattr_t a;
	int err;

	static_assert(sizeof(pthread_mutex_t) <= sizeof(h->broker_alive),
	              "a pthread mutex fits broker_alive");
	static_assert(WSYNC_BROKER_DIED == FUTEX_OWNER_DIED, "the kernel's owner-died bit");
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	err = pthread_mutex_init(mu, &a);
	pthread_mutexattr_destroy(&a);
	if (!err)
		err = pthread_mutex_lock(mu);
	if (err) {
		log_warn("control segment: cannot hold the liveness mutex (%s); clients "
		         "poll their sockets instead", strerror(err));
		memset(h->broker_alive, 0, sizeof(h->broker_alive));
		return;
	}
	b->ctl_alive_held = true;
}

int ctl_create(struct broker *b)
{
	struct wsync_ctl_header *h;
	void *map;
	int fd, ro, err;

	fd = fault_seg_create_at(b->seg_dirfd, CTL_SEG_NAME, CTL_BYTES);
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
	h->bounds_offset = CTL_BOUNDS_OFFSET;
	h->started_ns = b->started_ns;
	atomic_store(&h->heartbeat_ns, wsync_real_ns());
	atomic_store(&h->tick_ns, wsync_clock_ns(CLOCK_MONOTONIC_COARSE));
	h->shm_limit = b->cfg.shm_limit;
	snprintf(h->name, sizeof(h->name), "%s", b->cfg.name);
	if (pin_barrier_works())
		atomic_store(&h->features, WSYNC_CTL_PIN_BARRIER);

	ctl_hold_alive(b, h);

	b->ctl = h;
	b->ctl_fd = fd;
	b->ctl_ro_fd = ro;
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++)
		ctl_model(b, i)->id = i;
	return 0;

out_close_ro:
	close(ro);
out_unlink:
	unlinkat(b->seg_dirfd, CTL_SEG_NAME, 0);
	close(fd);
	return err;
}

int ctl_install(struct broker *b)
{
	char tmp[PATH_MAX + 8];
	ssize_t n;
	int fd, err = 0;

	/* The state file names the generation's directory; rename(2) replaces
	 * the previous one atomically, so a crash leaves either name valid. */
	if (snprintf(tmp, sizeof(tmp), "%s.new", b->state_path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	n = dprintf(fd, "%s\n", b->seg_dir);
	if (n < 0 || fsync(fd) < 0)
		err = -errno;
	close(fd);
	if (!err && rename(tmp, b->state_path) < 0)
		err = -errno;
	if (err)
		unlink(tmp);
	return err;
}

int ctl_read_state(const char *path, uid_t uid, char *dir, size_t len, char *why,
                   size_t whylen)
{
	struct stat st;
	ssize_t n;
	int fd, err;

	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		snprintf(why, whylen, "cannot open %s: %s", path, strerror(-err));
		return err;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != uid ||
	    (st.st_mode & (S_IWGRP | S_IWOTH))) {
		snprintf(why, whylen, "%s is not a private file of uid %u (owner uid %u, "
		         "mode %04o)", path, (unsigned)uid, (unsigned)st.st_uid,
		         (unsigned)(st.st_mode & 07777));
		close(fd);
		return -EPERM;
	}
	n = pread(fd, dir, len - 1, 0);
	err = n < 0 ? -errno : 0;
	close(fd);
	if (err) {
		snprintf(why, whylen, "cannot read %s: %s", path, strerror(-err));
		return err;
	}
	dir[n] = '\0';
	dir[strcspn(dir, "\n")] = '\0';
	return 0;
}

void ctl_destroy(struct broker *b, bool unlink_it)
{
	if (b->ctl) {
		if (b->ctl_alive_held)
			pthread_mutex_unlock((pthread_mutex_t *)(void *)b->ctl->broker_alive);
		b->ctl_alive_held = false;
		munmap(b->ctl, CTL_BYTES);
		b->ctl = NULL;
	}
	if (b->ctl_ro_fd >= 0)
		close(b->ctl_ro_fd);
	if (b->ctl_fd >= 0)
		close(b->ctl_fd);
	b->ctl_fd = b->ctl_ro_fd = -1;
	if (b->seg_dirfd >= 0)
		close(b->seg_dirfd);
	b->seg_dirfd = -1;
	if (unlink_it && b->seg_dir[0]) {
		char named[WSYNC_SHM_NAME_MAX], why[160];

		/* The state file goes only if it names this generation. */
		if (!ctl_read_state(b->state_path, b->uid, named, sizeof(named), why,
		                    sizeof(why)) && !strcmp(named, b->seg_dir))
			unlink(b->state_path);
		wsync_seg_dir_remove(b->seg_dir, b->uid);
	}
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
	if (h->header_bytes != sizeof(*h) || h->total_bytes != len ||
	    (len != CTL_BYTES && len != CTL_BYTES_NO_BOUNDS) ||
	    h->bounds_offset != (len == CTL_BYTES ? CTL_BOUNDS_OFFSET : 0) ||
	    h->max_models != WSYNC_MAX_MODELS ||
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
