/* libclient/errors.c — names of return codes, the detail message, the version. */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "shm/errmsg.h"
#include "wsync.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* Wording for the codes the API gives a meaning of its own; the rest are
 * plain errno values and keep the C library's text. */
static const char *wsync_specific(int err)
{
	switch (err) {
	case 0:             return "success";
	case -EINVAL:       return "invalid argument";
	case -ENOENT:       return "not found (no broker socket, no such tensor, or nothing outstanding)";
	case -ECONNREFUSED: return "no broker is listening (is wsyncd running?)";
	case -EPERM:        return "refused by the broker (uid/group check)";
	case -EPROTO:       return "protocol error or layout version mismatch with the broker";
	case -ENOMEM:       return "out of memory";
	case -ENAMETOOLONG: return "endpoint path too long";
	case -EEXIST:       return "model exists with a different layout";
	case -EBUSY:        return "busy: every slot is held by readers, or the model has another publisher";
	case -ENOSPC:       return "over the broker's shared-memory limit or its model table is full";
	case -ENOBUFS:      return "over one of the broker's per-session budgets (pending waits, models awaited)";
	case -EALREADY:     return "a slab is already begun";
	case -ETIMEDOUT:    return "timed out";
	case -ENODATA:      return "nothing published yet";
	case -EAGAIN:       return "too many views held at once";
	case -ENOTCONN:     return "not connected: the broker shut down or went away";
	}
	return NULL;
}

const char *wsync_strerror(int err)
{
	const char *s = wsync_specific(err);

	if (s)
		return s;
	if (err == INT_MIN)
		return "unknown error";
	/* strerrordesc_np returns static text, unlike strerror for unknown codes */
	s = strerrordesc_np(err < 0 ? -err : err);
	return s ? s : "unknown error";
}

const char *wsync_errmsg(void)
{
	return wsync_errmsg_get();
}

const char *wsync_version_string(void)
{
	return STR(WSYNC_VERSION_MAJOR) "." STR(WSYNC_VERSION_MINOR) "." STR(WSYNC_VERSION_PATCH);
}
