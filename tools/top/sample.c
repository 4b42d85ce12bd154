/*
 * tools/top/sample.c — wsync-top's refresh: map the control segment (again)
 * when needed, copy it, derive rates and the broker's CPU use, order the
 * sessions.
 *
 * A broker that stops cleanly removes its state file (or, with --keep,
 * marks its segment STOPPED); one that crashes leaves both, with its
 * process gone. A restarted broker writes a new state file naming a new
 * generation. So each refresh checks that the state file still names the
 * segment mapped, and maps the new one when it does not: a restart is
 * followed without restarting top, and a dead broker's segment is shown,
 * marked dead, until a new one replaces it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "top.h"
#include "tools/common/health.h"

static int64_t mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void top_state_init(struct top_state *t, const struct top_opts *o)
{
	memset(t, 0, sizeof(*t));
	t->o = *o;
	t->v.broker_cpu_pct = -1;
}

void top_state_free(struct top_state *t)
{
	seg_detach(&t->seg);
	free(t->prev);
	free(t->v.snap);
	t->prev = t->v.snap = NULL;
}

static bool attach(struct top_state *t)
{
	if (t->seg.ctl && seg_current(&t->seg))
		return true;
	seg_detach(&t->seg);
	return seg_attach(t->o.endpoint, &t->seg, t->v.why, sizeof(t->v.why)) == 0;
}

static void derive(struct top_state *t, int64_t now)
{
	struct top_view *v = &t->v;
	const struct snap *s = v->snap, *p = t->prev;
	uint64_t ticks = 0;
	bool ticks_known = proc_stat(s->broker_pid, NULL, &ticks, NULL);
	double dt = p ? (double)(now - t->prev_mono_ns) / 1e9 : 0;

	v->have_rates = p && p->generation == s->generation && p->started_ns == s->started_ns &&
	                dt > 0;
	v->interval_s = dt;
	for (uint32_t i = 0; i < s->n_models; i++) {
		const struct snap_model *m = &s->models[i], *pm;

		v->rate_hz[i] = v->bandwidth[i] = 0;
		if (!v->have_rates)
			continue;
		pm = snap_model_find(p, m->name);
		if (!pm || pm->id != m->id || pm->commits > m->commits)
			continue;
		v->rate_hz[i] = (double)(m->commits - pm->commits) / dt;
		v->bandwidth[i] = v->rate_hz[i] * (double)m->bytes;
	}
	/* zero ticks used is 0%, not unknown: only a missing process is */
	v->broker_cpu_pct = -1;
	if (ticks_known && t->prev_cpu_known && v->have_rates &&
	    t->prev_cpu_pid == s->broker_pid && ticks >= t->prev_cpu_ticks)
		v->broker_cpu_pct = (double)(ticks - t->prev_cpu_ticks) /
		                    (double)sysconf(_SC_CLK_TCK) / dt * 100.0;
	t->prev_cpu_known = ticks_known;
	t->prev_cpu_ticks = ticks;
	t->prev_cpu_pid = s->broker_pid;
}

void top_refresh(struct top_state *t)
{
	struct top_view *v = &t->v;
	int64_t now = mono_now();
	struct snap *s;

	/* the last refresh's snapshot becomes the reference for rates */
	if (v->snap) {
		free(t->prev);
		t->prev = v->snap;
		v->snap = NULL;
	}
	if (!attach(t)) {
		v->attached = false;
		t->prev_cpu_known = false;
		return;
	}
	s = malloc(sizeof(*s));
	if (!s) {
		snprintf(v->why, sizeof(v->why), "out of memory");
		v->attached = false;
		return;
	}
	snap_take(&t->seg, s);
	v->snap = s;
	v->attached = true;
	v->why[0] = 0;
	derive(t, now);
	t->prev_mono_ns = now;
}

/* ---- order ------------------------------------------------------------------ */

bool top_sortable(int col)
{
	return col != SC_ROLE && col != SC_MODELS && col != SC_SLOT;
}

static const struct snap_session *sort_base;
static int sort_col;

static int cmp_u64(uint64_t a, uint64_t b)
{
	return (a > b) - (a < b);
}

static int cmp_f(double a, double b)
{
	return (a > b) - (a < b);
}

/* Ascending order of column sort_col; unknown lags sort below every known
 * one. */
static int by_col(const void *pa, const void *pb)
{
	const struct snap_session *a = &sort_base[*(const uint32_t *)pa];
	const struct snap_session *b = &sort_base[*(const uint32_t *)pb];
	int r = 0;

	switch (sort_col) {
	case SC_ID:       r = cmp_u64(a->id, b->id); break;
	case SC_NAME:     r = strcmp(a->name, b->name); break;
	case SC_VERSION:  r = cmp_u64(a->view_version, b->view_version); break;
	case SC_LAG:      r = cmp_u64(a->lag_known ? a->lag + 1 : 0, b->lag_known ? b->lag + 1 : 0);
	                  if (!r)
	                          r = cmp_f(a->lag_known ? a->lag_ms : -1,
	                                    b->lag_known ? b->lag_ms : -1);
	                  break;
	case SC_BEHIND:   r = cmp_f(a->lag_known ? a->lag_ms : -1, b->lag_known ? b->lag_ms : -1);
	                  break;
	case SC_BOUND:    r = cmp_u64(a->over_bound * 2u + !!(a->max_lag_versions || a->max_lag_ns),
	                          b->over_bound * 2u + !!(b->max_lag_versions || b->max_lag_ns));
	                  break;
	case SC_HELD:     r = cmp_f(a->held ? a->view_ms : -1, b->held ? b->view_ms : -1); break;
	case SC_ACQ:      r = cmp_u64(a->acquires, b->acquires); break;
	case SC_WAITS:    r = cmp_u64(a->waits, b->waits); break;
	case SC_TIMEOUTS: r = cmp_u64(a->timeouts, b->timeouts); break;
	case SC_CONN:     r = a->connected_ns > b->connected_ns ? -1 :
	                      a->connected_ns < b->connected_ns; break;   /* longest first */
	default:          break;
	}
	return r ? r : cmp_u64(a->pid, b->pid);
}

uint32_t top_session_order(const struct top_view *v, int sort, bool desc, int model_id,
                           uint32_t *idx)
{
	const struct snap *s = v->snap;
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->n_sessions; i++)
		if (model_id < 0 || (s->sessions[i].models & (UINT64_C(1) << model_id)))
			idx[n++] = i;
	sort_base = s->sessions;
	sort_col = sort;
	qsort(idx, n, sizeof(*idx), by_col);
	if (desc)
		for (uint32_t i = 0; i < n / 2; i++) {
			uint32_t x = idx[i];

			idx[i] = idx[n - 1 - i];
			idx[n - 1 - i] = x;
		}
	return n;
}
