/*
 * tools/common/metrics.c — the Prometheus text exposition of a snapshot
 * (see metrics.h). Each family is written whole (HELP, TYPE, then its
 * samples), as the format asks; label values are escaped.
 */
#include "metrics.h"

#include <inttypes.h>
#include <string.h>

/* Label value escaping: backslash, double quote and newline. */
static void put_escaped(FILE *f, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			fputc('\\', f);
		if (*v == '\n') {
			fputs("\\n", f);
			continue;
		}
		fputc(*v, f);
	}
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void value(FILE *f, double v)
{
	if (v == (double)(int64_t)v && v < 9e15 && v > -9e15)
		fprintf(f, " %" PRId64 "\n", (int64_t)v);
	else
		fprintf(f, " %.9g\n", v);
}

static void broker_sample(FILE *f, const char *name, const char *broker, double v)
{
	fprintf(f, "%s{broker=\"", name);
	put_escaped(f, broker);
	fputs("\"}", f);
	value(f, v);
}

static void model_sample(FILE *f, const char *name, const char *broker,
                         const struct snap_model *m, double v)
{
	fprintf(f, "%s{broker=\"", name);
	put_escaped(f, broker);
	fputs("\",model=\"", f);
	put_escaped(f, m->name);
	fputs("\"}", f);
	value(f, v);
}

static void session_sample(FILE *f, const char *name, const char *broker,
                           const char *models, const struct snap_session *e, double v)
{
	fprintf(f, "%s{broker=\"", name);
	put_escaped(f, broker);
	fputs("\",model=\"", f);
	put_escaped(f, models);
	fprintf(f, "\",session=\"%" PRIu32 "\",name=\"", e->id);
	put_escaped(f, e->name);
	fprintf(f, "\",pid=\"%" PRIu32 "\"}", e->pid);
	value(f, v);
}

enum mfig { M_VERSION, M_STEP, M_COMMITS, M_ABORTS, M_BUSY, M_BYTES, M_SLOTS, M_USED,
            M_PINNED, M_COLL, M_AGE, M_LAG, M_LAG_S, M_SUMFAIL, M_LEAD, M_LEAD_WAITS,
            M_LEAD_TIMEOUTS, M_OVER, M_N };

static const struct { const char *name, *type, *help; } model_families[M_N] = {
	[M_VERSION] = { "wsync_model_version", "gauge", "Latest version of the model (0: none yet)." },
	[M_STEP]    = { "wsync_model_step", "gauge", "Trainer step of the latest version." },
	[M_COMMITS] = { "wsync_model_commits_total", "counter",
	                "Versions committed; rate() of it is the commit rate." },
	[M_ABORTS]  = { "wsync_model_aborts_total", "counter", "Writes aborted by the publisher, or dropped when it left mid-write." },
	[M_BUSY]    = { "wsync_model_busy_total", "counter",
	                "Begins refused with EBUSY: every slot was held." },
	[M_BYTES]   = { "wsync_model_slab_bytes", "gauge", "Size of one version (one slab)." },
	[M_SLOTS]   = { "wsync_model_slots", "gauge", "Slots of the model." },
	[M_USED]    = { "wsync_model_slots_used", "gauge", "Slots that hold a version or are being written." },
	[M_PINNED]  = { "wsync_model_slots_pinned", "gauge", "Slots a reader holds a view of." },
	[M_COLL]    = { "wsync_model_collectors", "gauge", "Sessions subscribed to the model." },
	[M_AGE]     = { "wsync_model_latest_age_seconds", "gauge", "Time since the latest version was committed." },
	[M_LAG]     = { "wsync_model_worst_lag_commits", "gauge",
	                "Most commits a collector did not take, at the broker's last tick." },
	[M_LAG_S]   = { "wsync_model_worst_lag_seconds", "gauge",
	                "Longest time since the version a collector reads was superseded." },
	[M_SUMFAIL] = { "wsync_model_checksum_failures_total", "counter",
	                "Checksum mismatches the model's collectors found (wsync_view_verify)." },
	[M_LEAD]    = { "wsync_model_max_lead", "gauge",
	                "The publisher's staleness bound in versions (0: none; docs/LIVE.md)." },
	[M_LEAD_WAITS] = { "wsync_model_lead_waits_total", "counter",
	                   "Begins held back by a collector behind the publisher's max_lead." },
	[M_LEAD_TIMEOUTS] = { "wsync_model_lead_timeouts_total", "counter",
	                      "Of those, the ones that timed out." },
	[M_OVER]    = { "wsync_model_collectors_over_bound", "gauge",
	                "Collectors past the staleness bound (max_lag) they declared." },
};

