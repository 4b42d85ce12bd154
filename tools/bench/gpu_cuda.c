/*
 * tools/bench/gpu_cuda.c — the CUDA driver in a child of the gpu scenario:
 * a context and a stream, device and pinned buffers for the references,
 * device models, and the fake driver's leak count when the rows run
 * against it (WSYNC_BENCH_GPU_FAKE=1).
 *
 * Everything goes through shm/cuda_loader's typed pointers, resolved the
 * way libwsync resolves them, so the bench calls exactly the ABIs wsync does.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bench_gpu.h"

double gb_ms_since(int64_t t0)
{
	return (double)(mono_ns() - t0) / (double)NS_PER_MS;
}

#ifdef WSYNC_HAVE_CUDA_H
/* The fake's live counts (a test header: the struct the fake fills). */
#include "tests/fakecuda/fakecuda.h"

int gb_cu(struct gb_cuda *g, CUresult r, const char *what)
{
	const char *name = NULL;

	if (r == CUDA_SUCCESS)
		return 0;
	if (g->loaded && g->cu.api.cu_cuGetErrorName(r, &name) != CUDA_SUCCESS)
		name = NULL;
	snprintf(g->err, g->err_len, "%s: %s (%d)", what, name ? name : "CUDA error", (int)r);
	return -1;
}

int gb_wsync(struct gb_cuda *g, int err, const char *what)
{
	wsync_error_text(g->err, g->err_len, what, err);
	return -1;
}

int gb_cuda_up(struct gb_cuda *g, int ordinal, char *err, size_t err_len)
{
	CUdevice dev;

	memset(g, 0, sizeof *g);
	g->err = err;
	g->err_len = err_len;
	g->ordinal = -1;
	if (wsync_cuda_load(&g->cu, err, err_len))
		return -1;
	g->loaded = true;
	if (gb_cu(g, g->cu.api.cu_cuDeviceGet(&dev, ordinal), "cuDeviceGet") ||
	    gb_cu(g, g->cu.api.cu_cuDevicePrimaryCtxRetain(&g->ctx, dev),
	          "cuDevicePrimaryCtxRetain"))
		return -1;
	g->ordinal = ordinal;
	if (gb_cu(g, g->cu.api.cu_cuCtxSetCurrent(g->ctx), "cuCtxSetCurrent") ||
	    gb_cu(g, g->cu.api.cu_cuStreamCreate(&g->stream, CU_STREAM_NON_BLOCKING),
	          "cuStreamCreate"))
		return -1;
	return 0;
}

/* Anything the fake still counts alive in this process: 0, or -1 naming it. */
static int fake_leaks(struct gb_cuda *g)
{
	fakecuda_live_fn live = (fakecuda_live_fn)dlsym(g->cu.lib, "fakecuda_live");
	struct fakecuda_live l;
	size_t off;
	bool any = false;

	if (!live) {
		snprintf(g->err, g->err_len, "the driver is not the tests' fake (no fakecuda_live)");
		return -1;
	}
	live(&l);
	const struct { const char *what; uint64_t n; } alive[] = {
		{ "allocations", l.allocations }, { "exports", l.exports },
		{ "mappings", l.mappings }, { "reservations", l.reservations },
		{ "cuMemAlloc", l.mem_allocs }, { "host registrations", l.host_registrations },
		{ "streams", l.streams }, { "events", l.events }, { "contexts", l.contexts },
	};
	off = (size_t)snprintf(g->err, g->err_len, "left alive in the fake driver:");
	for (size_t i = 0; i < sizeof alive / sizeof alive[0]; i++) {
		if (!alive[i].n || off >= g->err_len)
			continue;
		any = true;
		off += (size_t)snprintf(g->err + off, g->err_len - off, " %s %llu",
		                        alive[i].what, (unsigned long long)alive[i].n);
	}
	if (!any)
		g->err[0] = '\0';
	return any ? -1 : 0;
}

int gb_cuda_down(struct gb_cuda *g, bool check_leaks)
{
	int rc = 0;

	if (!g->loaded)
		return 0;
	if (g->stream)
		g->cu.api.cu_cuStreamDestroy(g->stream);
	g->cu.api.cu_cuCtxSetCurrent(NULL);
	if (g->ordinal >= 0)
		gb_ctx_release(g, g->ordinal);
	if (check_leaks)
		rc = fake_leaks(g);
	wsync_cuda_unload(&g->cu);
	g->loaded = false;
	return rc;
}

int gb_ctx_retain(struct gb_cuda *g, int ordinal, CUcontext *ctx)
{
	CUdevice dev;

	if (gb_cu(g, g->cu.api.cu_cuDeviceGet(&dev, ordinal), "cuDeviceGet"))
		return -1;
	return gb_cu(g, g->cu.api.cu_cuDevicePrimaryCtxRetain(ctx, dev),
	             "cuDevicePrimaryCtxRetain");
}

void gb_ctx_release(struct gb_cuda *g, int ordinal)
{
	CUdevice dev;

	if (g->cu.api.cu_cuDeviceGet(&dev, ordinal) == CUDA_SUCCESS)
		g->cu.api.cu_cuDevicePrimaryCtxRelease(dev);
}

