/*
 * gpu_device — device slabs on whatever CUDA driver there is: the suite for
 * the first real GPU. `make test-gpu` runs it, unchanged, against the real
 * driver (WSYNC_TEST_GPU=real: WSYNC_LIBCUDA unset, so libcuda.so.1), and
 * `make test` against the fake (3 GPUs, peer access 0<->1 only, slow
 * copies). It takes the GPUs it finds: A, the first that exports VMM memory
 * as an fd, publishes; B is a GPU A reaches peer to peer, C one it does not.
 * At the end it prints one line per check, "verified: ..." or "skipped: ...
 * (why)", for lack of a second GPU, of a pair with peer access or of one
 * without. Without a GPU it skips (exit 77) saying why.
 *
 *  - a 20 MiB model on every GPU found, with a host mirror: versions
 *    published on A reach collectors in other processes on every GPU and on
 *    the host bit-exact, peer to peer to B, through pinned memory to C;
 *  - a device view copied into a buffer on another GPU: from a GPU that
 *    reaches the view's, exact; from one that does not, -EXDEV;
 *  - wsync_dview_slice_read of a dim-1 part (rows with a stride), exact;
 *  - a publisher group whose ranks write column shards on two GPUs (one
 *    if there is one): whole tensors exact on each GPU and in the mirror;
 *  - a broker restart: the mirrored model restored onto every GPU;
 *  - a collector's view is read-only on its GPU: a copy into it is refused;
 *  - against the fake only: no driver object left alive in any process, and
 *    the 2D copies counted (gpu_slabs checks what needs failure injection).
 *
 * No process of the test initialises CUDA before it forks: a real driver
 * does not survive fork(). A probe child lists the GPUs; every check runs
 * in children that make their own contexts, as trainers and collectors do.
 */
#include "tests/lib/harness.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef WSYNC_HAVE_CUDA_H
#include <dlfcn.h>

#include "shm/cuda_discover.h"
#include "shm/cuda_loader.h"
#include "tests/fakecuda/fakecuda.h"

#define MAX_GPUS  WSYNC_MAX_DEVICES
#define ROUNDS    6
#define ROUND     "dev.round"
#define GROUP     "dev.group"
/* w: 1024 x 5121 f32 (20 MiB, three 8 MiB staging chunks), b: 5121 f32 */
#define W_ROWS    1024
#define W_COLS    5121

/* What the probe child found, and what the children report back. */
struct shared {
	bool fake;
	int  driver_version;
	int  n;                               /* usable GPUs, in gpu[] */
	int  gpu[MAX_GPUS];                   /* their ordinals */
	char uuid[MAX_GPUS][WSYNC_GPU_UUID_LEN];
	char name[MAX_GPUS][96];
	bool peer[MAX_GPUS][MAX_GPUS];        /* [i][j]: gpu[i] reaches gpu[j] */
	char why[256];                        /* no GPU: why */
	char note[160];                       /* a child's detail for a result line */
	uint64_t version[2];                  /* published: last of ROUND, of GROUP */
};

static struct shared *sh;
static struct broker B;
static int A = 0, Bi = -1, Ci = -1;       /* indices into sh->gpu[] */

/* ---- results --------------------------------------------------------------- */

static char results[48][240];
static int n_results;

