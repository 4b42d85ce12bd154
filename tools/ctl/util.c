/* tools/ctl/util.c — messages, connecting, option values for wsyncctl. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

void ctl_error(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "wsyncctl: %s\n", msg);
}

void ctl_wsync_error(const char *what, int err)
{
	char detail[768];

	snprintf(detail, sizeof(detail), "%s", wsync_errmsg());
	if (detail[0])
		ctl_error("%s: %s: %s", what, wsync_strerror(err), detail);
	else
		ctl_error("%s: %s", what, wsync_strerror(err));
}

int ctl_usage_error(const char *cmd, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ctl_error("%s", msg);
	fprintf(stderr, "Try 'wsyncctl %s%s--help'.\n", cmd ? cmd : "", cmd ? " " : "");
	return CTL_USAGE;
}

int ctl_common_opt(int opt, struct ctl_opts *o, const char *cmd, const char *usage)
{
	switch (opt) {
	case 'E':
	case 'N':
		o->endpoint = optarg;
		return CTL_GO_ON;
	case 'j':
		o->json = true;
		return CTL_GO_ON;
	case 'h':
		fputs(usage, stdout);
		fputs(CTL_COMMON_USAGE, stdout);
		return CTL_OK;
	default:
		return ctl_usage_error(cmd, "unknown option or missing value");
	}
}

int ctl_connect(const struct ctl_opts *o, wsync_client **out)
{
	char where[256];
	int err = wsync_connect(o->endpoint, "wsyncctl", out);

	if (!err)
		return 0;
	if (o->endpoint)
		snprintf(where, sizeof(where), "%s", o->endpoint);
	else if (wsync_default_endpoint(where, sizeof(where)))
		snprintf(where, sizeof(where), "the default broker");
	if (err == -ENOENT || err == -ECONNREFUSED)
		ctl_error("no broker at %s (is wsyncd running? --endpoint, --name or "
		          "$WSYNC_ENDPOINT choose another): %s", where, wsync_errmsg());
	else
		ctl_wsync_error(where, err);
	return CTL_ERROR;
}

struct snap *ctl_snapshot(wsync_client *c)
{
	struct snap *s = malloc(sizeof(*s));
	char why[256];

	if (!s) {
		ctl_error("out of memory");
		return NULL;
	}
	if (snap_take(c, s, why, sizeof(why))) {
		ctl_error("%s", why);
		free(s);
		return NULL;
	}
	return s;
}

int ctl_print_json(json_t *doc)
{
	int err;

	if (!doc) {
		ctl_error("out of memory building JSON");
		return CTL_ERROR;
	}
	err = json_dumpf(doc, stdout, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(9));
	json_decref(doc);
	putchar('\n');
	if (err || fflush(stdout)) {
		ctl_error("writing to stdout failed");
		return CTL_ERROR;
	}
	return CTL_OK;
}

bool ctl_parse_seconds(const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0) || v > 1e9)
		return false;
	*out = v;
	return true;
}

bool ctl_parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}
