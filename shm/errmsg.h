/* shm/errmsg.h — the thread-local detail message behind wsync_errmsg(). */
#ifndef WSYNC_SHM_ERRMSG_H
#define WSYNC_SHM_ERRMSG_H

#include <stddef.h>

#define WSYNC_ERRMSG_LEN 512

/* Sets the calling thread's detail message; returns err, for
 * `return wsync_fail(-EINVAL, "model '%s': ...", name);` */
int wsync_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void wsync_errmsg_clear(void);
/* Formats a reason into why (when why is not NULL and whylen > 0) and
 * returns err: for checks that report into a caller's buffer rather than
 * the thread's message (shared by the broker and the library). */
int wsync_why(char *why, size_t whylen, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
const char *wsync_errmsg_get(void);

#endif
