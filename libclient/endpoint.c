/*
 * libclient/endpoint.c — which socket a client connects to.
 *
 * NULL means $WSYNC_ENDPOINT if set and non-empty, else the default instance;
 * a string with a '/' is a socket path; anything else is an instance name,
 * whose socket is <rundir>/<name>.sock with rundir $XDG_RUNTIME_DIR/wsync,
 * or /tmp/wsync-<uid> without XDG_RUNTIME_DIR (the broker uses the same rule).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_internal.h"
#include "shm/errmsg.h"

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
	const char *xdg = getenv("XDG_RUNTIME_DIR");

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
		endpoint = getenv("WSYNC_ENDPOINT");
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
