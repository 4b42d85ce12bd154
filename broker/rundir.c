/* broker/rundir.c — run directory, instance lock, listening socket. */
#include "rundir.h"

#include "log.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Describes who owns path for a refusal: "uid 1234" or "an unknown owner". */
static void owner_str(const struct stat *st, char *buf, size_t len)
{
	snprintf(buf, len, "uid %u", (unsigned)st->st_uid);
}

/*
 * mkdir path with mode if absent, then insists that it is a real directory
 * (not a symlink) owned by us, and sets its mode and group exactly: nothing
 * another uid made or can write is used. 0 or -errno with a message.
 */
static int dir_own(const char *path, mode_t mode, bool group, gid_t gid,
                   char *err, size_t errlen)
{
	char owner[32];
	struct stat st;

	if (mkdir(path, mode) < 0 && errno != EEXIST) {
		int e = errno;

		snprintf(err, errlen, "cannot create the directory %s: %s", path, strerror(e));
		return -e;
	}
	if (lstat(path, &st) < 0) {
		int e = errno;

		snprintf(err, errlen, "cannot stat %s: %s", path, strerror(e));
		return -e;
	}
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
		owner_str(&st, owner, sizeof(owner));
		snprintf(err, errlen, "%s is a %s owned by %s, not a directory of uid %u: "
		         "another user created it; remove it or pick another run directory "
		         "(XDG_RUNTIME_DIR)", path, S_ISDIR(st.st_mode) ? "directory" :
		         S_ISLNK(st.st_mode) ? "symlink" : "file", owner, (unsigned)geteuid());
		return -EPERM;
	}
	if (group && st.st_gid != gid && chown(path, (uid_t)-1, gid) < 0) {
		int e = errno;

		snprintf(err, errlen, "cannot give %s to the group: %s", path, strerror(e));
		return -e;
	}
	if ((st.st_mode & 07777) != mode && chmod(path, mode) < 0) {
		int e = errno;

		snprintf(err, errlen, "cannot chmod %s: %s", path, strerror(e));
		return -e;
	}
	return 0;
}

/* True if the group (or everyone) may search every directory above path. */
static bool group_can_reach(const char *path, gid_t gid, char *blocker, size_t len)
{
	char dir[PATH_MAX];
	struct stat st;
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	while ((slash = strrchr(dir, '/')) && slash != dir) {
		*slash = '\0';
		if (stat(dir, &st) < 0)
			continue;
		if ((st.st_mode & S_IXOTH) || ((st.st_mode & S_IXGRP) && st.st_gid == gid))
			continue;
		snprintf(blocker, len, "%s (mode %04o)", dir, (unsigned)(st.st_mode & 07777));
		return false;
	}
	return true;
}

int rundir_group_dir(const struct config *cfg, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s/%s.group", cfg->rundir, cfg->name);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static bool rundir_is_0711(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
	       (st.st_mode & 07777) == 0711;
}

int rundir_prepare(const struct config *cfg, char *err, size_t errlen)
{
	char gdir[PATH_MAX], blocker[PATH_MAX + 16];
	size_t glen;
	bool in_gdir;
	int e;

	/* The run dir is shared by all of the user's instances: 0700, and 0711
	 * (search only) when a --group instance keeps its socket in its own
	 * <name>.group/ below it. Never readable or writable by anyone else. */
	if (rundir_group_dir(cfg, gdir, sizeof(gdir))) {
		snprintf(err, errlen, "run directory path too long");
		return -ENAMETOOLONG;
	}
	glen = strlen(gdir);
	in_gdir = cfg->has_group && !strncmp(cfg->socket_path, gdir, glen) &&
	          cfg->socket_path[glen] == '/';
	/* 0711 left by a --group instance that may still run stays: search
	 * only, and taking it away would cut that instance's group off. */
	e = dir_own(cfg->rundir, in_gdir || rundir_is_0711(cfg->rundir) ? 0711 : 0700,
	            false, 0, err, errlen);
	if (e)
		return e;
	if (in_gdir) {
		e = dir_own(gdir, 0750, true, cfg->gid, err, errlen);
		if (e)
			return e;
	}
	if (cfg->has_group && !group_can_reach(cfg->socket_path, cfg->gid, blocker,
	                                       sizeof(blocker)))
		log_warn("--group %s: members of the group cannot reach the socket %s: %s "
		         "is not searchable by them (XDG_RUNTIME_DIR is usually 0700); give "
		         "--group a socket the group can reach, e.g. --socket /tmp/wsync-%s.sock",
		         cfg->group, cfg->socket_path, blocker, cfg->name);
	return 0;
}

