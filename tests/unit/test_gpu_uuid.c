/*
 * test_gpu_uuid — wsync_gpu_uuid names "GPU ordinal N as this process sees
 * it" by its UUID, as the driver maps ordinals (fake driver, 3 GPUs):
 * under CUDA_VISIBLE_DEVICES=2,0 ordinal 0 is physical GPU 2 and ordinal 1
 * is GPU 0; an ordinal past the visible ones is -ENODEV, a short buffer
 * -EINVAL; without a driver it is -ENOENT with the reason in
 * wsync_errmsg(). Built without cuda.h it is -ENOSYS.
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
#include <sys/wait.h>
#include <unistd.h>

#include "shm/cuda_discover.h"
#include "wsync.h"

#ifdef WSYNC_HAVE_CUDA_H
static char fake[4096];
static struct wsync_gpu_inventory all;     /* the fake's GPUs, all visible */

/* Run first: the library keeps the driver it loaded, so the no-driver case
 * runs in a child before this process loads anything. */
static void test_without_driver(void **state)
{
	char buf[WSYNC_GPU_UUID_LEN];
	int status;
	pid_t pid;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("WSYNC_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
		if (wsync_gpu_uuid(0, buf, sizeof(buf)) != -ENOENT)
			_exit(10);
		if (!strstr(wsync_errmsg(), "wsync_gpu_uuid: no CUDA driver: /nonexistent"))
			_exit(11);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_ordinals_as_this_process_sees_them(void **state)
{
	char buf[WSYNC_GPU_UUID_LEN];

	(void)state;
	setenv("CUDA_VISIBLE_DEVICES", "2,0", 1);
	assert_int_equal(wsync_gpu_uuid(0, buf, sizeof(buf)), 0);
	assert_string_equal(buf, all.dev[2].uuid_text);
	assert_int_equal(wsync_gpu_uuid(1, buf, sizeof(buf)), 0);
	assert_string_equal(buf, all.dev[0].uuid_text);
	assert_int_equal(wsync_gpu_uuid(2, buf, sizeof(buf)), -ENODEV);
	assert_non_null(strstr(wsync_errmsg(), "no GPU 2 in this process (2 visible"));
	assert_int_equal(wsync_gpu_uuid(-1, buf, sizeof(buf)), -ENODEV);
	assert_int_equal(wsync_gpu_uuid(0, buf, sizeof(buf) - 1), -EINVAL);
	assert_int_equal(wsync_gpu_uuid(0, NULL, 64), -EINVAL);
}

int main(void)
{
	const char *build = getenv("BUILD");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_without_driver),
		cmocka_unit_test(test_ordinals_as_this_process_sees_them),
	};
	struct wsync_cuda cu;
	char why[512];

	snprintf(fake, sizeof(fake), "%s/tests/fakecuda/libcuda.so.1",
	         build && *build ? build : "build");
	unsetenv("CUDA_VISIBLE_DEVICES");
	setenv("WSYNC_LIBCUDA", fake, 1);
	setenv("FAKECUDA_DEVICES", "3", 1);
	/* The UUIDs with every GPU visible; unloading lets the fake read
	 * CUDA_VISIBLE_DEVICES again when the library loads it. */
	if (wsync_cuda_load(&cu, why, sizeof(why)) || wsync_cuda_discover(&cu, &all, why, sizeof(why))) {
		printf("cannot load the fake driver: %s\n", why);
		return 1;
	}
	wsync_cuda_unload(&cu);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
static void test_compiled_out(void **state)
{
	char buf[WSYNC_GPU_UUID_LEN];

	(void)state;
	assert_int_equal(wsync_gpu_uuid(0, buf, sizeof(buf)), -ENOSYS);
	assert_non_null(strstr(wsync_errmsg(), "compiled out"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_compiled_out),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
