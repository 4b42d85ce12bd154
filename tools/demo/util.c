/* tools/demo/util.c — messages, clocks, option values, stop signals. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"

char g_role[32];
volatile sig_atomic_t g_stop;

void say_error(const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "wsync-demo: %s%s\n", g_role, msg);
}

/* "wsync-demo: <role><what>: <strerror>: <detail>" for a wsync call that
 * returned err. The detail is copied first: it lives until the next call. */
void say_wsync_error(const char *what, int err)
{
	char detail[768];
	const char *msg = wsync_errmsg();

	snprintf(detail, sizeof detail, "%s", msg ? msg : "");
	if (detail[0])
		say_error("%s: %s: %s", what, wsync_strerror(err), detail);
	else
		say_error("%s: %s", what, wsync_strerror(err));
}

void say_sys_error(const char *what)
{
	say_error("%s: %s", what, strerror(errno));
}

int say_bad_option(char **argv)
{
	say_error("unknown option or missing value: '%s'", argv[optind - 1]);
	return 1;
}

int say_usage_error(const char *unexpected, const char *command)
{
	if (unexpected)
		say_error("unexpected argument '%s'", unexpected);
	fprintf(stderr, "Try '%s --help'.\n", command);
	return 2;
}

int64_t now_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

void sleep_until(int64_t mono_ns)
{
	struct timespec ts = { .tv_sec = mono_ns / NS_PER_S, .tv_nsec = mono_ns % NS_PER_S };

	/* EINTR is fine: the caller checks g_stop. */
	clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

double mib_of(uint64_t bytes)
{
	return (double)bytes / (1024.0 * 1024.0);
}

int parse_count(const char *opt, const char *s, uint64_t lo, uint64_t hi,
                uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) {
		say_error("--%s: expected a number in %" PRIu64 "..%" PRIu64 ", got '%s'",
		          opt, lo, hi, s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int parse_seconds(const char *opt, const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0) || v > 3600) {
		say_error("--%s: expected seconds in 0..3600, got '%s'", opt, s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static double g_timeout_s = DEMO_TIMEOUT_S;

void bound_round_trips(double s)
{
	char ms[32];
	const char *env = getenv("WSYNC_REPLY_TIMEOUT_MS");

	if (s < 0 && env && *env) {
		g_timeout_s = strtod(env, NULL) / 1e3;
		return;
	}
	if (s < 0)
		s = DEMO_TIMEOUT_S;
	g_timeout_s = s;
	/* a floor, so that --timeout 0 still lets a healthy broker answer */
	snprintf(ms, sizeof ms, "%lld", (long long)(s * 1e3 > 100 ? s * 1e3 : 100));
	setenv("WSYNC_REPLY_TIMEOUT_MS", ms, 1);
}

void say_connect_error(const char *endpoint, int err)
{
	if (err == -ETIMEDOUT) {
		say_error("connect to the broker: no answer from %s within %g s: it is not "
		          "responding (stopped, e.g. by SIGSTOP, or overloaded; "
		          "'wsyncctl ping' says which); --timeout S waits longer",
		          endpoint && *endpoint ? endpoint :
		          getenv("WSYNC_ENDPOINT") && *getenv("WSYNC_ENDPOINT") ?
		          getenv("WSYNC_ENDPOINT") : "'default'", g_timeout_s);
		return;
	}
	say_wsync_error("connect to the broker", err);
}

static void on_stop_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

/* No SA_RESTART: a sleep in progress returns early so the loop sees g_stop. */
void catch_stop_signals(void)
{
	struct sigaction sa = { .sa_handler = on_stop_signal };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
}
