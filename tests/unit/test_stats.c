/*
 * test_stats — broker/stats.c turns a session page and a model's commit
 * history into the figures monitors show: acquires summed over hazard
 * records (low 32 bits); the lowest pinned version with its model, HELD and
 * the slot it pins; without a pin the newest version taken, with the model
 * only when the session opened one; pins of models the session did not open
 * (or of slots past the table) ignored; how long ago the view was taken, in
 * ms, forged times dropped; waits and timeouts cut to 32 bits; a cleared
 * entry is all zero. Lag: counted in commits, not version numbers (a
 * skipped version is not a commit missed); exact from a history of every
 * commit; from tick observations exact where no version was skipped between
 * two points and flagged as an estimate, inside its bounds, where one was;
 * lag_ms from the successor's commit time; a history that wraps keeps the
 * newest points. A declared staleness bound is mirrored for the model of
 * the view (or the only one subscribed), only while a subscription of it
 * is open; a forged age past INT64_MAX reads as none.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "broker/stats.h"

#define MONO INT64_C(5000000000)
#define REAL INT64_C(1700000000000000000)
#define MS   INT64_C(1000000)

static struct wsync_session_page page;
static struct wsync_session_stats st;
static struct stats_history hist;

static int reset(void **state)
{
	(void)state;
	memset(&page, 0, sizeof(page));
	memset(&st, 0xa5, sizeof(st));
	stats_history_reset(&hist);
	return 0;
}

static void hz(uint32_t i, uint32_t model, uint32_t slot, uint64_t version, int64_t since,
               uint64_t acquires, int pinned)
{
	atomic_store(&page.hazards[i].pin, pinned ? wsync_pin_pack(model, slot) : 0);
	atomic_store(&page.hazards[i].version, version);
	atomic_store(&page.hazards[i].since_ns, since);
	atomic_store(&page.hazards[i].acquires, acquires);
}

static void add(uint64_t version, uint64_t count, int64_t ns, bool exact)
{
	struct stats_point pt = { .version = version, .count = count, .ns = ns, .exact = exact };

	stats_history_add(&hist, &pt);
	hist.latest = version;
	hist.commits = count;
	hist.latest_ns = ns;
}

static uint32_t lag_of(uint64_t version, uint32_t *ms)
{
	return stats_lag(&hist, version, REAL, ms);
}

#define COUNT(w) ((w) & WSYNC_STATS_LAG_MAX)

static void never_acquired_is_zero(void **state)
{
	(void)state;
	stats_mirror(&st, &page, 1, NULL, MONO, REAL);
	assert_int_equal(atomic_load(&st.acquires), 0);
	assert_int_equal(atomic_load(&st.view), 0);
	assert_int_equal(atomic_load(&st.view_ms), 0);
	assert_int_equal(atomic_load(&st.lag), 0);
}

static void lowest_pinned_version_is_held(void **state)
{
	(void)state;
	hz(0, 3, 1, 40, MONO - 1000 * MS, 5, 1);
	hz(7, 3, 2, 38, MONO - 3000 * MS, 2, 1);
	hz(9, 3, 0, 45, MONO - 10 * MS, 10, 0);       /* released later, newer */
	stats_mirror(&st, &page, UINT64_C(1) << 3, NULL, MONO, REAL);
	assert_int_equal(atomic_load(&st.acquires), 17);
	assert_int_equal(atomic_load(&st.view), (UINT64_C(38) << 8) | WSYNC_STATS_HELD | 3);
	assert_int_equal(atomic_load(&st.view_ms), 3000);
	/* slot 2 pinned, stored plus one; no history: lag unknown */
	assert_int_equal(atomic_load(&st.lag), 3u << WSYNC_STATS_LAG_SLOT_SHIFT);
}

