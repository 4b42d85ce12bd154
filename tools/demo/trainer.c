/*
 * tools/demo/trainer.c — `wsync-demo trainer`: declares the synthetic model
 * and publishes a new version at a fixed rate, each version filled with the
 * pattern of its step.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "demo.h"

static const char trainer_usage_text[] =
	"usage: wsync-demo trainer [--name NAME | --endpoint E] [--model M] [--mib N]\n"
	"                          [--hz N] [--tensors N] [--timeout S]\n"
	"\n"
	"Declares model M (default '" MODEL_NAME "': an embedding, weight matrices and biases)\n"
	"and publishes a new version at N Hz, each filled with a pattern derived from\n"
	"its step. Prints one progress line per second. On SIGTERM or SIGINT prints\n"
	"a line 'result trainer ...' and exits 0; exits 1 on an error.\n"
	"\n"
	"  --name NAME       the broker instance (default: $WSYNC_ENDPOINT, else\n"
	"                    'default'); --endpoint E: a socket path or instance name\n"
	"  --model M         the model to publish (default " MODEL_NAME ")\n"
	"  --mib N           model size in MiB (default 32)\n"
	"  --hz N            versions per second (default 10)\n"
	"  --tensors N       tensors in the model (default 8)\n"
	"  --timeout S       how long the broker gets to answer the connect and each\n"
	"                    round trip (default 2); a broker that does not (stopped)\n"
	"                    ends the trainer with exit 1 and says so\n";

struct trainer_opts {
	const char *endpoint, *model;
	uint64_t mib, hz, tensors;
	double timeout_s;                       /* -1: the default */
};

struct publish_times {
	int64_t fill_ns, commit_ns;
};

/* One version: begin (waiting up to 1 s for a free slot), fill every tensor
 * with the pattern of `step`, commit. */
static int trainer_publish(wsync_pub *pub, uint64_t step, uint64_t *version,
                           size_t *bytes, struct publish_times *t)
{
	wsync_slab slab;
	int64_t t0, t1;
	char what[64];
	int err;

	snprintf(what, sizeof what, "begin a slab for step %" PRIu64, step);
	err = wsync_pub_begin(pub, NS_PER_S, &slab);
	if (err) {
		say_wsync_error(what, err);
		return err;
	}
	t0 = now_ns(CLOCK_MONOTONIC);
	for (size_t i = 0; i < slab.n_tensors; i++) {
		const wsync_tensor_desc *d = &slab.tensors[i];
		pattern_fill((char *)slab.base + d->offset, d->offset,
		             wsync_tensor_bytes(d), step);
	}
	t1 = now_ns(CLOCK_MONOTONIC);
	err = wsync_pub_commit(pub, step, version);
	if (err) {
		snprintf(what, sizeof what, "commit step %" PRIu64, step);
		say_wsync_error(what, err);
		return err;
	}
	t->fill_ns = t1 - t0;
	t->commit_ns = now_ns(CLOCK_MONOTONIC) - t1;
	*bytes = slab.bytes;
	return 0;
}

/* Publishes at `hz` until SIGTERM. A begin that finds every slot held by
 * readers for its whole timeout skips that step; any other error ends it. */
static int trainer_loop(wsync_pub *pub, uint64_t hz, struct trainer_result *st)
{
	int64_t period = NS_PER_S / (int64_t)hz;
	int64_t started = now_ns(CLOCK_MONOTONIC), next = started, last_print = started;
	int err = 0;

	for (uint64_t step = 1; !g_stop; step++) {
		struct publish_times t = { 0 };
		uint64_t version = 0;
		size_t bytes = 0;
		int64_t now;

		err = trainer_publish(pub, step, &version, &bytes, &t);
		if (err && err != -EBUSY)
			break;
		if (err) {
			st->busy++;
		} else {
			st->commits++;
			st->last_version = version;
			st->last_step = step;
			st->bytes = bytes;
		}
		now = now_ns(CLOCK_MONOTONIC);
		if (!err && now - last_print >= NS_PER_S) {
			printf("step %" PRIu64 " version %" PRIu64 ": commit %.0f us, fill %.1f ms\n",
			       st->last_step, st->last_version, (double)t.commit_ns / 1e3,
			       (double)t.fill_ns / 1e6);
			last_print = now;
		}
		next += period;
		if (next < now)
			next = now;     /* behind schedule: do not burst to catch up */
		sleep_until(next);
	}
	st->elapsed_ns = now_ns(CLOCK_MONOTONIC) - started;
	return err == -EBUSY ? 0 : err;
}

static int trainer_run(const struct trainer_opts *o)
{
	struct trainer_result st = { .tensors = o->tensors };
	wsync_tensor_desc *tensors;
	wsync_client *client = NULL;
	wsync_pub *pub = NULL;
	int err, rc = 1;

	tensors = calloc(o->tensors, sizeof *tensors);
	if (!tensors) {
		say_sys_error("allocate the tensor table");
		return 1;
	}
	model_describe(tensors, o->tensors, o->mib);
	bound_round_trips(o->timeout_s);
	err = wsync_connect(o->endpoint, "wsync-demo-trainer", &client);
	if (err) {
		say_connect_error(o->endpoint, err);
		goto out_free;
	}
	err = wsync_pub_open(client, o->model, tensors, o->tensors, NULL, &pub);
	if (err) {
		char what[WSYNC_NAME_MAX + 32];

		snprintf(what, sizeof what, "open model '%s' to publish", o->model);
		say_wsync_error(what, err);
		goto out_close;
	}
	model_print(o->model, tensors, o->tensors, o->hz);
	err = trainer_loop(pub, o->hz, &st);
	result_print_trainer(&st);
	rc = err ? 1 : 0;
	wsync_pub_close(pub);
out_close:
	wsync_close(client);
out_free:
	free(tensors);
	return rc;
}

int trainer_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "endpoint", required_argument, NULL, 'e' },
		{ "name",     required_argument, NULL, 'e' },
		{ "model",    required_argument, NULL, 'M' },
		{ "mib",      required_argument, NULL, 'm' },
		{ "hz",       required_argument, NULL, 'z' },
		{ "tensors",  required_argument, NULL, 't' },
		{ "timeout",  required_argument, NULL, 'T' },
		{ "help",     no_argument,       NULL, 'h' },
		{ 0 },
	};
	struct trainer_opts o = { .model = MODEL_NAME, .mib = 32, .hz = 10, .tensors = 8,
	                          .timeout_s = -1 };
	int c, bad = 0;

	snprintf(g_role, sizeof g_role, "trainer: ");
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'e': o.endpoint = optarg; break;
		case 'M': bad |= !model_name_ok(optarg); o.model = optarg; break;
		case 'm': bad |= parse_count("mib", optarg, 1, 65536, &o.mib); break;
		case 'z': bad |= parse_count("hz", optarg, 1, 10000, &o.hz); break;
		case 't': bad |= parse_count("tensors", optarg, 1, 1024, &o.tensors); break;
		case 'T': bad |= parse_seconds("timeout", optarg, &o.timeout_s); break;
		case 'h': fputs(trainer_usage_text, stdout); return 0;
		default:  bad = say_bad_option(argv); break;
		}
	}
	if (bad || optind < argc)
		return say_usage_error(bad ? NULL : argv[optind], "wsync-demo trainer");
	setvbuf(stdout, NULL, _IOLBF, 0);
	catch_stop_signals();
	return trainer_run(&o);
}
