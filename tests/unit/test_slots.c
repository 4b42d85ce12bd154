/*
 * test_slots — which slot the broker may hand out for writing
 * (broker/slots.h): hazard_scan sees exactly the pins of one model within its
 * slots, slot_pick never chooses a slot someone reads or that is the latest
 * or already granted, and slot_describe_busy says who pins what.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/slots.h"

#define NPAGES 5

static struct wsync_session_page *pages[NPAGES];

static int setup_pages(void **state)
{
	(void)state;
	for (int i = 0; i < NPAGES; i++) {
		pages[i] = aligned_alloc(WSYNC_PAGE, sizeof *pages[i]);
		if (!pages[i])
			return -1;
		memset(pages[i], 0, sizeof *pages[i]);
		pages[i]->magic = WSYNC_MAGIC_SESSION;
		pages[i]->layout_version = WSYNC_LAYOUT_VERSION;
		pages[i]->session_id = (uint32_t)i + 1;
	}
	return 0;
}

static int teardown_pages(void **state)
{
	(void)state;
	for (int i = 0; i < NPAGES; i++) {
		free(pages[i]);
		pages[i] = NULL;
	}
	return 0;
}

static void pin(int page, int hazard, uint32_t model, uint32_t slot)
{
	atomic_store(&pages[page]->hazards[hazard].pin, wsync_pin_pack(model, slot));
}

static uint32_t scan(uint32_t model, uint32_t n_slots, size_t n)
{
	return hazard_scan(model, n_slots, (struct wsync_session_page *const *)pages, n);
}

/* ---- hazard_scan ------------------------------------------------------------- */

static void scan_of_no_sessions_or_no_pins_is_empty(void **state)
{
	(void)state;
	assert_int_equal(hazard_scan(0, 4, NULL, 0), 0);
	assert_int_equal(scan(0, 4, NPAGES), 0);
	assert_int_equal(scan(7, WSYNC_MAX_SLOTS, NPAGES), 0);
}

static void scan_sees_pins_of_the_model(void **state)
{
	(void)state;
	pin(0, 0, 2, 1);
	assert_int_equal(scan(2, 4, NPAGES), 1u << 1);
	pin(0, 62, 2, 3);                 /* the last hazard record of a page */
	assert_int_equal(scan(2, 4, NPAGES), (1u << 1) | (1u << 3));
	/* model 0 slot 0: the pin word is not 0, so it counts */
	pin(1, 5, 0, 0);
	assert_int_equal(scan(0, 4, NPAGES), 1u << 0);
}

static void scan_ignores_pins_of_other_models(void **state)
{
	(void)state;
	pin(0, 0, 1, 0);
	pin(1, 0, 3, 1);
	pin(2, 7, WSYNC_MAX_MODELS - 1, 2);
	assert_int_equal(scan(2, 4, NPAGES), 0);
	assert_int_equal(scan(1, 4, NPAGES), 1u << 0);
	assert_int_equal(scan(3, 4, NPAGES), 1u << 1);
	/* a raw pin word whose model field is 0 (model "-1") names no model */
	atomic_store(&pages[3]->hazards[0].pin, (uint64_t)2);
	assert_int_equal(scan(0, 4, NPAGES), 0);
}

static void scan_ignores_slots_past_n_slots(void **state)
{
	(void)state;
	pin(0, 0, 4, 4);                  /* n_slots 4: slots 0..3 */
	pin(1, 1, 4, 31);
	pin(2, 2, 4, 32);                 /* would be 1 << 32 */
	pin(3, 3, 4, 1000);
	pin(4, 4, 4, UINT32_MAX);
	assert_int_equal(scan(4, 4, NPAGES), 0);
	assert_int_equal(scan(4, 2, NPAGES), 0);
	/* with the most slots a model can have, slots 4 and 31 count, 32+ still do not */
	assert_int_equal(scan(4, WSYNC_MAX_SLOTS, NPAGES), (1u << 31) | (1u << 4));
}

static void scan_merges_several_pages_and_hazards(void **state)
{
	(void)state;
	pin(0, 0, 5, 0);
	pin(0, 1, 5, 0);                  /* the same slot twice: still one bit */
	pin(1, 30, 5, 2);
	pin(3, 62, 5, 5);
	pin(4, 10, 6, 1);                 /* another model */
	assert_int_equal(scan(5, 8, NPAGES), (1u << 0) | (1u << 2) | (1u << 5));
	/* only the first n pages are looked at */
	assert_int_equal(scan(5, 8, 1), 1u << 0);
	assert_int_equal(scan(5, 8, 3), (1u << 0) | (1u << 2));
	/* a cleared pin stops counting */
	atomic_store(&pages[1]->hazards[30].pin, 0);
	assert_int_equal(scan(5, 8, NPAGES), (1u << 0) | (1u << 5));
}

