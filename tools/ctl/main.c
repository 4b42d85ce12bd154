/*
 * wsyncctl — looks at and drives a running wsyncd from the shell.
 *
 *   wsyncctl [--name NAME | --endpoint E] [--json] [--timeout S] COMMAND [ARGS]
 *
 * status, models, sessions, ping, metrics and serve-metrics read the
 * broker's control segment without a session: they ask the broker nothing,
 * never count as its clients and answer at once when it is stopped, dead or
 * gone. wait, dump, load, verify and rm connect like any client. Exit codes
 * are in ctl.h and docs/TOOLS.md.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

static const char usage_text[] =
	"usage: wsyncctl [--name NAME | --endpoint E] [--json] [--timeout S] COMMAND [ARGS]\n"
	"\n"
	"Looks at and drives a running wsyncd.\n"
	"\n"
	"commands that only read the broker's control segment (no session):\n"
	"  status                         the broker: health, pid, generation, uptime, memory\n"
	"  models                         the model table: versions, steps, slots, collectors\n"
	"  sessions                       connected clients: role, version held, lag, waits\n"
	"  ping                           exit 0 healthy, 1 not responding, 2 no broker\n"
	"  metrics                        Prometheus text exposition of the broker's figures\n"
	"  serve-metrics [--listen ADDR:PORT]\n"
	"                                 the same over HTTP (default 127.0.0.1:9464)\n"
	"commands that connect:\n"
	"  wait MODEL [--after V]         waits for a version of MODEL newer than V\n"
	"  dump MODEL -o FILE [--version N]\n"
	"                                 writes the latest version as a .safetensors file\n"
	"  load FILE --model NAME [--step S] [--no-checksum]\n"
	"                                 publishes a .safetensors file as a new version\n"
	"  verify MODEL [--version N]     recomputes the latest version's checksum\n"
	"  rm MODEL...                    deletes models that have no publisher\n"
	"\n"
	"'wsyncctl COMMAND --help' describes a command. Options (also after COMMAND):\n";

static const char exit_text[] =
	"\nexit codes: 0 done; 1 wait timed out or verify found a mismatch; 2 usage;\n"
	"3 no broker, a broker not responding, no such model, a refused file or\n"
	"another error. ping: 0 healthy, 1 not responding, 2 no broker.\n";

static const struct {
	const char *name;
	int (*run)(const struct ctl_opts *o, int argc, char **argv);
} commands[] = {
	{ "status",        ctl_cmd_status },
	{ "models",        ctl_cmd_models },
	{ "sessions",      ctl_cmd_sessions },
	{ "ping",          ctl_cmd_ping },
	{ "health",        ctl_cmd_ping },
	{ "metrics",       ctl_cmd_metrics },
	{ "serve-metrics", ctl_cmd_serve_metrics },
	{ "wait",          ctl_cmd_wait },
	{ "dump",          ctl_cmd_dump },
	{ "load",          ctl_cmd_load },
	{ "verify",        ctl_cmd_verify },
	{ "rm",            ctl_cmd_rm },
};

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		CTL_COMMON_LONGOPTS,
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl_opts o = { .timeout_ns = -1 };
	int opt, r;

	report_init("wsyncctl");
	/* --json anywhere holds for errors found before it is parsed */
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--json"))
			report_set_json(true);
	opterr = 0;
	while ((opt = getopt_long(argc, argv, CTL_COMMON_SHORTOPTS, longopts, NULL)) != -1) {
		if (opt == 'h') {
			fputs(usage_text, stdout);
			fputs(CTL_COMMON_USAGE, stdout);
			fputs("  --version      the version (before COMMAND)\n", stdout);
			fputs(exit_text, stdout);
			return EXIT_DONE;
		}
		r = ctl_common_opt(opt, &o, NULL, usage_text, argv);
		if (r != CTL_GO_ON)
			return r;
	}
	if (optind >= argc)
		return report_usage(NULL, "no command given");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(argv[optind], commands[i].name))
			continue;
		argc -= optind;
		argv += optind;
		optind = 0;                      /* restart getopt on the command's arguments */
		return commands[i].run(&o, argc, argv);
	}
	return report_usage(NULL, "unknown command '%s'", argv[optind]);
}
