/*
 * wsync-top — a live view of a wsyncd: its models (versions, publish rate
 * and bandwidth, slots, collectors and their worst lag, checksums) and its
 * clients (version held, lag, waits, timeouts).
 *
 *   wsync-top [--name NAME | --endpoint E] [-d SECONDS] [-n N] [-b | --json]
 *             [--timeout S]
 *
 * It maps the broker's control segment without a session: a refresh asks
 * the broker for nothing (top.h). A broker that is stopped, dead or gone is
 * said to be so and retried; a restarted one is followed.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "top.h"

static const char usage_text[] =
	"usage: wsync-top [--name NAME | --endpoint E] [-d SECONDS] [-n N] [-b | --json]\n"
	"                 [--timeout S]\n"
	"\n"
	"A live view of a wsync broker: models, publish rates, slots, collectors and\n"
	"their lag, read from its control segment (it never connects).\n"
	"\n"
	"  --name NAME    the broker instance (default: $WSYNC_ENDPOINT, else 'default')\n"
	"  --endpoint E   the broker's socket path, or an instance name\n"
	"  -d SECONDS     refresh interval (default 1; decimals allowed, at least 0.1)\n"
	"  -n N           stop after N refreshes (in every mode)\n"
	"  -b             batch mode: plain text every interval, like top -b\n"
	"  --json         batch mode printing one JSON object per refresh and line\n"
	"  --timeout S    accepted as by every wsync tool; wsync-top never waits on\n"
	"                 the broker (a refresh reads its segment), so it bounds nothing\n"
	"  -h, --help     this text;  --version  the version\n"
	"\n"
	"keys: q quit, up/down scroll the sessions, m/M select a model (its slot map),\n"
	"s/</> sort column, r reverse, f whole names, p pause, d interval, h help.\n"
	"\n"
	"exit codes: 0 done, 2 usage, 3 no broker at the start of a batch run, a\n"
	"batch run with -n whose last refresh found the broker shut down, dead,\n"
	"gone or not responding, or no terminal for the screen (try -b). Once\n"
	"running, a broker that is stopped, dead or gone is said to be so and\n"
	"retried every interval.\n";

static void sleep_s(double s)
{
	struct timespec ts = { .tv_sec = (time_t)s,
	                       .tv_nsec = (long)((s - (double)(time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts))
		;
}

/* The most refreshes -n takes (at -d 0.1, more than three years). */
#define ITERATIONS_MAX 1000000000L

static int run_batch(struct top_state *t)
{
	const struct health *h;

	for (long i = 0; !t->o.iterations || i < t->o.iterations; i++) {
		if (i)
			sleep_s(t->o.delay_s);
		top_refresh(t);
		if (i == 0 && !t->v.attached)
			return report_fail(EXIT_FAILED, "no_broker", "%s", t->v.why);
		if (t->o.json)
			top_print_json(&t->v);
		else
			top_print_text(&t->v);
	}
	/* -n N ends: like wsyncctl status, the exit says whether the broker of
	 * the last refresh serves */
	h = t->v.attached ? &t->v.snap->health : NULL;
	if (h && (h->state == HEALTH_OK || h->state == HEALTH_STARTING))
		return 0;
	fprintf(stderr, "wsync-top: %s\n", h ? h->text : t->v.why);
	return EXIT_FAILED;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "endpoint", required_argument, NULL, 'E' },
		{ "name",     required_argument, NULL, 'N' },
		{ "json",     no_argument,       NULL, 'j' },
		{ "timeout",  required_argument, NULL, 'T' },
		{ "help",     no_argument,       NULL, 'h' },
		{ "version",  no_argument,       NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct top_opts o = { .delay_s = 1.0 };
	struct top_state *t;
	char *end;
	int opt, rc;

	report_init("wsync-top");
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--json"))
			report_set_json(true);
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":hbn:d:", longopts, NULL)) != -1) {
		switch (opt) {
		case 'E':
		case 'N':
			o.endpoint = optarg;
			break;
		case 'j':
			o.json = o.batch = true;
			break;
		case 'b':
			o.batch = true;
			break;
		case 'n':
			errno = 0;
			o.iterations = strtol(optarg, &end, 10);
			if (end == optarg || *end || errno || o.iterations < 1 ||
			    o.iterations > ITERATIONS_MAX)
				return report_usage(NULL, "-n wants a count from 1 to %ld, not '%s'",
				                    ITERATIONS_MAX, optarg);
			break;
		case 'd':
			o.delay_s = strtod(optarg, &end);
			if (end == optarg || *end || !(o.delay_s >= 0.1) || o.delay_s > 3600)
				return report_usage(NULL, "-d wants seconds from 0.1 to 3600, not '%s'",
				                    optarg);
			break;
		case 'T': {
			/* the tools' common flag: checked, then nothing to bound */
			double s = strtod(optarg, &end);

			if (end == optarg || *end || !(s >= 0) || s > 1e9)
				return report_usage(NULL, "--timeout wants seconds (0 or more), not '%s'",
				                    optarg);
			break;
		}
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		case 'V':
			return report_version(wsync_version_string());
		default:
			return report_bad_option(NULL, opt, argv);
		}
	}
	if (optind < argc)
		return report_usage(NULL, "unexpected argument '%s'", argv[optind]);
	t = malloc(sizeof(*t));
	if (!t)
		return report_fail(EXIT_FAILED, "error", "out of memory");
	top_state_init(t, &o);
	rc = o.batch ? run_batch(t) : top_interactive(t);
	top_state_free(t);
	free(t);
	return rc;
}
