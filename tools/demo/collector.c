/*
 * tools/demo/collector.c — `wsync-demo collector`: waits for each newer
 * version of the model, checks every byte of it against its step, and
 * records how far behind the trainer it was.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "demo.h"

#define MAX_FAILURE_LOGS 5      /* mismatch reports printed per collector */

static const char collector_usage_text[] =
	"usage: wsync-demo collector [--name NAME | --endpoint E] [--model M] [--id K]\n"
	"                            [--timeout S]\n"
	"\n"
	"Subscribes to model M (default '" MODEL_NAME "'; it need not exist yet),\n"
	"waits for each newer version and checks every byte of it against its\n"
	"step. A model that 'wsync-demo trainer' did not publish is refused at its\n"
	"first version. Without a first version it says once what it waits for\n"
	"(after a second, or five when no model is published). On SIGTERM or\n"
	"SIGINT prints a line 'result collector ...' and exits: 0 if every view\n"
	"matched, 1 on a mismatch or an error (such as the broker going away, or a\n"
	"model that is not a demo model).\n"
	"\n"
	"  --name NAME       the broker instance (default: $WSYNC_ENDPOINT, else\n"
	"                    'default'); --endpoint E: a socket path or instance name\n"
	"  --model M         the model to read (default " MODEL_NAME ")\n"
	"  --id K            number shown in messages and results (default 0)\n"
	"  --timeout S       how long the broker gets to answer the connect and each\n"
	"                    round trip (default 2); a broker that does not (stopped)\n"
	"                    ends the collector with exit 1 and says so. Waiting for\n"
	"                    a new version has no limit.\n";

struct collector_stats {
	struct collector_result r;              /* what the driver gets */
	unsigned logs_left;                     /* mismatch reports still printed */
	const char *model;
	bool layout_checked;                    /* the model is a demo model */
};

static void collector_log_mismatch(struct collector_stats *st, const wsync_view *v,
                                   const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void collector_log_mismatch(struct collector_stats *st, const wsync_view *v,
                                   const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!st->logs_left)
		return;
	st->logs_left--;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	say_error("version %" PRIu64 " (step %" PRIu64 "): %s%s", v->version, v->step, msg,
	          st->logs_left ? "" : " (further mismatches not shown)");
}

/* Checks one tensor of the view: inside the view, aligned, every byte the
 * pattern of view.step. */
static bool tensor_verify(struct collector_stats *st, const wsync_view *v,
                          const wsync_tensor_desc *d)
{
	uint64_t bytes = wsync_tensor_bytes(d), bad;
	const uint8_t *p;

	if (d->offset % 8 || d->offset > v->bytes || bytes > v->bytes - d->offset) {
		collector_log_mismatch(st, v, "tensor '%s' (offset %" PRIu64 ", %" PRIu64
		                       " bytes) does not fit a %zu-byte view",
		                       d->name, d->offset, bytes, v->bytes);
		return false;
	}
	p = (const uint8_t *)v->base + d->offset;
	bad = pattern_find_mismatch(p, d->offset, bytes, v->step);
	if (bad == bytes)
		return true;
	collector_log_mismatch(st, v, "tensor '%s' byte %" PRIu64 ": expected 0x%02x, read 0x%02x",
	                       d->name, bad, pattern_byte(d->offset, bad, v->step), p[bad]);
	return false;
}

/* Checks every byte of every tensor, and that lookup by name finds the
 * first tensor where the table says it is. */
static bool view_verify(struct collector_stats *st, const wsync_view *v)
{
	const wsync_tensor_desc *desc;
	const void *data;
	bool ok = true;
	int err;

	if (!v->n_tensors || !v->tensors) {
		collector_log_mismatch(st, v, "the view has no tensors");
		return false;
	}
	for (size_t i = 0; i < v->n_tensors; i++)
		ok &= tensor_verify(st, v, &v->tensors[i]);
	err = wsync_view_tensor(v, v->tensors[0].name, &data, &desc);
	if (err) {
		say_wsync_error("look up the first tensor by name", err);
		return false;
	}
	if (data != (const char *)v->base + v->tensors[0].offset ||
	    desc->offset != v->tensors[0].offset || strcmp(desc->name, v->tensors[0].name)) {
		collector_log_mismatch(st, v, "lookup of '%s' disagrees with the tensor table",
		                       v->tensors[0].name);
		return false;
	}
	return ok;
}

/* Lag of a view: versions skipped since the previous view (published while
 * this collector was busy), and the time from commit to holding it. The
 * first view is left out: its wait includes attaching to the model. False
 * if the version did not go up. */
static bool collector_account(struct collector_stats *st, const wsync_view *v,
                              int64_t held_ns)
{
	int64_t lag = held_ns > v->published_ns ? held_ns - v->published_ns : 0;

	if (!st->r.views++) {
		st->r.first_version = v->version;
		printf("first view: version %" PRIu64 " (step %" PRIu64 "), %.1f MiB in %zu"
		       " tensors, %.1f ms after its commit\n", v->version, v->step,
		       mib_of(v->bytes), v->n_tensors, (double)lag / 1e6);
	} else if (v->version <= st->r.last_version) {
		collector_log_mismatch(st, v, "came after version %" PRIu64, st->r.last_version);
		return false;
	} else {
		if (v->version - st->r.last_version - 1 > st->r.max_skip)
			st->r.max_skip = v->version - st->r.last_version - 1;
		st->r.lag_sum_ns += lag;
		if (lag > st->r.lag_max_ns)
			st->r.lag_max_ns = lag;
	}
	st->r.last_version = v->version;
	return true;
}