static void unpinned_shows_newest_taken(void **state)
{
	(void)state;
	hz(0, 2, 1, 40, MONO - 1000 * MS, 1, 0);
	hz(1, 2, 2, 41, MONO - 500 * MS, 1, 0);
	stats_mirror(&st, &page, UINT64_C(1) << 2, NULL, MONO, REAL);
	assert_int_equal(atomic_load(&st.view), (UINT64_C(41) << 8) | 2);
	assert_int_equal(atomic_load(&st.view_ms), 500);
	assert_int_equal(atomic_load(&st.lag) >> WSYNC_STATS_LAG_SLOT_SHIFT & 0x3f, 0);
	/* with two models opened, which one is unknown */
	stats_mirror(&st, &page, (UINT64_C(1) << 2) | 1, NULL, MONO, REAL);
	assert_int_equal(atomic_load(&st.view), (UINT64_C(41) << 8) | WSYNC_STATS_MODEL_UNKNOWN);
}

static void pins_of_other_models_are_ignored(void **state)
{
	(void)state;
	hz(0, 5, 1, 7, MONO - 1000, 1, 1);           /* model 5 not opened */
	hz(1, 63, 1, 3, MONO - 1000, 1, 1);          /* nor 63 */
	atomic_store(&page.hazards[2].pin, UINT64_C(200) << 32);   /* no such model */
	hz(3, 1, 40, 2, MONO - 1000, 1, 1);          /* a slot past the table */
	stats_mirror(&st, &page, UINT64_C(1) << 1, NULL, MONO, REAL);
	assert_false(atomic_load(&st.view) & WSYNC_STATS_HELD);
	assert_int_equal(atomic_load(&st.view) >> 8, 7);   /* newest taken, unpinned */
}

static void forged_times_are_dropped(void **state)
{
	(void)state;
	hz(0, 0, 1, 9, MONO + 1000, 1, 1);           /* in the future */
	stats_mirror(&st, &page, 1, NULL, MONO, REAL);
	assert_int_equal(atomic_load(&st.view_ms), 0);
	hz(0, 0, 1, 9, -5, 1, 1);
	stats_mirror(&st, &page, 1, NULL, MONO, REAL);
	assert_int_equal(atomic_load(&st.view_ms), 0);
}

static void waits_and_timeouts_are_copied(void **state)
{
	(void)state;
	atomic_store(&page.waits, (UINT64_C(1) << 32) + 12);
	atomic_store(&page.timeouts, 3);
	hz(0, 0, 1, 9, MONO, (UINT64_C(1) << 32) + 4, 0);
	stats_mirror(&st, &page, 1, NULL, MONO, REAL);
	assert_int_equal(atomic_load(&st.waits), 12);
	assert_int_equal(atomic_load(&st.timeouts), 3);
	assert_int_equal(atomic_load(&st.acquires), 4);
	stats_clear(&st);
	assert_int_equal(atomic_load(&st.waits), 0);
	assert_int_equal(atomic_load(&st.view), 0);
	assert_int_equal(atomic_load(&st.acquires), 0);
	assert_int_equal(atomic_load(&st.lag), 0);
	assert_int_equal(atomic_load(&st.lag_ms), 0);
}

/* Every commit recorded: versions 10..14 committed, 15 and 16 skipped (a
 * publisher reopened), 17..19 committed. */
static void every_commit(void)
{
	for (uint64_t v = 10; v <= 14; v++)
		add(v, v - 9, REAL - (int64_t)(20 - v) * 100 * MS, true);
	for (uint64_t v = 17; v <= 19; v++)
		add(v, v - 11, REAL - (int64_t)(20 - v) * 100 * MS, true);
}

