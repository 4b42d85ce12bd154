/*
 * test_pages — the sizes behind huge-page slabs: wsync_seg_round rounds up
 * to a power-of-two page and says 0 for 0, overflow or a page that is not a
 * power of two; a slab object is the layout's bytes on 4 KiB pages and
 * rounded up to 2 MiB on hugetlb and THP pages (pages_seg_bytes); a plain
 * memfd maps in 4 KiB units, a hugetlb one (where the kernel makes one) in
 * 2 MiB units (wsync_seg_page_size), and --huge-pages parses auto, on and
 * off and nothing else.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <setjmp.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "broker/config.h"
#include "broker/pages.h"
#include "shm/segment.h"

#define MiB (UINT64_C(1) << 20)

static void round_up_to_pages(void **state)
{
	(void)state;
	assert_int_equal(wsync_seg_round(1, WSYNC_PAGE), WSYNC_PAGE);
	assert_int_equal(wsync_seg_round(WSYNC_PAGE, WSYNC_PAGE), WSYNC_PAGE);
	assert_int_equal(wsync_seg_round(WSYNC_PAGE + 1, WSYNC_PAGE), 2 * WSYNC_PAGE);
	assert_int_equal(wsync_seg_round(4096, WSYNC_HUGE_PAGE), 2 * MiB);
	assert_int_equal(wsync_seg_round(2 * MiB, WSYNC_HUGE_PAGE), 2 * MiB);
	assert_int_equal(wsync_seg_round(6 * MiB + 4096, WSYNC_HUGE_PAGE), 8 * MiB);
	assert_int_equal(wsync_seg_round(UINT64_C(1) << 40, WSYNC_HUGE_PAGE),
	                 UINT64_C(1) << 40);
}

static void round_refuses_nonsense(void **state)
{
	(void)state;
	assert_int_equal(wsync_seg_round(0, WSYNC_HUGE_PAGE), 0);
	assert_int_equal(wsync_seg_round(UINT64_MAX - 100, WSYNC_HUGE_PAGE), 0);
	assert_int_equal(wsync_seg_round(4096, 3 * MiB), 0);
	assert_int_equal(wsync_seg_round(4096, 0), 0);
}

static void slab_objects_by_pages(void **state)
{
	(void)state;
	assert_int_equal(pages_seg_bytes(WSYNC_PAGES_4K, 12288), 12288);
	assert_int_equal(pages_seg_bytes(WSYNC_PAGES_HUGETLB, 12288), 2 * MiB);
	assert_int_equal(pages_seg_bytes(WSYNC_PAGES_THP, 256 * MiB + 4096), 258 * MiB);
	assert_int_equal(pages_seg_bytes(WSYNC_PAGES_HUGETLB, 1024 * MiB), 1024 * MiB);
}

static void mapping_units(void **state)
{
	int fd = wsync_memfd_create("test-pages", 3 * WSYNC_PAGE);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(wsync_seg_page_size(fd), WSYNC_PAGE);
	close(fd);
	/* no pages need be reserved to ask a hugetlb memfd its unit */
	fd = memfd_create("test-pages-huge", MFD_CLOEXEC | MFD_HUGETLB);
	if (fd < 0)
		return;                   /* a kernel without hugetlb */
	assert_int_equal(wsync_seg_page_size(fd), WSYNC_HUGE_PAGE);
	close(fd);
}

static int parse(const char *when, struct config *cfg)
{
	char err[256];
	char *argv[] = { "wsyncd", "--huge-pages", (char *)when, NULL };

	return config_parse(cfg, 3, argv, err, sizeof(err));
}

static void option_parses(void **state)
{
	struct config cfg;
	char err[256];
	char *argv[] = { "wsyncd", NULL };

	(void)state;
	assert_int_equal(config_parse(&cfg, 1, argv, err, sizeof(err)), CONFIG_RUN);
	assert_int_equal(cfg.huge_pages, CONFIG_HUGE_AUTO);
	assert_int_equal(parse("on", &cfg), CONFIG_RUN);
	assert_int_equal(cfg.huge_pages, CONFIG_HUGE_ON);
	assert_int_equal(parse("off", &cfg), CONFIG_RUN);
	assert_int_equal(cfg.huge_pages, CONFIG_HUGE_OFF);
	assert_int_equal(parse("auto", &cfg), CONFIG_RUN);
	assert_int_equal(cfg.huge_pages, CONFIG_HUGE_AUTO);
	assert_int_equal(parse("yes", &cfg), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(round_up_to_pages),
		cmocka_unit_test(round_refuses_nonsense),
		cmocka_unit_test(slab_objects_by_pages),
		cmocka_unit_test(mapping_units),
		cmocka_unit_test(option_parses),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
