/*
 * tools/ctl/sub.c — wsyncctl wait, verify and rm: subscribe, take a version,
 * delete models.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checksum.h"
#include "ctl.h"

static const char wait_usage[] =
	"usage: wsyncctl wait MODEL [--after V] [--timeout S] [OPTIONS]\n"
	"\n"
	"Waits until MODEL (which need not exist yet) has a version newer than V\n"
	"(default 0: any version), then prints its version, step and publish time.\n"
	"\n"
	"  --after V      wait for a version newer than V\n"
	"  --timeout S    give up after S seconds (decimals allowed; default: wait\n"
	"                 forever once the broker answered, which it gets 2 s for)\n"
	"\n"
	"exit codes: 0 got a version, 1 timed out (the message says when the name\n"
	"was never published), 2 usage, 3 no broker, a broker not responding, or\n"
	"another error (the broker went away while waiting).\n\n";

static const char verify_usage[] =
	"usage: wsyncctl verify MODEL [--version N] [OPTIONS]\n"
	"\n"
	"Recomputes the XXH3-64 checksum of MODEL's latest version and compares it\n"
	"with the one its publisher stored at commit (every version carries one\n"
	"unless its publisher opened the model with WSYNC_PUB_NO_CHECKSUM, or\n"
	"wsyncctl load --no-checksum). --version N fails unless N is the latest\n"
	"version.\n"
	"\n"
	"exit codes: 0 the checksum matches, 1 mismatch, 2 usage, 3 no broker, no such\n"
	"model, no checksum, or another error.\n\n";

/* Connects and subscribes to model; with must_exist, a model that was
 * never published is an error. */
static int open_model(const struct ctl_opts *o, const char *model, bool must_exist,
                      wsync_client **c, wsync_sub **s)
{
	int err, r = ctl_connect(o, c);

	if (r)
		return r;
	if (must_exist) {
		const struct snap_model *m;
		struct snap *snap;
		struct seg seg;

		r = ctl_snapshot(o, &seg, &snap);
		if (r)
			goto out_close;
		m = snap_model_find(snap, model);
		if (!m || m->state != WSYNC_MODEL_READY || !m->version)
			r = report_fail(EXIT_FAILED, "not_found", "model '%s': %s on broker '%s'",
			                model, m ? "nothing published yet" : "no such model",
			                snap->instance);
		free(snap);
		seg_detach(&seg);
		if (r)
			goto out_close;
	}
	err = wsync_sub_open(*c, model, s);
	if (!err)
		return EXIT_DONE;
	r = report_wsync_fail(EXIT_FAILED, "subscribe", err);
out_close:
	wsync_close(*c);
	return r;
}

static json_t *view_json(const char *model, const wsync_view *v)
{
	return json_pack("{s:s, s:I, s:I, s:I}", "model", model,
	                 "version", (json_int_t)v->version, "step", (json_int_t)v->step,
	                 "published_ns", (json_int_t)v->published_ns);
}

int ctl_cmd_wait(const struct ctl_opts *common, int argc, char **argv)
{
	static const struct option longopts[] = {
		CTL_COMMON_LONGOPTS,
		{ "after",   required_argument, NULL, 'a' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl_opts o = *common;
	uint64_t after = 0;
	const char *model;
	wsync_client *c;
	wsync_sub *s;
	wsync_view v;
	int opt, r, err;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, CTL_CMD_SHORTOPTS, longopts, NULL)) != -1) {
		if (opt == 'a') {
			if (!ctl_parse_u64(optarg, &after))
				return report_usage("wait", "--after wants a version number, not '%s'",
				                    optarg);
			continue;
		}
		r = ctl_common_opt(opt, &o, "wait", wait_usage, argv);
		if (r != CTL_GO_ON)
			return r;
	}
	if (optind != argc - 1)
		return report_usage("wait", optind >= argc ? "no MODEL given" : "one MODEL only");
	model = argv[optind];
	if ((r = ctl_check_model("wait", model)) != CTL_GO_ON)
		return r;
	r = open_model(&o, model, false, &c, &s);
	if (r)
		return r;
	err = wsync_sub_wait(s, after, o.timeout_ns >= 0 ? o.timeout_ns : WSYNC_FOREVER, &v);
	if (!err) {
		if (o.json)
			r = report_json(view_json(model, &v));
		else
			printf("%s version %" PRIu64 " step %" PRIu64 " published_ns %" PRId64 "\n",
			       model, v.version, v.step, v.published_ns);
		wsync_sub_release(s, &v);
	} else {
		/* the library's message says what was missed, and whether the
		 * name was ever published (a typo) */
		r = report_wsync_fail(err == -ETIMEDOUT ? EXIT_NEGATIVE : EXIT_FAILED, "wait", err);
	}
	wsync_sub_close(s);
	wsync_close(c);
	return r;
}

int ctl_take_latest(const struct ctl_opts *o, const char *model, bool have_version,
                    uint64_t version, wsync_client **c, wsync_sub **s, wsync_view *v)
{
	int err, r = open_model(o, model, true, c, s);

	if (r)
		return r;
	err = wsync_sub_acquire(*s, v);
	if (err) {
		r = report_wsync_fail(EXIT_FAILED, "acquire", err);
	} else if (have_version && v->version != version) {
		r = report_fail(EXIT_FAILED, "not_latest", "model '%s': version %" PRIu64 " is not "
		                "the latest (%" PRIu64 "); only the latest version can be read",
		                model, version, v->version);
		wsync_sub_release(*s, v);
	}
	if (!r)
		return EXIT_DONE;
	wsync_sub_close(*s);
	wsync_close(*c);
	return r;
}

