/*
 * wsync-top — a live view of a wsyncd: its models (versions, publish rate
 * and bandwidth, slots, collectors and their worst lag, checksums) and its
 * clients (version held, lag, waits, timeouts).
 *
 *   wsync-top [--endpoint E | --name NAME] [-d SECONDS] [-b [-n N]] [--json]
 *
 * It reads the broker's control segment, mapped read-only at connect: a
 * refresh asks the broker for nothing (top.h). A broker that goes away is
 * said to be gone and retried; a restarted one is followed.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "top.h"

static const char usage_text[] =
	"usage: wsync-top [--endpoint E | --name NAME] [-d SECONDS] [-b [-n N]] [--json]\n"
	"\n"
	"A live view of a wsync broker: models, publish rates, collectors and their lag.\n"
	"\n"
	"  --endpoint E   broker socket path or instance name (default: $WSYNC_ENDPOINT,\n"
	"                 else the default instance)\n"
	"  --name NAME    broker instance name (same as --endpoint NAME)\n"
	"  -d SECONDS     refresh interval (default 1; decimals allowed, at least 0.1)\n"
	"  -b             batch mode: print plain text every interval, like top -b\n"
	"  -n N           stop after N refreshes (batch and JSON modes)\n"
	"  --json         batch mode printing one JSON document per refresh and line\n"
	"  -h, --help     this text;  --version  the version\n"
	"\n"
	"keys: q quit, up/down or m select a model, s sort sessions, p pause,\n"
	"d set the interval, h help.\n"
	"\n"
	"exit codes: 0 done, 2 usage, 3 no broker at the start of a batch run or no\n"
	"terminal. Once running, a broker that goes away is retried every interval.\n";

static void sleep_s(double s)
{
	struct timespec ts = { .tv_sec = (time_t)s,
	                       .tv_nsec = (long)((s - (double)(time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts))
		;
}

static int run_batch(struct top_state *t)
{
	for (long i = 0; !t->o.iterations || i < t->o.iterations; i++) {
		if (i)
			sleep_s(t->o.delay_s);
		top_refresh(t);
		if (i == 0 && !t->v.attached) {
			fprintf(stderr, "wsync-top: %s\n", t->v.why);
			return 3;
		}
		if (t->o.json)
			top_print_json(&t->v);
		else
			top_print_text(&t->v);
	}
	return 0;
}

static int usage_error(const char *msg, const char *arg)
{
	fprintf(stderr, "wsync-top: %s%s%s\nTry 'wsync-top --help'.\n", msg,
	        arg ? ": " : "", arg ? arg : "");
	return 2;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "endpoint", required_argument, NULL, 'E' },
		{ "name",     required_argument, NULL, 'N' },
		{ "json",     no_argument,       NULL, 'j' },
		{ "help",     no_argument,       NULL, 'h' },
		{ "version",  no_argument,       NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct top_opts o = { .delay_s = 1.0 };
	struct top_state *t;
	char *end;
	int opt, rc;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "hbn:d:", longopts, NULL)) != -1) {
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
			o.iterations = strtol(optarg, &end, 10);
			if (end == optarg || *end || o.iterations < 1)
				return usage_error("-n wants a positive count", optarg);
			break;
		case 'd':
			o.delay_s = strtod(optarg, &end);
			if (end == optarg || *end || !(o.delay_s >= 0.1) || o.delay_s > 3600)
				return usage_error("-d wants seconds, 0.1 to 3600", optarg);
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		case 'V':
			printf("wsync-top %s\n", wsync_version_string());
			return 0;
		default:
			return usage_error("unknown option or missing value", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument", argv[optind]);
	t = malloc(sizeof(*t));
	if (!t) {
		fprintf(stderr, "wsync-top: out of memory\n");
		return 3;
	}
	top_state_init(t, &o);
	rc = o.batch ? run_batch(t) : top_interactive(t);
	top_state_free(t);
	free(t);
	return rc;
}
