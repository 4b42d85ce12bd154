/*
 * tools/common/snap.c — snapshots of the control segment and their JSON form
 * (see snap.h). Shared by wsyncctl, wsync-top and the metrics exporter, so
 * all show the same figures under the same names.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "shm/cuda_discover.h"
#include "shm/layout.h"
#include "snap.h"

#define RELAXED memory_order_relaxed
/* The segment is mapped read-only: loads through a pointer without const. */
#define LOAD(p) atomic_load_explicit((__typeof__(p) *)&(p), RELAXED)

static int64_t real_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void snap_model_copy(struct snap_model *m, const struct wsync_ctl_model *e, uint32_t id)
{
	memset(m, 0, sizeof(*m));
	m->id = id;
	m->state = LOAD(e->state);
	memcpy(m->name, e->name, sizeof(m->name));
	m->name[sizeof(m->name) - 1] = 0;
	m->bytes = e->bytes;
	m->n_tensors = e->n_tensors;
	m->n_slots = e->n_slots < WSYNC_MAX_SLOTS ? e->n_slots : WSYNC_MAX_SLOTS;
	m->hwm = LOAD(e->hwm_version);
	m->version = wsync_latest_slot(LOAD(e->latest)) == WSYNC_SLOT_NONE ? 0 :
	             wsync_latest_version(LOAD(e->latest));
	/* The broker counts a commit, then stores its time: the time read
	 * first is of a commit the counter read after counts (lag_to_now). */
	m->commit_ns = atomic_load_explicit((_Atomic int64_t *)&e->last_commit_ns,
	                                    memory_order_acquire);
	m->commits = LOAD(e->commits);
	m->aborts = LOAD(e->aborts);
	m->busy = LOAD(e->busy);
	m->step = LOAD(e->last_step);
	m->group_size = LOAD(e->group_size);
	m->group_committed = LOAD(e->group_committed);
	m->group_first_ns = LOAD(e->group_first_ns);
	m->group_last_ns = LOAD(e->group_last_ns);
	m->slab_pages = e->slab_pages;
	m->publisher = LOAD(e->publisher);
	m->publisher_pid = LOAD(e->publisher_pid);
	/* checksum_version is the broker's sequence word (broker/monitor.c):
	 * the same version before and after, or the pair was being rewritten */
	if (m->version) {
		uint64_t v1 = atomic_load_explicit((__typeof__(e->checksum_version) *)
		                                   &e->checksum_version, memory_order_acquire);
		uint64_t sum = LOAD(e->checksum);

		atomic_thread_fence(memory_order_acquire);
		if (v1 == m->version && LOAD(e->checksum_version) == v1)
			m->checksum = sum;
	}
	m->checksum_failures = LOAD(e->checksum_failures);
	m->max_lead = LOAD(e->max_lead);
	m->lead_waits = LOAD(e->lead_waits);
	m->lead_timeouts = LOAD(e->lead_timeouts);
	m->n_devices = e->n_devices < WSYNC_MAX_DEVICES ? e->n_devices : WSYNC_MAX_DEVICES;
	m->dev_flags = e->dev_flags;
	memcpy(m->dev_uuid, e->dev_uuid, sizeof(m->dev_uuid));
	for (uint32_t k = 0; k < m->n_slots; k++) {
		m->slot_state[k] = LOAD(e->slot_state[k]);
		if (m->slot_state[k] != WSYNC_SLOT_FREE)
			m->slots_used++;
	}
}

