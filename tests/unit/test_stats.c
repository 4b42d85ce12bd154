/*
 * test_stats — broker/stats.c turns a session page into the figures
 * monitors show: acquires summed over hazard records; the lowest pinned
 * version with its model and HELD; without a pin the newest version taken,
 * with the model only when the session opened one; pins of models the
 * session did not open ignored; the coarse monotonic time of the view
 * turned into CLOCK_REALTIME; waits and timeouts cut to 32 bits; a cleared
 * entry is all zero.
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

static struct wsync_session_page page;
static struct wsync_session_stats st;

static int reset(void **state)
{
	(void)state;
	memset(&page, 0, sizeof(page));
	memset(&st, 0xa5, sizeof(st));
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

static void never_acquired_is_zero(void **state)
{
	(void)state;
	stats_mirror(&st, &page, 1, MONO, REAL);
	assert_int_equal(atomic_load(&st.acquires), 0);
	assert_int_equal(atomic_load(&st.view), 0);
	assert_int_equal(atomic_load(&st.view_since_ns), 0);
}

static void lowest_pinned_version_is_held(void **state)
{
	(void)state;
	hz(0, 3, 1, 40, MONO - 1000, 5, 1);
	hz(7, 3, 2, 38, MONO - 3000, 2, 1);
	hz(9, 3, 0, 45, MONO - 10, 10, 0);          /* released later, newer */
	stats_mirror(&st, &page, UINT64_C(1) << 3, MONO, REAL);
	assert_int_equal(atomic_load(&st.acquires), 17);
	assert_int_equal(atomic_load(&st.view), (UINT64_C(38) << 8) | WSYNC_STATS_HELD | 3);
	assert_int_equal(atomic_load(&st.view_since_ns), REAL - 3000);
}

static void unpinned_shows_newest_taken(void **state)
{
	(void)state;
	hz(0, 2, 1, 40, MONO - 1000, 1, 0);
	hz(1, 2, 2, 41, MONO - 500, 1, 0);
	stats_mirror(&st, &page, UINT64_C(1) << 2, MONO, REAL);
	assert_int_equal(atomic_load(&st.view), (UINT64_C(41) << 8) | 2);
	assert_int_equal(atomic_load(&st.view_since_ns), REAL - 500);
	/* with two models opened, which one is unknown */
	stats_mirror(&st, &page, (UINT64_C(1) << 2) | 1, MONO, REAL);
	assert_int_equal(atomic_load(&st.view), (UINT64_C(41) << 8) | WSYNC_STATS_MODEL_UNKNOWN);
}

static void pins_of_other_models_are_ignored(void **state)
{
	(void)state;
	hz(0, 5, 1, 7, MONO - 1000, 1, 1);           /* model 5 not opened */
	hz(1, 63, 1, 3, MONO - 1000, 1, 1);          /* nor 63 */
	atomic_store(&page.hazards[2].pin, UINT64_C(200) << 32);   /* no such model */
	stats_mirror(&st, &page, UINT64_C(1) << 1, MONO, REAL);
	assert_false(atomic_load(&st.view) & WSYNC_STATS_HELD);
	assert_int_equal(atomic_load(&st.view) >> 8, 7);   /* newest taken, unpinned */
}

static void forged_times_are_dropped(void **state)
{
	(void)state;
	hz(0, 0, 1, 9, MONO + 1000, 1, 1);           /* in the future */
	stats_mirror(&st, &page, 1, MONO, REAL);
	assert_int_equal(atomic_load(&st.view_since_ns), 0);
	hz(0, 0, 1, 9, -5, 1, 1);
	stats_mirror(&st, &page, 1, MONO, REAL);
	assert_int_equal(atomic_load(&st.view_since_ns), 0);
}

static void waits_and_timeouts_are_copied(void **state)
{
	(void)state;
	atomic_store(&page.waits, (UINT64_C(1) << 32) + 12);
	atomic_store(&page.timeouts, 3);
	stats_mirror(&st, &page, 1, MONO, REAL);
	assert_int_equal(atomic_load(&st.waits), 12);
	assert_int_equal(atomic_load(&st.timeouts), 3);
	stats_clear(&st);
	assert_int_equal(atomic_load(&st.waits), 0);
	assert_int_equal(atomic_load(&st.view), 0);
	assert_int_equal(atomic_load(&st.acquires), 0);
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
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
