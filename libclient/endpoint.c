/*
 * libclient/endpoint.c — which socket a client connects to.
 *
 * NULL means $WSYNC_ENDPOINT if set and non-empty, else the default instance;
 * a string with a '/' is a socket path; anything else is an instance name,
 * whose socket is <rundir>/<name>.sock with rundir $XDG_RUNTIME_DIR/wsync,
 * or /tmp/wsync-<uid> without XDG_RUNTIME_DIR (the broker uses the same rule).
 */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "endpoint.h"
#include "shm/errmsg.h"
#include "shm/proto.h"

#define WSYNC_DEFAULT_INSTANCE "default"

static int put_path(size_t len, int n)
{
	if (n < 0)
		return wsync_fail(-EINVAL, "cannot format the endpoint path");
	if ((size_t)n >= len)
		return wsync_fail(-ENAMETOOLONG, "endpoint path of %d bytes does not fit "
		                  "in a buffer of %zu", n, len);
	return 0;
}

static int instance_path(const char *name, char *buf, size_t len)
{
	const char *xdg = secure_getenv("XDG_RUNTIME_DIR");

	if (!wsync_name_valid(name, WSYNC_INSTANCE_MAX))
		return wsync_fail(-EINVAL, "broker instance name '%.80s' is invalid "
		                  "(1..%d of [A-Za-z0-9._:-], not starting with '.')",
		                  name, WSYNC_INSTANCE_MAX - 1);
	if (xdg && *xdg)
		return put_path(len, snprintf(buf, len, "%s/wsync/%s.sock", xdg, name));
	return put_path(len, snprintf(buf, len, "/tmp/wsync-%u/%s.sock",
	                                   (unsigned)getuid(), name));
}

int wsync_endpoint_resolve(const char *endpoint, char *buf, size_t len)
{
	if (!buf || len == 0)
		return wsync_fail(-EINVAL, "endpoint buffer is NULL or empty");
	if (!endpoint) {
		endpoint = secure_getenv("WSYNC_ENDPOINT");
		if (!endpoint || !*endpoint)
			endpoint = WSYNC_DEFAULT_INSTANCE;
	}
	if (!*endpoint)
		return wsync_fail(-EINVAL, "endpoint is an empty string");
	if (strchr(endpoint, '/'))
		return put_path(len, snprintf(buf, len, "%s", endpoint));
	return instance_path(endpoint, buf, len);
}

int wsync_default_endpoint(char *buf, size_t len)
{
	return wsync_endpoint_resolve(NULL, buf, len);
}

int64_t wsync_uid_parse(const char *s)
{
	struct passwd pw, *res = NULL;
	char buf[1024], *end;
	unsigned long long v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (!errno && !*end && s[0] != '-')
		return v <= (uid_t)-2 ? (int64_t)v : -EINVAL;
	if (getpwnam_r(s, &pw, buf, sizeof(buf), &res) != 0 || !res)
		return -ENOENT;
	return (int64_t)res->pw_uid;
}

static bool uid_trusted(uid_t uid)
{
	const char *env = secure_getenv("WSYNC_BROKER_UID");

	return uid == getuid() || uid == geteuid() || uid == 0 ||
	       (env && wsync_uid_parse(env) == (int64_t)uid);
}

int wsync_endpoint_check(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	struct stat st;
	size_t n;

	if (!slash)
		return 0;
	n = slash == path ? 1 : (size_t)(slash - path);
	if (n >= sizeof(dir))
		return wsync_fail(-ENAMETOOLONG, "socket path '%s' is too long", path);
	memcpy(dir, path, n);
	dir[n] = '\0';
	if (lstat(dir, &st) < 0)
		return 0;                        /* connect says what is missing */
	if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode))
		return wsync_fail(-EPERM, "%s, the directory of the broker's socket, is %s; "
		                  "refusing to connect", dir,
		                  S_ISLNK(st.st_mode) ? "a symbolic link" : "not a directory");
	if ((st.st_mode & S_ISVTX) && (st.st_mode & S_IWOTH)) {
		/* like /tmp: others may create names here but not replace ours,
		 * so the socket itself must be a trusted user's */
		if (lstat(path, &st) < 0)
			return 0;
		if (!uid_trusted(st.st_uid))
			return wsync_fail(-EPERM, "the socket %s belongs to uid %u, not to this "
			                  "user or root (set WSYNC_BROKER_UID to trust it)", path,
			                  (unsigned)st.st_uid);
		return 0;
	}
	if (!uid_trusted(st.st_uid) || (st.st_mode & (S_IWGRP | S_IWOTH)))
		return wsync_fail(-EPERM, "%s, the directory of the broker's socket, %s; "
		                  "another user could have put a broker there: refusing to "
		                  "connect (set WSYNC_BROKER_UID to trust its owner)", dir,
		                  !uid_trusted(st.st_uid) ? "belongs to another user"
		                                          : "is writable by others");
	return 0;
}