static void snap_session_copy(struct snap_session *s, const struct wsync_ctl_session *e,
                              const struct wsync_session_bound *bd, uint32_t id)
{
	uint64_t view = LOAD(e->stats.view);
	uint32_t lag = LOAD(e->stats.lag);
	uint32_t slot = lag >> WSYNC_STATS_LAG_SLOT_SHIFT & WSYNC_STATS_LAG_SLOT_MASK;

	memset(s, 0, sizeof(*s));
	s->id = id;
	s->pid = e->pid;
	s->uid = e->uid;
	s->roles = LOAD(e->roles);
	s->connected_ns = e->connected_ns;
	s->models = LOAD(e->models);
	memcpy(s->name, e->name, sizeof(s->name));
	s->name[sizeof(s->name) - 1] = 0;
	s->acquires = LOAD(e->stats.acquires);
	s->waits = LOAD(e->stats.waits);
	s->timeouts = LOAD(e->stats.timeouts);
	s->view_version = view >> 8;
	s->held = view & WSYNC_STATS_HELD;
	s->view_model = (uint32_t)(view & WSYNC_STATS_MODEL_UNKNOWN);
	s->slot = s->held && slot ? (int)slot - 1 : -1;
	s->view_ms = LOAD(e->stats.view_ms);
	s->lag_known = s->view_version && (lag & WSYNC_STATS_LAG_KNOWN);
	s->lag_estimated = s->lag_known && (lag & WSYNC_STATS_LAG_ESTIMATE);
	s->lag = lag & WSYNC_STATS_LAG_MAX;
	s->lag_ms = LOAD(e->stats.lag_ms);
	s->bound_model = bd ? LOAD(bd->model) : WSYNC_STATS_MODEL_UNKNOWN;
	if (s->bound_model < WSYNC_MAX_MODELS) {
		s->max_lag_ns = LOAD(bd->max_age_ns);
		s->max_lag_versions = LOAD(bd->max_versions);
	}
}

/*
 * The age of the version a session reads, now, and whether it is past the
 * bound it declared. The model's latest is as old as its last commit; an
 * older version was superseded lag_ms ago, so it is at least that old (the
 * age a collector's own bound measures, wsync_sub_set_max_lag, is of the
 * newest version it could take: the same while it keeps up). A lag in
 * commits stands for versions behind.
 */
static void bound_to_now(struct snap_session *e, const struct snap_model *m, int64_t now_ns)
{
	if (!e->lag_known || e->view_model != m->id)
		return;
	e->age_known = true;
	if (e->lag)
		e->age_ms = e->lag_ms;
	else
		e->age_ms = m->commit_ns > 0 && now_ns > m->commit_ns ?
		            (double)(now_ns - m->commit_ns) / 1e6 : 0;
	if (e->bound_model != m->id)
		return;
	e->over_bound = (e->max_lag_versions && e->lag > e->max_lag_versions) ||
	                (e->max_lag_ns && e->age_ms * 1e6 > (double)e->max_lag_ns);
}

/*
 * Brings a session's lag from the tick (stats_ns) to now_ns. The version it
 * read at the tick is `lag` commits behind the commits counter of then
 * (tick_commits), so against the counter read now it is behind by the
 * commits since as well; the time since it was superseded grows by the age
 * of the tick. One the tick saw current has been superseded since if
 * commits came: exactly when the latest one is its successor (one commit:
 * lag_ms counts from its commit time), else by the first of them, some
 * time after the tick, whose age bounds it (an estimate, from above).
 * Never lower than the truth for the version read at the tick; a session
 * that took a newer one since reads higher until the next tick.
 */
static void lag_to_now(struct snap_session *e, uint64_t tick_commits, uint64_t commits,
                       int64_t commit_ns, int64_t stats_ns, int64_t now_ns)
{
	double age_ms = now_ns > stats_ns ? (double)(now_ns - stats_ns) / 1e6 : 0;
	uint64_t since;

	if (!e->lag_known || !stats_ns || !(tick_commits & WSYNC_STATS_COMMITS_SET))
		return;
	tick_commits &= ~WSYNC_STATS_COMMITS_SET;
	if (commits < tick_commits)
		return;                          /* another model in the entry now */
	since = commits - tick_commits;
	if (e->lag) {
		e->lag += since;
		e->lag_ms += age_ms;
	} else if (since) {
		e->lag = since;
		if (since == 1 && commit_ns > stats_ns) {
			e->lag_ms = now_ns > commit_ns ? (double)(now_ns - commit_ns) / 1e6 : 0;
		} else {
			e->lag_ms = age_ms;
			e->lag_estimated = true;
		}
	}
}

