#!/bin/sh
# tests/gpu_suite.sh — the device tests, or the GPU bench rows, against the
# real CUDA driver (libcuda.so.1: WSYNC_LIBCUDA is unset), for the first
# machine with a GPU. make test-gpu and make bench-gpu run it.
#
#   sh tests/gpu_suite.sh test     tests/integ/gpu_device (every check it
#                                  can make with the GPUs there, each line
#                                  "verified" or "skipped: why"), then torch's
#                                  zero-copy use of device views
#                                  (tests/python/test_gpu.py::test_torch_cuda),
#                                  the serving benchmark's GPU ways, short
#                                  (test_serving_bench.py::test_gpu_ways)
#   sh tests/gpu_suite.sh bench    wsync-bench --only gpu, then
#                                  tools/bench/gpu_torch.py and the serving
#                                  benchmark's GPU ways (wsync-bench --only
#                                  serving, WSYNC_BENCH_SERVING_WAYS)
#
# Environment: BUILD (default build), PYTHON (default /usr/bin/python3),
# BENCH_ARGS (more wsync-bench options, e.g. --quick; --quick is passed on
# to gpu_torch.py). Without a GPU every part says so and the exit status is
# 0; a check that fails makes it 1. make test keeps using the fake driver.
set -u

BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
BENCH_ARGS=${BENCH_ARGS:-}
unset WSYNC_LIBCUDA WSYNC_BENCH_GPU_FAKE
export BUILD
status=0

case ${1:-} in
test)
	echo "== device slabs against the real CUDA driver: $BUILD/tests/integ/gpu_device"
	WSYNC_TEST_GPU=real timeout 900 "$BUILD/tests/integ/gpu_device"
	rc=$?
	case $rc in
	0) echo "gpu_device: passed" ;;
	77) echo "gpu_device: nothing verified: no GPU here (exit 0)" ;;
	*) echo "gpu_device: FAILED (exit $rc)"; status=1 ;;
	esac
	echo "== torch on a GPU: tests/python/test_gpu.py::test_torch_cuda"
	PYTHONPATH=libclient/python WSYNC_LIBRARY="$BUILD/lib/libwsync.so" \
		WSYNC_WSYNCD="$BUILD/bin/wsyncd" timeout 900 "$PYTHON" -m pytest -q -rs \
		-p no:cacheprovider tests/python/test_gpu.py -k torch_cuda || status=1
	echo "== serving on GPU 0: tests/python/test_serving_bench.py::test_gpu_ways"
	PYTHONPATH=libclient/python WSYNC_LIBRARY="$BUILD/lib/libwsync.so" \
		WSYNC_WSYNCD="$BUILD/bin/wsyncd" timeout 900 "$PYTHON" -m pytest -q -rs \
		-p no:cacheprovider tests/python/test_serving_bench.py -k test_gpu_ways || status=1
	;;
bench)
	echo "== GPU bench rows against the real CUDA driver"
	# shellcheck disable=SC2086  # BENCH_ARGS is a list of options
	"$BUILD/bin/wsync-bench" --wsyncd "$BUILD/bin/wsyncd" --only gpu $BENCH_ARGS || status=1
	quick=
	case " $BENCH_ARGS " in *" --quick "*) quick=--quick ;; esac
	echo "== torch's zero-copy use of a device view"
	WSYNC_LIBRARY="$BUILD/lib/libwsync.so" "$PYTHON" tools/bench/gpu_torch.py \
		--wsyncd "$BUILD/bin/wsyncd" $quick || status=1
	echo "== serving on GPU 0: wsync-bench --only serving, the GPU ways"
	# shellcheck disable=SC2086  # BENCH_ARGS is a list of options
	WSYNC_BENCH_SERVING_WAYS=live_gpu,load_into_gpu,reference_gpu "$BUILD/bin/wsync-bench" \
		--wsyncd "$BUILD/bin/wsyncd" --only serving $BENCH_ARGS || status=1
	;;
*)
	echo "usage: sh tests/gpu_suite.sh test|bench" >&2
	exit 2
	;;
esac
exit $status
