/*
 * broker/stats.c — copies each session's reading figures into the control
 * segment once per tick (see stats.h).
 *
 * The session page is written by its client at any time and is never
 * trusted: every word is read once (relaxed; these are informational
 * figures, not the hazard protocol), pins naming a model the session did not
 * open are ignored, and nothing read here decides anything in the broker.
 * Only the broker writes the stats, so a monitor reading them (relaxed) sees
 * each word whole, possibly one tick old.
 */
#include <stdatomic.h>
#include <time.h>

#include "stats.h"

#define RELAXED memory_order_relaxed

void stats_clear(struct wsync_session_stats *st)
{
	atomic_store_explicit(&st->acquires, 0, RELAXED);
	atomic_store_explicit(&st->view, 0, RELAXED);
	atomic_store_explicit(&st->view_since_ns, 0, RELAXED);
	atomic_store_explicit(&st->waits, 0, RELAXED);
	atomic_store_explicit(&st->timeouts, 0, RELAXED);
}

static uint32_t only_model(uint64_t models)
{
	if (models && !(models & (models - 1)))
		return (uint32_t)__builtin_ctzll(models);
	return WSYNC_STATS_MODEL_UNKNOWN;
}

void stats_mirror(struct wsync_session_stats *out, const struct wsync_session_page *page,
                  uint64_t models, int64_t mono_ns, int64_t real_ns)
{
	uint64_t acquires = 0, held_v = UINT64_MAX, last_v = 0, view = 0;
	uint32_t held_m = 0;
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
		if (m >= WSYNC_MAX_MODELS || !(models & (UINT64_C(1) << m)) || v >= held_v)
			continue;
		held_v = v;
		held_m = m;
		held_since = t;
	}
	/* Versions fit in 56 bits; a client writing more gets them cut. */
	if (held_v != UINT64_MAX) {
		view = (held_v << 8) | WSYNC_STATS_HELD | held_m;
		since = held_since;
	} else if (last_v) {
		view = (last_v << 8) | only_model(models);
		since = last_since;
	}
	if (view && since > 0 && since <= mono_ns)
		since = real_ns - (mono_ns - since);
	else
		since = 0;
	atomic_store_explicit(&out->acquires, acquires, RELAXED);
	atomic_store_explicit(&out->view, view, RELAXED);
	atomic_store_explicit(&out->view_since_ns, since, RELAXED);
	atomic_store_explicit(&out->waits,
	                      (uint32_t)atomic_load_explicit(&page->waits, RELAXED), RELAXED);
	atomic_store_explicit(&out->timeouts,
	                      (uint32_t)atomic_load_explicit(&page->timeouts, RELAXED), RELAXED);
}
