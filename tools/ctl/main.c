/*
 * wsyncctl — looks at and drives a running wsyncd from the shell.
 *
 *   wsyncctl [--endpoint E | --name NAME] [--json] COMMAND [ARGS]
 *
 * status, models and sessions read the broker's control segment (mapped
 * read-only at connect; nothing is asked of the broker). wait, dump, load
 * and verify subscribe or publish like any client. Exit codes are in ctl.h
 * and docs/TOOLS.md.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

static const char usage_text[] =
	"usage: wsyncctl [--endpoint E | --name NAME] [--json] COMMAND [ARGS]\n"
	"\n"
	"Looks at and drives a running wsyncd.\n"
	"\n"
	"commands:\n"
	"  status                         the broker: instance, pid, generation, uptime, memory\n"
	"  models                         the model table: versions, steps, slots, collectors\n"
	"  sessions                       connected clients: role, version held, lag, waits\n"
	"  wait MODEL [--after V] [--timeout S]\n"
	"                                 waits for a version of MODEL newer than V\n"
	"  dump MODEL -o FILE [--version N]\n"
	"                                 writes the latest version as a .safetensors file\n"
	"  load FILE --model NAME [--step S] [--checksum]\n"
	"                                 publishes a .safetensors file as a new version\n"
	"  verify MODEL [--version N]     recomputes the latest version's checksum\n"
	"  rm MODEL...                    deletes models that have no publisher\n"
	"\n"
	"'wsyncctl COMMAND --help' describes a command. Options (also after COMMAND):\n";

static const char exit_text[] =
	"\nexit codes: 0 done; 1 wait timed out or verify found a mismatch; 2 usage;\n"
	"3 no broker, no such model, a refused file or another error.\n";

static const struct {
	const char *name;
	int (*run)(const struct ctl_opts *o, int argc, char **argv);
} commands[] = {
	{ "status",   ctl_cmd_status },
	{ "models",   ctl_cmd_models },
	{ "sessions", ctl_cmd_sessions },
	{ "wait",     ctl_cmd_wait },
	{ "dump",     ctl_cmd_dump },
	{ "load",     ctl_cmd_load },
	{ "verify",   ctl_cmd_verify },
	{ "rm",       ctl_cmd_rm },
};

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		CTL_COMMON_LONGOPTS,
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl_opts o = { 0 };
	int opt, r;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, CTL_COMMON_SHORTOPTS, longopts, NULL)) != -1) {
		if (opt == 'V') {
			printf("wsyncctl %s\n", wsync_version_string());
			return CTL_OK;
		}
		if (opt == 'h') {
			fputs(usage_text, stdout);
			fputs(CTL_COMMON_USAGE, stdout);
			fputs(exit_text, stdout);
			return CTL_OK;
		}
		r = ctl_common_opt(opt, &o, NULL, usage_text);
		if (r != CTL_GO_ON)
			return r;
	}
	if (optind >= argc)
		return ctl_usage_error(NULL, "no command given");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(argv[optind], commands[i].name))
			continue;
		argc -= optind;
		argv += optind;
		optind = 0;                      /* restart getopt on the command's arguments */
		return commands[i].run(&o, argc, argv);
	}
	return ctl_usage_error(NULL, "unknown command '%s'", argv[optind]);
}
