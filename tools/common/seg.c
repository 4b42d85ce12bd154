/*
 * tools/common/seg.c — finding and mapping a broker's control segment
 * without a session (see seg.h for what is checked and why).
 */
#include "seg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "endpoint.h"
#include "shm/segment.h"

#define DEFAULT_INSTANCE "default"

static bool uid_trusted(uid_t uid)
{
	const char *env = secure_getenv("WSYNC_BROKER_UID");

	return uid == getuid() || uid == geteuid() || uid == 0 ||
	       (env && *env && wsync_uid_parse(env) == (int64_t)uid);
}

static const char *rundir(char *buf, size_t len)
{
	const char *xdg = secure_getenv("XDG_RUNTIME_DIR");

	if (xdg && xdg[0] == '/')                /* as the broker decides */
		snprintf(buf, len, "%s/wsync", xdg);
	else
		snprintf(buf, len, "/tmp/wsync-%u", (unsigned)getuid());
	return buf;
}

static const char *resolve(const char *endpoint)
{
	if (!endpoint) {
		endpoint = secure_getenv("WSYNC_ENDPOINT");
		if (!endpoint || !*endpoint)
			endpoint = DEFAULT_INSTANCE;
	}
	return endpoint;
}

const char *seg_endpoint_text(const char *endpoint, char *buf, size_t len)
{
	endpoint = resolve(endpoint);
	if (strchr(endpoint, '/'))
		snprintf(buf, len, "%s", endpoint);
	else
		snprintf(buf, len, "broker '%s'", endpoint);
	return buf;
}

/* Reads the state file: a regular file of a trusted uid, written by nobody
 * else. The directory name it holds goes to s->dir, its owner to s->uid. */
static int read_state(struct seg *s, char *why, size_t whylen)
{
	struct stat st;
	ssize_t n;
	int fd = open(s->state_path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0) {
		int e = errno;

		if (e == ENOENT)
			snprintf(why, whylen, "no broker %s: %s does not exist (is wsyncd running?)",
			         s->where, s->state_path);
		else
			snprintf(why, whylen, "cannot open %s: %s", s->state_path, strerror(e));
		return -e;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || !uid_trusted(st.st_uid) ||
	    (st.st_mode & (S_IWGRP | S_IWOTH))) {
		snprintf(why, whylen, "%s is not a private file of a trusted user (owner uid %u, "
		         "mode %04o): not reading it", s->state_path, (unsigned)st.st_uid,
		         (unsigned)(st.st_mode & 07777));
		close(fd);
		return -EPERM;
	}
	n = pread(fd, s->dir, sizeof(s->dir) - 1, 0);
	close(fd);
	if (n < 0) {
		snprintf(why, whylen, "cannot read %s: %s", s->state_path, strerror(errno));
		return -EIO;
	}
	s->dir[n] = '\0';
	s->dir[strcspn(s->dir, "\n")] = '\0';
	s->uid = st.st_uid;
	return 0;
}

/* What "<socket>.wsync" (broker/rundir.h) names, checked as the state file
 * is: a regular file, not followed if a link, of a trusted uid, that nobody
 * else can write, naming an absolute "<dir>/<name>.state" of an instance
 * name, beside a socket of the same uid. 1 when there is no pointer (the
 * caller looks where brokers put state files), 0 with s->state_path,
 * s->instance and *owner set, or -errno with why. */
