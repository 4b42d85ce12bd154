/*
 * tools/ctl/show.c — wsyncctl status, models, sessions: the control segment
 * as tables or JSON. Only `models` talks to the broker, once per ready model
 * it has not seen, to subscribe and read the latest version's checksum.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

enum show_what { SHOW_STATUS, SHOW_MODELS, SHOW_SESSIONS };

static const char *const show_usage[] = {
	[SHOW_STATUS] =
	"usage: wsyncctl status [OPTIONS]\n"
	"\n"
	"The broker: instance, pid, generation, state, uptime, heartbeat, shared\n"
	"memory used and allowed, models and sessions.\n\n",
	[SHOW_MODELS] =
	"usage: wsyncctl models [OPTIONS]\n"
	"\n"
	"One row per model: state, latest version and step, its age, slab size,\n"
	"slots in use/total, commits, collectors, the worst collector lag in\n"
	"versions, and the latest version's checksum ('-' if it has none).\n\n",
	[SHOW_SESSIONS] =
	"usage: wsyncctl sessions [OPTIONS]\n"
	"\n"
	"One row per connected client: id, pid, name, role, models, the version it\n"
	"reads (* = holds it now), its lag, acquires, waits, timeouts, connected\n"
	"for. Figures of reading are mirrored by the broker once a second.\n\n",
};

static const char *const show_names[] = { "status", "models", "sessions" };

static void print_status(const struct snap *s)
{
	char a[32], b[32], up[32], hb[32];

	printf("instance    %s\n", s->instance);
	printf("broker pid  %" PRIu32 "\n", s->broker_pid);
	printf("generation  %" PRIu64 "\n", s->generation);
	printf("state       %s\n", snap_state_name(s->state));
	printf("uptime      %s\n", fmt_age(up, sizeof(up), s->now_ns - s->started_ns));
	printf("heartbeat   %s ago\n", fmt_age(hb, sizeof(hb), s->now_ns - s->heartbeat_ns));
	printf("shm         %s of %s\n", fmt_bytes(a, sizeof(a), s->shm_used),
	       fmt_bytes(b, sizeof(b), s->shm_limit));
	printf("max slots   %" PRIu32 "\n", s->max_slots);
	printf("models      %" PRIu32 "\n", s->n_models);
	printf("sessions    %" PRIu32 " (%" PRIu64 " since start)\n", s->n_sessions,
	       s->sessions_total);
}

static void print_models(const struct snap *s)
{
	char sz[32], age[32], cs[32], slots[16];

	printf("%-24s %-8s %8s %8s %8s %10s %7s %8s %6s %5s %-16s\n", "MODEL", "STATE",
	       "VERSION", "STEP", "AGE", "SLAB", "SLOTS", "COMMITS", "COLL", "LAG", "CHECKSUM");
	for (uint32_t i = 0; i < s->n_models; i++) {
		const struct snap_model *m = &s->models[i];

		snprintf(slots, sizeof(slots), "%" PRIu32 "/%" PRIu32, m->slots_used, m->n_slots);
		printf("%-24s %-8s %8" PRIu64 " %8" PRIu64 " %8s %10s %7s %8" PRIu64 " %6" PRIu32
		       " %5" PRIu64 " %-16s\n", m->name, snap_model_state_name(m->state),
		       m->version, m->step,
		       m->version ? fmt_age(age, sizeof(age), s->now_ns - m->commit_ns) : "-",
		       fmt_bytes(sz, sizeof(sz), m->bytes), slots, m->commits, m->collectors,
		       m->worst_lag, fmt_checksum(cs, sizeof(cs), m));
	}
}

static void print_sessions(const struct snap *s)
{
	char models[64], ver[32], lag[24], con[32];

	printf("%6s %8s %-16s %-7s %-20s %10s %5s %10s %8s %8s %8s\n", "ID", "PID", "NAME",
	       "ROLE", "MODELS", "VERSION", "LAG", "ACQUIRES", "WAITS", "TIMEOUTS", "CONN");
	for (uint32_t i = 0; i < s->n_sessions; i++) {
		const struct snap_session *e = &s->sessions[i];

		fmt_session_models(models, sizeof(models), s, e);
		if (e->view_version)
			snprintf(ver, sizeof(ver), "%" PRIu64 "%s", e->view_version, e->held ? "*" : "");
		else
			snprintf(ver, sizeof(ver), "-");
		if (e->lag_known)
			snprintf(lag, sizeof(lag), "%" PRIu64, e->lag);
		else
			snprintf(lag, sizeof(lag), "-");
		printf("%6" PRIu32 " %8" PRIu32 " %-16.16s %-7s %-20.20s %10s %5s %10" PRIu64
		       " %8" PRIu32 " %8" PRIu32 " %8s\n", e->id, e->pid, e->name,
		       snap_roles_name(e->roles), models, ver, lag, e->acquires, e->waits,
		       e->timeouts, fmt_age(con, sizeof(con), s->now_ns - e->connected_ns));
	}
}

static int show(const struct ctl_opts *common, int argc, char **argv, enum show_what what)
{
	static const struct option longopts[] = { CTL_COMMON_LONGOPTS, { NULL, 0, NULL, 0 } };
	wsync_sub *subs[WSYNC_MAX_MODELS] = { 0 };
	struct ctl_opts o = *common;
	wsync_client *c;
	struct snap *s;
	int opt, r;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, CTL_CMD_SHORTOPTS, longopts, NULL)) != -1) {
		r = ctl_common_opt(opt, &o, show_names[what], show_usage[what]);
		if (r != CTL_GO_ON)
			return r;
	}
	if (optind < argc)
		return ctl_usage_error(show_names[what], "unexpected argument '%s'", argv[optind]);
	if (ctl_connect(&o, &c))
		return CTL_ERROR;
	s = ctl_snapshot(c);
	if (!s) {
		wsync_close(c);
		return CTL_ERROR;
	}
	if (what == SHOW_MODELS)
		snap_checksums(c, subs, s);
	r = CTL_OK;
	if (o.json) {
		json_t *doc = what == SHOW_STATUS ? snap_json_status(s) :
		              what == SHOW_MODELS ? snap_json_models(s) : snap_json_sessions(s);
		r = ctl_print_json(doc);
	} else if (what == SHOW_STATUS) {
		print_status(s);
	} else if (what == SHOW_MODELS) {
		print_models(s);
	} else {
		print_sessions(s);
	}
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++)
		wsync_sub_close(subs[i]);
	free(s);
	wsync_close(c);
	return r;
}

int ctl_cmd_status(const struct ctl_opts *o, int argc, char **argv)
{
	return show(o, argc, argv, SHOW_STATUS);
}

int ctl_cmd_models(const struct ctl_opts *o, int argc, char **argv)
{
	return show(o, argc, argv, SHOW_MODELS);
}

int ctl_cmd_sessions(const struct ctl_opts *o, int argc, char **argv)
{
	return show(o, argc, argv, SHOW_SESSIONS);
}
