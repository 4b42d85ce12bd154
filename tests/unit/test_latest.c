/*
 * test_latest — the packed words shared between processes (shm/layout.h):
 * `latest` (version in the high 56 bits, slot in the low 8) and hazard pins
 * (model + 1 in the high 32 bits, slot in the low 32) round-trip at their
 * extremes, and a pin is never the "empty" value 0.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "shm/layout.h"

#define VERSION_MAX (((uint64_t)1 << 56) - 1)

static void latest_round_trips(void **state)
{
	(void)state;
	const uint64_t versions[] = { 0, 1, 2, 255, 256, 0xffffffffull, (uint64_t)1 << 55,
	                              VERSION_MAX - 1, VERSION_MAX };
	const uint32_t slots[] = { 0, 1, 7, WSYNC_MAX_SLOTS - 1, 0xfe, WSYNC_SLOT_NONE };
	for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++)
		for (size_t j = 0; j < sizeof slots / sizeof slots[0]; j++) {
			uint64_t l = wsync_latest_pack(versions[i], slots[j]);
			assert_int_equal(wsync_latest_version(l), versions[i]);
			assert_int_equal(wsync_latest_slot(l), slots[j]);
		}
}

static void latest_orders_by_version(void **state)
{
	(void)state;
	/* a newer version packs to a larger word, whatever the slots */
	assert_true(wsync_latest_pack(2, 0) > wsync_latest_pack(1, WSYNC_SLOT_NONE));
	assert_true(wsync_latest_pack(VERSION_MAX, 0) > wsync_latest_pack(VERSION_MAX - 1, 0xff));
}

static void latest_slot_never_spills_into_the_version(void **state)
{
	(void)state;
	uint64_t l = wsync_latest_pack(5, 0x1ff);
	assert_int_equal(wsync_latest_version(l), 5);
	assert_int_equal(wsync_latest_slot(l), 0xff);
	l = wsync_latest_pack(VERSION_MAX, UINT32_MAX);
	assert_int_equal(wsync_latest_version(l), VERSION_MAX);
}

static void empty_latest_has_no_slot(void **state)
{
	(void)state;
	uint64_t l = wsync_latest_pack(0, WSYNC_SLOT_NONE);
	assert_int_equal(wsync_latest_version(l), 0);
	assert_int_equal(wsync_latest_slot(l), WSYNC_SLOT_NONE);
	assert_true(WSYNC_SLOT_NONE >= WSYNC_MAX_SLOTS);
}

static void pin_round_trips(void **state)
{
	(void)state;
	const uint32_t models[] = { 0, 1, WSYNC_MAX_MODELS - 1, 0x7fffffffu, UINT32_MAX - 1 };
	const uint32_t slots[] = { 0, 1, WSYNC_MAX_SLOTS - 1, WSYNC_SLOT_NONE, 0x80000000u,
	                           UINT32_MAX };
	for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
		for (size_t j = 0; j < sizeof slots / sizeof slots[0]; j++) {
			uint64_t p = wsync_pin_pack(models[i], slots[j]);
			assert_int_not_equal(p, 0);
			assert_int_equal(wsync_pin_model(p), models[i]);
			assert_int_equal(wsync_pin_slot(p), slots[j]);
		}
}

static void pin_of_model_0_slot_0_is_not_empty(void **state)
{
	(void)state;
	assert_int_not_equal(wsync_pin_pack(0, 0), 0);
	/* pins of different (model, slot) pairs differ */
	assert_int_not_equal(wsync_pin_pack(0, 1), wsync_pin_pack(1, 0));
	assert_int_not_equal(wsync_pin_pack(1, 0), wsync_pin_pack(0, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(latest_round_trips),
		cmocka_unit_test(latest_orders_by_version),
		cmocka_unit_test(latest_slot_never_spills_into_the_version),
		cmocka_unit_test(empty_latest_has_no_slot),
		cmocka_unit_test(pin_round_trips),
		cmocka_unit_test(pin_of_model_0_slot_0_is_not_empty),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