static double model_figure(const struct snap *s, const struct snap_model *m, int k)
{
	switch (k) {
	case M_VERSION: return (double)m->version;
	case M_STEP:    return (double)m->step;
	case M_COMMITS: return (double)m->commits;
	case M_ABORTS:  return (double)m->aborts;
	case M_BUSY:    return (double)m->busy;
	case M_BYTES:   return (double)m->bytes;
	case M_SLOTS:   return m->n_slots;
	case M_USED:    return m->slots_used;
	case M_PINNED:  return m->slots_pinned;
	case M_COLL:    return m->collectors;
	case M_AGE:     return m->version ? (double)(s->now_ns - m->commit_ns) / 1e9 : 0;
	case M_LAG:     return (double)m->worst_lag;
	case M_LAG_S:   return m->worst_lag_ms / 1e3;
	case M_SUMFAIL: return (double)m->checksum_failures;
	case M_LEAD:    return m->max_lead;
	case M_LEAD_WAITS: return (double)m->lead_waits;
	case M_LEAD_TIMEOUTS: return (double)m->lead_timeouts;
	case M_OVER:    return m->over_bound;
	default:        return 0;
	}
}

enum sfig { S_LAG, S_LAG_S, S_HELD, S_ACQ, S_WAITS, S_TIMEOUTS, S_BOUND_V, S_BOUND_S,
            S_OVER, S_N };

static const struct { const char *name, *type, *help; } session_families[S_N] = {
	[S_LAG]      = { "wsync_collector_lag_commits", "gauge",
	                 "Commits the collector did not take, at the broker's last tick." },
	[S_LAG_S]    = { "wsync_collector_lag_seconds", "gauge",
	                 "Time since the version the collector reads was superseded (0: latest)." },
	[S_HELD]     = { "wsync_collector_view_held_seconds", "gauge",
	                 "How long the collector has held its pinned view (0: none pinned)." },
	[S_ACQ]      = { "wsync_collector_acquires_total", "counter", "Views taken (32-bit, wraps)." },
	[S_WAITS]    = { "wsync_collector_waits_total", "counter", "Waits for a newer version (32-bit)." },
	[S_TIMEOUTS] = { "wsync_collector_timeouts_total", "counter", "Waits that timed out (32-bit)." },
	[S_BOUND_V]  = { "wsync_collector_max_lag_versions", "gauge",
	                 "The staleness bound the collector declared, in versions behind." },
	[S_BOUND_S]  = { "wsync_collector_max_lag_seconds", "gauge",
	                 "The staleness bound the collector declared, as the age of its version." },
	[S_OVER]     = { "wsync_collector_over_bound", "gauge",
	                 "1 if the collector's lag or its version's age is past its declared bound." },
};

static bool session_figure(const struct snap_session *e, int k, double *v)
{
	switch (k) {
	case S_LAG:      *v = (double)e->lag; return e->lag_known;
	case S_LAG_S:    *v = e->lag_ms / 1e3; return e->lag_known;
	case S_HELD:     *v = e->held ? e->view_ms / 1e3 : 0; return true;
	case S_ACQ:      *v = e->acquires; return true;
	case S_WAITS:    *v = e->waits; return true;
	case S_TIMEOUTS: *v = e->timeouts; return true;
	case S_BOUND_V:  *v = e->max_lag_versions; return e->max_lag_versions;
	case S_BOUND_S:  *v = (double)e->max_lag_ns / 1e9; return e->max_lag_ns;
	case S_OVER:     *v = e->over_bound; return e->max_lag_versions || e->max_lag_ns;
	default:         return false;
	}
}

