/* libclient/pub_grant.h — beginning a slab (pub_grant.c). */
#ifndef WSYNC_PUB_GRANT_H
#define WSYNC_PUB_GRANT_H

#include <stdint.h>

#include "pub.h"

/* Begin of any slab: wsync_pub_begin refuses device models, whose slabs
 * gpu_pub.c begins on a GPU. */
int wsync_pub_begin_slab(struct wsync_pub *p, int64_t timeout_ns, wsync_slab *out);

#endif /* WSYNC_PUB_GRANT_H */
