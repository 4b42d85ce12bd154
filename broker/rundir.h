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
#include <sys/stat.h>

#include "config.h"

/*
 * Creates the run dir, or checks that an existing one is a directory of
 * ours (not a symlink; a foreign one is refused, naming its owner). It is
 * shared by every instance of the user, so it is never loosened: 0700, or
 * 0711 when a --group instance keeps its socket in <rundir>/<name>.group/
 * (0750, owned by the group); a 0711 one is left so for other instances.
 * Warns when the group cannot reach the socket.
 * 0 or -errno with a message in err.
 */
int rundir_prepare(const struct config *cfg, char *err, size_t errlen);
/* "<rundir>/<name>.group": 0 or -ENAMETOOLONG. */
int rundir_group_dir(const struct config *cfg, char *buf, size_t len);
/* Takes the instance lock and writes our pid into it: an fd or -errno
 * (-EEXIST: another broker of this name runs, err names its pid). */
int rundir_lock(const char *lock_path, const char *name, char *err, size_t errlen);
/* Binds and listens on the socket (0600, or 0660 for the group), replacing
 * a socket file only if nobody answers on it (-EADDRINUSE names the pid of
 * the broker that does). *bound gets the inode bound. An fd or -errno. */
int rundir_listen(const struct config *cfg, struct stat *bound, char *err, size_t errlen);
/* Unlinks path only if it is still the inode we bound: 0 or -errno
 * (-ESTALE: another broker's socket is there now). */
int rundir_unlink_socket(const char *path, const struct stat *bound);

/*
 * A socket the tools would not find the state file for (anywhere but
 * <rundir>/<name>.sock or <rundir>/<name>.group/<name>.sock) gets a pointer
 * beside it, "<socket>.wsync": one line, the state file's absolute path, so
 * that the endpoint a client uses is enough for wsyncctl and wsync-top,
 * which take no session. A regular file of ours, 0644, written under a
 * temporary name and renamed; tools trust it only as they trust the state
 * file (tools/common/seg.c). 1 written (*made gets its inode), 0 not
 * needed, or -errno with a message (the broker runs on without it).
 */
int rundir_point(const struct config *cfg, const char *state_path, struct stat *made,
                 char *err, size_t errlen);
/* Removes the pointer only if it is still the inode we made. */
void rundir_unpoint(const struct config *cfg, const struct stat *made);

#endif