/* Access for the owner and every GPU that reaches it: desc filled, count. */
static size_t dbuf_access(struct gb_cuda *g, int ordinal, CUmemAccessDesc *desc)
{
	const struct wsync_cuda_api *api = &g->cu.api;
	CUdevice owner, other;
	size_t n = 0;

	if (api->cu_cuDeviceGet(&owner, ordinal) != CUDA_SUCCESS)
		return 0;
	for (int i = 0; i < g->cu.device_count && i < GB_MAX_GPUS; i++) {
		int can = i == ordinal;

		if (!can && api->cu_cuDeviceGet(&other, i) == CUDA_SUCCESS &&
		    api->cu_cuDeviceCanAccessPeer(&can, other, owner) != CUDA_SUCCESS)
			can = 0;
		if (!can)
			continue;
		desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		desc[n].location.id = i;
		desc[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	}
	return n;
}

int gb_dbuf_alloc(struct gb_cuda *g, int ordinal, size_t bytes, struct gb_dbuf *d)
{
	const struct wsync_cuda_api *api = &g->cu.api;
	CUmemAccessDesc desc[GB_MAX_GPUS];
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle h;
	size_t gran = 0;

	memset(d, 0, sizeof *d);
	memset(&prop, 0, sizeof prop);
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = ordinal;
	if (gb_cu(g, api->cu_cuMemGetAllocationGranularity(&gran, &prop,
	          CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "cuMemGetAllocationGranularity"))
		return -1;
	d->size = gran ? (bytes + gran - 1) / gran * gran : bytes;
	if (gb_cu(g, api->cu_cuMemCreate(&h, d->size, &prop, 0), "cuMemCreate"))
		return -1;
	if (gb_cu(g, api->cu_cuMemAddressReserve(&d->ptr, d->size, 0, 0, 0),
	          "cuMemAddressReserve"))
		goto out_release;
	if (gb_cu(g, api->cu_cuMemMap(d->ptr, d->size, 0, h, 0), "cuMemMap"))
		goto out_free;
	if (gb_cu(g, api->cu_cuMemSetAccess(d->ptr, d->size, desc, dbuf_access(g, ordinal, desc)),
	          "cuMemSetAccess"))
		goto out_unmap;
	api->cu_cuMemRelease(h);        /* the mapping keeps the memory */
	return 0;

out_unmap:
	api->cu_cuMemUnmap(d->ptr, d->size);
out_free:
	api->cu_cuMemAddressFree(d->ptr, d->size);
out_release:
	api->cu_cuMemRelease(h);
	d->ptr = 0;
	return -1;
}

void gb_dbuf_free(struct gb_cuda *g, struct gb_dbuf *d)
{
	if (!d->ptr)
		return;
	g->cu.api.cu_cuMemUnmap(d->ptr, d->size);
	g->cu.api.cu_cuMemAddressFree(d->ptr, d->size);
	d->ptr = 0;
}

int gb_pinned_alloc(struct gb_cuda *g, size_t bytes, void **out)
{
	void *p = warm_alloc(bytes);

	*out = NULL;
	if (!p) {
		snprintf(g->err, g->err_len, "out of memory (%zu MiB of host memory)", bytes / MIB);
		return -1;
	}
	/* portable: the staged reference uploads from it in another GPU's
	 * context, where memory pinned for this one would be pageable */
	if (gb_cu(g, g->cu.api.cu_cuMemHostRegister(p, bytes, CU_MEMHOSTREGISTER_PORTABLE),
	          "cuMemHostRegister")) {
		warm_free(p, bytes);
		return -1;
	}
	*out = p;
	return 0;
}

void gb_pinned_free(struct gb_cuda *g, void *p, size_t bytes)
{
	if (!p)
		return;
	g->cu.api.cu_cuMemHostUnregister(p);
	warm_free(p, bytes);
}

int gb_model_open(struct gb_cuda *g, wsync_client *c, const char *model, size_t bytes,
                  size_t n_tensors, const int *gpus, int n_gpus, wsync_pub **out)
{
	char uuid[WSYNC_MAX_DEVICES][WSYNC_GPU_UUID_LEN];
	const char *devices[WSYNC_MAX_DEVICES];
	wsync_model_opts opts;
	char what[96];
	int err;

	memset(&opts, 0, sizeof opts);
	opts.slots = 3;
	for (int i = 0; i < n_gpus && i < WSYNC_MAX_DEVICES; i++) {
		err = wsync_gpu_uuid(gpus[i], uuid[i], sizeof uuid[i]);
		if (err) {
			snprintf(what, sizeof what, "wsync_gpu_uuid(%d)", gpus[i]);
			return gb_wsync(g, err, what);
		}
		devices[i] = uuid[i];
	}
	opts.n_devices = (uint32_t)n_gpus;
	opts.devices = n_gpus ? devices : NULL;
	err = model_open_opts(c, model, bytes, n_tensors, &opts, out);
	if (err) {
		snprintf(what, sizeof what, "wsync_pub_open(%s)", model);
		return gb_wsync(g, err, what);
	}
	return 0;
}
#endif /* WSYNC_HAVE_CUDA_H */
