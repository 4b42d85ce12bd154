/*
 * tools/ctl/ctl.h — what the files of wsyncctl share.
 *
 * Exit codes of every subcommand (docs/TOOLS.md) but ping:
 *   0  done (wait: got a version; verify: the checksum matches)
 *   1  the awaited thing did not happen (wait: timeout; verify: mismatch)
 *   2  usage error
 *   3  no broker, a broker not responding, no such model, a refused file,
 *      or another error
 * ping: 0 healthy, 1 not responding, 2 no broker (health.h).
 *
 * The monitoring commands (status, models, sessions, ping, metrics,
 * serve-metrics) read the control segment without a session (seg.h); the
 * others connect like any client, after checking that the broker beats,
 * with every round trip bounded by --timeout.
 */
#ifndef WSYNC_TOOLS_CTL_H
#define WSYNC_TOOLS_CTL_H

#include <stdbool.h>
#include <stdint.h>

#include "tools/common/report.h"
#include "tools/common/seg.h"
#include "tools/common/snap.h"
#include "wsync.h"

#define CTL_BROKER_TIMEOUT_NS (INT64_C(2) * 1000000000)  /* --timeout default */

struct ctl_opts {
	const char *endpoint;            /* --endpoint / --name; NULL = defaults */
	bool json;
	int64_t timeout_ns;              /* --timeout; -1 = not given */
};

/* How long the broker gets to show a heartbeat and to answer each round
 * trip: --timeout, else CTL_BROKER_TIMEOUT_NS. */
int64_t ctl_broker_timeout(const struct ctl_opts *o);

/* Connects with the tool's name as client name, once the broker's segment
 * shows it beating; on failure says why (no broker, not responding,
 * refused, ...) and returns an exit code. */
int  ctl_connect(const struct ctl_opts *o, wsync_client **out);
/* Maps the broker's segment and snapshots it (malloc'd, into *out; the
 * segment stays mapped in *seg for the caller to detach). An exit code. */
int  ctl_snapshot(const struct ctl_opts *o, struct seg *seg, struct snap **out);
/* Parses a number of seconds ("2", "0.5"); false if it is not one. */
bool ctl_parse_seconds(const char *s, double *out);
/* Parses an unsigned integer; false if it is not one. */
bool ctl_parse_u64(const char *s, uint64_t *out);

/* Subscribes to an existing model and takes its latest version, which must
 * be `version` when have_version: EXIT_DONE with *c, *s and *v to release
 * and close, or an exit code after a message. */
int  ctl_take_latest(const struct ctl_opts *o, const char *model, bool have_version,
                     uint64_t version, wsync_client **c, wsync_sub **s, wsync_view *v);

/*
 * Subcommands: argv[0] is the subcommand's name; common options were taken
 * out already. Each returns an exit code.
 */
int ctl_cmd_status(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_models(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_sessions(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_ping(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_metrics(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_serve_metrics(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_wait(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_dump(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_load(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_verify(const struct ctl_opts *o, int argc, char **argv);
int ctl_cmd_rm(const struct ctl_opts *o, int argc, char **argv);

/* Options every subcommand takes, for its getopt_long table. */
#define CTL_COMMON_LONGOPTS \
	{ "endpoint", required_argument, NULL, 'E' }, \
	{ "name",     required_argument, NULL, 'N' }, \
	{ "json",     no_argument,       NULL, 'j' }, \
	{ "timeout",  required_argument, NULL, 'T' }, \
	{ "help",     no_argument,       NULL, 'h' }
#define CTL_COMMON_SHORTOPTS "+:h"    /* before the command: stop at it */
#define CTL_CMD_SHORTOPTS    ":h"     /* a command's options may follow its arguments */
#define CTL_COMMON_USAGE \
	"  --name NAME    the broker instance (default: $WSYNC_ENDPOINT, else 'default')\n" \
	"  --endpoint E   the broker's socket path, or an instance name\n" \
	"  --timeout S    how long the broker gets to show it is alive and to answer\n" \
	"                 (default 2; for wait also how long to wait for a version)\n" \
	"  --json         one JSON object on stdout, on success and on error\n" \
	"  -h, --help     this text\n"
#define CTL_GO_ON (-1)
/* A model name given on the command line: CTL_GO_ON if it is one the
 * broker could hold, else a usage error (exit 2) saying what a name is. */
int ctl_check_model(const char *cmd, const char *name);
/* Handles a common option or an unknown one for getopt's result opt:
 * CTL_GO_ON to continue parsing, else the exit code to return (--help
 * printed usage: 0; a bad option: 2). */
int ctl_common_opt(int opt, struct ctl_opts *o, const char *cmd, const char *usage,
                   char **argv);

#endif
