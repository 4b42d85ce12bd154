/*
 * broker/auth.h — who may talk to the broker: its own uid, root, and with
 * --group the members of that group (primary or supplementary), judged from
 * the credentials the kernel recorded at connect (SO_PEERCRED,
 * SO_PEERGROUPS), never from anything the client says.
 */
#ifndef WSYNC_BROKER_AUTH_H
#define WSYNC_BROKER_AUTH_H

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "config.h"

/* The peer's pid/uid/gid: 0 or -errno. */
int  auth_peer(int fd, struct ucred *cred);
bool auth_admit(const struct config *cfg, uid_t self, int fd, const struct ucred *cred);

#endif