static void lag_counts_commits_not_versions(void **state)
{
	uint32_t ms, w;

	(void)state;
	every_commit();
	w = lag_of(19, &ms);                          /* the latest */
	assert_int_equal(w, WSYNC_STATS_LAG_KNOWN);
	assert_int_equal(ms, 0);
	w = lag_of(14, &ms);                          /* 17, 18, 19 missed: 3, not 5 */
	assert_int_equal(w, WSYNC_STATS_LAG_KNOWN | 3);
	assert_int_equal(ms, 300);                    /* since 17 was committed */
	w = lag_of(12, &ms);
	assert_int_equal(w, WSYNC_STATS_LAG_KNOWN | 5);
	assert_int_equal(ms, 700);                    /* since 13 */
	/* the lag reaches the session's entry, with its slot */
	hz(0, 4, 2, 14, MONO - 2000 * MS, 1, 1);
	{
		const struct stats_history *hs[WSYNC_MAX_MODELS] = { [4] = &hist };

		stats_mirror(&st, &page, UINT64_C(1) << 4, hs, MONO, REAL);
	}
	assert_int_equal(atomic_load(&st.lag),
	                 WSYNC_STATS_LAG_KNOWN | 3 | (3u << WSYNC_STATS_LAG_SLOT_SHIFT));
	assert_int_equal(atomic_load(&st.lag_ms), 300);
	assert_int_equal(atomic_load(&st.view_ms), 2000);
}

static void tick_points_exact_without_skips(void **state)
{
	uint32_t ms, w;

	(void)state;
	/* the tick saw v20 (count 5) and v30 (count 15): nothing skipped */
	add(20, 5, REAL - 2000 * MS, true);
	add(30, 15, REAL - 900 * MS, true);
	w = lag_of(25, &ms);
	assert_int_equal(w & ~WSYNC_STATS_LAG_ESTIMATE, WSYNC_STATS_LAG_KNOWN | 5);
	/* the count is exact, the time only bounded (26 was not seen) */
	assert_true(w & WSYNC_STATS_LAG_ESTIMATE);
	assert_int_equal(ms, 900);
	/* the version right before a point: its successor is the point */
	w = lag_of(29, &ms);
	assert_int_equal(w, WSYNC_STATS_LAG_KNOWN | 1);
	assert_int_equal(ms, 900);
	w = lag_of(20, &ms);
	assert_int_equal(w & WSYNC_STATS_LAG_MAX, 10);
}

static void tick_points_with_skips_are_estimates(void **state)
{
	uint32_t ms, w;

	(void)state;
	/* v20 (count 5) then v30 (count 10): five versions were skipped */
	add(20, 5, REAL - 2000 * MS, true);
	add(30, 10, REAL - 500 * MS, true);
	w = lag_of(22, &ms);
	assert_true(w & WSYNC_STATS_LAG_ESTIMATE);
	assert_true(w & WSYNC_STATS_LAG_KNOWN);
	assert_in_range(COUNT(w), 1, 4);              /* inside (5, 10) */
	w = lag_of(28, &ms);
	assert_in_range(COUNT(w), 1, 4);
	/* older than every point: at least as far behind as the oldest */
	w = lag_of(3, &ms);
	assert_true(w & WSYNC_STATS_LAG_ESTIMATE);
	assert_true(COUNT(w) >= 6);
}

static void unknown_without_history(void **state)
{
	uint32_t ms;

	(void)state;
	assert_int_equal(stats_lag(NULL, 5, REAL, &ms), 0);
	assert_int_equal(stats_lag(&hist, 5, REAL, &ms), 0);   /* empty */
	add(10, 3, REAL, true);
	assert_int_equal(lag_of(0, &ms), 0);          /* never acquired */
	assert_int_equal(lag_of(12, &ms), WSYNC_STATS_LAG_KNOWN);   /* ahead of the tick */
}

