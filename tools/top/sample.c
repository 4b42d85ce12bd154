/*
 * tools/top/sample.c — wsync-top's refresh: attach (again) when needed, copy
 * the control segment, derive rates and the broker's CPU use.
 *
 * A broker that stops cleanly marks its control segment STOPPED; one that
 * dies closes our session socket. Either way the client is dropped and the
 * next refresh tries to connect again, so a restarted broker (a new
 * generation, a new control segment) is followed without a restart of top.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"
#include "top.h"

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

static void detach(struct top_state *t)
{
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		wsync_sub_close(t->subs[i]);
		t->subs[i] = NULL;
	}
	wsync_close(t->c);
	t->c = NULL;
}

void top_state_free(struct top_state *t)
{
	detach(t);
	free(t->prev);
	free(t->v.snap);
	t->prev = t->v.snap = NULL;
}

static bool attach(struct top_state *t)
{
	char where[256];
	int err = wsync_connect(t->o.endpoint, "wsync-top", &t->c);

	if (!err)
		return true;
	t->c = NULL;
	if (t->o.endpoint)
		snprintf(where, sizeof(where), "%s", t->o.endpoint);
	else if (wsync_default_endpoint(where, sizeof(where)))
		snprintf(where, sizeof(where), "the default broker");
	if (err == -ENOENT || err == -ECONNREFUSED)
		snprintf(t->v.why, sizeof(t->v.why), "no broker at %.300s", where);
	else
		snprintf(t->v.why, sizeof(t->v.why), "%.200s: %s: %.200s", where,
		         wsync_strerror(err), wsync_errmsg());
	return false;
}

/* The broker we are attached to shut down or died. */
static bool broker_gone(struct top_state *t)
{
	if (atomic_load(&((struct wsync_ctl_header *)t->c->ctl)->state) == WSYNC_BROKER_STOPPED) {
		snprintf(t->v.why, sizeof(t->v.why), "broker shut down");
		return true;
	}
	if (client_is_dead(t->c) || wsync_conn_hung_up(t->c)) {
		snprintf(t->v.why, sizeof(t->v.why), "broker went away");
		return true;
	}
	return false;
}

/* utime + stime of pid in clock ticks, from /proc/<pid>/stat; 0 unknown. */
static uint64_t proc_cpu_ticks(uint32_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');            /* the command name may hold spaces */
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
	                 &ut, &st) != 2)
		return 0;
	return ut + st;
}

static void derive(struct top_state *t, int64_t now)
{
	struct top_view *v = &t->v;
	const struct snap *s = v->snap, *p = t->prev;
	uint64_t ticks = proc_cpu_ticks(s->broker_pid);
	double dt = p ? (double)(now - t->prev_mono_ns) / 1e9 : 0;

	v->have_rates = p && p->generation == s->generation && dt > 0;
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
	v->broker_cpu_pct = -1;
	if (ticks && v->have_rates && t->prev_cpu_pid == s->broker_pid &&
	    ticks >= t->prev_cpu_ticks)
		v->broker_cpu_pct = (double)(ticks - t->prev_cpu_ticks) /
		                    (double)sysconf(_SC_CLK_TCK) / dt * 100.0;
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
	if (t->c && broker_gone(t)) {
		detach(t);
		v->attached = false;
		return;
	}
	if (!t->c && !attach(t)) {
		v->attached = false;
		return;
	}
	s = malloc(sizeof(*s));
	if (!s || snap_take(t->c, s, v->why, sizeof(v->why))) {
		if (!s)
			snprintf(v->why, sizeof(v->why), "out of memory");
		free(s);
		detach(t);
		v->attached = false;
		return;
	}
	snap_checksums(t->c, t->subs, s);
	v->snap = s;
	v->attached = true;
	v->why[0] = 0;
	derive(t, now);
	t->prev_mono_ns = now;
}

const char *top_sort_name(enum top_sort s)
{
	static const char *const names[SORT_N] = { "lag", "pid", "waits", "timeouts",
	                                           "connected" };

	return s < SORT_N ? names[s] : "?";
}

static const struct snap_session *sort_base;
static enum top_sort sort_key;

static int cmp_u64_desc(uint64_t a, uint64_t b)
{
	return a > b ? -1 : a < b;
}

static int by_key(const void *pa, const void *pb)
{
	const struct snap_session *a = &sort_base[*(const uint32_t *)pa];
	const struct snap_session *b = &sort_base[*(const uint32_t *)pb];
	int r = 0;

	switch (sort_key) {
	case SORT_LAG:      r = cmp_u64_desc(a->lag_known ? a->lag + 1 : 0,
	                                     b->lag_known ? b->lag + 1 : 0); break;
	case SORT_WAITS:    r = cmp_u64_desc(a->waits, b->waits); break;
	case SORT_TIMEOUTS: r = cmp_u64_desc(a->timeouts, b->timeouts); break;
	case SORT_AGE:      r = a->connected_ns < b->connected_ns ? -1 :
	                        a->connected_ns > b->connected_ns; break;
	default:            break;
	}
	return r ? r : (a->pid > b->pid) - (a->pid < b->pid);
}

uint32_t top_session_order(const struct top_view *v, enum top_sort sort, int model_id,
                           uint32_t *idx)
{
	const struct snap *s = v->snap;
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->n_sessions; i++)
		if (model_id < 0 || (s->sessions[i].models & (UINT64_C(1) << model_id)))
			idx[n++] = i;
	sort_base = s->sessions;
	sort_key = sort;
	qsort(idx, n, sizeof(*idx), by_key);
	return n;
}
