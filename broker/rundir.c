/* broker/rundir.c — run directory, instance lock, listening socket. */
#include "rundir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int rundir_prepare(const struct config *cfg, char *err, size_t errlen)
{
	mode_t mode = cfg->has_group ? 0750 : 0700;
	struct stat st;

	if (mkdir(cfg->rundir, mode) < 0 && errno != EEXIST) {
		int e = errno;

		snprintf(err, errlen, "cannot create the run directory %s: %s",
		         cfg->rundir, strerror(e));
		return -e;
	}
	/* /tmp is shared: never trust a directory someone else made for us. */
	if (lstat(cfg->rundir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
		snprintf(err, errlen, "the run directory %s is not a directory owned by "
		         "uid %u", cfg->rundir, (unsigned)geteuid());
		return -EPERM;
	}
	if (cfg->has_group && chown(cfg->rundir, (uid_t)-1, cfg->gid) < 0) {
		int e = errno;

		snprintf(err, errlen, "cannot give %s to group %s: %s", cfg->rundir,
		         cfg->group, strerror(e));
		return -e;
	}
	if ((st.st_mode & 07777) != mode && chmod(cfg->rundir, mode) < 0) {
		int e = errno;

		snprintf(err, errlen, "cannot chmod %s: %s", cfg->rundir, strerror(e));
		return -e;
	}
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

int rundir_listen(const struct config *cfg, char *err, size_t errlen)
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
	/* We hold the instance lock: a socket file here is a dead broker's. */
	if (lstat(cfg->socket_path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "%s exists and is not a socket", cfg->socket_path);
			return -EEXIST;
		}
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
	return fd;

out_unlink:
	unlink(cfg->socket_path);
out_close:
	close(fd);
	return -e;
}