static int state_from_pointer(struct seg *s, const char *path, uid_t *owner, char *why,
                              size_t whylen)
{
	char ptr[PATH_MAX], line[PATH_MAX];
	const char *base;
	struct stat st, sock;
	size_t len;
	ssize_t n;
	int fd;

	if (snprintf(ptr, sizeof(ptr), "%s.wsync", path) >= (int)sizeof(ptr))
		return 1;
	fd = open(ptr, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;

		if (e == ENOENT || e == ENOTDIR)
			return 1;
		snprintf(why, whylen, "cannot open %s: %s%s", ptr, strerror(e),
		         e == ELOOP ? " (a symlink: not following it)" : "");
		return e == ELOOP ? -EPERM : -e;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || !uid_trusted(st.st_uid) ||
	    (st.st_mode & (S_IWGRP | S_IWOTH))) {
		snprintf(why, whylen, "%s is not a file of a trusted user that only it can "
		         "write (owner uid %u, mode %04o): not reading it", ptr,
		         (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		close(fd);
		return -EPERM;
	}
	n = pread(fd, line, sizeof(line) - 1, 0);
	close(fd);
	if (n < 0) {
		snprintf(why, whylen, "cannot read %s: %s", ptr, strerror(errno));
		return -EIO;
	}
	line[n] = '\0';
	line[strcspn(line, "\n")] = '\0';
	len = strlen(line);
	base = strrchr(line, '/');
	if (line[0] != '/' || !base || len - (size_t)(base + 1 - line) <= 6 ||
	    strcmp(line + len - 6, ".state") || base[1] == '.' ||
	    len - (size_t)(base + 1 - line) - 6 >= sizeof(s->instance)) {
		snprintf(why, whylen, "%s does not name a broker's state file: not reading it",
		         ptr);
		return -EPROTO;
	}
	if (lstat(path, &sock) < 0 || !S_ISSOCK(sock.st_mode) || sock.st_uid != st.st_uid) {
		snprintf(why, whylen, "no broker at %s: %s is left from a broker of uid %u, "
		         "and %s is not its socket now", path, ptr, (unsigned)st.st_uid, path);
		return -ENOENT;
	}
	snprintf(s->instance, sizeof(s->instance), "%.*s", (int)(len - (size_t)(base + 1 - line) - 6),
	         base + 1);
	snprintf(s->state_path, sizeof(s->state_path), "%s", line);
	*owner = st.st_uid;
	return 0;
}

/* The state file for a socket path: what the broker's pointer beside it
 * names; else <stem>.state beside it, one directory up (a --group
 * broker's socket is <rundir>/<name>.group/<name>.sock), or in our run
 * directory (a --socket elsewhere, from a broker of an older build). */
static int state_for_socket(struct seg *s, const char *path, uid_t *owner, char *why,
                            size_t whylen)
{
	char dir[PATH_MAX], up[PATH_MAX], run[PATH_MAX];
	const char *base = strrchr(path, '/') + 1;
	size_t stem = strlen(base);
	const char *cands[3];
	int err;

	err = state_from_pointer(s, path, owner, why, whylen);
	if (err <= 0)
		return err;
	if (stem > 5 && !strcmp(base + stem - 5, ".sock"))
		stem -= 5;
	if (!stem || stem >= sizeof(s->instance)) {
		snprintf(why, whylen, "cannot tell the instance of the socket %s (give --name)",
		         path);
		return -EINVAL;
	}
	memcpy(s->instance, base, stem);
	s->instance[stem] = '\0';
	snprintf(dir, sizeof(dir), "%.*s", (int)(base - 1 - path), path);
	snprintf(up, sizeof(up), "%s", dir);
	if (strrchr(up, '/'))
		*strrchr(up, '/') = '\0';
	cands[0] = dir;
	cands[1] = up;
	cands[2] = rundir(run, sizeof(run));
	for (int i = 0; i < 3; i++) {
		struct stat st;

		if (snprintf(s->state_path, sizeof(s->state_path), "%s/%s.state", cands[i],
		             s->instance) >= (int)sizeof(s->state_path))
			continue;
		if (lstat(s->state_path, &st) == 0)
			return 0;
	}
	snprintf(why, whylen, "no broker at %s: no %s.wsync beside it, no state file %s.state "
	         "beside it or in %s (is wsyncd running? --name NAME names an instance)",
	         path, path, s->instance, run);
	return -ENOENT;
}

static int check_header(const struct seg *s, const struct wsync_ctl_header *h, size_t bytes,
                        char *why, size_t whylen)
{
	uint64_t models_end, sessions_end;

	if (bytes < sizeof(*h) || h->magic != WSYNC_MAGIC_CTL) {
		snprintf(why, whylen, "%s/%s/ctl is not a wsync control segment", WSYNC_SHM_DIR,
		         s->dir);
		return -EPROTO;
	}
	if (h->layout_version != WSYNC_LAYOUT_VERSION || h->header_bytes != sizeof(*h)) {
		snprintf(why, whylen, "the broker's control segment has layout version %u; this "
		         "tool understands %u (tools and wsyncd of one build go together)",
		         h->layout_version, WSYNC_LAYOUT_VERSION);
		return -EPROTO;
	}
	models_end = (uint64_t)h->models_offset +
	             (uint64_t)h->max_models * sizeof(struct wsync_ctl_model);
	sessions_end = (uint64_t)h->sessions_offset +
	               (uint64_t)h->max_sessions * sizeof(struct wsync_ctl_session);
	if (h->total_bytes != bytes || h->max_models > WSYNC_MAX_MODELS ||
	    h->max_sessions > WSYNC_MAX_SESSIONS || models_end > bytes || sessions_end > bytes ||
	    (h->bounds_offset && (uint64_t)h->bounds_offset + (uint64_t)h->max_sessions *
	     sizeof(struct wsync_session_bound) > bytes) ||
	    h->uid != (uint32_t)s->uid || strncmp(h->name, s->instance, sizeof(h->name))) {
		snprintf(why, whylen, "%s/%s/ctl does not describe broker '%s' of uid %u: "
		         "not reading it", WSYNC_SHM_DIR, s->dir, s->instance, (unsigned)s->uid);
		return -EPROTO;
	}
	return 0;
}

int seg_attach(const char *endpoint, struct seg *s, char *why, size_t whylen)
{
	char run[PATH_MAX];
	struct stat st;
	uid_t owner = (uid_t)-1;
	void *map;
	int dfd, fd, err;

	memset(s, 0, sizeof(*s));
	endpoint = resolve(endpoint);
	snprintf(s->where, sizeof(s->where), "%s", endpoint);
	if (strchr(endpoint, '/')) {
		err = state_for_socket(s, endpoint, &owner, why, whylen);
		if (err)
			return err;
	} else {
		if (strlen(endpoint) >= sizeof(s->instance) || endpoint[0] == '.') {
			snprintf(why, whylen, "'%.80s' is not a broker instance name", endpoint);
			return -EINVAL;
		}
		snprintf(s->instance, sizeof(s->instance), "%s", endpoint);
		snprintf(s->where, sizeof(s->where), "'%s'", endpoint);
		snprintf(s->state_path, sizeof(s->state_path), "%s/%s.state",
		         rundir(run, sizeof(run)), endpoint);
	}
	err = read_state(s, why, whylen);
	if (err)
		return err;
	if (owner != (uid_t)-1 && s->uid != owner) {
		snprintf(why, whylen, "%s.wsync (uid %u) names %s of uid %u: not reading it",
		         s->where, (unsigned)owner, s->state_path, (unsigned)s->uid);
		return -EPERM;
	}
	if (!wsync_seg_dir_name_ours(s->dir, s->uid, s->instance)) {
		snprintf(why, whylen, "%s names '%.80s', not a directory of broker '%s' of uid %u: "
		         "not reading it", s->state_path, s->dir, s->instance, (unsigned)s->uid);
		return -EPERM;
	}
	dfd = wsync_seg_dir_open(s->dir, s->uid, why, whylen);
	if (dfd < 0) {
		char detail[256];

		snprintf(detail, sizeof(detail), "%s", why);
		if (dfd == -ENOENT)
			snprintf(why, whylen, "no broker %s: %s names %s/%s, which is gone (the "
			         "broker stopped or was cleaned up)", s->where, s->state_path,
			         WSYNC_SHM_DIR, s->dir);
		else
			snprintf(why, whylen, "%s/%s: %s", WSYNC_SHM_DIR, s->dir, detail);
		return dfd;
	}
	fd = wsync_seg_open_checked(dfd, "ctl", s->uid, why, whylen);
	close(dfd);
	if (fd < 0) {
		if (fd == -ENOENT)
			snprintf(why, whylen, "no broker %s: %s/%s has no control segment",
			         s->where, WSYNC_SHM_DIR, s->dir);
		return fd;
	}
	if (fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(struct wsync_ctl_header)) {
		snprintf(why, whylen, "%s/%s/ctl is too short for a control segment",
		         WSYNC_SHM_DIR, s->dir);
		close(fd);
		return -EPROTO;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED) {
		snprintf(why, whylen, "cannot map %s/%s/ctl: %s", WSYNC_SHM_DIR, s->dir,
		         strerror(errno));
		return -errno;
	}
	err = check_header(s, map, (size_t)st.st_size, why, whylen);
	if (err) {
		munmap(map, (size_t)st.st_size);
		return err;
	}
	s->ctl = map;
	s->bytes = (size_t)st.st_size;
	return 0;
}

void seg_detach(struct seg *s)
{
	if (s->ctl)
		munmap((void *)s->ctl, s->bytes);
	s->ctl = NULL;
}

int seg_current(const struct seg *s)
{
	struct seg now;
	char why[64];

	memset(&now, 0, sizeof(now));
	now.uid = s->uid;
	snprintf(now.state_path, sizeof(now.state_path), "%s", s->state_path);
	if (read_state(&now, why, sizeof(why)))
		return 0;
	return now.uid == s->uid && !strcmp(now.dir, s->dir);
}
