/* broker/auth.c — admission by peer credentials. */
#include "auth.h"

#include <errno.h>
#include <stdlib.h>

#include "fault.h"

int auth_peer(int fd, struct ucred *cred)
{
	socklen_t len = sizeof(*cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &len) < 0)
		return -errno;
	return len == sizeof(*cred) ? 0 : -EIO;
}

/* Whether gid is among the peer's supplementary groups. */
static bool peer_in_group(int fd, gid_t gid)
{
	gid_t small[64], *groups = small;
	socklen_t len = sizeof(small);
	bool found = false;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
		if (errno != ERANGE || len == 0)
			return false;
		groups = fault_malloc(len);
		if (!groups)
			return false;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
			free(groups);
			return false;
		}
	}
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		if (groups[i] == gid)
			found = true;
	if (groups != small)
		free(groups);
	return found;
}

bool auth_admit(const struct config *cfg, uid_t self, int fd, const struct ucred *cred)
{
	if (cred->uid == self || cred->uid == 0)
		return true;
	if (!cfg->has_group)
		return false;
	return cred->gid == cfg->gid || peer_in_group(fd, cfg->gid);
}
