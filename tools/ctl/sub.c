/*
 * tools/ctl/sub.c — wsyncctl wait and verify: subscribe, take a version.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "checksum.h"
#include "ctl.h"

static const char wait_usage[] =
	"usage: wsyncctl wait MODEL [--after V] [--timeout S] [OPTIONS]\n"
	"\n"
	"Waits until MODEL (which need not exist yet) has a version newer than V\n"
	"(default 0: any version), then prints its version, step and publish time.\n"
	"\n"
	"  --after V      wait for a version newer than V\n"
	"  --timeout S    give up after S seconds (decimals allowed; default: forever)\n"
	"\n"
	"exit codes: 0 got a version, 1 timed out, 2 usage, 3 no broker or another error\n"
	"(the broker went away while waiting).\n\n";

static const char verify_usage[] =
	"usage: wsyncctl verify MODEL [--version N] [OPTIONS]\n"
	"\n"
	"Recomputes the XXH3-64 checksum of MODEL's latest version and compares it\n"
	"with the one its publisher stored at commit (models published with\n"
	"WSYNC_PUB_CHECKSUM, or wsyncctl load --checksum). --version N fails unless\n"
	"N is the latest version.\n"
	"\n"
	"exit codes: 0 the checksum matches, 1 mismatch, 2 usage, 3 no broker, no such\n"
	"model, no checksum, or another error.\n\n";

/* Connects and subscribes to model; with must_exist, a model that was
 * never published is an error. */
static int open_model(const struct ctl_opts *o, const char *model, bool must_exist,
                      wsync_client **c, wsync_sub **s)
{
	struct snap *snap;
	const struct snap_model *m;
	int err;

	if (ctl_connect(o, c))
		return CTL_ERROR;
	if (must_exist) {
		snap = ctl_snapshot(*c);
		if (!snap)
			goto out_close;
		m = snap_model_find(snap, model);
		if (!m || m->state != WSYNC_MODEL_READY || !m->version) {
			ctl_error("model '%s': %s on broker '%s'", model,
			          m ? "nothing published yet" : "no such model", snap->instance);
			free(snap);
			goto out_close;
		}
		free(snap);
	}
	err = wsync_sub_open(*c, model, s);
	if (!err)
		return CTL_OK;
	ctl_wsync_error("subscribe", err);
out_close:
	wsync_close(*c);
	return CTL_ERROR;
}

static void print_view(const struct ctl_opts *o, const char *model, const wsync_view *v)
{
	if (o->json) {
		ctl_print_json(json_pack("{s:s, s:I, s:I, s:I}", "model", model,
		                         "version", (json_int_t)v->version,
		                         "step", (json_int_t)v->step,
		                         "published_ns", (json_int_t)v->published_ns));
		return;
	}
	printf("%s version %" PRIu64 " step %" PRIu64 " published_ns %" PRId64 "\n",
	       model, v->version, v->step, v->published_ns);
}