static void scan_with_every_hazard_in_use(void **state)
{
	(void)state;
	for (int p = 0; p < NPAGES; p++)
		for (int h = 0; h < WSYNC_MAX_VIEWS; h++)
			pin(p, h, (uint32_t)(h % 3), (uint32_t)(h % WSYNC_MAX_SLOTS));
	uint32_t want = 0;
	for (int h = 0; h < WSYNC_MAX_VIEWS; h++)
		if (h % 3 == 1)
			want |= 1u << (h % WSYNC_MAX_SLOTS);
	assert_int_equal(scan(1, WSYNC_MAX_SLOTS, NPAGES), want);
}

/* ---- slot_pick ------------------------------------------------------------------- */

static struct slot_books books(uint32_t n, const uint8_t *st, const uint64_t *ver)
{
	struct slot_books b;
	memset(&b, 0, sizeof b);
	b.n_slots = n;
	for (uint32_t i = 0; i < n; i++) {
		b.state[i] = st[i];
		b.version[i] = ver ? ver[i] : 0;
	}
	return b;
}

enum { FREE = WSYNC_SLOT_FREE, OLD = WSYNC_SLOT_OLD, LATEST = WSYNC_SLOT_LATEST,
       GRANTED = WSYNC_SLOT_GRANTED };

static void pick_takes_a_free_slot_first(void **state)
{
	(void)state;
	struct slot_books b = books(4, (const uint8_t[]){ FREE, FREE, FREE, FREE }, NULL);
	assert_int_equal(slot_pick(&b, 0), 0);
	b = books(4, (const uint8_t[]){ LATEST, OLD, FREE, FREE }, (const uint64_t[]){ 9, 1, 0, 0 });
	assert_int_equal(slot_pick(&b, 0), 2);           /* FREE before the older OLD */
	b = books(3, (const uint8_t[]){ GRANTED, LATEST, FREE }, (const uint64_t[]){ 3, 2, 0 });
	assert_int_equal(slot_pick(&b, 0), 2);
}

static void pick_takes_the_oldest_unpinned_old_slot(void **state)
{
	(void)state;
	struct slot_books b = books(4, (const uint8_t[]){ OLD, OLD, LATEST, OLD },
	                            (const uint64_t[]){ 5, 3, 6, 4 });
	assert_int_equal(slot_pick(&b, 0), 1);           /* v3 */
	assert_int_equal(slot_pick(&b, 1u << 1), 3);     /* v3 pinned: v4 */
	assert_int_equal(slot_pick(&b, (1u << 1) | (1u << 3)), 0);
	/* versions far apart: compare as 64-bit numbers */
	b = books(3, (const uint8_t[]){ OLD, OLD, LATEST },
	          (const uint64_t[]){ (uint64_t)1 << 40, ((uint64_t)1 << 40) + 1, (uint64_t)1 << 41 });
	assert_int_equal(slot_pick(&b, 0), 0);
	b = books(3, (const uint8_t[]){ OLD, OLD, LATEST },
	          (const uint64_t[]){ ((uint64_t)1 << 33) + 2, 2, (uint64_t)1 << 34 });
	assert_int_equal(slot_pick(&b, 0), 1);
}

static void pick_never_takes_latest_or_granted(void **state)
{
	(void)state;
	struct slot_books b = books(2, (const uint8_t[]){ LATEST, GRANTED }, (const uint64_t[]){ 7, 8 });
	assert_int_equal(slot_pick(&b, 0), -EBUSY);
	b = books(4, (const uint8_t[]){ GRANTED, LATEST, GRANTED, GRANTED },
	          (const uint64_t[]){ 1, 2, 3, 4 });
	assert_int_equal(slot_pick(&b, 0), -EBUSY);
	/* the latest carries the lowest version: still not chosen */
	b = books(3, (const uint8_t[]){ LATEST, OLD, OLD }, (const uint64_t[]){ 1, 5, 6 });
	assert_int_equal(slot_pick(&b, 0), 1);
}

static void pick_is_busy_when_every_candidate_is_pinned(void **state)
{
	(void)state;
	struct slot_books b = books(4, (const uint8_t[]){ OLD, OLD, LATEST, OLD },
	                            (const uint64_t[]){ 5, 3, 6, 4 });
	assert_int_equal(slot_pick(&b, (1u << 0) | (1u << 1) | (1u << 3)), -EBUSY);
	assert_int_equal(slot_pick(&b, 0xffffffffu), -EBUSY);
	/* a pinned slot is not written even if the books say FREE */
	b = books(2, (const uint8_t[]){ FREE, LATEST }, (const uint64_t[]){ 0, 1 });
	assert_int_equal(slot_pick(&b, 1u << 0), -EBUSY);
	b = books(3, (const uint8_t[]){ FREE, FREE, LATEST }, (const uint64_t[]){ 0, 0, 1 });
	assert_int_equal(slot_pick(&b, 1u << 0), 1);
}