/* Collector counts, pinned slots, worst lags and publisher pids, once
 * models and sessions are copied. A slot pinned by several collectors
 * counts once. */
static void snap_derive(struct snap *s)
{
	uint64_t pinned[WSYNC_MAX_MODELS] = { 0 };

	for (uint32_t i = 0; i < s->n_sessions; i++) {
		const struct snap_session *e = &s->sessions[i];

		for (uint32_t j = 0; j < s->n_models; j++) {
			struct snap_model *m = &s->models[j];

			if (!m->publisher_pid && m->publisher == e->id)
				m->publisher_pid = e->pid;
			if (e->view_model == m->id && e->slot >= 0 && e->slot < 64)
				pinned[j] |= UINT64_C(1) << e->slot;
			if (!(e->models & (UINT64_C(1) << m->id)) || !(e->roles & WSYNC_ROLE_SUB))
				continue;
			m->collectors++;
			if (e->bound_model == m->id && (e->max_lag_versions || e->max_lag_ns))
				m->bounded++;
			m->over_bound += e->over_bound && e->bound_model == m->id;
			if (!e->lag_known || e->view_model != m->id)
				continue;
			m->worst_known = true;
			if (e->lag_estimated && (e->lag >= m->worst_lag || e->lag_ms >= m->worst_lag_ms))
				m->worst_estimated = true;
			if (e->lag > m->worst_lag)
				m->worst_lag = e->lag;
			if (e->lag_ms > m->worst_lag_ms)
				m->worst_lag_ms = e->lag_ms;
		}
	}
	for (uint32_t j = 0; j < s->n_models; j++)
		s->models[j].slots_pinned = (uint32_t)__builtin_popcountll(pinned[j]);
}

static void snap_copy_sessions(const struct wsync_ctl_header *h, struct snap *out)
{
	const char *base = (const char *)h;

	out->n_sessions = 0;
	for (uint32_t i = 0; i < h->max_sessions; i++) {
		const struct wsync_ctl_session *e =
			(const struct wsync_ctl_session *)(base + h->sessions_offset) + i;
		/* seg.c checked the table lies inside the segment; 0: a broker
		 * before bounds */
		const struct wsync_session_bound *bd = h->bounds_offset ?
			(const struct wsync_session_bound *)(base + h->bounds_offset) + i : NULL;
		uint32_t id = LOAD(e->id);

		if (id)
			snap_session_copy(&out->sessions[out->n_sessions++], e, bd, id);
	}
}

