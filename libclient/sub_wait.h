/* libclient/sub_wait.h — waiting for a newer version (sub_wait.c). */
#ifndef WSYNC_SUB_WAIT_H
#define WSYNC_SUB_WAIT_H

#include <stdbool.h>
#include <stdint.h>

#include "sub.h"

/* wsync_sub_wait, for host or (device) device views. */
int wsync_sub_wait_any(struct wsync_sub *s, uint64_t after_version, int64_t timeout_ns,
                       bool device, wsync_view *out);

#endif /* WSYNC_SUB_WAIT_H */
