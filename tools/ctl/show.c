/*
 * tools/ctl/show.c — wsyncctl status, models, sessions and ping: the control
 * segment as tables or JSON, read without a session (seg.h). Nothing here
 * sends the broker anything, so a stopped broker is shown, not waited for.
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
	"The broker: its health (running, not responding, stopped, dead), instance,\n"
	"pid, generation, uptime, heartbeat, shared memory used and allowed, models\n"
	"and sessions. Read from its control segment: a stopped broker is shown as\n"
	"such at once. Exit 0 for a running (or starting) broker; 3 when there is\n"
	"none, or when it shut down, died or is not responding (what its segment\n"
	"holds is still shown, the health on stderr).\n\n",
	[SHOW_MODELS] =
	"usage: wsyncctl models [OPTIONS]\n"
	"\n"
	"One row per model: state, latest version and step, its age, slab size,\n"
	"slots pinned by collectors' views/total (PINNED), slots holding a\n"
	"version/total (USED), commits, collectors, the worst collector lag (commits\n"
	"not taken, and how long ago the version they read was superseded), the\n"
	"publisher's pid, the latest version's checksum ('-' if it has none) and\n"
	"the checksum mismatches its collectors found (SUMFAIL). Below the table,\n"
	"each model whose publisher has a staleness bound (max_lead): its begins\n"
	"held back and timed out, and the collectors at or past the bound (their\n"
	"version and how many versions behind the latest). Then each model whose\n"
	"collectors declared a staleness bound (max_lag): how many did, and those\n"
	"past it. Exit 3, after the\n"
	"table, when the broker shut down, died or is not responding.\n\n",
	[SHOW_SESSIONS] =
	"usage: wsyncctl sessions [OPTIONS]\n"
	"\n"
	"One row per connected client: id, pid, full name, role, models, the\n"
	"version it reads (* = holds it now) and the slot it pins, its lag in\n"
	"commits and in time since that version was superseded ('~' = an\n"
	"estimate), how long it has held the view, acquires, waits, timeouts,\n"
	"connected for, and the staleness bound it declared (BOUND: versions\n"
	"'v' and age 's', '-' = none, '!' first = its lag or its version's age\n"
	"is past it). The broker computes the reading figures once a second,\n"
	"all at one instant (status shows how old they are). Exit 3, after the\n"
	"table, when the broker shut down, died or is not responding.\n\n",
};

static const char *const show_names[] = { "status", "models", "sessions" };

static void print_status(const struct snap *s)
{
	char a[32], b[32], up[32], hb[32], st[32];

	printf("health      %s\n", s->health.text);
	printf("instance    %s\n", s->instance);
	printf("broker pid  %" PRIu32 "\n", s->broker_pid);
	printf("generation  %" PRIu64 "\n", s->generation);
	printf("state       %s\n", snap_state_name(s->state));
	printf("uptime      %s\n", fmt_age(up, sizeof(up), s->uptime_ns));
	printf("heartbeat   %s ago\n", fmt_age(hb, sizeof(hb), s->now_ns - s->heartbeat_ns));
	if (s->stats_ns)
		printf("stats       %s ago\n", fmt_age(st, sizeof(st), s->now_ns - s->stats_ns));
	else
		printf("stats       not computed yet\n");
	printf("shm         %s of %s\n", fmt_bytes(a, sizeof(a), s->shm_used),
	       fmt_bytes(b, sizeof(b), s->shm_limit));
	printf("max slots   %" PRIu32 "\n", s->max_slots);
	printf("models      %" PRIu32 "\n", s->n_models);
	printf("sessions    %" PRIu32 " (%" PRIu64 " since start)\n", s->n_sessions,
	       s->sessions_total);
}

static int name_width(const struct snap *s, bool models, int min)
{
	int w = min;

	for (uint32_t i = 0; i < (models ? s->n_models : s->n_sessions); i++) {
		int n = (int)strlen(models ? s->models[i].name : s->sessions[i].name);

		if (n > w)
			w = n;
	}
	return w;
}

/* A model's staleness bound (docs/LIVE.md): the collectors a next begin
 * would wait for, each with its version read and its versions behind. */
static void print_lead(const struct snap *s, const struct snap_model *m)
{
	uint32_t shown = 0;

	if (!m->max_lead)
		return;
	printf("%s: max_lead %" PRIu32 ", %" PRIu64 " begins held back, %" PRIu64
	       " timed out", m->name, m->max_lead, m->lead_waits, m->lead_timeouts);
	for (uint32_t j = 0; j < s->n_sessions; j++) {
		const struct snap_session *e = &s->sessions[j];

		if (e->view_model != m->id || !e->view_version || e->view_version > m->version ||
		    m->version - e->view_version < m->max_lead)
			continue;
		printf("%s '%s' (pid %" PRIu32 ") at v%" PRIu64 ", %" PRIu64 " behind",
		       shown++ ? "," : "; at the bound:", e->name, e->pid, e->view_version,
		       m->version - e->view_version);
	}
	printf("\n");
}