void snap_take(const struct seg *seg, struct snap *out)
{
	const struct wsync_ctl_header *h = seg->ctl;
	const char *base = (const char *)h;
	const struct wsync_ctl_model *ents = (const struct wsync_ctl_model *)(base + h->models_offset);
	uint64_t tick_commits[WSYNC_MAX_MODELS] = { 0 };

	memset(out, 0, offsetof(struct snap, models));
	health_judge(seg, NULL, &out->health);
	memcpy(out->instance, h->name, sizeof(out->instance));
	out->instance[sizeof(out->instance) - 1] = 0;
	out->broker_pid = h->broker_pid;
	out->uid = h->uid;
	out->state = LOAD(h->state);
	out->max_slots = h->max_slots;
	out->generation = h->generation;
	out->started_ns = h->started_ns;
	out->heartbeat_ns = LOAD(h->heartbeat_ns);
	out->now_ns = real_now();
	out->uptime_ns = (out->health.state == HEALTH_STOPPED || out->health.state == HEALTH_DEAD) &&
	                 out->heartbeat_ns > 0 ? out->heartbeat_ns - out->started_ns :
	                 out->now_ns - out->started_ns;
	if (out->uptime_ns < 0)
		out->uptime_ns = 0;
	out->shm_limit = h->shm_limit;
	out->shm_used = LOAD(h->shm_used);
	out->sessions_total = LOAD(h->sessions_total);
	out->messages = LOAD(h->messages);
	out->bad_messages = LOAD(h->bad_messages);
	out->work_mutes = LOAD(h->work_mutes);
	out->sessions_muted = LOAD(h->sessions_muted);
	out->moves = LOAD(h->moves);
	out->moves_queued = LOAD(h->moves_queued);
	out->moves_on_loop = LOAD(h->moves_on_loop);
	/* The session figures of one tick: the broker stores stats_ns last
	 * (release); the same value before and after the copy means no tick
	 * wrote in between. A broker that ticks during every try leaves the
	 * last copy (a monitor's figures, not a decision). */
	for (int tries = 0; tries < 4; tries++) {
		int64_t before = atomic_load_explicit((_Atomic int64_t *)&h->stats_ns,
		                                      memory_order_acquire);

		snap_copy_sessions(h, out);
		for (uint32_t i = 0; i < h->max_models; i++)
			tick_commits[i] = LOAD(ents[i].stats_commits);
		atomic_thread_fence(memory_order_acquire);
		out->stats_ns = LOAD(h->stats_ns);
		if (out->stats_ns == before)
			break;
	}
	/* The models after the tick's figures: their commits counters are at
	 * least the tick's, so lags come up to now, never below it. */
	for (uint32_t i = 0; i < h->max_models; i++) {
		if (LOAD(ents[i].state) == WSYNC_MODEL_FREE)
			continue;
		snap_model_copy(&out->models[out->n_models++], &ents[i], i);
	}
	out->now_ns = real_now();
	for (uint32_t i = 0; i < out->n_sessions; i++) {
		struct snap_session *e = &out->sessions[i];

		if (e->view_version && out->stats_ns && out->now_ns > out->stats_ns)
			e->view_ms += (double)(out->now_ns - out->stats_ns) / 1e6;
		for (uint32_t j = 0; j < out->n_models; j++)
			if (out->models[j].id == e->view_model) {
				lag_to_now(e, tick_commits[e->view_model], out->models[j].commits,
				           out->models[j].commit_ns, out->stats_ns, out->now_ns);
				bound_to_now(e, &out->models[j], out->now_ns);
			}
	}
	snap_derive(out);
}

const struct snap_model *snap_model_find(const struct snap *s, const char *name)
{
	for (uint32_t i = 0; i < s->n_models; i++)
		if (!strcmp(s->models[i].name, name))
			return &s->models[i];
	return NULL;
}

const char *snap_state_name(uint32_t st)
{
	switch (st) {
	case WSYNC_BROKER_STARTING: return "starting";
	case WSYNC_BROKER_RUNNING:  return "running";
	case WSYNC_BROKER_STOPPED:  return "stopped";
	default:                    return "unknown";
	}
}

const char *snap_model_state_name(uint32_t st)
{
	switch (st) {
	case WSYNC_MODEL_DECLARED: return "declared";
	case WSYNC_MODEL_READY:    return "ready";
	default:                   return "free";
	}
}

const char *snap_roles_name(uint32_t roles)
{
	static const char *const names[] = { "-", "pub", "sub", "pub+sub" };

	return names[roles & (WSYNC_ROLE_PUB | WSYNC_ROLE_SUB)];
}

/* ---- JSON ------------------------------------------------------------------ */

static json_t *jcount(uint64_t v)
{
	return json_integer((json_int_t)(v > INT64_MAX ? INT64_MAX : v));
}

static json_t *jseconds(int64_t ns)
{
	return json_real((double)ns / 1e9);
}

