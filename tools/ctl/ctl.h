/*
 * tools/ctl/ctl.h — what the files of wsyncctl share.
 *
 * Exit codes of every subcommand (docs/TOOLS.md):
 *   0  done (wait: got a version; verify: the checksum matches)
 *   1  the awaited thing did not happen (wait: timeout; verify: mismatch)
 *   2  usage error
 *   3  no broker, no such model, a refused file, or another error
 */
#ifndef WSYNC_TOOLS_CTL_H
#define WSYNC_TOOLS_CTL_H

#include <stdbool.h>
#include <stdint.h>

#include "tools/common/snap.h"
#include "wsync.h"

#define CTL_OK       0
#define CTL_NEGATIVE 1
#define CTL_USAGE    2
#define CTL_ERROR    3

struct ctl_opts {
	const char *endpoint;            /* --endpoint / --name; NULL = defaults */
	bool json;
};

/* "wsyncctl: <message>" on stderr. */
void ctl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same for a wsync call that returned err, with its detail. */
void ctl_wsync_error(const char *what, int err);
/* Usage error: the message, then a pointer to --help; returns CTL_USAGE. */
int  ctl_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Connects with the tool's name as client name; on failure says why
 * (no broker there, refused, ...) and returns CTL_ERROR. */
int  ctl_connect(const struct ctl_opts *o, wsync_client **out);
/* A snapshot of the connected broker (malloc'd; free it), NULL after a
 * message on failure. */
struct snap *ctl_snapshot(wsync_client *c);
/* Prints a JSON document on stdout, one line; steals the reference. */
int  ctl_print_json(json_t *doc);
/* Parses a number of seconds ("2", "0.5"); false if it is not one. */
bool ctl_parse_seconds(const char *s, double *out);
/* Parses an unsigned integer; false if it is not one. */
bool ctl_parse_u64(const char *s, uint64_t *out);

/* Subscribes to an existing model and takes its latest version, which must
 * be `version` when have_version: CTL_OK with *c, *s and *v to release and
 * close, or an exit code after a message. */
int  ctl_take_latest(const struct ctl_opts *o, const char *model, bool have_version,
                     uint64_t version, wsync_client **c, wsync_sub **s, wsync_view *v);

/*
 * Subcommands: argv[0] is the subcommand's name; common options were taken
 * out already. Each returns an exit code.
 */
int ctl_cmd_status(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_models(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_sessions(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_wait(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_dump(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_load(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_verify(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_rm(const struct ctl_opts *o, int argc, char **argv);

#endif

/* Options every subcommand takes, for its getopt_long table. */
#define CTL_COMMON_LONGOPTS \
	{ "endpoint", required_argument, NULL, 'E' }, \
	{ "name",     required_argument, NULL, 'N' }, \
	{ "json",     no_argument,       NULL, 'j' }, \
	{ "help",     no_argument,       NULL, 'h' }
#define CTL_COMMON_SHORTOPTS "+h"     /* before the command: stop at it */
#define CTL_CMD_SHORTOPTS    "h"      /* a command's options may follow its arguments */
#define CTL_COMMON_USAGE \
	"  --endpoint E   broker socket path or instance name (default: $WSYNC_ENDPOINT,\n" \
	"                 else the default instance)\n" \
	"  --name NAME    broker instance name (same as --endpoint NAME)\n" \
	"  --json         machine-readable output, one JSON document\n" \
	"  -h, --help     this text\n"
#define CTL_GO_ON (-1)
/* Handles a common option or an unknown one for getopt's result opt:
 * CTL_GO_ON to continue parsing, else the exit code to return (--help
 * printed usage: 0; an unknown option: 2). */
int ctl_common_opt(int opt, struct ctl_opts *o, const char *cmd, const char *usage);
