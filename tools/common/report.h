/*
 * tools/common/report.h — one contract for every tool's output.
 *
 * Errors: one line on stderr, "<tool>: <what failed>: <the specific
 * reason>", said once (the library's detail when it has one, else the
 * error's name, never both). With --json, every run also prints exactly one
 * JSON object on stdout, success or error, on one line: a success object
 * starts with "ok": true; an error object is
 *
 *     {"ok": false, "error": "<the message>", "reason": "<keyword>", "exit": N}
 *
 * with the same keywords everywhere (report_reason_of). Usage errors name
 * the option or argument at fault and point at --help; they exit 2.
 */
#ifndef WSYNC_TOOLS_COMMON_REPORT_H
#define WSYNC_TOOLS_COMMON_REPORT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Exit codes every tool uses (wsyncctl ping has its own: health.h). */
#define EXIT_DONE     0
#define EXIT_NEGATIVE 1              /* the awaited thing did not happen */
#define EXIT_USAGE    2
#define EXIT_FAILED   3

/* Names the tool in messages; json: --json was given. */
void report_init(const char *tool);
void report_set_json(bool json);
bool report_json_mode(void);
const char *report_tool(void);

/* An error: the message on stderr and, with --json, the error object on
 * stdout. reason is a keyword (report_reason_of, or "usage", "partial",
 * ...). Returns code. */
int  report_fail(int code, const char *reason, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The exit code of usage errors: 2, but wsyncctl ping says "no broker"
 * with 2 and takes 3 for usage. */
void report_set_usage_exit(int code);
/* A usage error of cmd (NULL: the tool itself). */
int  report_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The usage error for getopt's '?' or ':' (opterr = 0, optstring with a
 * leading ':'): names the unknown option or the one missing its value. */
int  report_bad_option(const char *cmd, int opt, char **argv);

/* The one message for a wsync call that returned err: its detail, else the
 * code's name. */
const char *report_wsync_text(int err, char *buf, size_t len);
/* The keyword for an errno value. */
const char *report_reason_of(int err);
/* A failed wsync call: "<what>: <detail>", with the reason of err. */
int  report_wsync_fail(int code, const char *what, int err);

/* Prints doc with "ok": true first on stdout, one line; steals doc.
 * EXIT_DONE, or EXIT_FAILED if stdout could not be written. */
int  report_json(json_t *doc);
/* The same for a document that is not a success (verify's mismatch):
 * "ok": false and "exit", with the fields given. */
int  report_json_status(json_t *doc, int code);
/* Writes doc on one line (no "ok" added): 0 or -1. */
int  report_dump(json_t *doc);
/* --version: "<tool> <version>", or with --json {"ok": true, "program":
 * "<tool>", "version": "<version>"}. EXIT_DONE. */
int  report_version(const char *version);

#endif