static json_t *jsince(const struct snap *s, int64_t ns)
{
	return ns > 0 ? jseconds(s->now_ns - ns) : json_null();
}

json_t *snap_json_status(const struct snap *s)
{
	uint32_t pubs = 0, subs = 0;

	for (uint32_t i = 0; i < s->n_sessions; i++) {
		pubs += !!(s->sessions[i].roles & WSYNC_ROLE_PUB);
		subs += !!(s->sessions[i].roles & WSYNC_ROLE_SUB);
	}
	return json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:I, "
	                 "s:I, s:I, s:I, s:I, s:I, s:I}",
	                 "instance", s->instance,
	                 "health", health_reason(s->health.state),
	                 "health_text", s->health.text,
	                 "broker_pid", (json_int_t)s->broker_pid,
	                 "generation", (json_int_t)s->generation,
	                 "state", snap_state_name(s->state),
	                 "started_ns", json_integer(s->started_ns),
	                 "uptime_s", s->started_ns > 0 ? jseconds(s->uptime_ns) : json_null(),
	                 "heartbeat_age_s", jsince(s, s->heartbeat_ns),
	                 "stats_age_s", jsince(s, s->stats_ns),
	                 "stats_ns", json_integer(s->stats_ns),
	                 "shm_used", (json_int_t)s->shm_used,
	                 "shm_limit", (json_int_t)s->shm_limit,
	                 "max_slots", (json_int_t)s->max_slots,
	                 "models", (json_int_t)s->n_models,
	                 "sessions", (json_int_t)s->n_sessions,
	                 "publishers", (json_int_t)pubs,
	                 "subscribers", (json_int_t)subs,
	                 "sessions_total", (json_int_t)s->sessions_total,
	                 "messages", (json_int_t)s->messages);
}

json_t *snap_json_model(const struct snap *s, const struct snap_model *m)
{
	char cs[32];
	json_t *o = json_pack("{s:s, s:I, s:s, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
	                      "s:I, s:o, s:o, s:I, s:o}",
	                      "name", m->name,
	                      "id", (json_int_t)m->id,
	                      "state", snap_model_state_name(m->state),
	                      "version", jcount(m->version),
	                      "step", jcount(m->step),
	                      "bytes", (json_int_t)m->bytes,
	                      "tensors", (json_int_t)m->n_tensors,
	                      "slots", (json_int_t)m->n_slots,
	                      "slots_used", (json_int_t)m->slots_used,
	                      "slots_pinned", (json_int_t)m->slots_pinned,
	                      "commits", (json_int_t)m->commits,
	                      "aborts", (json_int_t)m->aborts,
	                      "busy", (json_int_t)m->busy,
	                      "published_ns", json_integer(m->commit_ns),
	                      "age_s", m->version ? jsince(s, m->commit_ns) : json_null(),
	                      "collectors", (json_int_t)m->collectors,
	                      "worst_lag", m->worst_known ? jcount(m->worst_lag) : json_null());

	json_object_set_new(o, "worst_lag_ms", m->worst_known ? json_real(m->worst_lag_ms) :
	                    json_null());
	json_object_set_new(o, "worst_lag_estimated", json_boolean(m->worst_estimated));
	json_object_set_new(o, "publisher_pid",
	                    m->publisher_pid ? json_integer(m->publisher_pid) : json_null());
	if (m->group_size > 1) {
		json_t *done = json_array();

		for (uint32_t r = 0; r < m->group_size && r < 32; r++)
			if (m->group_committed & (1u << r))
				json_array_append_new(done, json_integer(r));
		json_object_set_new(o, "group", json_pack(
			"{s:I, s:o, s:o, s:f}", "ranks", (json_int_t)m->group_size,
			"committed", done,
			"waiting_s", m->group_first_ns ? jsince(s, m->group_first_ns) : json_null(),
			"last_version_ms", (double)m->group_last_ns / 1e6));
	}
	if (m->n_devices) {
		json_t *gpus = json_array();

		for (uint32_t d = 0; d < m->n_devices; d++) {
			char text[WSYNC_GPU_UUID_TEXT];

			wsync_gpu_uuid_format(m->dev_uuid[d], text, sizeof(text));
			json_array_append_new(gpus, json_string(text));
		}
		json_object_set_new(o, "devices", json_pack("{s:o, s:b}", "gpus", gpus,
		                    "host_mirror", (m->dev_flags & WSYNC_DEV_HOST_MIRROR) != 0));
	}
	/* what backs the slabs: "4k", "thp" (2 MiB transparent huge pages
	 * where the kernel had them) or "hugetlb" (2 MiB); null before a layout */
	json_object_set_new(o, "pages", m->state != WSYNC_MODEL_READY ? json_null() :
	                    json_string(m->slab_pages == WSYNC_PAGES_HUGETLB ? "hugetlb" :
	                                m->slab_pages == WSYNC_PAGES_THP ? "thp" : "4k"));
	if (m->checksum) {
		snprintf(cs, sizeof(cs), "%016" PRIx64, m->checksum);
		json_object_set_new(o, "checksum", json_string(cs));
	} else {
		json_object_set_new(o, "checksum", json_null());
	}
	json_object_set_new(o, "checksum_failures", json_integer((json_int_t)m->checksum_failures));
	json_object_set_new(o, "max_lead", json_integer((json_int_t)m->max_lead));
	json_object_set_new(o, "lead_waits", json_integer((json_int_t)m->lead_waits));
	json_object_set_new(o, "lead_timeouts", json_integer((json_int_t)m->lead_timeouts));
	json_object_set_new(o, "collectors_bounded", json_integer((json_int_t)m->bounded));
	json_object_set_new(o, "collectors_over_bound", json_integer((json_int_t)m->over_bound));
	return o;
}

