/*
 * libclient/client_internal.h — the library's internal headers in one, for
 * the tools that look inside a client (wsync-top, wsyncctl) and white-box
 * tests. Files of the library include the header of each file they use
 * (client.h, conn.h, pub.h, sub.h, ...), never this one: the include
 * graph among them is what tests/layering.sh checks.
 */
#ifndef WSYNC_CLIENT_INTERNAL_H
#define WSYNC_CLIENT_INTERNAL_H

#include "client.h"
#include "conn.h"
#include "pub.h"
#include "sub.h"

#endif /* WSYNC_CLIENT_INTERNAL_H */