int rundir_lock(const char *lock_path, const char *name, char *err, size_t errlen)
{
	char pid[32];
	ssize_t n;
	int fd, e;

	fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		e = errno;
		snprintf(err, errlen, "cannot open the lock file %s: %s", lock_path, strerror(e));
		return -e;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		e = errno;
		if (e == EWOULDBLOCK) {
			n = pread(fd, pid, sizeof(pid) - 1, 0);
			pid[n > 0 ? n : 0] = '\0';
			pid[strcspn(pid, "\n")] = '\0';
			snprintf(err, errlen, "broker '%s' is already running (pid %s)", name,
			         pid[0] ? pid : "unknown");
			close(fd);
			return -EEXIST;
		}
		snprintf(err, errlen, "cannot lock %s: %s", lock_path, strerror(e));
		close(fd);
		return -e;
	}
	n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
		e = errno;
		snprintf(err, errlen, "cannot write the lock file %s: %s", lock_path, strerror(e));
		close(fd);
		return -e;
	}
	return fd;
}

/* 0 if nobody answers at sa (a stale socket file), else -EADDRINUSE with
 * the pid of whoever does. */
static int socket_in_use(const struct sockaddr_un *sa, char *err, size_t errlen,
                         const char *path)
{
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	int fd, e;

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0) {
		e = errno;
		close(fd);
		if (e == ECONNREFUSED || e == ENOENT)
			return 0;
		snprintf(err, errlen, "socket %s may be in use (connect: %s); not replacing it",
		         path, strerror(e));
		return -EADDRINUSE;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0)
		cred.pid = 0;
	close(fd);
	/* A broker just killed may accept a little longer (its io_uring is torn
	 * down after it died): the listener's process must be alive. */
	if (cred.pid > 0 && kill(cred.pid, 0) < 0 && errno == ESRCH)
		return 0;
	snprintf(err, errlen, "socket %s is in use by another broker (pid %d, from "
	         "SO_PEERCRED); stop it or pick another --socket", path, (int)cred.pid);
	return -EADDRINUSE;
}

int rundir_unlink_socket(const char *path, const struct stat *bound)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return -errno;
	if (st.st_dev != bound->st_dev || st.st_ino != bound->st_ino)
		return -ESTALE;          /* someone else's now: leave it */
	return unlink(path) < 0 ? -errno : 0;
}

