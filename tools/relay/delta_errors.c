/*
 * tools/relay/delta_errors.c — the detail message of the last failure, per thread.
 */
#include <stdarg.h>
#include <stdio.h>

#include "tools/relay/delta_internal.h"

static __thread char errbuf[320];

const char *wsync_delta_errmsg(void)
{
	return errbuf;
}

const char *wsync_delta_version(void)
{
	static char v[64];

	if (!v[0])
		snprintf(v, sizeof v, "1 (zstd %s)", ZSTD_versionString());
	return v;
}

int delta_err(int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errbuf, sizeof errbuf, fmt, ap);
	va_end(ap);
	return rc;
}

/* Called by a worker with d->mu held: the first error of the job wins. */
void delta_task_err(struct wsync_delta *d, int rc, const char *fmt, ...)
{
	va_list ap;

	if (d->job.err)
		return;
	d->job.err = rc;
	va_start(ap, fmt);
	vsnprintf(d->job.errmsg, sizeof d->job.errmsg, fmt, ap);
	va_end(ap);
}