json_t *snap_json_models(const struct snap *s)
{
	json_t *a = json_array();

	for (uint32_t i = 0; i < s->n_models; i++)
		json_array_append_new(a, snap_json_model(s, &s->models[i]));
	return a;
}

json_t *snap_json_session(const struct snap *s, const struct snap_session *e)
{
	json_t *models = json_array();
	json_t *o;

	for (uint32_t j = 0; j < s->n_models; j++)
		if (e->models & (UINT64_C(1) << s->models[j].id))
			json_array_append_new(models, json_string(s->models[j].name));
	o = json_pack("{s:I, s:I, s:I, s:s, s:s, s:o, s:o, s:I, s:I, s:I}",
	              "id", (json_int_t)e->id,
	              "pid", (json_int_t)e->pid,
	              "uid", (json_int_t)e->uid,
	              "name", e->name,
	              "role", snap_roles_name(e->roles),
	              "models", models,
	              "connected_s", jsince(s, e->connected_ns),
	              "acquires", (json_int_t)e->acquires,
	              "waits", (json_int_t)e->waits,
	              "timeouts", (json_int_t)e->timeouts);
	/* what it reads, at the broker's last tick (stats_age_s ago) */
	json_object_set_new(o, "version", e->view_version ? jcount(e->view_version) : json_null());
	json_object_set_new(o, "held", json_boolean(e->held));
	json_object_set_new(o, "slot", e->slot >= 0 ? json_integer(e->slot) : json_null());
	json_object_set_new(o, "since_s", e->view_version ? json_real(e->view_ms / 1e3) :
	                    json_null());
	json_object_set_new(o, "lag", e->lag_known ? jcount(e->lag) : json_null());
	json_object_set_new(o, "lag_ms", e->lag_known ? json_real(e->lag_ms) : json_null());
	json_object_set_new(o, "lag_estimated", json_boolean(e->lag_estimated));
	/* its declared staleness bound (null: none) and the age it bounds */
	json_object_set_new(o, "max_lag_versions", e->max_lag_versions ?
	                    json_integer(e->max_lag_versions) : json_null());
	json_object_set_new(o, "max_lag_s", e->max_lag_ns ? jseconds((int64_t)e->max_lag_ns) :
	                    json_null());
	json_object_set_new(o, "age_s", e->age_known ? json_real(e->age_ms / 1e3) : json_null());
	json_object_set_new(o, "over_bound", json_boolean(e->over_bound));
	return o;
}