int ctl_cmd_wait(const struct ctl_opts *common, int argc, char **argv)
{
	static const struct option longopts[] = {
		CTL_COMMON_LONGOPTS,
		{ "after",   required_argument, NULL, 'a' },
		{ "timeout", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl_opts o = *common;
	int64_t timeout = WSYNC_FOREVER;
	uint64_t after = 0;
	const char *model;
	wsync_client *c;
	wsync_sub *s;
	wsync_view v;
	double secs;
	int opt, r, err;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, CTL_CMD_SHORTOPTS, longopts, NULL)) != -1) {
		if (opt == 'a' && !ctl_parse_u64(optarg, &after))
			return ctl_usage_error("wait", "--after wants a version number, not '%s'", optarg);
		if (opt == 't') {
			if (!ctl_parse_seconds(optarg, &secs))
				return ctl_usage_error("wait", "--timeout wants seconds, not '%s'", optarg);
			timeout = (int64_t)(secs * 1e9);
		}
		if (opt == 'a' || opt == 't')
			continue;
		r = ctl_common_opt(opt, &o, "wait", wait_usage);
		if (r != CTL_GO_ON)
			return r;
	}
	if (optind != argc - 1)
		return ctl_usage_error("wait", optind >= argc ? "no MODEL given" : "one MODEL only");
	model = argv[optind];
	r = open_model(&o, model, false, &c, &s);
	if (r)
		return r;
	err = wsync_sub_wait(s, after, timeout, &v);
	if (!err) {
		print_view(&o, model, &v);
		wsync_sub_release(s, &v);
		r = CTL_OK;
	} else if (err == -ETIMEDOUT) {
		ctl_error("model '%s': no version after %" PRIu64 " within the timeout", model, after);
		r = CTL_NEGATIVE;
	} else {
		ctl_wsync_error("wait", err);
		r = CTL_ERROR;
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
		ctl_wsync_error("acquire", err);
		r = CTL_ERROR;
	} else if (have_version && v->version != version) {
		ctl_error("model '%s': version %" PRIu64 " is not the latest (%" PRIu64 "); "
		          "only the latest version can be read", model, version, v->version);
		wsync_sub_release(*s, v);
		r = CTL_ERROR;
	}
	if (!r)
		return CTL_OK;
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
				return ctl_usage_error("verify", "--version wants a number, not '%s'", optarg);
			have_version = true;
			continue;
		}
		r = ctl_common_opt(opt, &o, "verify", verify_usage);
		if (r != CTL_GO_ON)
			return r;
	}
	if (optind != argc - 1)
		return ctl_usage_error("verify", optind >= argc ? "no MODEL given" : "one MODEL only");
	model = argv[optind];
	r = ctl_take_latest(&o, model, have_version, version, &c, &s, &v);
	if (r)
		return r;
	wsync_view_checksum(&v, &sum);
	err = wsync_view_verify(&v);
	if (err == -EBADMSG) {
		ctl_wsync_error("verify", err);
		r = CTL_NEGATIVE;
	} else if (err == -ENODATA) {
		ctl_error("verify: %s", wsync_errmsg());
		r = CTL_ERROR;
	} else if (err) {
		ctl_wsync_error("verify", err);
		r = CTL_ERROR;
	}
	if (o.json)
		ctl_print_json(json_pack("{s:s, s:I, s:s, s:o}", "model", model,
		                         "version", (json_int_t)v.version,
		                         "result", !err ? "ok" : err == -EBADMSG ? "mismatch" :
		                                   err == -ENODATA ? "no checksum" : "error",
		                         "checksum", sum ? json_sprintf("%016" PRIx64, sum) :
		                                     json_null()));
	else if (!err)
		printf("%s version %" PRIu64 ": checksum %016" PRIx64 " ok\n", model, v.version, sum);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_close(c);
	return r;
}

static const char rm_usage[] =
	"usage: wsyncctl rm MODEL...\n"
	"\n"
	"Deletes models that have no publisher. Their collectors get -EIDRM (a\n"
	"waiting one wakes) and subscribe again; views they hold keep their bytes\n"
	"until released. The names publish again at versions above the old ones.\n"
	"Exit 0 if every model was deleted, 3 if one was not (no such model, or\n"
	"it has a publisher: the message names it).\n";

int ctl_cmd_rm(const struct ctl_opts *common, int argc, char **argv)
{
	static const struct option longopts[] = {
		CTL_COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct ctl_opts o = *common;
	wsync_client *c;
	int opt, r, rc = CTL_OK;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, CTL_CMD_SHORTOPTS, longopts, NULL)) != -1) {
		r = ctl_common_opt(opt, &o, "rm", rm_usage);
		if (r != CTL_GO_ON)
			return r;
	}
	if (optind >= argc)
		return ctl_usage_error("rm", "no MODEL given");
	r = ctl_connect(&o, &c);
	if (r)
		return r;
	for (int i = optind; i < argc; i++) {
		int err = wsync_model_delete(c, argv[i]);

		if (err) {
			ctl_wsync_error("rm", err);
			rc = CTL_ERROR;
		} else if (!o.json) {
			printf("deleted %s\n", argv[i]);
		}
	}
	if (o.json) {
		json_t *doc = json_object();

		json_object_set_new(doc, "ok", json_boolean(rc == CTL_OK));
		ctl_print_json(doc);
	}
	wsync_close(c);
	return rc;
}