/* A mistyped --model would wait in silence: without a first version, the
 * collector says once what it waits for, after a second when other models
 * are published (then the name is likely wrong), after a few when none is
 * (the demo driver starts its collectors before the trainer). True once
 * said. */
static bool collector_say_waiting(wsync_client *client, const char *model, int64_t waited_ns)
{
	wsync_model_info info[32];
	char names[512] = "";
	size_t n = 0, at = 0;

	if (wsync_models(client, info, 32, &n))
		n = 0;
	for (size_t i = 0; i < n && i < 32 && at < sizeof(names); i++) {
		if (!info[i].published || !strcmp(info[i].name, model))
			continue;
		at += (size_t)snprintf(names + at, sizeof(names) - at, "%s%s", at ? ", " : "",
		                       info[i].name);
	}
	if (waited_ns < (names[0] ? 1 : 5) * NS_PER_S)
		return false;
	say_error("waiting for model '%s': nothing published under that name yet (%s%s); "
	          "is the name right?", model, names[0] ? "published here: " : "no model is "
	          "published here", names);
	return true;
}

static int collector_loop(wsync_client *client, wsync_sub *sub, struct collector_stats *st)
{
	int64_t since = now_ns(CLOCK_MONOTONIC);
	bool told = false;

	while (!g_stop) {
		wsync_view v;
		int64_t held_ns;
		bool ok;
		int err;

		err = wsync_sub_wait(sub, st->r.last_version, 500 * NS_PER_MS, &v);
		if (err == -ETIMEDOUT || err == -EINTR) {
			if (!told && !st->r.views)
				told = collector_say_waiting(client, st->model,
				                             now_ns(CLOCK_MONOTONIC) - since);
			continue;
		}
		if (err) {
			st->r.broker_gone = err == -ENOTCONN;
			say_wsync_error("wait for a version", err);
			return err;
		}
		if (!st->layout_checked) {
			char why[256];

			/* another model's bytes would all read as failures */
			if (!model_is_demo(v.tensors, v.n_tensors, why, sizeof why)) {
				say_error("model '%s' is not a demo model (%s): the collector checks "
				          "the byte pattern of 'wsync-demo trainer', so it reads only "
				          "models that trainer publishes", st->model, why);
				wsync_sub_release(sub, &v);
				return -EMEDIUMTYPE;
			}
			st->layout_checked = true;
		}
		held_ns = now_ns(CLOCK_REALTIME);
		ok = collector_account(st, &v, held_ns);
		ok &= view_verify(st, &v);
		st->r.failures += !ok;
		wsync_sub_release(sub, &v);
	}
	return 0;
}

static int collector_run(const char *endpoint, const char *model, unsigned id,
                         double timeout_s)
{
	struct collector_stats st = { .r.id = id, .logs_left = MAX_FAILURE_LOGS };
	wsync_client *client = NULL;
	wsync_sub *sub = NULL;
	char name[64];
	int err;

	snprintf(name, sizeof name, "wsync-demo-collector-%u", id);
	bound_round_trips(timeout_s);
	err = wsync_connect(endpoint, name, &client);
	if (err) {
		say_connect_error(endpoint, err);
		return 1;
	}
	err = wsync_sub_open(client, model, &sub);
	if (err) {
		char what[WSYNC_NAME_MAX + 32];

		snprintf(what, sizeof what, "subscribe to model '%s'", model);
		say_wsync_error(what, err);
		wsync_close(client);
		return 1;
	}
	st.model = model;
	err = collector_loop(client, sub, &st);
	result_print_collector(&st.r);
	wsync_sub_close(sub);
	wsync_close(client);
	return err || st.r.failures ? 1 : 0;
}

int collector_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "endpoint", required_argument, NULL, 'e' },
		{ "name",     required_argument, NULL, 'e' },
		{ "model",    required_argument, NULL, 'M' },
		{ "id",       required_argument, NULL, 'i' },
		{ "timeout",  required_argument, NULL, 'T' },
		{ "help",     no_argument,       NULL, 'h' },
		{ 0 },
	};
	const char *endpoint = NULL, *model = MODEL_NAME;
	uint64_t id = 0;
	double timeout_s = -1;
	int c, bad = 0;

	snprintf(g_role, sizeof g_role, "collector: ");
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'e': endpoint = optarg; break;
		case 'M': bad |= !model_name_ok(optarg); model = optarg; break;
		case 'i': bad |= parse_count("id", optarg, 0, 1000000, &id); break;
		case 'T': bad |= parse_seconds("timeout", optarg, &timeout_s); break;
		case 'h': fputs(collector_usage_text, stdout); return 0;
		default:  bad = say_bad_option(argv); break;
		}
	}
	if (bad || optind < argc)
		return say_usage_error(bad ? NULL : argv[optind], "wsync-demo collector");
	snprintf(g_role, sizeof g_role, "collector %u: ", (unsigned)id);
	setvbuf(stdout, NULL, _IOLBF, 0);
	catch_stop_signals();
	return collector_run(endpoint, model, (unsigned)id, timeout_s);
}