int ctl_cmd_verify(const struct ctl_opts *common, int argc, char **argv)
{
	static const struct option longopts[] = {
		CTL_COMMON_LONGOPTS,
		{ "version", required_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl_opts o = *common;
	bool have_version = false;
	uint64_t version = 0, sum = 0;
	const char *model;
	wsync_client *c;
	wsync_sub *s;
	wsync_view v;
	int opt, r, err;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, CTL_CMD_SHORTOPTS, longopts, NULL)) != -1) {
		if (opt == 'v') {
			if (!ctl_parse_u64(optarg, &version))
				return report_usage("verify", "--version wants a number, not '%s'", optarg);
			have_version = true;
			continue;
		}
		r = ctl_common_opt(opt, &o, "verify", verify_usage, argv);
		if (r != CTL_GO_ON)
			return r;
	}
	if (optind != argc - 1)
		return report_usage("verify", optind >= argc ? "no MODEL given" : "one MODEL only");
	model = argv[optind];
	if ((r = ctl_check_model("verify", model)) != CTL_GO_ON)
		return r;
	r = ctl_take_latest(&o, model, have_version, version, &c, &s, &v);
	if (r)
		return r;
	wsync_view_checksum(&v, &sum);
	err = wsync_view_verify(&v);
	if (!err) {
		if (o.json)
			r = report_json(json_pack("{s:s, s:I, s:s, s:o}", "model", model,
			                          "version", (json_int_t)v.version, "result", "ok",
			                          "checksum", json_sprintf("%016" PRIx64, sum)));
		else
			printf("%s version %" PRIu64 ": checksum %016" PRIx64 " ok\n", model,
			       v.version, sum);
	} else {
		char text[768];
		int code = err == -EBADMSG ? EXIT_NEGATIVE : EXIT_FAILED;
		const char *result = err == -EBADMSG ? "mismatch" : err == -ENODATA ?
		                     "no checksum" : "error";

		report_wsync_text(err, text, sizeof(text));
		fprintf(stderr, "wsyncctl: verify: %s\n", text);
		r = code;
		if (o.json)
			r = report_json_status(json_pack("{s:s, s:I, s:s, s:o, s:s, s:s}",
			                       "model", model, "version", (json_int_t)v.version,
			                       "result", result,
			                       "checksum", sum ? json_sprintf("%016" PRIx64, sum) :
			                                   json_null(),
			                       "error", text, "reason", report_reason_of(err)), code);
	}
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_close(c);
	return r;
}

static const char rm_usage[] =
	"usage: wsyncctl rm MODEL... [OPTIONS]\n"
	"\n"
	"Deletes models that have no publisher. Their collectors get -EIDRM (a\n"
	"waiting one wakes) and subscribe again; views they hold keep their bytes\n"
	"until released. The names publish again at versions above the old ones.\n"
	"Every name is tried; each is reported (with --json, in \"models\").\n"
	"A model belongs to the user that first published it: only that user,\n"
	"the broker's user and root may delete it.\n"
	"Exit 0 if every model was deleted, 3 if one was not (no such model, it\n"
	"has a publisher, or it is another user's: the message names it).\n\n";

int ctl_cmd_rm(const struct ctl_opts *common, int argc, char **argv)
{
	static const struct option longopts[] = {
		CTL_COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct ctl_opts o = *common;
	json_t *items;
	wsync_client *c;
	int opt, r, failed = 0, n;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, CTL_CMD_SHORTOPTS, longopts, NULL)) != -1) {
		r = ctl_common_opt(opt, &o, "rm", rm_usage, argv);
		if (r != CTL_GO_ON)
			return r;
	}
	if (optind >= argc)
		return report_usage("rm", "no MODEL given");
	for (int i = optind; i < argc; i++)
		if ((r = ctl_check_model("rm", argv[i])) != CTL_GO_ON)
			return r;
	r = ctl_connect(&o, &c);
	if (r)
		return r;
	items = json_array();
	n = argc - optind;
	for (int i = optind; i < argc; i++) {
		int err = wsync_model_delete(c, argv[i]);
		char text[768];

		if (!err) {
			if (!o.json)
				printf("deleted %s\n", argv[i]);
			json_array_append_new(items, json_pack("{s:s, s:b}", "model", argv[i],
			                                       "ok", 1));
			continue;
		}
		failed++;
		report_wsync_text(err, text, sizeof(text));
		fprintf(stderr, "wsyncctl: rm %s: %s\n", argv[i], text);
		json_array_append_new(items, json_pack("{s:s, s:b, s:s, s:s}", "model", argv[i],
		                                       "ok", 0, "error", text,
		                                       "reason", report_reason_of(err)));
	}
	wsync_close(c);
	r = failed ? EXIT_FAILED : EXIT_DONE;
	if (o.json) {
		json_t *doc = json_pack("{s:o}", "models", items);

		if (failed) {
			char msg[128];

			snprintf(msg, sizeof(msg), "%d of %d models not deleted", failed, n);
			json_object_set_new(doc, "error", json_string(msg));
			json_object_set_new(doc, "reason", json_string(failed == n ? "failed" :
			                                               "partial"));
		}
		return report_json_status(doc, r);
	}
	json_decref(items);
	return r;
}
