/* libclient/endpoint.h — which socket a client connects to (endpoint.c). */
#ifndef WSYNC_ENDPOINT_H
#define WSYNC_ENDPOINT_H

#include <stddef.h>
#include <stdint.h>

/* Resolves endpoint (see wsync_connect) to a socket path. */
int wsync_endpoint_resolve(const char *endpoint, char *buf, size_t len);
/* Checks where a socket lives before connecting: its directory must be a
 * real directory owned by a trusted uid (ours, root, $WSYNC_BROKER_UID)
 * and writable by nobody else, or sticky like /tmp with the socket owned
 * by a trusted uid. 0 or -EPERM with a reason. */
int wsync_endpoint_check(const char *path);
/* A uid from a number or a user name: the uid, or -errno. */
int64_t wsync_uid_parse(const char *s);

#endif /* WSYNC_ENDPOINT_H */
