/*
 * tools/common/report.c — the output contract of the tools (see report.h).
 */
#include "report.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "wsync.h"

static const char *tool = "wsync";
static bool json_mode;
static int usage_exit = EXIT_USAGE;

void report_set_usage_exit(int code)
{
	usage_exit = code;
}

void report_init(const char *name)
{
	tool = name;
}

void report_set_json(bool json)
{
	json_mode = json;
}

bool report_json_mode(void)
{
	return json_mode;
}

const char *report_tool(void)
{
	return tool;
}

int report_dump(json_t *doc)
{
	int err;

	if (!doc)
		return -1;
	err = json_dumpf(doc, stdout, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(9));
	if (!err && putchar('\n') == EOF)
		err = -1;
	if (fflush(stdout))
		err = -1;
	return err;
}

static int fail_v(int code, const char *reason, const char *fmt, va_list ap)
{
	char msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	fprintf(stderr, "%s: %s\n", tool, msg);
	if (json_mode) {
		json_t *doc = json_pack("{s:b, s:s, s:s, s:i}", "ok", 0, "error", msg,
		                        "reason", reason, "exit", code);

		report_dump(doc);
		json_decref(doc);
	}
	return code;
}

int report_fail(int code, const char *reason, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = fail_v(code, reason, fmt, ap);
	va_end(ap);
	return r;
}

static int usage_v(const char *cmd, const char *fmt, va_list ap)
{
	char msg[512], full[640];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	snprintf(full, sizeof(full), "%s (try '%s %s%s--help')", msg, tool, cmd ? cmd : "",
	         cmd ? " " : "");
	return report_fail(usage_exit, "usage", "%s", full);
}

int report_usage(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = usage_v(cmd, fmt, ap);
	va_end(ap);
	return r;
}

int report_bad_option(const char *cmd, int opt, char **argv)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "";
	char name[128];

	/* a short option is known by optopt; a long one by its argument */
	if (optopt > 0 && optopt < 256 && !(arg[0] == '-' && arg[1] == '-'))
		snprintf(name, sizeof(name), "-%c", optopt);
	else
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(arg, "="), arg);
	if (opt == ':')
		return report_usage(cmd, "option '%s' needs a value", name);
	return report_usage(cmd, "unknown option '%s'", name);
}

const char *report_wsync_text(int err, char *buf, size_t len)
{
	const char *detail = wsync_errmsg();

	if (detail && *detail)
		snprintf(buf, len, "%s", detail);
	else
		snprintf(buf, len, "%s", wsync_strerror(err));
	return buf;
}

const char *report_reason_of(int err)
{
	switch (-err) {
	case 0:            return "ok";
	case ENOENT:       return "not_found";
	case ECONNREFUSED: return "no_broker";
	case ENOTCONN:
	case EPIPE:
	case ECONNRESET:   return "broker_gone";
	case ETIMEDOUT:    return "timeout";
	case EPERM:
	case EACCES:       return "refused";
	case EBUSY:        return "busy";
	case EEXIST:       return "layout_clash";
	case EINVAL:       return "invalid";
	case ENOSPC:       return "no_space";
	case EBADMSG:      return "mismatch";
	case ENODATA:      return "no_data";
	case EPROTO:       return "protocol";
	case EIDRM:        return "deleted";
	default:           return "error";
	}
}

int report_wsync_fail(int code, const char *what, int err)
{
	char text[768];

	report_wsync_text(err, text, sizeof(text));
	return report_fail(code, report_reason_of(err), "%s: %s", what, text);
}

static int print_object(json_t *doc, bool ok, int code)
{
	json_t *out = json_object();
	const char *key;
	json_t *v;
	int err;

	if (!doc || !out) {
		json_decref(doc);
		json_decref(out);
		return report_fail(EXIT_FAILED, "error", "out of memory building JSON");
	}
	json_object_set_new(out, "ok", json_boolean(ok));
	if (!ok)
		json_object_set_new(out, "exit", json_integer(code));
	json_object_foreach(doc, key, v)
		json_object_set(out, key, v);
	json_decref(doc);
	err = report_dump(out);
	json_decref(out);
	if (err) {
		fprintf(stderr, "%s: writing to stdout failed\n", tool);
		return EXIT_FAILED;
	}
	return code;
}

int report_json(json_t *doc)
{
	return print_object(doc, true, EXIT_DONE);
}

int report_json_status(json_t *doc, int code)
{
	return print_object(doc, code == EXIT_DONE, code);
}

int report_version(const char *version)
{
	if (json_mode)
		return report_json(json_pack("{s:s, s:s}", "program", tool, "version", version));
	printf("%s %s\n", tool, version);
	return EXIT_DONE;
}
