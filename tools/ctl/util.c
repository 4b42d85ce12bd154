/* tools/ctl/util.c — options, connecting and snapshots for wsyncctl. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "shm/proto.h"
#include "tools/common/health.h"

int64_t ctl_broker_timeout(const struct ctl_opts *o)
{
	return o->timeout_ns >= 0 ? o->timeout_ns : CTL_BROKER_TIMEOUT_NS;
}

int ctl_common_opt(int opt, struct ctl_opts *o, const char *cmd, const char *usage,
                   char **argv)
{
	double secs;

	switch (opt) {
	case 'E':
	case 'N':
		o->endpoint = optarg;
		return CTL_GO_ON;
	case 'j':
		o->json = true;
		report_set_json(true);
		return CTL_GO_ON;
	case 'T':
		if (!ctl_parse_seconds(optarg, &secs))
			return report_usage(cmd, "--timeout wants seconds, not '%s'", optarg);
		o->timeout_ns = (int64_t)(secs * 1e9);
		return CTL_GO_ON;
	case 'h':
		fputs(usage, stdout);
		fputs(CTL_COMMON_USAGE, stdout);
		return EXIT_DONE;
	case 'V':
		return report_version(wsync_version_string());
	default:
		return report_bad_option(cmd, opt, argv);
	}
}

int ctl_check_model(const char *cmd, const char *name)
{
	if (wsync_name_valid(name, WSYNC_NAME_MAX))
		return CTL_GO_ON;
	return report_usage(cmd, "model name '%.128s' is invalid (1..%d of [A-Za-z0-9._:/-], "
	                    "not starting with '.' or '/')", name, WSYNC_NAME_MAX - 1);
}

int ctl_snapshot(const struct ctl_opts *o, struct seg *seg, struct snap **out)
{
	char why[512];
	int err = seg_attach(o->endpoint, seg, why, sizeof(why));

	*out = NULL;
	if (err)
		return report_fail(EXIT_FAILED, err == -ENOENT ? "no_broker" :
		                   report_reason_of(err), "%s", why);
	*out = malloc(sizeof(**out));
	if (!*out) {
		seg_detach(seg);
		return report_fail(EXIT_FAILED, "error", "out of memory");
	}
	snap_take(seg, *out);
	return EXIT_DONE;
}

/* The library bounds every round trip that has no timeout of its own by
 * $WSYNC_REPLY_TIMEOUT_MS, read at connect. */
static void bound_round_trips(const struct ctl_opts *o)
{
	char ms[32];
	int64_t t = ctl_broker_timeout(o) / 1000000;

	/* a floor, so that a poll (--timeout 0) still gets its round trips */
	snprintf(ms, sizeof(ms), "%lld", (long long)(t > 100 ? t : 100));
	setenv("WSYNC_REPLY_TIMEOUT_MS", ms, 1);
}

int ctl_connect(const struct ctl_opts *o, wsync_client **out)
{
	char why[512], text[768], where[300];
	struct health h;
	struct seg seg;
	int attach_err, err;

	/* A broker that does not beat would leave connect waiting: ask its
	 * segment first, and say which it is (stopped, dead, gone). */
	attach_err = seg_attach(o->endpoint, &seg, why, sizeof(why));
	if (!attach_err) {
		health_wait(&seg, ctl_broker_timeout(o), &h);
		seg_detach(&seg);
		if (h.state != HEALTH_OK)
			return report_fail(EXIT_FAILED, health_reason(h.state), "%s", h.text);
	}
	bound_round_trips(o);
	err = wsync_connect(o->endpoint, "wsyncctl", out);
	if (!err)
		return EXIT_DONE;
	if (attach_err == -ENOENT)                   /* no state file and no answer */
		return report_fail(EXIT_FAILED, "no_broker", "%s", why);
	seg_endpoint_text(o->endpoint, where, sizeof(where));
	report_wsync_text(err, text, sizeof(text));
	if (err == -ENOENT || err == -ECONNREFUSED)
		return report_fail(EXIT_FAILED, "no_broker", "no broker at %s (is wsyncd "
		                   "running? --name or --endpoint choose another): %s", where, text);
	return report_fail(EXIT_FAILED, report_reason_of(err), "%s: %s", where, text);
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
