/*
 * broker/rundir.h — the run directory, the instance lock and the socket.
 *
 * <rundir>/<name>.lock is flock()ed for the broker's whole life: it tells a
 * live broker from a stale socket file, so a second instance of the same
 * name refuses to start and a stale socket can be removed safely.
 */
#ifndef WSYNC_BROKER_RUNDIR_H
#define WSYNC_BROKER_RUNDIR_H

#include <stddef.h>

#include "config.h"

/* Creates the run dir (0700, or 0750 owned by the group), or checks that an
 * existing one is ours. 0 or -errno with a message in err. */
int rundir_prepare(const struct config *cfg, char *err, size_t errlen);
/* Takes the instance lock and writes our pid into it: an fd or -errno
 * (-EEXIST: another broker of this name runs, err names its pid). */
int rundir_lock(const char *lock_path, const char *name, char *err, size_t errlen);
/* Binds and listens on the socket (0600, or 0660 for the group),
 * replacing a stale socket file: an fd or -errno. */
int rundir_listen(const struct config *cfg, char *err, size_t errlen);

#endif
