/*
 * gpu_slabs — device slabs end to end against the fake CUDA driver (3 GPUs,
 * peer access 0<->1 only, so GPU 2 is reached through pinned host memory):
 *
 *  - a trainer on GPU 0 publishes a model that lives on GPUs 0, 1, 2;
 *    collectors in other processes, on GPU 1 and GPU 2, read every version
 *    bit-exact through read-only device pointers, with asynchronous copies
 *    delayed (FAKECUDA_COPY_DELAY_US): commit waits for the fan-out, so no
 *    collector ever sees a half-copied version (a model on GPUs 0 and 1
 *    only, all peer copies, shows it: without the synchronise its
 *    collector reads old bytes); a collector's write through
 *    its device view faults in the collector and changes nothing;
 *  - misuse is refused with clear errors: host begin/commit on a device
 *    model, a GPU the model is not on, host views of a device-only model,
 *    a bad UUID, a device model on a broker without GPUs (--gpus none);
 *  - a host mirror serves host views of the same versions;
 *  - a 20 MiB slab reaches a GPU without peer access intact, through the
 *    double-buffered staging with slow copies;
 *  - two ranks of a publisher group write their column shards (dim 1) on
 *    GPUs 0 and 1 and each copies only its parts to the other GPUs, one
 *    cuMemcpy2DAsync per part and destination (counted), never one copy
 *    per row; a collector on GPU 2 reads whole, bit-exact tensors of every
 *    version; so does wsync_dview_slice_read, in one 2D copy;
 *  - what the real driver is strict about (the fake is too): VMM access is
 *    per device, so a view copied into a buffer on another GPU works from a
 *    GPU that reaches it peer to peer and is refused (-EXDEV, naming both)
 *    from one that does not; the staging buffers are pinned for the
 *    contexts that upload from them (no pageable copy in a staged fan-out,
 *    counted), a commit runs with another context current than its
 *    stream's, and a publisher closed with no context current unpins them;
 *  - a fan-out that fails half-way (the device-to-host copy, injected)
 *    returns only once the copies it queued are done, so the next version,
 *    in the same slot, is intact on every GPU and in the mirror;
 *  - a collector killed (SIGKILL) while holding a device view gives its
 *    slot back; a trainer killed in the middle of its device copies leaves
 *    the previous version latest and the next trainer publishes;
 *  - a stopped broker (SIGSTOP): the first wait_gpu and begin_gpu on a GPU
 *    return by their deadline though they need a GPU_ATTACH round trip, and
 *    go on after SIGCONT;
 *  - another user admitted with --group reads a device model's host mirror
 *    but is refused its device memory (-EPERM: VMM exports carry no
 *    access mode);
 *  - a GPU that is full gives -ENOSPC naming it, a driver failure while
 *    mapping gives -EIO naming the call, and nothing leaks: every client
 *    process and the broker end with no allocation, mapping, reservation,
 *    export or context alive (the fake's report);
 *  - a broker restart restores a device model that has a host mirror onto
 *    its GPUs from the mirror (the same version, bit-exact on each GPU),
 *    declares one without a mirror without a version, and versions go on
 *    above the old ones.
 */
#include "tests/lib/harness.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef WSYNC_HAVE_CUDA_H
#include "shm/cuda_discover.h"
#include "shm/cuda_loader.h"
#include "tests/fakecuda/fakecuda.h"
#include <dlfcn.h>

#define MODEL    "gpu.policy"
#define MIRRORED "gpu.mirrored"
#define PEERS    "gpu.peers"
#define ROUNDS   12

static struct broker B;
static char fake[4096], report[4096], uuid[3][WSYNC_GPU_UUID_LEN];
static struct wsync_cuda cu;
static CUcontext ctx;
static int ctx_ordinal = -1;

/* This process's driver and a current context on GPU ordinal, as the CUDA
 * runtime of a torch program would have. */
static void cuda_up(int ordinal)
{
	char why[256];
	CUdevice dev;

	TEST_ASSERT_MSG(wsync_cuda_load(&cu, why, sizeof why) == 0, "%s", why);
	TEST_ASSERT(cu.api.cu_cuDeviceGet(&dev, ordinal) == CUDA_SUCCESS);
	TEST_ASSERT(cu.api.cu_cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS);
	TEST_ASSERT(cu.api.cu_cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
	ctx_ordinal = ordinal;
}

/* The fake's live counts of this process: all zero once everything went
 * (its context released, its clients closed). */
static void expect_no_leaks(const char *who)
{
	fakecuda_live_fn live = (fakecuda_live_fn)dlsym(cu.lib, "fakecuda_live");
	struct fakecuda_live l;

	TEST_ASSERT(live != NULL);
	live(&l);
	harness_log("%s: allocations=%llu exports=%llu mappings=%llu reservations=%llu "
	            "registrations=%llu contexts=%llu", who, (unsigned long long)l.allocations,
	            (unsigned long long)l.exports, (unsigned long long)l.mappings,
	            (unsigned long long)l.reservations,
	            (unsigned long long)l.host_registrations, (unsigned long long)l.contexts);
	TEST_ASSERT_MSG(l.allocations == 0 && l.exports == 0 && l.mappings == 0 &&
	                l.reservations == 0 && l.host_registrations == 0 && l.contexts == 0,
	                "%s: the fake driver still holds memory or contexts", who);
}

/* Releases this process's context and checks that nothing is left. */
static void cuda_down_checked(const char *who)
{
	CUdevice dev;

	cu.api.cu_cuCtxSetCurrent(NULL);
	TEST_ASSERT(cu.api.cu_cuDeviceGet(&dev, ctx_ordinal) == CUDA_SUCCESS);
	cu.api.cu_cuDevicePrimaryCtxRelease(dev);
	expect_no_leaks(who);
	wsync_cuda_unload(&cu);
}

/* Makes the fake read its FAKECUDA_* settings again at the next cuInit
 * (they are read once per process, and children inherit them). */
static void fake_reconfigure(void)
{
	void *lib = dlopen(fake, RTLD_NOW | RTLD_NOLOAD);
	fakecuda_reset_fn reset = lib ? (fakecuda_reset_fn)dlsym(lib, "fakecuda_reset") : NULL;

	TEST_ASSERT(reset != NULL);
	TEST_OK(reset());
	dlclose(lib);
}

/* The fake's count of calls of an entry point in this process, and of the
 * asynchronous copies it ran synchronously (pageable host memory). */
static uint64_t fake_calls(const char *name)
{
	fakecuda_calls_fn calls = (fakecuda_calls_fn)dlsym(cu.lib, "fakecuda_calls");

	TEST_ASSERT(calls != NULL);
	return calls(name);
}

static uint64_t fake_pageable(void)
{
	fakecuda_pageable_copies_fn n =
		(fakecuda_pageable_copies_fn)dlsym(cu.lib, "fakecuda_pageable_copies");

	TEST_ASSERT(n != NULL);
	return n();
}

/* Plain asynchronous copies of every direction. */
static uint64_t copies_1d(void)
{
	return fake_calls("cuMemcpyDtoDAsync_v2") + fake_calls("cuMemcpyDtoHAsync_v2") +
	       fake_calls("cuMemcpyHtoDAsync_v2");
}

static const char *devices3[3] = { uuid[0], uuid[1], uuid[2] };

static void opts_devices(wsync_model_opts *o, uint32_t n, uint32_t flags)
{
	memset(o, 0, sizeof(*o));
	o->slots = 3;
	o->n_devices = n;
	o->devices = devices3;
	o->device_flags = flags;
}

static int open_dev(wsync_client *c, const char *model, uint32_t flags, wsync_pub **p)
{
	wsync_tensor_desc d[2];
	wsync_model_opts o;

	harness_model_2t(d);
	opts_devices(&o, 3, flags);
	return wsync_pub_open(c, model, d, 2, &o, p);
}

/* One version from GPU 0: the pattern of step, uploaded on the stream. */
static int publish_dev(wsync_pub *p, uint64_t step, CUstream st, uint64_t *version)
{
	static char host[64 << 10];
	wsync_dslab s;
	int err;

	err = wsync_pub_begin_gpu(p, uuid[0], 5 * HARNESS_S, &s);
	if (err)
		return err;
	TEST_ASSERT(s.bytes <= sizeof host);
	harness_fill(host, s.bytes, step);
	TEST_ASSERT(cu.api.cu_cuMemcpyHtoDAsync(s.base, host, s.bytes, st) == CUDA_SUCCESS);
	return wsync_pub_commit_gpu(p, st, step, version);
}

/* Device memory read back with its own GPU's context current: VMM access
 * is per device, and a view on a GPU this process's context does not
 * reach peer to peer has no access for it (the fake refuses such a copy,
 * as the driver does). */
static CUresult dtoh_on_its_gpu(void *dst, CUdeviceptr src, size_t n)
{
	CUcontext own, prev = NULL;
	CUdevice dev;
	int ordinal = -1;
	CUresult r;

	r = cu.api.cu_cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, src);
	if (r == CUDA_SUCCESS)
		r = cu.api.cu_cuDeviceGet(&dev, ordinal);
	if (r == CUDA_SUCCESS)
		r = cu.api.cu_cuDevicePrimaryCtxRetain(&own, dev);
	if (r != CUDA_SUCCESS)
		return r;
	cu.api.cu_cuCtxGetCurrent(&prev);
	r = cu.api.cu_cuCtxSetCurrent(own);
	if (r == CUDA_SUCCESS)
		r = cu.api.cu_cuMemcpyDtoH(dst, src, n);
	cu.api.cu_cuCtxSetCurrent(prev);
	cu.api.cu_cuDevicePrimaryCtxRelease(dev);
	return r;
}

