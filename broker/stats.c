/*
 * broker/stats.c — what monitors read of sessions and models, computed once
 * per tick (see stats.h).
 *
 * The session page is written by its client at any time and is never
 * trusted: every word is read once (relaxed; these are informational
 * figures, not the hazard protocol), pins naming a model the session did not
 * open or a slot past the table are ignored, and nothing read here decides
 * anything in the broker. Only the broker writes the stats, so a monitor
 * reading them (relaxed) sees each word whole; the header's stats_ns is
 * stored last with release, so a monitor that loads it with acquire and
 * finds it unchanged after reading the entries read one tick's figures.
 *
 * How lag is counted. A version's place among commits is its point in the
 * model's history: the commits counter right after it was committed. A
 * session reading version v is (commits now) - (count of v) commits behind,
 * and has been behind since the commit that followed v. monitor_commit()
 * (broker/monitor.c, called by publish_book at every commit this broker
 * books) records each point, so every version of the last STATS_HISTORY
 * commits has one. For the others (versions adopted at start, or older
 * than the ring) the tick adds a point for the latest version (exact: the
 * counter and `latest` move together in the broker's thread) and for
 * versions still in slots; a version between two points a < v < b then
 * has the count a.count + (v - a.version) exactly when no version number
 * between a and b was skipped (b.version - a.version == b.count - a.count;
 * before the first point, when the commits counter equals the latest
 * version, as no version was ever skipped), and that as an estimate, kept
 * inside (a.count, b.count), otherwise. The time it was superseded is
 * exact when the next point is its successor (count + 1); otherwise the next
 * point's commit time is used, which makes lag_ms a lower bound.
 *
 * The histories are the broker's alone, one in each model (monitor.c keeps
 * them); this file is pure functions over them and a session page.
 */
#include "stats.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define RELAXED memory_order_relaxed

void stats_clear(struct wsync_session_stats *st)
{
	atomic_store_explicit(&st->acquires, 0, RELAXED);
	atomic_store_explicit(&st->lag, 0, RELAXED);
	atomic_store_explicit(&st->view, 0, RELAXED);
	atomic_store_explicit(&st->view_ms, 0, RELAXED);
	atomic_store_explicit(&st->lag_ms, 0, RELAXED);
	atomic_store_explicit(&st->waits, 0, RELAXED);
	atomic_store_explicit(&st->timeouts, 0, RELAXED);
}

void stats_clear_bound(struct wsync_session_bound *bd)
{
	atomic_store_explicit(&bd->max_age_ns, 0, RELAXED);
	atomic_store_explicit(&bd->max_versions, 0, RELAXED);
	atomic_store_explicit(&bd->model, WSYNC_STATS_MODEL_UNKNOWN, RELAXED);
}

/* ---- histories --------------------------------------------------------------- */

void stats_history_reset(struct stats_history *h)
{
	h->first = h->n = 0;
	h->latest = h->commits = 0;
	h->latest_ns = 0;
}

const struct stats_point *stats_point_at(const struct stats_history *h, uint32_t i)
{
	return &h->p[(h->first + i) % STATS_HISTORY];
}

void stats_history_add(struct stats_history *h, const struct stats_point *pt)
{
	if (h->n && pt->version <= stats_point_at(h, h->n - 1)->version)
		return;
	if (h->n == STATS_HISTORY) {
		h->first = (h->first + 1) % STATS_HISTORY;
		h->n--;
	}
	h->p[(h->first + h->n) % STATS_HISTORY] = *pt;
	h->n++;
}