/* The staleness bounds a model's collectors declared (docs/LIVE.md) and
 * those past theirs: lag in versions, age of the version they read. */
static void print_lag_bounds(const struct snap *s, const struct snap_model *m)
{
	char bound[48], age[32];
	uint32_t shown = 0;

	if (!m->bounded)
		return;
	printf("%s: %" PRIu32 " of %" PRIu32 " collectors declare max_lag, %" PRIu32
	       " past it", m->name, m->bounded, m->collectors, m->over_bound);
	for (uint32_t j = 0; j < s->n_sessions; j++) {
		const struct snap_session *e = &s->sessions[j];

		if (!e->over_bound || e->bound_model != m->id)
			continue;
		printf("%s '%s' (pid %" PRIu32 ") at v%" PRIu64 ", %" PRIu64 " behind, %s old, "
		       "max_lag %s", shown++ ? "," : ":", e->name, e->pid, e->view_version, e->lag,
		       fmt_age(age, sizeof(age), (int64_t)(e->age_ms * 1e6)),
		       fmt_bound(bound, sizeof(bound), e, false));
	}
	printf("\n");
}

static void print_models(const struct snap *s)
{
	char sz[32], age[32], cs[32], slots[16], pinned[16], lag[24], ms[32], pid[16];
	int w = name_width(s, true, 5);

	printf("%-*s %-8s %8s %8s %8s %10s %6s %6s %8s %5s %6s %8s %8s %-16s %7s\n", w, "MODEL",
	       "STATE", "VERSION", "STEP", "AGE", "SLAB", "PINNED", "USED", "COMMITS", "COLL", "LAG",
	       "BEHIND", "PUB", "CHECKSUM", "SUMFAIL");
	for (uint32_t i = 0; i < s->n_models; i++) {
		const struct snap_model *m = &s->models[i];

		snprintf(pinned, sizeof(pinned), "%" PRIu32 "/%" PRIu32, m->slots_pinned, m->n_slots);
		snprintf(slots, sizeof(slots), "%" PRIu32 "/%" PRIu32, m->slots_used, m->n_slots);
		{
			struct snap_session worst = { .lag_known = m->worst_known,
			                              .lag = m->worst_lag, .lag_ms = m->worst_lag_ms,
			                              .lag_estimated = m->worst_estimated };

			fmt_lag(lag, sizeof(lag), &worst);
			fmt_lag_ms(ms, sizeof(ms), &worst);
		}
		snprintf(pid, sizeof(pid), m->publisher_pid ? "%" PRIu32 : "-", m->publisher_pid);
		printf("%-*s %-8s %8" PRIu64 " %8" PRIu64 " %8s %10s %6s %6s %8" PRIu64 " %5" PRIu32
		       " %6s %8s %8s %-16s %7" PRIu64 "\n", w, m->name,
		       snap_model_state_name(m->state), m->version, m->step,
		       m->version ? fmt_age(age, sizeof(age), s->now_ns - m->commit_ns) : "-",
		       fmt_bytes(sz, sizeof(sz), m->bytes), pinned, slots, m->commits, m->collectors,
		       lag, ms, pid, fmt_checksum(cs, sizeof(cs), m), m->checksum_failures);
	}
	for (uint32_t i = 0; i < s->n_models; i++)
		print_lead(s, &s->models[i]);
	for (uint32_t i = 0; i < s->n_models; i++)
		print_lag_bounds(s, &s->models[i]);
}

static void print_sessions(const struct snap *s)
{
	char models[256], ver[32], lag[24], ms[32], held[32], slot[8], con[32], bound[48];
	int w = name_width(s, false, 4);

	printf("%6s %8s %-*s %-7s %-16s %10s %6s %8s %4s %8s %10s %8s %8s %8s %11s\n", "ID",
	       "PID", w, "NAME", "ROLE", "MODELS", "VERSION", "LAG", "BEHIND", "SLOT", "HELD",
	       "ACQUIRES", "WAITS", "TIMEOUTS", "CONN", "BOUND");
	for (uint32_t i = 0; i < s->n_sessions; i++) {
		const struct snap_session *e = &s->sessions[i];

		fmt_session_models(models, sizeof(models), s, e);
		if (e->view_version)
			snprintf(ver, sizeof(ver), "%" PRIu64 "%s", e->view_version, e->held ? "*" : "");
		else
			snprintf(ver, sizeof(ver), "-");
		snprintf(slot, sizeof(slot), e->slot >= 0 ? "%d" : "-", e->slot);
		if (e->held)
			fmt_age(held, sizeof(held), (int64_t)(e->view_ms * 1e6));
		else
			snprintf(held, sizeof(held), "-");
		printf("%6" PRIu32 " %8" PRIu32 " %-*s %-7s %-16s %10s %6s %8s %4s %8s %10" PRIu32
		       " %8" PRIu32 " %8" PRIu32 " %8s %11s\n", e->id, e->pid, w, e->name,
		       snap_roles_name(e->roles), models, ver, fmt_lag(lag, sizeof(lag), e),
		       fmt_lag_ms(ms, sizeof(ms), e), slot, held, e->acquires, e->waits,
		       e->timeouts, fmt_age(con, sizeof(con), s->now_ns - e->connected_ns),
		       fmt_bound(bound, sizeof(bound), e, true));
	}
}