static void result(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void result(const char *kind, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (n_results >= (int)(sizeof results / sizeof results[0]))
		return;
	n = snprintf(results[n_results], sizeof results[0], "%s: ", kind);
	va_start(ap, fmt);
	vsnprintf(results[n_results] + n, sizeof results[0] - (size_t)n, fmt, ap);
	va_end(ap);
	n_results++;
}

/* ---- the driver in a child ------------------------------------------------- */

static struct wsync_cuda cu;
static CUcontext ctx;
static CUdevice ctx_dev;
static CUstream stream;

#define CU_OK(expr) TEST_ASSERT_MSG((expr) == CUDA_SUCCESS, "%s failed", #expr)

/* The driver, GPU ordinal's primary context current, a stream in it: what a
 * torch process on that GPU has. */
static void cuda_up(int ordinal)
{
	char why[256];

	TEST_ASSERT_MSG(wsync_cuda_load(&cu, why, sizeof why) == 0, "%s", why);
	CU_OK(cu.api.cu_cuDeviceGet(&ctx_dev, ordinal));
	CU_OK(cu.api.cu_cuDevicePrimaryCtxRetain(&ctx, ctx_dev));
	CU_OK(cu.api.cu_cuCtxSetCurrent(ctx));
	CU_OK(cu.api.cu_cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
}

/* Releases what cuda_up made; against the fake, nothing may be left alive
 * (the child's clients are closed by now). */
static void cuda_down(const char *who)
{
	fakecuda_live_fn live = (fakecuda_live_fn)dlsym(cu.lib, "fakecuda_live");

	CU_OK(cu.api.cu_cuStreamDestroy(stream));
	CU_OK(cu.api.cu_cuCtxSetCurrent(NULL));
	CU_OK(cu.api.cu_cuDevicePrimaryCtxRelease(ctx_dev));
	if (sh->fake) {
		struct fakecuda_live l;

		TEST_ASSERT(live != NULL);
		live(&l);
		TEST_ASSERT_MSG(!l.allocations && !l.exports && !l.mappings && !l.reservations &&
		                !l.mem_allocs && !l.host_registrations && !l.streams && !l.events &&
		                !l.contexts, "%s: the fake driver still holds objects", who);
	}
	wsync_cuda_unload(&cu);
}

static uint64_t fake_calls(const char *name)
{
	fakecuda_calls_fn calls = (fakecuda_calls_fn)dlsym(cu.lib, "fakecuda_calls");

	return calls ? calls(name) : 0;
}

/* Device memory of our own on GPU ordinal, allocated as slabs are (VMM),
 * read-write for that GPU only. */
struct dbuf {
	CUmemGenericAllocationHandle h;
	CUdeviceptr p;
	size_t size;
};

static void dbuf_alloc(int ordinal, size_t bytes, struct dbuf *d)
{
	CUmemAllocationProp prop;
	CUmemAccessDesc access = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, ordinal },
	                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	size_t gran = 0;

	memset(&prop, 0, sizeof prop);
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = ordinal;
	CU_OK(cu.api.cu_cuMemGetAllocationGranularity(&gran, &prop,
	                                              CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	d->size = (bytes + gran - 1) / gran * gran;
	CU_OK(cu.api.cu_cuMemCreate(&d->h, d->size, &prop, 0));
	CU_OK(cu.api.cu_cuMemAddressReserve(&d->p, d->size, 0, 0, 0));
	CU_OK(cu.api.cu_cuMemMap(d->p, d->size, 0, d->h, 0));
	CU_OK(cu.api.cu_cuMemSetAccess(d->p, d->size, &access, 1));
}

static void dbuf_free(struct dbuf *d)
{
	CU_OK(cu.api.cu_cuMemUnmap(d->p, d->size));
	CU_OK(cu.api.cu_cuMemAddressFree(d->p, d->size));
	CU_OK(cu.api.cu_cuMemRelease(d->h));
}

/* Pinned host memory, usable from every context. */
static void *pinned_alloc(size_t bytes)
{
	void *p = NULL;

	TEST_ASSERT(posix_memalign(&p, 4096, bytes) == 0);
	memset(p, 0, bytes);
	CU_OK(cu.api.cu_cuMemHostRegister(p, bytes, CU_MEMHOSTREGISTER_PORTABLE));
	return p;
}

static void pinned_free(void *p)
{
	CU_OK(cu.api.cu_cuMemHostUnregister(p));
	free(p);
}

/* Device bytes read back on this child's GPU (its context is current). */
static void *dtoh(CUdeviceptr src, size_t n)
{
	void *host = malloc(n);

	TEST_ASSERT(host != NULL);
	CU_OK(cu.api.cu_cuMemcpyDtoH(host, src, n));
	return host;
}

static void round_model(wsync_tensor_desc d[2])
{
	harness_desc(&d[0], "w", WSYNC_F32, 2, (const uint64_t[]){ W_ROWS, W_COLS });
	harness_desc(&d[1], "b", WSYNC_F32, 1, (const uint64_t[]){ W_COLS });
}

static const char *uuids[MAX_GPUS];

/* ---- the probe -------------------------------------------------------------- */

static int probe(void *arg)
{
	struct wsync_gpu_inventory inv;

	(void)arg;
	if (wsync_cuda_load(&cu, sh->why, sizeof sh->why))
		return 0;
	sh->fake = dlsym(cu.lib, "fakecuda_live") != NULL;
	sh->driver_version = cu.driver_version;
	if (wsync_cuda_discover(&cu, &inv, sh->why, sizeof sh->why) == 0) {
		for (int i = 0; i < inv.count && sh->n < MAX_GPUS; i++) {
			if (!inv.dev[i].vmm || !inv.dev[i].posix_fd)
				continue;
			sh->gpu[sh->n] = i;
			snprintf(sh->uuid[sh->n], sizeof sh->uuid[0], "%s", inv.dev[i].uuid_text);
			snprintf(sh->name[sh->n], sizeof sh->name[0], "%s", inv.dev[i].name);
			sh->n++;
		}
		for (int i = 0; i < sh->n; i++)
			for (int j = 0; j < sh->n; j++)
				sh->peer[i][j] = inv.peer[sh->gpu[i]][sh->gpu[j]];
		if (!sh->n)
			snprintf(sh->why, sizeof sh->why, "%d GPU%s, none exports VMM memory as a "
			         "file descriptor", inv.count, inv.count == 1 ? "" : "s");
	}
	wsync_cuda_unload(&cu);
	return 0;
}

/* ---- 1. fan-out to every GPU, collectors in other processes ----------------- */

struct reader {
	int idx;                              /* index into sh->gpu[], -1 = host */
	struct chan ready;
};

static int round_reader(void *arg)
{
	struct reader *r = arg;
	wsync_client *c;
	wsync_sub *s;
	uint64_t after = 0, step = 0;

	if (r->idx >= 0)
		cuda_up(sh->gpu[r->idx]);
	TEST_OK(harness_connect(&B, "dev-reader", &c));
	TEST_OK(wsync_sub_open(c, ROUND, &s));
	chan_send(&r->ready, 1);
	/* every version it holds is checked; it may skip some (the newest is
	 * what a wait returns), never the last */
	while (step < ROUNDS) {
		if (r->idx >= 0) {
			wsync_dview v;
			void *host;

			TEST_OK(wsync_sub_wait_gpu(s, uuids[r->idx], after, 60 * HARNESS_S, &v));
			host = dtoh(v.base, v.bytes);
			TEST_ASSERT_MSG(harness_verify(host, v.bytes, v.step) == 0, "GPU %d: v%llu "
			                "is not step %llu's bytes", sh->gpu[r->idx],
			                (unsigned long long)v.version, (unsigned long long)v.step);
			free(host);
			after = v.version;
			step = v.step;
			wsync_sub_release_gpu(s, &v, WSYNC_STREAM_NONE);
		} else {
			wsync_view v;

			TEST_OK(wsync_sub_wait(s, after, 60 * HARNESS_S, &v));
			TEST_OK(harness_verify_view(&v));
			after = v.version;
			step = v.step;
			wsync_sub_release(s, &v);
		}
	}
	wsync_sub_close(s);
	wsync_close(c);
	if (r->idx >= 0)
		cuda_down("reader");
	return 0;
}

static int round_publisher(void *arg)
{
	wsync_tensor_desc d[2];
	wsync_model_opts o;
	wsync_client *c;
	wsync_pub *p;
	void *host = NULL;

	(void)arg;
	cuda_up(sh->gpu[A]);
	TEST_OK(harness_connect(&B, "dev-trainer", &c));
	round_model(d);
	memset(&o, 0, sizeof o);
	o.slots = 3;
	o.n_devices = (uint32_t)sh->n;
	o.devices = uuids;
	o.device_flags = WSYNC_DEV_HOST_MIRROR;
	TEST_OK(wsync_pub_open(c, ROUND, d, 2, &o, &p));
	for (uint64_t step = 1; step <= ROUNDS; step++) {
		wsync_dslab s;

		TEST_OK(wsync_pub_begin_gpu(p, uuids[A], 60 * HARNESS_S, &s));
		if (!host)
			host = pinned_alloc(s.bytes);
		harness_fill(host, s.bytes, step);
		CU_OK(cu.api.cu_cuMemcpyHtoDAsync(s.base, host, s.bytes, stream));
		TEST_OK(wsync_pub_commit_gpu(p, stream, step, &sh->version[0]));
	}
	wsync_pub_close(p);
	wsync_close(c);
	pinned_free(host);
	cuda_down("publisher");
	return 0;
}

static void check_fan_out(void)
{
	static struct reader r[MAX_GPUS + 1];
	pid_t pid[MAX_GPUS + 1], pub;
	int n = sh->n + 1;

	for (int i = 0; i < n; i++) {
		r[i].idx = i < sh->n ? i : -1;
		chan_open(&r[i].ready);
		pid[i] = harness_fork(round_reader, &r[i]);
	}
	/* every reader has its subscription before the first version */
	for (int i = 0; i < n; i++)
		chan_recv(&r[i].ready, pid[i]);
	pub = harness_fork(round_publisher, NULL);
	harness_expect_exit0(pub, "the publisher");
	for (int i = 0; i < n; i++)
		harness_expect_exit0(pid[i], "a reader");
	result("verified", "%d versions of a 20 MiB model published on GPU %d reach "
	       "collectors in other processes on %d GPU%s, bit-exact", ROUNDS, sh->gpu[A],
	       sh->n, sh->n == 1 ? "" : "s");
	result("verified", "the host mirror holds every version, bit-exact (a host collector)");
	if (Bi >= 0)
		result("verified", "fan-out GPU %d -> GPU %d peer to peer", sh->gpu[A], sh->gpu[Bi]);
	else
		result("skipped", "peer fan-out (%s)", sh->n < 2 ? "a single GPU" :
		       "the publisher's GPU reaches no other GPU peer to peer");
	if (Ci >= 0)
		result("verified", "fan-out GPU %d -> GPU %d through pinned host memory (no peer "
		       "access), 3 staging chunks", sh->gpu[A], sh->gpu[Ci]);
	else
		result("skipped", "staged fan-out (%s)", sh->n < 2 ? "a single GPU" :
		       "the publisher's GPU reaches every other GPU peer to peer");
}

/* ---- 2. copies out of views: across GPUs, and a strided part ------------------ */

static int copy_out(void *arg)
{
	wsync_client *c;
	wsync_sub *s;
	wsync_dview v;
	struct dbuf dst;
	wsync_slice sl;
	void *want, *got, *part;
	uint64_t c2;

	(void)arg;
	cuda_up(sh->gpu[A]);
	TEST_OK(harness_connect(&B, "dev-copier", &c));
	TEST_OK(wsync_sub_open(c, ROUND, &s));
	TEST_OK(wsync_sub_acquire_gpu(s, uuids[A], &v));
	dbuf_alloc(sh->gpu[A], v.bytes, &dst);
	want = malloc(v.bytes);
	part = malloc(v.bytes);
	TEST_ASSERT(want && part);
	harness_fill(want, v.bytes, v.step);

	/* a dim-1 part of w: rows with a stride, into our buffer, packed */
	TEST_OK(wsync_tensor_part(&v.tensors[0], 1, 1, 3, &sl));
	c2 = fake_calls("cuMemcpy2DAsync_v2");
	TEST_OK(wsync_dview_slice_read(&v, &sl, dst.p, stream));
	if (sh->fake)
		TEST_EQ_U64(fake_calls("cuMemcpy2DAsync_v2") - c2, 1);
	CU_OK(cu.api.cu_cuStreamSynchronize(stream));
	got = dtoh(dst.p, sl.rows * sl.row_bytes);
	wsync_slice_read(part, want, &sl);
	TEST_ASSERT_MSG(!memcmp(got, part, sl.rows * sl.row_bytes), "the part differs");
	free(got);
	wsync_sub_release_gpu(s, &v, stream);

	/* every other GPU's view into our buffer on A */
	for (int x = 0; x < sh->n; x++) {
		if (x == A)
			continue;
		TEST_OK(wsync_sub_acquire_gpu(s, uuids[x], &v));
		if (sh->peer[A][x]) {
			TEST_OK(wsync_dview_copy_to_device(&v, 0, dst.p, v.bytes, stream));
			wsync_sub_release_gpu(s, &v, stream);
			got = dtoh(dst.p, v.bytes);
			TEST_ASSERT_MSG(!memcmp(got, want, v.bytes), "GPU %d's view copied to GPU %d "
			                "differs", sh->gpu[x], sh->gpu[A]);
			free(got);
		} else {
			TEST_RC(wsync_dview_copy_to_device(&v, 0, dst.p, v.bytes, stream), -EXDEV);
			TEST_CONTAINS(wsync_errmsg(), "cannot reach it peer to peer");
			wsync_sub_release_gpu(s, &v, stream);
		}
	}
	free(want);
	free(part);
	dbuf_free(&dst);
	wsync_sub_close(s);
	wsync_close(c);
	cuda_down("copier");
	return 0;
}

static void check_copies(void)
{
	harness_expect_exit0(harness_fork(copy_out, NULL), "the copier");
	result("verified", "wsync_dview_slice_read of a dim-1 part (%d strided rows)%s, exact",
	       W_ROWS, sh->fake ? " in one cuMemcpy2DAsync" : "");
	if (Bi >= 0)
		result("verified", "GPU %d's view copied into a buffer on GPU %d, which reaches it "
		       "peer to peer", sh->gpu[Bi], sh->gpu[A]);
	else
		result("skipped", "a view copied to another GPU (%s)", sh->n < 2 ? "a single GPU" :
		       "the publisher's GPU reaches no other GPU");
	if (Ci >= 0)
		result("verified", "GPU %d's view into a buffer on GPU %d, which does not reach it: "
		       "-EXDEV", sh->gpu[Ci], sh->gpu[A]);
	else
		result("skipped", "a copy between GPUs without peer access refused (%s)",
		       sh->n < 2 ? "a single GPU" : "the publisher's GPU reaches every other GPU");
}

/* ---- 3. a publisher group's column shards --------------------------------------- */

#define G_ROWS 64
#define G_COLS 4099

static int group_n;                       /* GPUs of the group model: 1 or 2 */

static size_t group_parts(uint32_t r, wsync_shard *parts)
{
	if (r == 0) {
		parts[0] = (wsync_shard){ .tensor = 0, .dim = 1, .start = 0, .end = 2048 };
		parts[1] = (wsync_shard){ .tensor = 1, .dim = WSYNC_SHARD_WHOLE };
		return 2;
	}
	parts[0] = (wsync_shard){ .tensor = 0, .dim = 1, .start = 2048, .end = G_COLS };
	return 1;
}

static void group_model(wsync_tensor_desc d[2])
{
	harness_desc(&d[0], "w", WSYNC_F32, 2, (const uint64_t[]){ G_ROWS, G_COLS });
	harness_desc(&d[1], "b", WSYNC_F32, 1, (const uint64_t[]){ G_COLS });
}

static int group_rank(void *arg)
{
	uint32_t r = (uint32_t)(uintptr_t)arg;
	int idx = group_n > 1 ? (int)r : 0;
	const char *gpus[2] = { uuids[0], uuids[group_n > 1 ? 1 : 0] };
	wsync_tensor_desc d[2];
	wsync_model_opts o;
	wsync_shard parts[2];
	size_t n = group_parts(r, parts);
	wsync_client *c;
	wsync_pub *p;
	wsync_dslab s;
	void *host;

	cuda_up(sh->gpu[idx]);
	TEST_OK(harness_connect(&B, r ? "dev-rank-1" : "dev-rank-0", &c));
	group_model(d);
	memset(&o, 0, sizeof o);
	o.slots = 3;
	o.n_devices = (uint32_t)group_n;
	o.devices = gpus;
	o.device_flags = WSYNC_DEV_HOST_MIRROR;
	o.group_size = 2;
	o.rank = r;
	TEST_OK(wsync_pub_open_shard(c, GROUP, d, 2, &o, parts, n, &p));
	TEST_OK(wsync_pub_begin_gpu(p, uuids[idx], 60 * HARNESS_S, &s));
	host = pinned_alloc(s.bytes);
	harness_fill(host, s.bytes, 900);
	for (size_t i = 0; i < n; i++) {
		wsync_slice sl;

		TEST_OK(wsync_shard_slice(&s.tensors[parts[i].tensor], &parts[i], &sl));
		for (uint64_t row = 0; row < sl.rows; row++) {
			uint64_t off = sl.offset + row * sl.stride;

			CU_OK(cu.api.cu_cuMemcpyHtoDAsync(s.base + off, (char *)host + off,
			                                  sl.row_bytes, stream));
		}
	}
	TEST_OK(wsync_pub_commit_gpu(p, stream, 900, &sh->version[1]));
	wsync_pub_close(p);
	wsync_close(c);
	pinned_free(host);
	cuda_down("rank");
	return 0;
}

/* Whole tensors of the group's version, on GPU idx (or the host mirror). */
static int group_reader(void *arg)
{
	int idx = (int)(intptr_t)arg;
	wsync_client *c;
	wsync_sub *s;
	char *want, *got;

	if (idx >= 0)
		cuda_up(sh->gpu[idx]);
	TEST_OK(harness_connect(&B, "dev-group-reader", &c));
	TEST_OK(wsync_sub_open(c, GROUP, &s));
	if (idx >= 0) {
		wsync_dview v;

		TEST_OK(wsync_sub_wait_gpu(s, uuids[idx], 0, 60 * HARNESS_S, &v));
		want = malloc(v.bytes);
		TEST_ASSERT(want != NULL);
		harness_fill(want, v.bytes, v.step);
		got = dtoh(v.base, v.bytes);
		for (size_t t = 0; t < v.n_tensors; t++)
			TEST_ASSERT_MSG(!memcmp(got + v.tensors[t].offset, want + v.tensors[t].offset,
			                        wsync_tensor_bytes(&v.tensors[t])),
			                "tensor '%s' on GPU %d", v.tensors[t].name, sh->gpu[idx]);
		free(got);
		free(want);
		wsync_sub_release_gpu(s, &v, WSYNC_STREAM_NONE);
	} else {
		wsync_view v;

		TEST_OK(wsync_sub_wait(s, 0, 60 * HARNESS_S, &v));
		want = malloc(v.bytes);
		TEST_ASSERT(want != NULL);
		harness_fill(want, v.bytes, v.step);
		for (size_t t = 0; t < v.n_tensors; t++)
			TEST_ASSERT_MSG(!memcmp((const char *)v.base + v.tensors[t].offset,
			                        want + v.tensors[t].offset,
			                        wsync_tensor_bytes(&v.tensors[t])),
			                "tensor '%s' in the mirror", v.tensors[t].name);
		free(want);
		wsync_sub_release(s, &v);
	}
	wsync_sub_close(s);
	wsync_close(c);
	if (idx >= 0)
		cuda_down("group reader");
	return 0;
}

static void check_group(void)
{
	pid_t rank[2], reader[3];

	group_n = sh->n > 1 ? 2 : 1;
	for (uint32_t r = 0; r < 2; r++)
		rank[r] = harness_fork(group_rank, (void *)(uintptr_t)r);
	for (int r = 0; r < 2; r++)
		harness_expect_exit0(rank[r], "a rank");
	for (int i = 0; i <= group_n; i++)
		reader[i] = harness_fork(group_reader, (void *)(intptr_t)(i < group_n ? i : -1));
	for (int i = 0; i <= group_n; i++)
		harness_expect_exit0(reader[i], "a group reader");
	if (group_n > 1)
		result("verified", "a publisher group: ranks on GPUs %d and %d write column shards, "
		       "each copies its parts to the other GPU and the mirror; whole tensors "
		       "exact everywhere", sh->gpu[0], sh->gpu[1]);
	else
		result("verified", "a publisher group: two ranks on GPU %d write column shards, "
		       "copied to the mirror; whole tensors exact (a second GPU would add the "
		       "fan-out of parts)", sh->gpu[0]);
}

/* ---- 4. a broker restart ------------------------------------------------------ */

static int restored_reader(void *arg)
{
	int idx = (int)(intptr_t)arg;
	wsync_client *c;
	wsync_sub *s;
	wsync_dview v;
	void *host;

	cuda_up(sh->gpu[idx]);
	TEST_OK(harness_connect(&B, "dev-restored", &c));
	TEST_OK(wsync_sub_open(c, ROUND, &s));
	TEST_OK(wsync_sub_acquire_gpu(s, uuids[idx], &v));
	TEST_ASSERT(v.version >= sh->version[0]);
	TEST_EQ_U64(v.step, ROUNDS);
	host = dtoh(v.base, v.bytes);
	TEST_ASSERT_MSG(harness_verify(host, v.bytes, v.step) == 0, "GPU %d: the restored "
	                "version differs", sh->gpu[idx]);
	free(host);
	wsync_sub_release_gpu(s, &v, WSYNC_STREAM_NONE);
	wsync_sub_close(s);
	wsync_close(c);
	cuda_down("restored reader");
	return 0;
}

static void check_restart(void)
{
	harness_broker_kill(&B);
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	for (int i = 0; i < sh->n; i++)
		harness_expect_exit0(harness_fork(restored_reader, (void *)(intptr_t)i),
		                     "a reader after the restart");
	result("verified", "a broker restart restores the mirrored model onto %d GPU%s from "
	       "its host mirror, bit-exact", sh->n, sh->n == 1 ? "" : "s");
}

/* ---- 5. read-only views --------------------------------------------------------- */

static int scribbler(void *arg)
{
	static char junk[4096];
	wsync_client *c;
	wsync_sub *s;
	wsync_dview v;
	const char *name = NULL;
	CUresult r;

	(void)arg;
	cuda_up(sh->gpu[A]);
	TEST_OK(harness_connect(&B, "dev-scribbler", &c));
	TEST_OK(wsync_sub_open(c, ROUND, &s));
	TEST_OK(wsync_sub_acquire_gpu(s, uuids[A], &v));
	r = cu.api.cu_cuMemcpyHtoD(v.base, junk, sizeof junk);
	cu.api.cu_cuGetErrorName(r, &name);
	snprintf(sh->note, sizeof sh->note, "%s", name ? name : "?");
	TEST_ASSERT_MSG(r != CUDA_SUCCESS, "a copy into a read-only device view succeeded");
	/* the context may be unusable now (a real GPU can report a fault): the
	 * process ends here, as a faulting collector would */
	_exit(0);
}

static void check_read_only(void)
{
	harness_expect_exit0(harness_fork(scribbler, NULL), "the scribbler");
	result("verified", "a collector's view is read-only on its GPU: a copy into it fails "
	       "(%s)", sh->note);
}

/* ---- main ------------------------------------------------------------------------ */

static void summary(void)
{
	printf("gpu_device: %d check%s\n", n_results, n_results == 1 ? "" : "s");
	for (int i = 0; i < n_results; i++)
		printf("  %s\n", results[i]);
	fflush(stdout);
}

int main(void)
{
	const char *mode = getenv("WSYNC_TEST_GPU");
	bool real = mode && !strcmp(mode, "real");
	char fake[4096], v[16];

	sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	TEST_ASSERT(sh != MAP_FAILED);
	memset(sh, 0, sizeof *sh);
	if (real) {
		unsetenv("WSYNC_LIBCUDA");        /* libcuda.so.1, as users load it */
	} else {
		harness_fakecuda_path(fake, sizeof fake);
		setenv("WSYNC_LIBCUDA", fake, 1);
		/* other shapes can be tried: FAKECUDA_DEVICES=1, FAKECUDA_PEERS=all */
		setenv("FAKECUDA_DEVICES", "3", 0);
		setenv("FAKECUDA_PEERS", "01,10", 0);
		setenv("FAKECUDA_COPY_DELAY_US", "200", 1);
		unsetenv("CUDA_VISIBLE_DEVICES");
	}
	harness_expect_exit0(harness_fork(probe, NULL), "the probe");
	if (!sh->n) {
		TEST_ASSERT_MSG(real, "the fake driver shows no usable GPU: %s", sh->why);
		printf("SKIP: no GPU: %s\n", sh->why[0] ? sh->why : "the driver shows none");
		return 77;
	}
	for (int i = 0; i < sh->n; i++)
		uuids[i] = sh->uuid[i];
	for (int i = 1; i < sh->n; i++) {
		if (sh->peer[A][i] && Bi < 0)
			Bi = i;
		if (!sh->peer[A][i] && Ci < 0)
			Ci = i;
	}
	wsync_cuda_version_text(sh->driver_version, v, sizeof v);
	printf("gpu_device: CUDA driver %s%s, %d usable GPU%s; GPU %d publishes\n", v,
	       sh->fake ? " (the tests' fake)" : "", sh->n, sh->n == 1 ? "" : "s", sh->gpu[A]);
	for (int i = 0; i < sh->n; i++) {
		printf("  GPU %d: %s '%s', reaches peer to peer:", sh->gpu[i], sh->uuid[i],
		       sh->name[i]);
		for (int j = 0; j < sh->n; j++)
			if (sh->peer[i][j])
				printf(" %d", sh->gpu[j]);
		printf("\n");
	}
	fflush(stdout);

	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	check_fan_out();
	check_copies();
	check_group();
	check_restart();
	check_read_only();
	harness_broker_finish(&B);
	if (sh->fake)
		result("verified", "no allocation, mapping, registration, stream, event or context "
		       "left alive in any process (the fake's counts)");
	else
		result("skipped", "leak counts, failure injection, a missing synchronise made "
		       "visible (the fake's only: gpu_slabs, test_fakecuda)");
	summary();
	return 0;
}

#else
int main(void)
{
	printf("SKIP: built without the CUDA Toolkit's cuda.h: no device slabs\n");
	return 77;
}
#endif