static void history_keeps_the_newest_and_the_order(void **state)
{
	uint32_t ms, w;

	(void)state;
	for (uint64_t v = 1; v <= STATS_HISTORY + 50; v++)
		add(v, v, REAL - (int64_t)(STATS_HISTORY + 51 - v) * MS, true);
	assert_int_equal(hist.n, STATS_HISTORY);
	/* a point below the newest is ignored */
	{
		struct stats_point old = { .version = 5, .count = 5, .exact = true };

		stats_history_add(&hist, &old);
	}
	assert_int_equal(hist.n, STATS_HISTORY);
	w = lag_of(STATS_HISTORY + 40, &ms);
	assert_int_equal(w, WSYNC_STATS_LAG_KNOWN | 10);
	assert_int_equal(ms, 10);
	w = lag_of(10, &ms);                          /* dropped from the history */
	assert_true(w & WSYNC_STATS_LAG_ESTIMATE);
	assert_in_range(COUNT(w), STATS_HISTORY, STATS_HISTORY + 50 - 10);
}

static void bound_of_the_viewed_model(void **state)
{
	struct wsync_session_bound bd;

	(void)state;
	stats_clear_bound(&bd);
	assert_int_equal(atomic_load(&bd.model), WSYNC_STATS_MODEL_UNKNOWN);
	atomic_store(&page.lag_bound_ns[3], 500 * MS);
	atomic_store(&page.lag_bound_versions[3], 2);
	atomic_store(&page.lag_bound_ns[5], 900 * MS);
	hz(0, 3, 1, 40, MONO - 1000 * MS, 1, 1);
	stats_mirror(&st, &page, (UINT64_C(1) << 3) | (UINT64_C(1) << 5), NULL, MONO, REAL);
	stats_mirror_bound(&bd, &st, &page, (UINT64_C(1) << 3) | (UINT64_C(1) << 5));
	assert_int_equal(atomic_load(&bd.model), 3);
	assert_int_equal(atomic_load(&bd.max_age_ns), 500 * MS);
	assert_int_equal(atomic_load(&bd.max_versions), 2);
	/* its subscription closed (the model still open to publish): none */
	stats_mirror_bound(&bd, &st, &page, UINT64_C(1) << 5);
	assert_int_equal(atomic_load(&bd.model), WSYNC_STATS_MODEL_UNKNOWN);
	assert_int_equal(atomic_load(&bd.max_age_ns), 0);
	assert_int_equal(atomic_load(&bd.max_versions), 0);
	/* never acquired: the only model subscribed */
	stats_clear(&st);
	stats_mirror_bound(&bd, &st, &page, UINT64_C(1) << 5);
	assert_int_equal(atomic_load(&bd.model), 5);
	assert_int_equal(atomic_load(&bd.max_age_ns), 900 * MS);
	assert_int_equal(atomic_load(&bd.max_versions), 0);
	/* several and no view: unknown, no bound */
	stats_mirror_bound(&bd, &st, &page, (UINT64_C(1) << 3) | (UINT64_C(1) << 5));
	assert_int_equal(atomic_load(&bd.model), WSYNC_STATS_MODEL_UNKNOWN);
	assert_int_equal(atomic_load(&bd.max_versions), 0);
	atomic_store(&page.lag_bound_ns[5], UINT64_MAX);
	stats_mirror_bound(&bd, &st, &page, UINT64_C(1) << 5);
	assert_int_equal(atomic_load(&bd.max_age_ns), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(never_acquired_is_zero, reset),
		cmocka_unit_test_setup(lowest_pinned_version_is_held, reset),
		cmocka_unit_test_setup(unpinned_shows_newest_taken, reset),
		cmocka_unit_test_setup(pins_of_other_models_are_ignored, reset),
		cmocka_unit_test_setup(forged_times_are_dropped, reset),
		cmocka_unit_test_setup(waits_and_timeouts_are_copied, reset),
		cmocka_unit_test_setup(lag_counts_commits_not_versions, reset),
		cmocka_unit_test_setup(tick_points_exact_without_skips, reset),
		cmocka_unit_test_setup(tick_points_with_skips_are_estimates, reset),
		cmocka_unit_test_setup(unknown_without_history, reset),
		cmocka_unit_test_setup(history_keeps_the_newest_and_the_order, reset),
		cmocka_unit_test_setup(bound_of_the_viewed_model, reset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
