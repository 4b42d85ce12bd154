/* shm/errmsg.c — one detail message per thread, set where a failure is found. */
#include "errmsg.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char errmsg_buf[WSYNC_ERRMSG_LEN];

int wsync_fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errmsg_buf, sizeof(errmsg_buf), fmt, ap);
	va_end(ap);
	return err;
}

void wsync_errmsg_clear(void)
{
	errmsg_buf[0] = '\0';
}

const char *wsync_errmsg_get(void)
{
	return errmsg_buf;
}

int wsync_why(char *why, size_t whylen, int err, const char *fmt, ...)
{
	va_list ap;

	if (why && whylen) {
		va_start(ap, fmt);
		vsnprintf(why, whylen, fmt, ap);
		va_end(ap);
	}
	return err;
}