/* A device view's bytes, read back through the driver, against its step. */
static void verify_dview(const wsync_dview *v)
{
	static char host[64 << 10];

	TEST_ASSERT(v->bytes <= sizeof host);
	TEST_ASSERT(dtoh_on_its_gpu(host, v->base, v->bytes) == CUDA_SUCCESS);
	TEST_ASSERT_MSG(harness_verify(host, v->bytes, v->step) == 0,
	                "v%llu on the GPU is not the bytes of step %llu",
	                (unsigned long long)v->version, (unsigned long long)v->step);
}

/* ---- collectors ----------------------------------------------------------- */

struct collector {
	int gpu;                         /* ordinal = index of the fake GPU */
	const char *model;
	struct chan ready;
};

static int collector(void *arg)
{
	struct collector *co = arg;
	wsync_client *c;
	wsync_sub *s;
	wsync_dview v;
	uint64_t after = 0;
	int seen = 0;

	cuda_up(co->gpu);
	TEST_OK(harness_connect(&B, "gpu-collector", &c));
	TEST_OK(wsync_sub_open(c, co->model, &s));
	chan_send(&co->ready, 1);
	while (seen < ROUNDS) {
		TEST_OK(wsync_sub_wait_gpu(s, uuid[co->gpu], after, 10 * HARNESS_S, &v));
		TEST_GT_U64(v.version, after);
		verify_dview(&v);
		{
			uint64_t dptr;
			const wsync_tensor_desc *d;

			TEST_OK(wsync_dview_tensor(&v, "policy.bias", &dptr, &d));
			TEST_EQ_U64(dptr, v.base + d->offset);
		}
		after = v.version;
		wsync_sub_release_gpu(s, &v, NULL);
		seen++;
	}
	wsync_sub_close(s);
	wsync_close(c);
	cuda_down_checked("collector");
	return 0;
}