/* Index of the first point whose version is above v (h->n if none). */
static uint32_t first_above(const struct stats_history *h, uint64_t v)
{
	uint32_t lo = 0, hi = h->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (stats_point_at(h, mid)->version <= v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static uint32_t clamp_ms(int64_t ns)
{
	if (ns <= 0)
		return 0;
	if (ns / 1000000 >= UINT32_MAX)
		return UINT32_MAX;
	return (uint32_t)(ns / 1000000);
}

uint32_t stats_lag(const struct stats_history *h, uint64_t v, int64_t real_ns,
                   uint32_t *lag_ms)
{
	const struct stats_point *a = NULL, *b = NULL;
	uint64_t count, lag;
	bool exact = false, ms_exact = false;
	uint32_t i, word;

	*lag_ms = 0;
	if (!h || !h->latest || !v)
		return 0;
	if (v >= h->latest)
		return WSYNC_STATS_LAG_KNOWN;
	i = first_above(h, v);
	if (i > 0)
		a = stats_point_at(h, i - 1);
	if (i < h->n)
		b = stats_point_at(h, i);
	if (!b)
		return 0;                    /* no point above v: nothing to count with */
	if (a && a->version == v && a->exact) {
		count = a->count;
		exact = true;
	} else if (a && a->exact && b->exact &&
	           b->version - a->version == b->count - a->count) {
		count = a->count + (v - a->version);
		exact = true;
	} else if (a) {
		/* v lies after a and before b: a.count < count(v) < b.count */
		count = a->count + (v - a->version);
		if (count >= b->count)
			count = b->count ? b->count - 1 : 0;
		if (count <= a->count && a->version != v)
			count = a->count + 1 < b->count ? a->count + 1 : a->count;
	} else {
		/* older than every point: at least this far behind */
		count = b->count ? b->count - 1 : 0;
	}
	lag = h->commits > count ? h->commits - count : 0;
	if (lag) {
		ms_exact = exact && b->exact && b->count == count + 1 && b->ns > 0;
		*lag_ms = b->ns > 0 ? clamp_ms(real_ns - b->ns) : 0;
	} else {
		ms_exact = true;             /* the same commit relabelled: not behind */
	}
	word = (uint32_t)(lag > WSYNC_STATS_LAG_MAX ? WSYNC_STATS_LAG_MAX : lag) |
	       WSYNC_STATS_LAG_KNOWN;
	if (!exact || !ms_exact)
		word |= WSYNC_STATS_LAG_ESTIMATE;
	return word;
}

/* ---- sessions ------------------------------------------------------------------ */

static uint32_t only_model(uint64_t models)
{
	if (models && !(models & (models - 1)))
		return (uint32_t)__builtin_ctzll(models);
	return WSYNC_STATS_MODEL_UNKNOWN;
}

void stats_mirror(struct wsync_session_stats *out, const struct wsync_session_page *page,
                  uint64_t models, const struct stats_history *const *hist,
                  int64_t mono_ns, int64_t real_ns)
{
	uint64_t acquires = 0, held_v = UINT64_MAX, last_v = 0, view = 0, version = 0;
	uint32_t held_m = 0, held_slot = 0, model = WSYNC_STATS_MODEL_UNKNOWN;
	uint32_t lag = 0, lag_ms = 0, view_ms = 0;
	int64_t held_since = 0, last_since = 0, since = 0;

	for (uint32_t h = 0; h < WSYNC_MAX_VIEWS; h++) {
		const struct wsync_hazard *hz = &page->hazards[h];
		uint64_t pin = atomic_load_explicit(&hz->pin, RELAXED);
		uint64_t v = atomic_load_explicit(&hz->version, RELAXED);
		int64_t t = atomic_load_explicit(&hz->since_ns, RELAXED);
		uint32_t m;

		acquires += atomic_load_explicit(&hz->acquires, RELAXED);
		if (v > last_v) {
			last_v = v;
			last_since = t;
		}
		if (!pin)
			continue;
		m = wsync_pin_model(pin);
		if (m >= WSYNC_MAX_MODELS || !(models & (UINT64_C(1) << m)) || v >= held_v ||
		    wsync_pin_slot(pin) >= WSYNC_MAX_SLOTS)
			continue;
		held_v = v;
		held_m = m;
		held_slot = wsync_pin_slot(pin);
		held_since = t;
	}
	/* Versions fit in 56 bits; a client writing more gets them cut. */
	if (held_v != UINT64_MAX) {
		version = held_v & (UINT64_MAX >> 8);
		model = held_m;
		view = (version << 8) | WSYNC_STATS_HELD | held_m;
		since = held_since;
	} else if (last_v) {
		version = last_v & (UINT64_MAX >> 8);
		model = only_model(models);
		view = (version << 8) | model;
		since = last_since;
	}
	if (view && since > 0 && since <= mono_ns)
		view_ms = clamp_ms(mono_ns - since);
	if (view && model < WSYNC_MAX_MODELS && hist)
		lag = stats_lag(hist[model], version, real_ns, &lag_ms);
	if (held_v != UINT64_MAX)
		lag |= (held_slot + 1) << WSYNC_STATS_LAG_SLOT_SHIFT;
	atomic_store_explicit(&out->acquires, (uint32_t)acquires, RELAXED);
	atomic_store_explicit(&out->lag, lag, RELAXED);
	atomic_store_explicit(&out->view, view, RELAXED);
	atomic_store_explicit(&out->view_ms, view_ms, RELAXED);
	atomic_store_explicit(&out->lag_ms, lag_ms, RELAXED);
	atomic_store_explicit(&out->waits,
	                      (uint32_t)atomic_load_explicit(&page->waits, RELAXED), RELAXED);
	atomic_store_explicit(&out->timeouts,
	                      (uint32_t)atomic_load_explicit(&page->timeouts, RELAXED), RELAXED);
}

void stats_mirror_bound(struct wsync_session_bound *out, const struct wsync_session_stats *st,
                        const struct wsync_session_page *page, uint64_t subscribed)
{
	uint64_t view = atomic_load_explicit(&st->view, RELAXED), ns = 0;
	uint32_t model = view ? (uint32_t)(view & WSYNC_STATS_MODEL_UNKNOWN) :
	                 WSYNC_STATS_MODEL_UNKNOWN, versions = 0;

	if (model >= WSYNC_MAX_MODELS)
		model = only_model(subscribed);
	if (model < WSYNC_MAX_MODELS && (subscribed & (UINT64_C(1) << model))) {
		ns = atomic_load_explicit(&page->lag_bound_ns[model], RELAXED);
		versions = atomic_load_explicit(&page->lag_bound_versions[model], RELAXED);
	} else {
		model = WSYNC_STATS_MODEL_UNKNOWN;
	}
	/* a client's word past INT64_MAX is no age: shown as none */
	atomic_store_explicit(&out->max_age_ns, ns > INT64_MAX ? 0 : ns, RELAXED);
	atomic_store_explicit(&out->max_versions, versions, RELAXED);
	atomic_store_explicit(&out->model, model, RELAXED);
}
