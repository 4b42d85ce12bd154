/* libclient/pub_commit.h — committing the begun slab (pub_commit.c). */
#ifndef WSYNC_PUB_COMMIT_H
#define WSYNC_PUB_COMMIT_H

#include <stdint.h>

#include "pub.h"

/* -ENOTCONN if the broker shut down (ctl header STOPPED) or the client is dead,
 * -EPROTO if the broker cut this publisher off:
 * nothing may be published into a generation that no longer has a broker. */
int wsync_pub_gone(struct wsync_pub *p);
/* Collects the outstanding async commit's acknowledgement by deadline_ns
 * (-1: the reply limit); its version into *version (may be NULL). An
 * -ETIMEDOUT on deadline_ns leaves it outstanding. Caller holds the lock. */
int wsync_pub_ack_collect(struct wsync_pub *p, int64_t deadline_ns, uint64_t *version);
/* Commit of any slab: wsync_pub_commit refuses device models, whose slabs
 * gpu_pub.c fans out first. */
int wsync_pub_commit_slab(struct wsync_pub *p, uint64_t step, uint64_t *version_out);

#endif /* WSYNC_PUB_COMMIT_H */