/* Writes through a read-only device view: must fault in this process. */
static int scribbler(void *arg)
{
	wsync_client *c;
	wsync_sub *s;
	wsync_dview v;

	(void)arg;
	cuda_up(1);
	TEST_OK(harness_connect(&B, "gpu-scribbler", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire_gpu(s, uuid[1], &v));
	/* the default action (sanitizers install handlers of their own), no core */
	setrlimit(RLIMIT_CORE, &(struct rlimit){ 0, 0 });
	signal(SIGSEGV, SIG_DFL);
	signal(SIGBUS, SIG_DFL);
	*(volatile char *)(uintptr_t)v.base = 1;    /* the fake maps device memory here */
	return 0;                                    /* not reached */
}

/* Holds a device view until killed. */
static struct chan held;
static int holder(void *arg)
{
	wsync_client *c;
	wsync_sub *s;
	wsync_dview v;

	(void)arg;
	cuda_up(2);
	TEST_OK(harness_connect(&B, "gpu-holder", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire_gpu(s, uuid[2], &v));
	chan_send(&held, v.version);
	for (;;)
		pause();
	return 0;
}

/* A trainer that dies in the middle of its fan-out copies. */
static struct chan copying;
static int dying_trainer(void *arg)
{
	static char host[64 << 10];
	wsync_client *c;
	wsync_pub *p;
	wsync_dslab s;
	CUstream st;

	(void)arg;
	setenv("FAKECUDA_COPY_DELAY_US", "200000", 1);
	fake_reconfigure();
	cuda_up(0);
	TEST_OK(harness_connect(&B, "gpu-dying", &c));
	TEST_OK(open_dev(c, MODEL, 0, &p));
	/* a stream of its own: CUDA state (the fake's stream workers too)
	 * does not survive fork() */
	TEST_ASSERT(cu.api.cu_cuStreamCreate(&st, 0) == CUDA_SUCCESS);
	TEST_OK(wsync_pub_begin_gpu(p, uuid[0], 5 * HARNESS_S, &s));
	harness_fill(host, s.bytes, 999);
	TEST_ASSERT(cu.api.cu_cuMemcpyHtoDAsync(s.base, host, s.bytes, st) == CUDA_SUCCESS);
	chan_send(&copying, 1);
	wsync_pub_commit_gpu(p, st, 999, NULL);     /* killed in here */
	return 0;
}

/* A rank of a publisher group of a device model: writes its parts on its
 * own GPU (rank r on GPU r) for steps 1..GROUP_STEPS. */
#define GROUP_MODEL "gpu.sharded"
#define GROUP_STEPS 4

static size_t group_parts(uint32_t r, wsync_shard *parts)
{
	/* the weight [64, 129] split along dim 1 (column-parallel): each rank's
	 * part is 64 runs, copied row by row to the other GPUs */
	if (r == 0) {
		parts[0] = (wsync_shard){ .tensor = 0, .dim = 1, .start = 0, .end = 64 };
		parts[1] = (wsync_shard){ .tensor = 1, .dim = WSYNC_SHARD_WHOLE };
		return 2;
	}
	parts[0] = (wsync_shard){ .tensor = 0, .dim = 1, .start = 64, .end = 129 };
	return 1;
}

static int group_rank(void *arg)
{
	static char host[64 << 10];
	uint32_t r = (uint32_t)(uintptr_t)arg;
	wsync_tensor_desc d[2];
	wsync_model_opts o;
	wsync_shard parts[2];
	size_t n = group_parts(r, parts);
	wsync_client *c;
	wsync_pub *p;
	CUstream st;
	char name[32];

	cuda_up((int)r);
	snprintf(name, sizeof name, "gpu-rank-%u", r);
	TEST_OK(harness_connect(&B, name, &c));
	harness_model_2t(d);
	opts_devices(&o, 3, 0);
	o.group_size = 2;
	o.rank = r;
	TEST_OK(wsync_pub_open_shard(c, GROUP_MODEL, d, 2, &o, parts, n, &p));
	/* a stream of its own: CUDA state does not survive fork() */
	TEST_ASSERT(cu.api.cu_cuStreamCreate(&st, 0) == CUDA_SUCCESS);
	for (uint64_t step = 1; step <= GROUP_STEPS; step++) {
		wsync_dslab s;

		TEST_OK(wsync_pub_begin_gpu(p, uuid[r], 10 * HARNESS_S, &s));
		harness_fill(host, s.bytes, 500 + step);
		for (size_t i = 0; i < n; i++) {
			wsync_slice sl;

			TEST_OK(wsync_shard_slice(&s.tensors[parts[i].tensor], &parts[i], &sl));
			for (uint64_t row = 0; row < sl.rows; row++) {
				uint64_t off = sl.offset + row * sl.stride;

				TEST_ASSERT(cu.api.cu_cuMemcpyHtoDAsync(s.base + off, host + off,
				                                        sl.row_bytes, st) ==
				            CUDA_SUCCESS);
			}
		}
		{
			uint64_t c2 = fake_calls("cuMemcpy2DAsync_v2"), c1 = copies_1d();
			uint64_t pageable = fake_pageable();

			TEST_OK(wsync_pub_commit_gpu(p, st, 500 + step, NULL));
			/* per destination, one 2D copy for the dim-1 part (the peer
			 * GPU: one; GPU 2, staged: down and up) and one plain copy
			 * for rank 0's whole bias; never one copy per row; the
			 * staged uploads read pinned memory */
			TEST_EQ_U64(fake_calls("cuMemcpy2DAsync_v2") - c2, 3);
			TEST_EQ_U64(copies_1d() - c1, r == 0 ? 3 : 0);
			TEST_EQ_U64(fake_pageable() - pageable, 0);
		}
	}
	TEST_ASSERT(cu.api.cu_cuStreamDestroy(st) == CUDA_SUCCESS);
	wsync_pub_close(p);
	wsync_close(c);
	cuda_down_checked(name);
	return 0;
}

/* Two ranks write their shards on GPUs 0 and 1; a collector on GPU 2
 * (reached by neither peer to peer) reads whole tensors of every version. */
static void group_of_ranks(void)
{
	static char want[64 << 10], got[64 << 10];
	wsync_client *c;
	wsync_sub *s;
	wsync_dview v;
	uint64_t after = 0;
	pid_t pid[2];

	for (uint32_t r = 0; r < 2; r++)
		pid[r] = harness_fork(group_rank, (void *)(uintptr_t)r);
	cuda_up(2);
	TEST_OK(harness_connect(&B, "gpu-group-reader", &c));
	TEST_OK(wsync_sub_open(c, GROUP_MODEL, &s));
	for (int seen = 0; seen < GROUP_STEPS; seen++) {
		TEST_OK(wsync_sub_wait_gpu(s, uuid[2], after, 10 * HARNESS_S, &v));
		TEST_ASSERT(v.bytes <= sizeof got);
		harness_fill(want, v.bytes, v.step);
		TEST_ASSERT(cu.api.cu_cuMemcpyDtoH(got, v.base, v.bytes) == CUDA_SUCCESS);
		for (size_t t = 0; t < v.n_tensors; t++) {
			const wsync_tensor_desc *d = &v.tensors[t];

			TEST_ASSERT_MSG(!memcmp(got + d->offset, want + d->offset,
			                        wsync_tensor_bytes(d)),
			                "v%llu: tensor '%s' on GPU 2 is not step %llu's",
			                (unsigned long long)v.version, d->name,
			                (unsigned long long)v.step);
		}
		after = v.version;
		wsync_sub_release_gpu(s, &v, WSYNC_STREAM_NONE);   /* read synchronously */
	}
	for (int r = 0; r < 2; r++)
		harness_expect_exit0(pid[r], "rank");
	wsync_sub_close(s);
	wsync_close(c);
	cuda_down_checked("group reader");
}

/* ---- scenarios -------------------------------------------------------------- */

static void misuse(wsync_client *c, wsync_pub *p)
{
	wsync_tensor_desc d[2];
	wsync_model_opts o;
	wsync_pub *hp;
	wsync_sub *s;
	wsync_slab slab;
	wsync_dview dv;
	wsync_view v;
	const char *bad[1] = { "GPU-not-a-uuid" };

	TEST_RC(wsync_pub_begin(p, 0, &slab), -EINVAL);
	TEST_CONTAINS(wsync_errmsg(), "wsync_pub_begin_gpu");
	/* an aborted device slab cannot be committed; the next begin works */
	{
		wsync_dslab ds;

		TEST_OK(wsync_pub_begin_gpu(p, uuid[0], HARNESS_S, &ds));
		TEST_OK(wsync_pub_abort(p));
		TEST_RC(wsync_pub_commit_gpu(p, NULL, 1, NULL), -EINVAL);
		TEST_RC(wsync_dslab_copy_from_device(&ds, (uint64_t[2]){ 0, 0 }, 2, NULL), -EINVAL);
	}
	TEST_RC(wsync_pub_commit(p, 1, NULL), -EINVAL);
	TEST_RC(wsync_pub_commit_gpu(p, NULL, 1, NULL), -EINVAL);

	/* options */
	harness_model_2t(d);
	memset(&o, 0, sizeof o);
	o.n_devices = 1;
	o.devices = bad;
	TEST_RC(wsync_pub_open(c, "gpu.bad", d, 2, &o, &hp), -EINVAL);
	TEST_CONTAINS(wsync_errmsg(), "not a GPU UUID");
	opts_devices(&o, 2, 0);
	o.devices = (const char *const[]){ uuid[1], uuid[1] };
	TEST_RC(wsync_pub_open(c, "gpu.bad", d, 2, &o, &hp), -EINVAL);
	TEST_CONTAINS(wsync_errmsg(), "twice");
	opts_devices(&o, 3, 0);
	o.flags = WSYNC_PUB_CHECKSUM;
	TEST_RC(wsync_pub_open(c, "gpu.bad", d, 2, &o, &hp), -EINVAL);
	TEST_CONTAINS(wsync_errmsg(), "WSYNC_DEV_HOST_MIRROR");
	/* the same name with other devices is another model */
	opts_devices(&o, 2, 0);
	TEST_RC(wsync_pub_open(c, MODEL, d, 2, &o, &hp), -EEXIST);
	TEST_CONTAINS(wsync_errmsg(), "lives on 3 GPUs");

	/* collectors */
	TEST_OK(publish_dev(p, 1, NULL, NULL));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_RC(wsync_sub_acquire(s, &v), -ENODEV);
	TEST_CONTAINS(wsync_errmsg(), "wsync_sub_acquire_gpu");
	TEST_RC(wsync_sub_acquire_gpu(s, "GPU-00000000-0000-0000-0000-000000000000", &dv),
	        -ENODEV);
	TEST_CONTAINS(wsync_errmsg(), "is not on GPU");
	TEST_RC(wsync_sub_acquire_gpu(s, "nonsense", &dv), -EINVAL);
	wsync_sub_close(s);
	TEST_OK(harness_pub_open_2t(c, "gpu.host", 0, &hp));
	TEST_OK(harness_publish(hp, 1, HARNESS_S, NULL));
	TEST_OK(wsync_sub_open(c, "gpu.host", &s));
	TEST_RC(wsync_sub_acquire_gpu(s, uuid[0], &dv), -ENODEV);
	TEST_CONTAINS(wsync_errmsg(), "host model");
	TEST_RC(wsync_pub_begin_gpu(hp, uuid[0], 0, (wsync_dslab[1]){ 0 }), -EINVAL);
	wsync_sub_close(s);
	wsync_pub_close(hp);
}

/* Publishes ROUNDS versions while two collectors (GPU 1 peer to peer, GPU 2
 * staged) check each one; the copies are slowed down so that a commit that
 * did not wait for them would show. */
static void fan_out_no_torn(void)
{
	struct collector co[3] = { { .gpu = 1, .model = MODEL }, { .gpu = 2, .model = MODEL },
	                           { .gpu = 1, .model = PEERS } };
	pid_t pid[3];
	wsync_client *c;
	wsync_pub *p, *pp;
	wsync_tensor_desc d[2];
	wsync_model_opts o;
	CUstream st;
	uint64_t version = 0, last = 0;
	int status;

	setenv("FAKECUDA_COPY_DELAY_US", "300", 1);
	fake_reconfigure();
	for (int i = 0; i < 3; i++) {
		chan_open(&co[i].ready);
		pid[i] = harness_fork(collector, &co[i]);
	}
	cuda_up(0);
	TEST_ASSERT(cu.api.cu_cuStreamCreate(&st, 0) == CUDA_SUCCESS);
	TEST_OK(harness_connect(&B, "gpu-trainer", &c));
	TEST_OK(open_dev(c, MODEL, 0, &p));
	/* GPUs 0 and 1 only: every copy is a peer copy, so only the final
	 * synchronise stands between a collector and half-copied bytes */
	harness_model_2t(d);
	opts_devices(&o, 2, 0);
	TEST_OK(wsync_pub_open(c, PEERS, d, 2, &o, &pp));
	for (int i = 0; i < 3; i++)
		chan_recv(&co[i].ready, pid[i]);
	misuse(c, p);
	for (uint64_t step = 1; step <= ROUNDS + 1; step++) {
		TEST_OK(publish_dev(pp, step, st, NULL));
		TEST_OK(publish_dev(p, step, st, &version));
		TEST_GT_U64(version, last);
		last = version;
		harness_sleep_ms(5);
	}
	for (int i = 0; i < 3; i++)
		harness_expect_exit0(pid[i], "collector");
	wsync_pub_close(pp);

	/* a write through a collector's device view faults there */
	pid[0] = harness_fork(scribbler, NULL);
	status = harness_wait_status(pid[0], 10000);
	TEST_ASSERT_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
	                "a write through a read-only device view: %s",
	                harness_status_str(status));

	/* a collector killed while holding a view gives its slot back: with 3
	 * slots, more versions than slots still publish */
	chan_open(&held);
	pid[0] = harness_fork(holder, NULL);
	TEST_EQ_U64(chan_recv(&held, pid[0]), last);
	kill(pid[0], SIGKILL);
	harness_wait_status(pid[0], 10000);
	for (uint64_t step = ROUNDS + 1; step <= ROUNDS + 4; step++)
		TEST_OK(publish_dev(p, step, st, &last));

	TEST_ASSERT(cu.api.cu_cuStreamDestroy(st) == CUDA_SUCCESS);
	wsync_pub_close(p);
	wsync_close(c);
	cuda_down_checked("trainer");
	unsetenv("FAKECUDA_COPY_DELAY_US");
	fake_reconfigure();
}

/* A trainer dies in its fan-out: the version before stays latest. */
static void trainer_killed(void)
{
	wsync_client *c;
	wsync_sub *s;
	wsync_pub *p;
	wsync_dview v;
	uint64_t before, after;
	pid_t pid;

	/* forked while this process holds nothing of the driver: the child
	 * reconfigures the fake for slow copies */
	chan_open(&copying);
	pid = harness_fork(dying_trainer, NULL);
	cuda_up(0);                     /* reads GPU 1's copy, publishes from GPU 0 */
	TEST_OK(harness_connect(&B, "gpu-watch", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire_gpu(s, uuid[1], &v));
	before = v.version;
	wsync_sub_release_gpu(s, &v, NULL);
	chan_recv(&copying, pid);
	harness_sleep_ms(50);
	kill(pid, SIGKILL);
	harness_wait_status(pid, 10000);
	TEST_OK(wsync_sub_acquire_gpu(s, uuid[1], &v));
	TEST_EQ_U64(v.version, before);
	verify_dview(&v);
	wsync_sub_release_gpu(s, &v, NULL);

	/* the next trainer publishes (retrying while the dead one is reaped) */
	for (int i = 0; i < 100; i++) {
		int err = open_dev(c, MODEL, 0, &p);

		if (err != -EBUSY) {
			TEST_OK(err);
			break;
		}
		harness_sleep_ms(50);
		TEST_ASSERT(i < 99);
	}
	TEST_OK(publish_dev(p, 1000, NULL, &after));
	TEST_GT_U64(after, before + 1);         /* the dead trainer's version is skipped */
	TEST_OK(wsync_sub_wait_gpu(s, uuid[1], before, HARNESS_S, &v));
	TEST_EQ_U64(v.version, after);
	verify_dview(&v);
	wsync_sub_release_gpu(s, &v, NULL);
	wsync_pub_close(p);
	wsync_sub_close(s);
	wsync_close(c);
	cuda_down_checked("watcher");
}

/* A host mirror: host views of the same versions, in any process. */
static void host_mirror(void)
{
	wsync_client *c;
	wsync_pub *p;
	wsync_sub *s;
	wsync_view v;
	wsync_dview dv;
	uint64_t version;

	cuda_up(0);
	TEST_OK(harness_connect(&B, "gpu-mirror", &c));
	TEST_OK(open_dev(c, MIRRORED, WSYNC_DEV_HOST_MIRROR, &p));
	TEST_OK(wsync_sub_open(c, MIRRORED, &s));
	for (uint64_t step = 1; step <= 3; step++) {
		TEST_OK(publish_dev(p, 40 + step, NULL, &version));
		TEST_OK(wsync_sub_acquire(s, &v));
		TEST_EQ_U64(v.version, version);
		TEST_OK(harness_verify_view(&v));
		wsync_sub_release(s, &v);
		TEST_OK(wsync_sub_acquire_gpu(s, uuid[2], &dv));
		TEST_EQ_U64(dv.version, version);
		verify_dview(&dv);
		wsync_sub_release_gpu(s, &dv, NULL);
	}
	/* tensors copied from device buffers (here: a device view of the
	 * other model, which has the same layout) land at their offsets */
	{
		static char want[64 << 10];
		const wsync_tensor_desc *td;
		uint64_t src[2], dptr;
		wsync_sub *other;
		wsync_dslab ds;

		TEST_OK(wsync_sub_open(c, MODEL, &other));
		TEST_OK(wsync_sub_acquire_gpu(other, uuid[0], &dv));
		TEST_OK(wsync_dview_tensor(&dv, "policy.weight", &src[0], NULL));
		TEST_OK(wsync_dview_tensor(&dv, "policy.bias", &src[1], NULL));
		TEST_OK(wsync_pub_begin_gpu(p, uuid[0], HARNESS_S, &ds));
		TEST_OK(wsync_dslab_tensor(&ds, "policy.bias", &dptr, &td));
		TEST_EQ_U64(dptr, ds.base + td->offset);
		TEST_RC(wsync_dslab_tensor(&ds, "policy.none", &dptr, &td), -ENOENT);
		TEST_OK(wsync_dslab_copy_from_device(&ds, src, 2, NULL));
		TEST_OK(wsync_pub_commit_gpu(p, NULL, dv.step, &version));
		wsync_sub_release_gpu(other, &dv, NULL);
		wsync_sub_close(other);
		TEST_OK(wsync_sub_acquire(s, &v));
		TEST_EQ_U64(v.version, version);
		harness_fill(want, v.bytes, v.step);
		for (size_t t = 0; t < v.n_tensors; t++)
			TEST_ASSERT_MSG(!memcmp((const char *)v.base + v.tensors[t].offset,
			                        want + v.tensors[t].offset,
			                        wsync_tensor_bytes(&v.tensors[t])),
			                "tensor '%s' copied from device buffers differs",
			                v.tensors[t].name);
		wsync_sub_release(s, &v);
	}
	/* a tensor-parallel part of a device view, read into a device buffer
	 * of the caller's (here: a begun slab, aborted after) */
	{
		static char want[64 << 10], exp[64 << 10], got[64 << 10];
		wsync_slice sl, bad;
		wsync_sub *other;
		wsync_dslab ds;
		uint64_t step, c1, c2;

		TEST_OK(wsync_sub_open(c, MODEL, &other));
		TEST_OK(wsync_sub_acquire_gpu(other, uuid[0], &dv));
		step = dv.step;
		TEST_OK(wsync_tensor_part(&dv.tensors[0], 1, 1, 3, &sl));   /* columns 43..85 */
		TEST_OK(wsync_pub_begin_gpu(p, uuid[0], HARNESS_S, &ds));
		c2 = fake_calls("cuMemcpy2DAsync_v2");
		c1 = copies_1d();
		TEST_OK(wsync_dview_slice_read(&dv, &sl, ds.base, NULL));
		/* 64 strided rows: one 2D copy */
		TEST_EQ_U64(fake_calls("cuMemcpy2DAsync_v2") - c2, 1);
		TEST_EQ_U64(copies_1d() - c1, 0);
		bad = sl;
		bad.rows = 1000;
		TEST_RC(wsync_dview_slice_read(&dv, &bad, ds.base, NULL), -EINVAL);
		harness_fill(want, dv.bytes, step);
		wsync_sub_release_gpu(other, &dv, NULL);   /* waits for the copy */
		TEST_ASSERT(cu.api.cu_cuMemcpyDtoH(got, ds.base, sl.rows * sl.row_bytes) ==
		            CUDA_SUCCESS);
		wsync_slice_read(exp, want, &sl);
		TEST_ASSERT_MSG(!memcmp(got, exp, sl.rows * sl.row_bytes),
		                "the part read from the device view differs");
		TEST_OK(wsync_pub_abort(p));
		wsync_sub_close(other);
	}
	/* a device view copied into a buffer on another GPU. VMM access is per
	 * device: GPU 1's view into GPU 0's buffer, issued in GPU 0's context
	 * (this thread's), works because GPU 0 reaches GPU 1 peer to peer and
	 * was given read access to the view; GPU 2's view cannot be given to
	 * GPU 0 at all, so the copy is refused, naming both GPUs */
	{
		static char want[64 << 10], got[64 << 10];
		wsync_sub *other;
		wsync_dslab ds;
		wsync_slice sl;
		uint64_t n;

		TEST_OK(wsync_sub_open(c, MODEL, &other));
		TEST_OK(wsync_pub_begin_gpu(p, uuid[0], HARNESS_S, &ds));
		TEST_OK(wsync_sub_acquire_gpu(other, uuid[1], &dv));
		n = dv.bytes;
		TEST_ASSERT(n <= sizeof got);
		harness_fill(want, n, dv.step);
		TEST_OK(wsync_dview_copy_to_device(&dv, 0, ds.base, n, NULL));
		wsync_sub_release_gpu(other, &dv, NULL);   /* waits for the copy */
		TEST_ASSERT(cu.api.cu_cuMemcpyDtoH(got, ds.base, n) == CUDA_SUCCESS);
		TEST_ASSERT_MSG(!memcmp(got, want, n), "GPU 1's view copied to GPU 0 differs");

		TEST_OK(wsync_sub_acquire_gpu(other, uuid[2], &dv));
		TEST_RC(wsync_dview_copy_to_device(&dv, 0, ds.base, dv.bytes, NULL), -EXDEV);
		TEST_CONTAINS(wsync_errmsg(), "cannot reach it peer to peer");
		TEST_CONTAINS(wsync_errmsg(), uuid[2]);
		TEST_CONTAINS(wsync_errmsg(), uuid[0]);
		TEST_OK(wsync_tensor_part(&dv.tensors[0], 1, 0, 3, &sl));
		TEST_RC(wsync_dview_slice_read(&dv, &sl, ds.base, NULL), -EXDEV);
		wsync_sub_release_gpu(other, &dv, NULL);
		TEST_OK(wsync_pub_abort(p));
		wsync_sub_close(other);
	}
	/* wsyncctl shows where models live; the device-only one has no host
	 * checksum to read, and says nothing wrong about it */
	{
		char ctl[256], out[16384], want[256];
		const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
		char *argv[] = { ctl, "--endpoint", B.sock, "--json", "models", NULL };
		int st;

		snprintf(ctl, sizeof(ctl), "%s/bin/wsyncctl", build);
		st = harness_run(argv, out, sizeof(out), 10000);
		TEST_ASSERT_MSG(st == 0, "wsyncctl models: %s: %s", harness_status_str(st), out);
		snprintf(want, sizeof want, "\"devices\":{\"gpus\":[\"%s\",\"%s\",\"%s\"],"
		         "\"host_mirror\":true}", uuid[0], uuid[1], uuid[2]);
		TEST_CONTAINS(out, want);
		TEST_CONTAINS(out, "\"host_mirror\":false");

		/* and wsync-top, in its text mode */
		char top[256];
		char *targv[] = { top, "--endpoint", B.sock, "-b", "-n", "1", NULL };

		snprintf(top, sizeof(top), "%s/bin/wsync-top", build);
		st = harness_run(targv, out, sizeof(out), 10000);
		TEST_ASSERT_MSG(st == 0, "wsync-top -b: %s: %s", harness_status_str(st), out);
		TEST_CONTAINS(out, "ON GPUS");
		snprintf(want, sizeof want, "%-24s %.12s %.12s %.12s", MIRRORED, uuid[0], uuid[1],
		         uuid[2]);
		TEST_CONTAINS(out, want);
	}
	wsync_sub_close(s);
	wsync_pub_close(p);
	wsync_close(c);
	cuda_down_checked("mirror");
}

/* A slab of several staging chunks, to a GPU reached only through host
 * memory, with slow copies: the double-buffered upload keeps every chunk
 * in place and in order. The staging buffers are pinned for the upload
 * contexts (no copy of the fan-out is a pageable one); a commit made while
 * another GPU's context is current (a thread of a program that moved on
 * to another device) still works, its stream being GPU 0's; a publisher
 * closed when no context is current any more unpins its buffers. */
static void staged_large(void)
{
	static char want[(20 << 20) + 4096], got[(20 << 20) + 4096];
	uint64_t shape[1] = { (20 << 20) / 4 + 100 };
	const char *gpus[2] = { uuid[0], uuid[2] };
	wsync_tensor_desc d[1];
	wsync_model_opts o;
	wsync_client *c;
	wsync_pub *p;
	wsync_sub *s;
	wsync_dview v;
	CUcontext ctx1;
	CUdevice dev1;
	CUstream st;

	setenv("FAKECUDA_COPY_DELAY_US", "100", 1);
	fake_reconfigure();
	cuda_up(0);
	TEST_ASSERT(cu.api.cu_cuStreamCreate(&st, 0) == CUDA_SUCCESS);
	TEST_ASSERT(cu.api.cu_cuDeviceGet(&dev1, 1) == CUDA_SUCCESS);
	TEST_ASSERT(cu.api.cu_cuDevicePrimaryCtxRetain(&ctx1, dev1) == CUDA_SUCCESS);
	TEST_OK(harness_connect(&B, "gpu-large", &c));
	harness_desc(&d[0], "big", WSYNC_F32, 1, shape);
	opts_devices(&o, 2, 0);
	o.devices = gpus;
	TEST_OK(wsync_pub_open(c, "gpu.large", d, 1, &o, &p));
	TEST_OK(wsync_sub_open(c, "gpu.large", &s));
	for (uint64_t step = 1; step <= 3; step++) {
		wsync_dslab ds;
		uint64_t version, pageable;
		size_t n;

		TEST_OK(wsync_pub_begin_gpu(p, uuid[0], HARNESS_S, &ds));
		TEST_ASSERT(ds.bytes <= sizeof want);
		harness_fill(want, ds.bytes, 70 + step);
		TEST_ASSERT(cu.api.cu_cuMemcpyHtoDAsync(ds.base, want, ds.bytes, st) ==
		            CUDA_SUCCESS);
		pageable = fake_pageable();
		if (step == 2)
			TEST_ASSERT(cu.api.cu_cuCtxSetCurrent(ctx1) == CUDA_SUCCESS);
		TEST_OK(wsync_pub_commit_gpu(p, st, 70 + step, &version));
		TEST_ASSERT(cu.api.cu_cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
		TEST_EQ_U64(fake_pageable() - pageable, 0);
		TEST_OK(wsync_sub_acquire_gpu(s, uuid[2], &v));
		TEST_EQ_U64(v.version, version);
		n = wsync_tensor_bytes(&v.tensors[0]);
		TEST_ASSERT(dtoh_on_its_gpu(got, v.base, n) == CUDA_SUCCESS);
		TEST_ASSERT_MSG(!memcmp(got, want, n), "v%llu on GPU 2 differs from what GPU 0 "
		                "had", (unsigned long long)version);
		wsync_sub_release_gpu(s, &v, NULL);
	}
	wsync_sub_close(s);
	TEST_ASSERT(cu.api.cu_cuCtxSetCurrent(NULL) == CUDA_SUCCESS);
	wsync_pub_close(p);
	TEST_ASSERT(cu.api.cu_cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
	TEST_ASSERT(cu.api.cu_cuStreamDestroy(st) == CUDA_SUCCESS);
	cu.api.cu_cuDevicePrimaryCtxRelease(dev1);
	wsync_close(c);
	cuda_down_checked("large");
	unsetenv("FAKECUDA_COPY_DELAY_US");
	fake_reconfigure();
}

/*
 * A fan-out that fails after it queued copies on the caller's stream. Step
 * 2's own upload (from pinned memory: asynchronous, and slow) and its peer
 * copy to GPU 1 are queued on st when its copy to the host mirror fails
 * (injected); the version is aborted and, the model having 2 slots, its
 * slot is granted again at once. The failed commit returns only once st
 * holds nothing of it, so step 3, written there synchronously and
 * committed on another stream, is step 3's on both GPUs and in the mirror,
 * also after anything that was still queued has landed.
 */
static void commit_fails_halfway(void)
{
	static char host[64 << 10];
	const char *gpus[2] = { uuid[0], uuid[1] };
	CUresult (*query)(CUstream);
	wsync_tensor_desc d[2];
	wsync_model_opts o;
	wsync_client *c;
	wsync_pub *p;
	wsync_sub *s;
	wsync_dslab ds;
	wsync_dview dv;
	wsync_view v;
	uint64_t version;
	uint32_t slot;
	void *pinned;
	CUstream st;

	setenv("FAKECUDA_COPY_DELAY_US", "20000", 1);
	setenv("FAKECUDA_FAIL", "cuMemcpyDtoHAsync_v2:2", 1);
	fake_reconfigure();
	cuda_up(0);
	*(void **)&query = dlsym(cu.lib, "cuStreamQuery");
	TEST_ASSERT(query != NULL);
	TEST_ASSERT(cu.api.cu_cuStreamCreate(&st, 0) == CUDA_SUCCESS);
	TEST_ASSERT(posix_memalign(&pinned, 4096, sizeof host) == 0);
	TEST_ASSERT(cu.api.cu_cuMemHostRegister(pinned, sizeof host,
	                                        CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS);
	TEST_OK(harness_connect(&B, "gpu-halfway", &c));
	harness_model_2t(d);
	opts_devices(&o, 2, WSYNC_DEV_HOST_MIRROR);
	o.devices = gpus;
	o.slots = 2;
	TEST_OK(wsync_pub_open(c, "gpu.halfway", d, 2, &o, &p));
	TEST_OK(wsync_sub_open(c, "gpu.halfway", &s));

	/* step 1: its mirror copy is this process's 1st device-to-host copy */
	TEST_OK(wsync_pub_begin_gpu(p, uuid[0], HARNESS_S, &ds));
	harness_fill(host, ds.bytes, 1);
	TEST_ASSERT(cu.api.cu_cuMemcpyHtoD(ds.base, host, ds.bytes) == CUDA_SUCCESS);
	TEST_OK(wsync_pub_commit_gpu(p, st, 1, NULL));

	/* step 2: the 2nd fails, with its upload and peer copy queued before */
	TEST_OK(wsync_pub_begin_gpu(p, uuid[0], HARNESS_S, &ds));
	slot = ds.priv_slab.priv_slot;
	harness_fill(pinned, ds.bytes, 2);
	TEST_ASSERT(cu.api.cu_cuMemcpyHtoDAsync(ds.base, pinned, ds.bytes, st) == CUDA_SUCCESS);
	TEST_RC(wsync_pub_commit_gpu(p, st, 2, NULL), -EIO);
	TEST_CONTAINS(wsync_errmsg(), "copy to the host mirror");
	TEST_ASSERT_MSG(query(st) == CUDA_SUCCESS, "the failed commit returned with its "
	                "copies still queued on the caller's stream");

	/* step 3, in the failed attempt's slot, written at once */
	TEST_OK(wsync_pub_begin_gpu(p, uuid[0], HARNESS_S, &ds));
	TEST_ASSERT_MSG(ds.priv_slab.priv_slot == slot, "2 slots: the aborted slot %u is "
	                "granted again (got %u)", slot, ds.priv_slab.priv_slot);
	harness_fill(host, ds.bytes, 3);
	TEST_ASSERT(cu.api.cu_cuMemcpyHtoD(ds.base, host, ds.bytes) == CUDA_SUCCESS);
	TEST_OK(wsync_pub_commit_gpu(p, NULL, 3, &version));
	TEST_ASSERT(cu.api.cu_cuStreamSynchronize(st) == CUDA_SUCCESS);   /* all landed */
	for (int g = 0; g < 2; g++) {
		TEST_OK(wsync_sub_acquire_gpu(s, uuid[g], &dv));
		TEST_EQ_U64(dv.version, version);
		TEST_EQ_U64(dv.step, 3);
		verify_dview(&dv);
		wsync_sub_release_gpu(s, &dv, NULL);
	}
	TEST_OK(wsync_sub_acquire(s, &v));
	TEST_EQ_U64(v.version, version);
	TEST_OK(harness_verify_view(&v));
	wsync_sub_release(s, &v);

	wsync_sub_close(s);
	wsync_pub_close(p);
	wsync_close(c);
	TEST_ASSERT(cu.api.cu_cuStreamDestroy(st) == CUDA_SUCCESS);
	TEST_ASSERT(cu.api.cu_cuMemHostUnregister(pinned) == CUDA_SUCCESS);
	free(pinned);
	cuda_down_checked("halfway");
	unsetenv("FAKECUDA_COPY_DELAY_US");
	unsetenv("FAKECUDA_FAIL");
	fake_reconfigure();
}

/* A stopped broker: the first device call on a GPU needs a GPU_ATTACH
 * round trip, and still returns by its caller's deadline; after SIGCONT the
 * same handles go on (the late answers are dropped). */
#define LATE_NS (2500 * HARNESS_MS)     /* 25 times the 100 ms asked; the reply limit is 30 s */

static void stopped_broker(void)
{
	wsync_client *c, *t;
	wsync_pub *p, *p2;
	wsync_sub *s;
	wsync_dslab ds;
	wsync_dview v;
	uint64_t version;
	int64_t t0;

	cuda_up(0);
	TEST_OK(harness_connect(&B, "gpu-dl-trainer", &t));
	TEST_OK(open_dev(t, "gpu.deadline", 0, &p));
	TEST_OK(publish_dev(p, 31, NULL, &version));       /* this client mapped them */
	TEST_OK(harness_connect(&B, "gpu-dl-collector", &c));
	TEST_OK(wsync_sub_open(c, "gpu.deadline", &s));    /* nothing mapped yet */
	TEST_OK(open_dev(c, "gpu.deadline2", 0, &p2));     /* nothing mapped yet */

	TEST_ASSERT(kill(B.pid, SIGSTOP) == 0);
	t0 = harness_mono_ns();
	TEST_RC(wsync_sub_wait_gpu(s, uuid[1], 0, 100 * HARNESS_MS, &v), -ETIMEDOUT);
	TEST_ASSERT_MSG(harness_mono_ns() - t0 < LATE_NS, "wait_gpu(100 ms) needing a "
	                "GPU_ATTACH took %lld ms",
	                (long long)((harness_mono_ns() - t0) / HARNESS_MS));
	t0 = harness_mono_ns();
	TEST_RC(wsync_pub_begin_gpu(p2, uuid[0], 100 * HARNESS_MS, &ds), -ETIMEDOUT);
	TEST_ASSERT_MSG(harness_mono_ns() - t0 < LATE_NS, "begin_gpu(100 ms) needing "
	                "GPU_ATTACHs took %lld ms",
	                (long long)((harness_mono_ns() - t0) / HARNESS_MS));
	TEST_ASSERT(kill(B.pid, SIGCONT) == 0);

	/* nobody was given up, no slot stayed pinned */
	TEST_OK(wsync_sub_wait_gpu(s, uuid[1], 0, 5 * HARNESS_S, &v));
	TEST_EQ_U64(v.version, version);
	verify_dview(&v);
	wsync_sub_release_gpu(s, &v, NULL);
	TEST_OK(publish_dev(p2, 32, NULL, NULL));
	for (uint64_t step = 33; step < 40; step++)         /* more than the slots */
		TEST_OK(publish_dev(p, step, NULL, NULL));
	wsync_sub_close(s);
	wsync_pub_close(p2);
	wsync_pub_close(p);
	wsync_close(c);
	wsync_close(t);
	cuda_down_checked("deadlines");
}

/* Another user admitted with --group reads a device model's host mirror,
 * never its device memory (an exported VMM allocation carries no access
 * mode: it could map it writable). */
static struct broker GB;
static uid_t other_uid;
static gid_t other_gid;
static struct chan member_go;

static int device_group_member(void *arg)
{
	wsync_client *c;
	wsync_sub *s;
	wsync_dview dv;
	wsync_view v;

	(void)arg;
	chan_recv(&member_go, getppid());             /* the model is published */
	TEST_ASSERT(setgroups(0, NULL) == 0);
	TEST_ASSERT(setgid(other_gid) == 0);
	TEST_ASSERT(setuid(other_uid) == 0);
	prctl(PR_SET_DUMPABLE, 1);
	cuda_up(1);
	TEST_OK(wsync_connect(GB.sock, "gpu-member", &c));
	TEST_OK(wsync_sub_open(c, MIRRORED, &s));
	TEST_RC(wsync_sub_acquire_gpu(s, uuid[1], &dv), -EPERM);
	TEST_CONTAINS(wsync_errmsg(), "cannot be shared read-only with another user");
	TEST_OK(wsync_sub_acquire(s, &v));                   /* the mirror, read-only */
	TEST_ASSERT(harness_verify_view(&v) == 0);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_close(c);
	cuda_down_checked("group member");
	return 0;
}

static void other_user(void)
{
	wsync_client *c;
	wsync_pub *p;
	pid_t pid;

	if (harness_other_user("read a device model as another user", &other_uid,
	                       &other_gid) == HARNESS_SKIP)
		return;
	TEST_ASSERT(harness_broker_start(&GB, HARNESS_OTHER_USERS, NULL) == 0);
	/* forked while this process holds nothing of the driver */
	chan_open(&member_go);
	pid = harness_fork(device_group_member, NULL);
	cuda_up(0);
	TEST_OK(harness_connect(&GB, "gpu-group-trainer", &c));
	TEST_OK(open_dev(c, MIRRORED, WSYNC_DEV_HOST_MIRROR, &p));
	TEST_OK(publish_dev(p, 61, NULL, NULL));
	chan_send(&member_go, 1);
	harness_expect_exit0(pid, "the group member");
	wsync_pub_close(p);
	wsync_close(c);
	cuda_down_checked("group trainer");
	harness_broker_finish(&GB);
}

/* Driver failures become clear errors, and leave nothing behind. */
static void driver_errors(void)
{
	wsync_client *c;
	wsync_sub *s;
	wsync_dview v;

	setenv("FAKECUDA_FAIL", "cuMemMap:2", 1);
	fake_reconfigure();
	cuda_up(1);
	TEST_OK(harness_connect(&B, "gpu-failing", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_RC(wsync_sub_acquire_gpu(s, uuid[1], &v), -EIO);
	TEST_CONTAINS(wsync_errmsg(), "mapping slot 1");
	TEST_OK(wsync_sub_acquire_gpu(s, uuid[1], &v));   /* the next try maps */
	verify_dview(&v);
	wsync_sub_release_gpu(s, &v, NULL);
	wsync_sub_close(s);
	wsync_close(c);
	cuda_down_checked("failing collector");
	unsetenv("FAKECUDA_FAIL");
	fake_reconfigure();
}

static void no_gpu_broker(void)
{
	struct broker nb;
	wsync_client *c;
	wsync_pub *p;

	TEST_ASSERT(harness_broker_start(&nb, "--gpus", "none", NULL) == 0);
	TEST_OK(harness_connect(&nb, "gpu-none", &c));
	TEST_RC(open_dev(c, MODEL, 0, &p), -ENODEV);
	TEST_CONTAINS(wsync_errmsg(), "serves none");
	wsync_close(c);
	harness_broker_finish(&nb);
}

static void gpu_full(void)
{
	struct broker fb;
	wsync_client *c;
	wsync_pub *p;
	wsync_tensor_desc d[1];
	wsync_model_opts o;
	uint64_t shape[1] = { 200 << 20 };     /* 800 MiB of f32, 3 slots: over 1 GiB */

	setenv("FAKECUDA_MEM_MB", "1024", 1);
	setenv("FAKECUDA_REPORT", report, 1);
	TEST_ASSERT(harness_broker_start(&fb, NULL) == 0);
	unsetenv("FAKECUDA_MEM_MB");
	unsetenv("FAKECUDA_REPORT");
	TEST_OK(harness_connect(&fb, "gpu-full", &c));
	harness_desc(&d[0], "big", WSYNC_F32, 1, shape);
	opts_devices(&o, 1, 0);
	TEST_RC(wsync_pub_open(c, "gpu.big", d, 1, &o, &p), -ENOSPC);
	TEST_CONTAINS(wsync_errmsg(), "the GPU is full");
	TEST_CONTAINS(wsync_errmsg(), uuid[0]);
	wsync_close(c);
	harness_broker_finish(&fb);
	/* what it allocated before the GPU was full is released */
	{
		char out[4096];

		TEST_CONTAINS(harness_read_file(report, out, sizeof out),
		              "allocations=0 exports=0 mappings=0 reservations=0");
		unlink(report);
	}
}

/* A restarted broker cannot adopt VMM memory. A model with a host mirror
 * is restored from it: the same version, bit-exact on every GPU and on the
 * host; one without a mirror comes back declared, without a version. The
 * next versions of both are above the old ones. */
static void broker_restart(void)
{
	wsync_client *c;
	wsync_sub *s, *sm;
	wsync_pub *p;
	wsync_dview v;
	wsync_view hv;
	uint64_t before, mirrored, after;

	cuda_up(0);
	TEST_OK(harness_connect(&B, "gpu-restart", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_OK(wsync_sub_acquire_gpu(s, uuid[0], &v));
	before = v.version;
	wsync_sub_release_gpu(s, &v, NULL);
	wsync_sub_close(s);
	TEST_OK(open_dev(c, MIRRORED, WSYNC_DEV_HOST_MIRROR, &p));
	TEST_OK(publish_dev(p, 77, NULL, &mirrored));
	wsync_pub_close(p);
	wsync_close(c);

	harness_broker_kill(&B);
	setenv("FAKECUDA_REPORT", report, 1);
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	unsetenv("FAKECUDA_REPORT");
	TEST_OK(harness_connect(&B, "gpu-restart", &c));
	TEST_OK(wsync_sub_open(c, MODEL, &s));
	TEST_RC(wsync_sub_acquire_gpu(s, uuid[0], &v), -ENODATA);
	TEST_OK(wsync_sub_open(c, MIRRORED, &sm));
	TEST_OK(wsync_sub_acquire(sm, &hv));
	/* the same version, or above every version granted (a prefetched one) */
	TEST_ASSERT(hv.version >= mirrored);
	mirrored = hv.version;
	TEST_EQ_U64(hv.step, 77);
	TEST_OK(harness_verify_view(&hv));
	wsync_sub_release(sm, &hv);
	for (int g = 0; g < 3; g++) {
		TEST_OK(wsync_sub_acquire_gpu(sm, uuid[g], &v));
		TEST_EQ_U64(v.version, mirrored);
		TEST_EQ_U64(v.step, 77);
		verify_dview(&v);
		wsync_sub_release_gpu(sm, &v, NULL);
	}
	TEST_OK(wsync_sub_acquire(sm, &hv));
	TEST_EQ_U64(hv.version, mirrored);
	TEST_OK(harness_verify_view(&hv));
	wsync_sub_release(sm, &hv);

	TEST_OK(open_dev(c, MODEL, 0, &p));
	TEST_OK(publish_dev(p, 2000, NULL, &after));
	TEST_GT_U64(after, before);
	TEST_OK(wsync_sub_acquire_gpu(s, uuid[0], &v));
	TEST_EQ_U64(v.version, after);
	verify_dview(&v);
	wsync_sub_release_gpu(s, &v, NULL);
	wsync_pub_close(p);
	TEST_OK(open_dev(c, MIRRORED, WSYNC_DEV_HOST_MIRROR, &p));
	TEST_OK(publish_dev(p, 78, NULL, &after));
	TEST_GT_U64(after, mirrored);
	wsync_pub_close(p);
	wsync_sub_close(sm);
	wsync_sub_close(s);
	wsync_close(c);
	cuda_down_checked("after restart");
	{
		char log[65536];

		harness_read_file(B.log, log, sizeof log);
		TEST_CONTAINS(log, "without a host mirror, whose memory ended with the last broker");
		TEST_CONTAINS(log, "restored onto its GPUs from its host mirror");
	}
}

int main(void)
{
	struct wsync_gpu_inventory inv;
	char why[256], out[4096];

	harness_fakecuda_path(fake, sizeof fake);
	setenv("WSYNC_LIBCUDA", fake, 1);
	setenv("FAKECUDA_DEVICES", "3", 1);
	setenv("FAKECUDA_PEERS", "01,10", 1);
	unsetenv("CUDA_VISIBLE_DEVICES");
	TEST_ASSERT_MSG(wsync_cuda_load(&cu, why, sizeof why) == 0, "%s", why);
	TEST_ASSERT_MSG(wsync_cuda_discover(&cu, &inv, why, sizeof why) == 0, "%s", why);
	wsync_cuda_unload(&cu);
	for (int i = 0; i < 3; i++) {
		snprintf(uuid[i], sizeof uuid[i], "%s", inv.dev[i].uuid_text);
		TEST_EQ_U64(wsync_gpu_ordinal(uuid[i]), i);
	}

	snprintf(report, sizeof report, "/tmp/wsync-gpu-slabs-%d.report", (int)getpid());
	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);

	fan_out_no_torn();
	trainer_killed();
	host_mirror();
	group_of_ranks();
	staged_large();
	commit_fails_halfway();
	stopped_broker();
	other_user();
	driver_errors();
	no_gpu_broker();
	gpu_full();
	broker_restart();

	/* the restarted broker released every allocation it made */
	harness_broker_finish(&B);
	TEST_CONTAINS(harness_read_file(report, out, sizeof out),
	              "allocations=0 exports=0 mappings=0 reservations=0");
	unlink(report);
	return 0;
}

#else
int main(void)
{
	printf("SKIP: built without the CUDA Toolkit's cuda.h: no device slabs\n");
	return 77;
}
#endif