static void pick_stays_within_n_slots(void **state)
{
	(void)state;
	/* entries past n_slots are FREE in the struct but do not exist */
	struct slot_books b = books(2, (const uint8_t[]){ LATEST, GRANTED }, (const uint64_t[]){ 1, 2 });
	assert_int_equal(slot_pick(&b, 0), -EBUSY);
	b = books(2, (const uint8_t[]){ LATEST, OLD }, (const uint64_t[]){ 2, 1 });
	assert_int_equal(slot_pick(&b, 1u << 1), -EBUSY);
	/* pinned bits past n_slots change nothing */
	b = books(2, (const uint8_t[]){ LATEST, OLD }, (const uint64_t[]){ 2, 1 });
	assert_int_equal(slot_pick(&b, 0xfffffffcu), 1);
	/* all WSYNC_MAX_SLOTS slots */
	uint8_t st[WSYNC_MAX_SLOTS];
	uint64_t ver[WSYNC_MAX_SLOTS];
	for (int i = 0; i < WSYNC_MAX_SLOTS; i++) {
		st[i] = OLD;
		ver[i] = 100 - (uint64_t)i;
	}
	st[0] = LATEST;
	ver[0] = 200;
	b = books(WSYNC_MAX_SLOTS, st, ver);
	assert_int_equal(slot_pick(&b, 0), WSYNC_MAX_SLOTS - 1);
	assert_int_equal(slot_pick(&b, 1u << 31), WSYNC_MAX_SLOTS - 2);
}

/* ---- slot_describe_busy ------------------------------------------------------------- */

static void describe_names_pinned_slots_and_holders(void **state)
{
	(void)state;
	struct slot_books b = books(2, (const uint8_t[]){ OLD, LATEST }, (const uint64_t[]){ 12, 13 });
	const char *holders[WSYNC_MAX_SLOTS] = { "collector-7 (pid 4242)", "learner-2 (pid 77)" };
	char buf[512] = "";
	slot_describe_busy(&b, (1u << 0) | (1u << 1), holders, buf, sizeof buf);
	if (!strstr(buf, "slot 0") || !strstr(buf, "12") || !strstr(buf, "collector-7"))
		fail_msg("does not say slot 0 (v12) is pinned by collector-7: \"%s\"", buf);
	if (!strstr(buf, "slot 1") || !strstr(buf, "13"))
		fail_msg("does not mention slot 1 (v13): \"%s\"", buf);

	/* four slots, three holders */
	b = books(4, (const uint8_t[]){ OLD, OLD, LATEST, OLD }, (const uint64_t[]){ 5, 3, 6, 4 });
	const char *h4[WSYNC_MAX_SLOTS] = { "alpha", "bravo", NULL, "charlie" };
	slot_describe_busy(&b, 0xbu, h4, buf, sizeof buf);
	for (int i = 0; i < 4; i++)
		if (h4[i] && !strstr(buf, h4[i]))
			fail_msg("holder '%s' missing: \"%s\"", h4[i], buf);
	if (!strstr(buf, "slot 3"))
		fail_msg("slot 3 missing: \"%s\"", buf);
}

static void describe_without_holders_still_describes(void **state)
{
	(void)state;
	struct slot_books b = books(2, (const uint8_t[]){ OLD, LATEST }, (const uint64_t[]){ 12, 13 });
	char buf[256] = "";
	slot_describe_busy(&b, 1u << 0, NULL, buf, sizeof buf);
	if (!strstr(buf, "slot 0") || !strstr(buf, "12"))
		fail_msg("does not say slot 0 (v12) is pinned: \"%s\"", buf);
}

static void describe_truncates_to_the_buffer(void **state)
{
	(void)state;
	uint8_t st[WSYNC_MAX_SLOTS];
	uint64_t ver[WSYNC_MAX_SLOTS];
	const char *holders[WSYNC_MAX_SLOTS];
	for (int i = 0; i < WSYNC_MAX_SLOTS; i++) {
		st[i] = OLD;
		ver[i] = 1000000 + (uint64_t)i;
		holders[i] = "a-collector-with-a-rather-long-name (pid 1234567)";
	}
	st[5] = LATEST;
	struct slot_books b = books(WSYNC_MAX_SLOTS, st, ver);
	for (size_t len = 1; len <= 64; len *= 2) {
		char *buf = malloc(len);    /* exact size: a sanitizer sees any overrun */
		assert_non_null(buf);
		slot_describe_busy(&b, 0xffffffffu, holders, buf, len);
		assert_true(memchr(buf, 0, len) != NULL);
		free(buf);
	}
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup_pages, teardown_pages)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(scan_of_no_sessions_or_no_pins_is_empty),
		T(scan_sees_pins_of_the_model),
		T(scan_ignores_pins_of_other_models),
		T(scan_ignores_slots_past_n_slots),
		T(scan_merges_several_pages_and_hazards),
		T(scan_with_every_hazard_in_use),
		cmocka_unit_test(pick_takes_a_free_slot_first),
		cmocka_unit_test(pick_takes_the_oldest_unpinned_old_slot),
		cmocka_unit_test(pick_never_takes_latest_or_granted),
		cmocka_unit_test(pick_is_busy_when_every_candidate_is_pinned),
		cmocka_unit_test(pick_stays_within_n_slots),
		cmocka_unit_test(describe_names_pinned_slots_and_holders),
		cmocka_unit_test(describe_without_holders_still_describes),
		cmocka_unit_test(describe_truncates_to_the_buffer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