json_t *snap_json_sessions(const struct snap *s)
{
	json_t *a = json_array();

	for (uint32_t i = 0; i < s->n_sessions; i++)
		json_array_append_new(a, snap_json_session(s, &s->sessions[i]));
	return a;
}

/* ---- human figures ------------------------------------------------------------ */

const char *fmt_bytes(char *buf, size_t len, uint64_t bytes)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	unsigned u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	/* no blank: every cell of the tools' tables is one word for awk */
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 "B", bytes);
	else
		snprintf(buf, len, "%.1f%s", v, units[u]);
	return buf;
}

const char *fmt_age(char *buf, size_t len, int64_t ns)
{
	int64_t s = ns / 1000000000;

	if (ns < 0)
		snprintf(buf, len, "-");
	else if (ns < 10 * INT64_C(1000000000))
		snprintf(buf, len, "%.2fs", (double)ns / 1e9);
	else if (s < 3600)
		snprintf(buf, len, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, len, "%" PRId64 "h%02" PRId64 "m", s / 3600, s / 60 % 60);
	else
		snprintf(buf, len, "%" PRId64 "d%02" PRId64 "h", s / 86400, s / 3600 % 24);
	return buf;
}

const char *fmt_checksum(char *buf, size_t len, const struct snap_model *m)
{
	if (m->checksum)
		snprintf(buf, len, "%016" PRIx64, m->checksum);
	else
		snprintf(buf, len, "-");
	return buf;
}

const char *fmt_session_models(char *buf, size_t len, const struct snap *s,
                               const struct snap_session *e)
{
	size_t at = 0;

	buf[0] = 0;
	for (uint32_t j = 0; j < s->n_models && at < len; j++)
		if (e->models & (UINT64_C(1) << s->models[j].id))
			at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? "," : "",
			                       s->models[j].name);
	if (!buf[0])
		snprintf(buf, len, "-");
	return buf;
}

const char *fmt_lag(char *buf, size_t len, const struct snap_session *e)
{
	if (!e->lag_known)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%s%" PRIu64, e->lag_estimated ? "~" : "", e->lag);
	return buf;
}

const char *fmt_lag_ms(char *buf, size_t len, const struct snap_session *e)
{
	if (!e->lag_known)
		snprintf(buf, len, "-");
	else if (e->lag_ms < 10000)
		snprintf(buf, len, "%s%.0fms", e->lag_estimated ? "~" : "", e->lag_ms);
	else
		fmt_age(buf, len, (int64_t)(e->lag_ms * 1e6));
	return buf;
}

const char *fmt_bound(char *buf, size_t len, const struct snap_session *e, bool mark)
{
	char v[16] = "", t[32] = "";

	if (!e->max_lag_versions && !e->max_lag_ns) {
		snprintf(buf, len, "-");
		return buf;
	}
	if (e->max_lag_versions)
		snprintf(v, sizeof(v), "%" PRIu32 "v", e->max_lag_versions);
	if (e->max_lag_ns)
		snprintf(t, sizeof(t), e->max_lag_ns < 100 * UINT64_C(1000000000) ? "%.3gs" :
		         "%.0fs", (double)e->max_lag_ns / 1e9);
	/* the mark first: a narrow column cuts the end of a cell */
	snprintf(buf, len, "%s%s%s%s", mark && e->over_bound ? "!" : "", v,
	         v[0] && t[0] ? "/" : "", t);
	return buf;
}