static int parse_no_args(const struct ctl_opts *common, struct ctl_opts *o, int argc,
                         char **argv, const char *name, const char *usage)
{
	static const struct option longopts[] = { CTL_COMMON_LONGOPTS, { NULL, 0, NULL, 0 } };
	int opt, r;

	*o = *common;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, CTL_CMD_SHORTOPTS, longopts, NULL)) != -1) {
		r = ctl_common_opt(opt, o, name, usage, argv);
		if (r != CTL_GO_ON)
			return r;
	}
	if (optind < argc)
		return report_usage(name, "unexpected argument '%s'", argv[optind]);
	return CTL_GO_ON;
}

static int show(const struct ctl_opts *common, int argc, char **argv, enum show_what what)
{
	struct ctl_opts o;
	struct seg seg;
	struct snap *s;
	bool healthy;
	int r = parse_no_args(common, &o, argc, argv, show_names[what], show_usage[what]);

	if (r != CTL_GO_ON)
		return r;
	r = ctl_snapshot(&o, &seg, &s);
	if (r)
		return r;
	/* What the segment holds is shown whatever the health; the exit says
	 * whether a broker serves (scripts: `wsyncctl status || alert`). */
	healthy = s->health.state == HEALTH_OK || s->health.state == HEALTH_STARTING;
	if (o.json) {
		json_t *doc = what == SHOW_STATUS ? snap_json_status(s) :
		              json_pack("{s:o}", what == SHOW_MODELS ? "models" : "sessions",
		                        what == SHOW_MODELS ? snap_json_models(s) :
		                        snap_json_sessions(s));

		if (doc && !healthy) {
			json_object_set_new(doc, "error", json_string(s->health.text));
			json_object_set_new(doc, "reason",
			                    json_string(health_reason(s->health.state)));
		}
		r = healthy ? report_json(doc) : report_json_status(doc, EXIT_FAILED);
	} else {
		if (what == SHOW_STATUS)
			print_status(s);
		else if (what == SHOW_MODELS)
			print_models(s);
		else
			print_sessions(s);
		if (!healthy) {
			fflush(stdout);
			fprintf(stderr, "%s: %s\n", report_tool(), s->health.text);
			r = EXIT_FAILED;
		}
	}
	free(s);
	seg_detach(&seg);
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

static const char ping_usage[] =
	"usage: wsyncctl ping [OPTIONS]      (also: wsyncctl health)\n"
	"\n"
	"Whether the broker is alive and answering, for scripts and service managers,\n"
	"from its control segment, at once: a shut down, dead or signal-stopped broker\n"
	"is said without waiting; only a running one whose heartbeat is older than\n"
	"1.5 s gets --timeout (2 s) to move. Prints one line saying which.\n"
	"\n"
	"exit codes: 0 healthy; 1 not responding (stopped, e.g. by SIGSTOP, or\n"
	"starting); 2 no broker (none there, shut down, or dead); 3 usage.\n\n";

int ctl_cmd_ping(const struct ctl_opts *common, int argc, char **argv)
{
	struct ctl_opts o;
	struct health h;
	struct seg seg;
	char why[512];
	int r;

	report_set_usage_exit(3);                /* 2 means "no broker" here */
	r = parse_no_args(common, &o, argc, argv, "ping", ping_usage);
	if (r != CTL_GO_ON)
		return r;
	if (seg_attach(o.endpoint, &seg, why, sizeof(why)))
		health_judge(&seg, why, &h);     /* GONE, with why */
	else
		health_wait(&seg, ctl_broker_timeout(&o), &h);
	r = health_exit(h.state);
	if (o.json) {
		json_t *doc = json_pack("{s:s, s:s, s:o}", "health", health_reason(h.state),
		                        "text", h.text, "heartbeat_age_s",
		                        h.heartbeat_age_ns >= 0 ?
		                        json_real((double)h.heartbeat_age_ns / 1e9) : json_null());

		report_json_status(doc, r);
	} else {
		printf("%s\n", h.text);
	}
	seg_detach(&seg);
	return r;
}