int rundir_listen(const struct config *cfg, struct stat *bound, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	struct stat st;
	int fd, e;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(cfg->socket_path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path %s is too long", cfg->socket_path);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, cfg->socket_path, strlen(cfg->socket_path));
	/* The instance lock does not cover --socket: another instance may be
	 * listening there. Only a socket nobody answers on is stale. */
	if (lstat(cfg->socket_path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "%s exists and is not a socket (owner uid %u)",
			         cfg->socket_path, (unsigned)st.st_uid);
			return -EEXIST;
		}
		e = socket_in_use(&sa, err, errlen, cfg->socket_path);
		if (e)
			return e;
		if (unlink(cfg->socket_path) < 0) {
			e = errno;
			snprintf(err, errlen, "cannot remove the stale socket %s: %s",
			         cfg->socket_path, strerror(e));
			return -e;
		}
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		e = errno;
		snprintf(err, errlen, "socket: %s", strerror(e));
		return -e;
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		e = errno;
		snprintf(err, errlen, "cannot bind %s: %s", cfg->socket_path, strerror(e));
		goto out_close;
	}
	if (cfg->has_group && chown(cfg->socket_path, (uid_t)-1, cfg->gid) < 0) {
		e = errno;
		snprintf(err, errlen, "cannot give %s to group %s: %s", cfg->socket_path,
		         cfg->group, strerror(e));
		goto out_unlink;
	}
	if (chmod(cfg->socket_path, cfg->has_group ? 0660 : 0600) < 0) {
		e = errno;
		snprintf(err, errlen, "cannot chmod %s: %s", cfg->socket_path, strerror(e));
		goto out_unlink;
	}
	if (listen(fd, SOMAXCONN) < 0) {
		e = errno;
		snprintf(err, errlen, "cannot listen on %s: %s", cfg->socket_path, strerror(e));
		goto out_unlink;
	}
	if (lstat(cfg->socket_path, &st) < 0) {
		e = errno;
		snprintf(err, errlen, "cannot stat %s: %s", cfg->socket_path, strerror(e));
		goto out_unlink;
	}
	*bound = st;
	return fd;

out_unlink:
	unlink(cfg->socket_path);
out_close:
	close(fd);
	return -e;
}

/* "<socket>.wsync" into buf: 0 or -ENAMETOOLONG. */
static int pointer_path(const struct config *cfg, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s.wsync", cfg->socket_path);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Whether the tools find the state file from the socket path alone. */
static bool socket_found_by_tools(const struct config *cfg)
{
	char dflt[PATH_MAX], gdir[PATH_MAX];
	int n;

	n = snprintf(dflt, sizeof(dflt), "%s/%s.sock", cfg->rundir, cfg->name);
	if (n > 0 && (size_t)n < sizeof(dflt) && !strcmp(cfg->socket_path, dflt))
		return true;
	if (rundir_group_dir(cfg, gdir, sizeof(gdir)))
		return false;
	n = snprintf(dflt, sizeof(dflt), "%s/%s.sock", gdir, cfg->name);
	return n > 0 && (size_t)n < sizeof(dflt) && !strcmp(cfg->socket_path, dflt);
}

int rundir_point(const struct config *cfg, const char *state_path, struct stat *made,
                 char *err, size_t errlen)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	ssize_t n;
	int fd, e;

	if (socket_found_by_tools(cfg))
		return 0;
	if (pointer_path(cfg, path, sizeof(path)) ||
	    snprintf(tmp, sizeof(tmp), "%s.new", path) >= (int)sizeof(tmp)) {
		snprintf(err, errlen, "the path %s.wsync is too long", cfg->socket_path);
		return -ENAMETOOLONG;
	}
	/* The socket's directory may be shared (/tmp): O_EXCL and O_NOFOLLOW,
	 * so a name another user planted is refused, never followed. */
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		e = errno;
		snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(e));
		return -e;
	}
	n = dprintf(fd, "%s\n", state_path);
	e = n < 0 || fchmod(fd, 0644) < 0 || fstat(fd, made) < 0 ? errno : 0;
	close(fd);
	if (!e && rename(tmp, path) < 0)
		e = errno;
	if (e) {
		snprintf(err, errlen, "cannot write %s: %s", path, strerror(e));
		unlink(tmp);
		return -e;
	}
	return 1;
}

void rundir_unpoint(const struct config *cfg, const struct stat *made)
{
	char path[PATH_MAX];
	struct stat st;

	if (pointer_path(cfg, path, sizeof(path)) || lstat(path, &st) < 0)
		return;
	if (st.st_dev == made->st_dev && st.st_ino == made->st_ino)
		unlink(path);
}