int metrics_write(FILE *f, const struct snap *s, const char *instance, double cpu_seconds)
{
	const char *b = s ? s->instance : instance;

	family(f, "wsync_up", "gauge", "1 if the broker is running and its heartbeat is fresh.");
	broker_sample(f, "wsync_up", b, s && s->health.state == HEALTH_OK);
	if (!s)
		return fflush(f) ? -1 : 0;
	family(f, "wsync_broker_heartbeat_age_seconds", "gauge",
	       "Time since the broker's last heartbeat (once a second when it runs).");
	broker_sample(f, "wsync_broker_heartbeat_age_seconds", b,
	              (double)(s->now_ns - s->heartbeat_ns) / 1e9);
	family(f, "wsync_broker_stats_age_seconds", "gauge",
	       "Age of the session figures (computed at each heartbeat).");
	broker_sample(f, "wsync_broker_stats_age_seconds", b,
	              s->stats_ns ? (double)(s->now_ns - s->stats_ns) / 1e9 : 0);
	family(f, "wsync_broker_uptime_seconds", "gauge", "Time since the broker started.");
	broker_sample(f, "wsync_broker_uptime_seconds", b, (double)s->uptime_ns / 1e9);
	family(f, "wsync_broker_generation", "gauge", "Broker starts that adopted this state.");
	broker_sample(f, "wsync_broker_generation", b, (double)s->generation);
	family(f, "wsync_broker_sessions", "gauge", "Connected client sessions.");
	broker_sample(f, "wsync_broker_sessions", b, s->n_sessions);
	family(f, "wsync_broker_sessions_accepted_total", "counter", "Sessions accepted since start.");
	broker_sample(f, "wsync_broker_sessions_accepted_total", b, (double)s->sessions_total);
	family(f, "wsync_broker_messages_total", "counter", "Messages handled since start.");
	broker_sample(f, "wsync_broker_messages_total", b, (double)s->messages);
	family(f, "wsync_broker_bad_messages_total", "counter",
	       "Messages answered with an error or a closed connection.");
	broker_sample(f, "wsync_broker_bad_messages_total", b, (double)s->bad_messages);
	family(f, "wsync_broker_work_pauses_total", "counter",
	       "Sessions paused because their uid asked past its share of work.");
	broker_sample(f, "wsync_broker_work_pauses_total", b, (double)s->work_mutes);
	family(f, "wsync_broker_sessions_paused", "gauge",
	       "Sessions not read until their uid's work bucket refills.");
	broker_sample(f, "wsync_broker_sessions_paused", b, s->sessions_muted);
	family(f, "wsync_broker_moves_total", "counter",
	       "Models moved to new memory (a publisher of another uid came or left).");
	broker_sample(f, "wsync_broker_moves_total", b, (double)s->moves);
	family(f, "wsync_broker_moves_queued_total", "counter",
	       "Departures' moves that waited for the mover's thread behind another move.");
	broker_sample(f, "wsync_broker_moves_queued_total", b, (double)s->moves_queued);
	family(f, "wsync_broker_moves_on_loop_total", "counter",
	       "Moves copied in the broker's event loop (only at a stop).");
	broker_sample(f, "wsync_broker_moves_on_loop_total", b, (double)s->moves_on_loop);
	family(f, "wsync_broker_shm_used_bytes", "gauge", "Slab memory in use.");
	broker_sample(f, "wsync_broker_shm_used_bytes", b, (double)s->shm_used);
	family(f, "wsync_broker_shm_limit_bytes", "gauge", "Slab memory allowed (--shm-limit).");
	broker_sample(f, "wsync_broker_shm_limit_bytes", b, (double)s->shm_limit);
	family(f, "wsync_broker_models", "gauge", "Models in the broker's table.");
	broker_sample(f, "wsync_broker_models", b, s->n_models);
	if (cpu_seconds >= 0) {
		family(f, "wsync_broker_cpu_seconds_total", "counter",
		       "CPU time (user and system) the broker process used.");
		broker_sample(f, "wsync_broker_cpu_seconds_total", b, cpu_seconds);
	}
	for (int k = 0; k < M_N && s->n_models; k++) {
		family(f, model_families[k].name, model_families[k].type, model_families[k].help);
		for (uint32_t i = 0; i < s->n_models; i++)
			model_sample(f, model_families[k].name, b, &s->models[i],
			             model_figure(s, &s->models[i], k));
	}
	/* Lags belong to the model of the view a collector reads, a bound to
	 * the model it was declared for; its counters to the session, labelled
	 * with every model it opened. */
	for (int k = 0; k < S_N; k++) {
		bool titled = false;

		for (uint32_t i = 0; i < s->n_sessions; i++) {
			const struct snap_session *e = &s->sessions[i];
			const struct snap_model *m = NULL;
			char models[512];
			double v;

			if (!(e->roles & WSYNC_ROLE_SUB))
				continue;
			for (uint32_t j = 0; j < s->n_models; j++)
				if (s->models[j].id == (k >= S_BOUND_V ? e->bound_model : e->view_model))
					m = &s->models[j];
			if (k == S_LAG || k == S_LAG_S || k == S_HELD || k >= S_BOUND_V) {
				if (!m)
					continue;
				snprintf(models, sizeof(models), "%s", m->name);
			} else {
				fmt_session_models(models, sizeof(models), s, e);
			}
			if (!session_figure(e, k, &v))
				continue;
			if (!titled) {
				family(f, session_families[k].name, session_families[k].type,
				       session_families[k].help);
				titled = true;
			}
			session_sample(f, session_families[k].name, b, models, e, v);
		}
	}
	return fflush(f) || ferror(f) ? -1 : 0;
}
