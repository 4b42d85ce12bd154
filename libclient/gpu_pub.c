/*
 * libclient/gpu_pub.c — publishing device slabs: begin on one GPU, fan out
 * to the model's other GPUs and the host mirror, synchronise, commit.
 *
 * The invariant kept here is the host one (no collector ever sees a version
 * whose bytes are incomplete), for every copy of the version: the commit
 * stores `latest` only after cuStreamSynchronize of the stream that carried
 * the caller's writes and every fan-out copy returned. A fan-out copy goes
 * peer to peer when the source GPU can reach the destination (the
 * destination's mapping grants it access, gpu_map.c), else through two
 * pinned host buffers, chunk by chunk, uploads on a stream of the
 * destination's primary context overlapping the next chunk's download;
 * those uploads are waited for too. Nothing is copied after the commit, so
 * a crash anywhere before it leaves an unpublished slot that the broker
 * frees. A fan-out that fails also synchronises every stream it queued
 * copies on before the version is aborted: the broker grants the slot
 * again at once, and a copy of the failed attempt still in flight would
 * land in the next version after collectors can see it.
 *
 * Contexts, as the driver wants them: the staging buffers are registered
 * CU_MEMHOSTREGISTER_PORTABLE (pinned for the caller's context, where the
 * downloads run, and for the destinations' primary contexts, where the
 * uploads run; without it the uploads would be pageable, synchronous
 * copies), in a primary context this publisher holds and made current
 * again to unregister them. Events are made and recorded in the context of
 * the upload stream they mark; a download is waited for by synchronising
 * the caller's stream, which needs no event in a context we do not know.
 *
 * A rank of a publisher group writes its parts on its own GPU and copies
 * only those to the other GPUs, so the fan-out runs rank by rank in
 * parallel and no GPU gathers the model; the broker makes the version
 * visible once every rank committed, i.e. once every rank's copies are
 * complete. A part split along dim 1 (rows with a stride) goes to each
 * destination in one cuMemcpy2DAsync, not one copy per row.
 *
 * The mappings and staging buffers (struct gpu_pub) are this file's: the
 * first begin_gpu sets p->gpu_release, through which pub.c frees them when
 * the publisher closes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "gpu_map.h"
#include "pub.h"
#include "pub_commit.h"
#include "pub_grant.h"
#include "shm/clock.h"
#include "shm/errmsg.h"

#define STAGE_BYTES ((size_t)8 << 20)     /* each of the two pinned buffers of a
                                             staged copy */

#ifdef WSYNC_HAVE_CUDA_H

struct gpu_pub {
	struct gpu_map *map[WSYNC_MAX_DEVICES];
	uint32_t n;
	/* staged uploads, for GPUs the source GPU cannot reach: their primary
	 * contexts, a stream in each, and two pinned host buffers */
	CUcontext ctx[WSYNC_MAX_DEVICES];
	CUstream  up[WSYNC_MAX_DEVICES];
	CUevent   up_done[WSYNC_MAX_DEVICES][2];  /* upload from buffer b recorded */
	void    *stage[2];
	bool     stage_pinned[2];
	uint32_t stage_ctx;              /* the device whose context registered them */
};

/* p->gpu_release: unmaps the publisher's GPUs and frees what the staged
 * copies made, when it closes (or its first mapping failed). */
static void pub_gpu_release(struct wsync_pub *p)
{
	struct gpu_pub *g = p->gpu;
	const struct wsync_cuda *cu;

	if (!g)
		return;
	if (!wsync_gpu_driver("device slabs", &cu)) {
		CUcontext caller = NULL;

		/* unpinned in the context that pinned them (held until below) */
		cu->api.cu_cuCtxGetCurrent(&caller);
		for (int b = 0; b < 2; b++)
			if (g->stage_pinned[b] &&
			    cu->api.cu_cuCtxSetCurrent(g->ctx[g->stage_ctx]) == CUDA_SUCCESS)
				cu->api.cu_cuMemHostUnregister(g->stage[b]);
		cu->api.cu_cuCtxSetCurrent(caller);
		for (uint32_t d = 0; d < g->n; d++) {
			if (!g->ctx[d] || !g->map[d])
				continue;
			if (g->up[d]) {
				CUcontext prev = NULL;

				cu->api.cu_cuCtxGetCurrent(&prev);
				cu->api.cu_cuCtxSetCurrent(g->ctx[d]);
				for (int b = 0; b < 2; b++)
					if (g->up_done[d][b])
						cu->api.cu_cuEventDestroy(g->up_done[d][b]);
				cu->api.cu_cuStreamDestroy(g->up[d]);
				cu->api.cu_cuCtxSetCurrent(prev);
			}
			cu->api.cu_cuDevicePrimaryCtxRelease(g->map[d]->dev);
		}
	}
	for (uint32_t d = 0; d < g->n; d++)
		wsync_gpu_map_free(g->map[d]);
	free(g->stage[0]);
	free(g->stage[1]);
	free(g);
	p->gpu = NULL;
}

/* Maps the model's slots on all its GPUs, writable, once, by deadline_ns. */
static int pub_gpu_setup(struct wsync_pub *p, int64_t deadline_ns)
{
	struct gpu_pub *g;
	int err = 0;

	if (p->gpu)
		return 0;
	g = calloc(1, sizeof(*g));
	if (!g)
		return wsync_fail(-ENOMEM, "model '%s': out of memory", p->model);
	g->n = p->entry->n_devices;
	if (g->n > WSYNC_MAX_DEVICES)
		g->n = WSYNC_MAX_DEVICES;
	client_lock(p->c);
	for (uint32_t d = 0; d < g->n && !err; d++)
		err = wsync_gpu_map_attach(p->c, p->model, p->model_id, p->entry, d, true,
		                           deadline_ns, &g->map[d]);
	client_unlock(p->c);
	p->gpu = g;
	p->gpu_release = pub_gpu_release;
	if (err)
		pub_gpu_release(p);
	return err;
}

int wsync_pub_begin_gpu(wsync_pub *p, const char *uuid, int64_t timeout_ns, wsync_dslab *out)
{
	struct gpu_map *map;
	int64_t deadline;
	uint32_t device;
	int err;

	if (!p || !uuid || !out)
		return wsync_fail(-EINVAL, "wsync_pub_begin_gpu: publisher, uuid and out must not "
		                  "be NULL");
	if (timeout_ns < 0 && timeout_ns != WSYNC_FOREVER)
		return wsync_fail(-EINVAL, "model '%s': timeout %lld ns is negative", p->model,
		                  (long long)timeout_ns);
	deadline = wsync_deadline(timeout_ns);
	if (!p->device_model)
		return wsync_fail(-EINVAL, "model '%s' is a host model: begin with "
		                  "wsync_pub_begin (or open it with opts.devices)", p->model);
	err = wsync_gpu_model_device(p->entry, p->model, uuid, &device);
	if (!err)
		err = pub_gpu_setup(p, deadline);
	if (err)
		return err;
	/* what is left of the caller's timeout after the first mapping */
	if (deadline >= 0) {
		int64_t left = deadline - wsync_mono_ns();

		timeout_ns = left > 0 ? left : 0;
	}
	err = wsync_pub_begin_slab(p, timeout_ns, &out->priv_slab);
	if (err)
		return err;
	map = p->gpu->map[device];
	p->gpu_begun = true;
	p->gpu_src = device;
	out->base = map->base[out->priv_slab.priv_slot];
	out->bytes = p->bytes;
	out->n_tensors = p->n_tensors;
	out->tensors = p->tensors;
	out->priv_device = device;
	out->priv_pad = 0;
	return 0;
}

static int dslab_check(const wsync_dslab *s, const char *what)
{
	const struct wsync_pub *p = s ? s->priv_slab.priv_pub : NULL;

	if (!p || !p->begun || !p->gpu_begun || p->cur.version != s->priv_slab.priv_version)
		return wsync_fail(-EINVAL, "%s: not a begun device slab", what);
	return 0;
}

int wsync_dslab_tensor(const wsync_dslab *s, const char *name, uint64_t *dptr,
                       const wsync_tensor_desc **desc)
{
	const wsync_tensor_desc *d;
	void *host;
	int err;

	if (!s || !name || !dptr)
		return wsync_fail(-EINVAL, "wsync_dslab_tensor: slab, name and dptr must not "
		                  "be NULL");
	err = wsync_slab_tensor(&s->priv_slab, name, &host, &d);
	if (err)
		return err;
	*dptr = s->base + d->offset;
	if (desc)
		*desc = d;
	return 0;
}

int wsync_dslab_copy_from_device(wsync_dslab *s, const uint64_t *src, size_t n, void *stream)
{
	const struct wsync_cuda *cu;
	int err;

	err = dslab_check(s, "wsync_dslab_copy_from_device");
	if (!err && (!src || n > s->n_tensors))
		err = wsync_fail(-EINVAL, "wsync_dslab_copy_from_device: %zu sources for %zu "
		                 "tensors", n, s->n_tensors);
	if (!err)
		err = wsync_gpu_driver("wsync_dslab_copy_from_device", &cu);
	if (err)
		return err;
	for (size_t i = 0; i < n; i++) {
		const wsync_tensor_desc *d = &s->tensors[i];
		uint64_t len = wsync_tensor_bytes(d);
		CUresult r;

		if (!src[i] || !len)
			continue;
		r = cu->api.cu_cuMemcpyDtoDAsync(s->base + d->offset, src[i], len,
		                                 (CUstream)stream);
		if (r != CUDA_SUCCESS)
			return wsync_fail(wsync_cu_errno(r), "tensor '%s': device copy: %s",
			                  d->name, wsync_cu_name(cu, r));
	}
	return 0;
}

/* What a staged upload to dst_dev needs, made once: the destination's
 * primary context, a stream and two events in it (an event is recorded on
 * a stream of its own context), and the two pinned buffers, registered
 * portable in the first such context (see the top of the file). */
static CUresult stage_ready(const struct wsync_cuda *cu, struct gpu_pub *g, uint32_t dst_dev)
{
	CUcontext prev = NULL;
	CUresult r;

	if (!g->ctx[dst_dev]) {
		r = cu->api.cu_cuDevicePrimaryCtxRetain(&g->ctx[dst_dev], g->map[dst_dev]->dev);
		if (r != CUDA_SUCCESS) {
			g->ctx[dst_dev] = NULL;
			return r;
		}
	}
	if (g->up[dst_dev] && g->stage[1])
		return CUDA_SUCCESS;
	cu->api.cu_cuCtxGetCurrent(&prev);
	r = cu->api.cu_cuCtxSetCurrent(g->ctx[dst_dev]);
	for (int b = 0; b < 2 && r == CUDA_SUCCESS; b++) {
		if (g->stage[b])
			continue;
		if (posix_memalign(&g->stage[b], 4096, STAGE_BYTES)) {
			g->stage[b] = NULL;
			r = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		/* unpinned still works, at pageable speed */
		g->stage_pinned[b] = cu->api.cu_cuMemHostRegister(g->stage[b], STAGE_BYTES,
		                                                  CU_MEMHOSTREGISTER_PORTABLE) ==
		                     CUDA_SUCCESS;
		g->stage_ctx = dst_dev;
	}
	for (int b = 0; b < 2 && r == CUDA_SUCCESS && !g->up[dst_dev]; b++) {
		r = cu->api.cu_cuEventCreate(&g->up_done[dst_dev][b], CU_EVENT_DISABLE_TIMING);
		if (r != CUDA_SUCCESS)
			g->up_done[dst_dev][b] = NULL;
	}
	if (r == CUDA_SUCCESS && !g->up[dst_dev])
		r = cu->api.cu_cuStreamCreate(&g->up[dst_dev], CU_STREAM_NON_BLOCKING);
	if (r != CUDA_SUCCESS && !g->up[dst_dev]) {
		for (int b = 0; b < 2; b++) {
			if (g->up_done[dst_dev][b])
				cu->api.cu_cuEventDestroy(g->up_done[dst_dev][b]);
			g->up_done[dst_dev][b] = NULL;
		}
	}
	cu->api.cu_cuCtxSetCurrent(prev);
	return r;
}

/* A byte range this publisher wrote, the same in every GPU's slab and the
 * mirror: `rows` rows of `width` bytes, `pitch` apart, from `off`. */
struct span {
	uint64_t off, rows, width, pitch;
};

/*
 * Through pinned host memory, for a GPU the source cannot reach: piece k
 * (rows of the span that fit a buffer, packed; or a buffer's worth of one
 * long row) is downloaded on the caller's stream into buffer k % 2 and
 * uploaded on the destination's stream, so the upload of piece k overlaps
 * the download of piece k + 1. A buffer is downloaded into again only once
 * its previous upload finished (an event recorded after it, in the
 * destination's context), and each download is waited for (the caller's
 * stream synchronised) before its upload. fan_out waits for the uploads
 * still running.
 */
static CUresult copy_staged(const struct wsync_cuda *cu, struct gpu_pub *g, uint32_t dst_dev,
                            CUdeviceptr dst, CUdeviceptr src, struct span sp, CUstream stream,
                            CUevent last_up[2])
{
	bool long_rows = sp.width > STAGE_BYTES;
	uint64_t per = long_rows ? 1 : STAGE_BYTES / sp.width;   /* rows per piece */
	CUcontext prev = NULL;
	CUresult r = stage_ready(cu, g, dst_dev);
	int b = 0;

	for (uint64_t row = 0; row < sp.rows && r == CUDA_SUCCESS; row += per) {
		uint64_t rows = sp.rows - row < per ? sp.rows - row : per;

		for (uint64_t col = 0; col < sp.width && r == CUDA_SUCCESS; b ^= 1) {
			uint64_t w = long_rows && sp.width - col > STAGE_BYTES ? STAGE_BYTES
			                                                        : sp.width - col;
			uint64_t at = sp.off + row * sp.pitch + col;
			struct wsync_cu_end buf = { true, (uintptr_t)g->stage[b], w };

			/* the buffer's last upload, to whichever GPU it went */
			if (last_up[b])
				r = cu->api.cu_cuEventSynchronize(last_up[b]);
			if (r == CUDA_SUCCESS)
				r = wsync_cu_copy_rows(cu, buf, (struct wsync_cu_end){ false, src + at,
				                                                      sp.pitch },
				                       w, rows, stream);
			if (r == CUDA_SUCCESS)
				r = cu->api.cu_cuStreamSynchronize(stream);
			if (r != CUDA_SUCCESS)
				break;
			cu->api.cu_cuCtxGetCurrent(&prev);
			r = cu->api.cu_cuCtxSetCurrent(g->ctx[dst_dev]);
			if (r == CUDA_SUCCESS)
				r = wsync_cu_copy_rows(cu, (struct wsync_cu_end){ false, dst + at, sp.pitch },
				                       buf, w, rows, g->up[dst_dev]);
			if (r == CUDA_SUCCESS)
				r = cu->api.cu_cuEventRecord(g->up_done[dst_dev][b], g->up[dst_dev]);
			if (r == CUDA_SUCCESS)
				last_up[b] = g->up_done[dst_dev][b];
			cu->api.cu_cuCtxSetCurrent(prev);
			col += w;
		}
	}
	return r;
}

/* The spans this publisher wrote: the whole slab, or (a rank of a group)
 * each of its parts. fn returns a CUDA status; the first failure stops the
 * walk. */
typedef CUresult (*span_fn)(struct wsync_pub *p, struct span sp, void *arg);

static CUresult for_each_span(struct wsync_pub *p, span_fn fn, void *arg)
{
	CUresult r = CUDA_SUCCESS;

	if (p->group_size <= 1)
		return fn(p, (struct span){ 0, 1, p->bytes, p->bytes }, arg);
	for (size_t i = 0; i < p->n_parts && r == CUDA_SUCCESS; i++) {
		wsync_slice sl;

		if (wsync_shard_slice(&p->tensors[p->parts[i].tensor], &p->parts[i], &sl))
			return CUDA_ERROR_INVALID_VALUE;
		if (sl.rows && sl.row_bytes)
			r = fn(p, (struct span){ sl.offset, sl.rows, sl.row_bytes,
			                         sl.rows > 1 ? sl.stride : sl.row_bytes }, arg);
	}
	return r;
}

struct fan {
	const struct wsync_cuda *cu;
	CUstream stream;
	uint32_t dst;                    /* model GPU, or UINT32_MAX = host mirror */
	bool peer;
	CUevent last_up[2];              /* staged: each buffer's last upload, NULL = none */
};

static CUresult copy_span(struct wsync_pub *p, struct span sp, void *arg)
{
	struct fan *f = arg;
	struct gpu_pub *g = p->gpu;
	uint32_t slot = p->cur.slot;
	CUdeviceptr src = g->map[p->gpu_src]->base[slot];
	struct wsync_cu_end from = { false, src + sp.off, sp.pitch };

	if (f->dst == UINT32_MAX)
		return wsync_cu_copy_rows(f->cu, (struct wsync_cu_end){
			true, (uintptr_t)p->slabs[slot] + sp.off, sp.pitch }, from, sp.width, sp.rows,
			f->stream);
	if (f->peer)
		return wsync_cu_copy_rows(f->cu, (struct wsync_cu_end){
			false, g->map[f->dst]->base[slot] + sp.off, sp.pitch }, from, sp.width,
			sp.rows, f->stream);
	return copy_staged(f->cu, g, f->dst, g->map[f->dst]->base[slot], src, sp, f->stream,
	                   f->last_up);
}

/* Copies what this publisher wrote of the begun version (a group rank: its
 * parts only, each rank from its own GPU) to every other GPU and the host
 * mirror, then waits for all of it and for the caller's work on stream, on
 * every path: a failed fan-out returns only once nothing it (or the
 * caller) queued can still land in the slot. */
static int fan_out(struct wsync_pub *p, CUstream stream)
{
	struct gpu_pub *g = p->gpu;
	uint32_t s = p->gpu_src;
	struct fan f = { .stream = stream };
	const char *what = "";
	CUresult r = CUDA_SUCCESS, u;
	int bad = -1, err;

	err = wsync_gpu_driver("wsync_pub_commit_gpu", &f.cu);
	if (err)
		return err;
	for (uint32_t d = 0; d < g->n && r == CUDA_SUCCESS; d++) {
		int can = 0;

		if (d == s)
			continue;
		bad = g->map[d]->ordinal;
		f.cu->api.cu_cuDeviceCanAccessPeer(&can, g->map[s]->dev, g->map[d]->dev);
		f.dst = d;
		f.peer = can;
		what = can ? "peer copy to GPU " : "staged copy to GPU ";
		r = for_each_span(p, copy_span, &f);
	}
	if (r == CUDA_SUCCESS && !p->device_only) {
		bad = -1;
		what = "copy to the host mirror";
		f.dst = UINT32_MAX;
		r = for_each_span(p, copy_span, &f);
	}
	/* the caller's stream and the staged uploads, whatever happened: the
	 * slot goes back to the broker on a failure (a buffer must not be
	 * freed or reused under an upload either) */
	u = f.cu->api.cu_cuStreamSynchronize(stream);
	if (r == CUDA_SUCCESS && u != CUDA_SUCCESS) {
		r = u;
		bad = -1;
		what = "synchronising the stream";
	}
	for (uint32_t d = 0; d < g->n; d++) {
		if (!g->up[d])
			continue;
		u = f.cu->api.cu_cuStreamSynchronize(g->up[d]);
		if (r == CUDA_SUCCESS && u != CUDA_SUCCESS) {
			r = u;
			bad = g->map[d]->ordinal;
			what = "staged upload to GPU ";
		}
	}
	if (r == CUDA_SUCCESS)
		return 0;
	if (bad >= 0)
		return wsync_fail(wsync_cu_errno(r), "model '%s': v%llu not published: %s%d: %s",
		                  p->model, (unsigned long long)p->cur.version, what, bad,
		                  wsync_cu_name(f.cu, r));
	return wsync_fail(wsync_cu_errno(r), "model '%s': v%llu not published: %s: %s",
	                  p->model, (unsigned long long)p->cur.version, what,
	                  wsync_cu_name(f.cu, r));
}

int wsync_pub_commit_gpu(wsync_pub *p, void *stream, uint64_t step, uint64_t *version_out)
{
	int err;

	if (!p)
		return wsync_fail(-EINVAL, "wsync_pub_commit_gpu: publisher is NULL");
	if (!p->begun || !p->gpu_begun || !p->gpu)
		return wsync_fail(-EINVAL, "model '%s': wsync_pub_commit_gpu without a slab begun "
		                  "by wsync_pub_begin_gpu", p->model);
	err = fan_out(p, (CUstream)stream);
	if (err) {
		char keep[WSYNC_ERRMSG_LEN];

		snprintf(keep, sizeof(keep), "%s", wsync_errmsg_get());
		(void)wsync_pub_abort(p);
		p->gpu_begun = false;
		return wsync_fail(err, "%s", keep);
	}
	p->gpu_begun = false;
	return wsync_pub_commit_slab(p, step, version_out);
}

#else /* built without cuda.h: nothing is ever mapped */

static int no_cuda(const char *what)
{
	const struct wsync_cuda *cu;

	return wsync_gpu_driver(what, &cu);
}

int wsync_pub_begin_gpu(wsync_pub *p, const char *uuid, int64_t timeout_ns, wsync_dslab *out)
{
	(void)p;
	(void)uuid;
	(void)timeout_ns;
	(void)out;
	return no_cuda("wsync_pub_begin_gpu");
}

int wsync_dslab_tensor(const wsync_dslab *s, const char *name, uint64_t *dptr,
                       const wsync_tensor_desc **desc)
{
	(void)s;
	(void)name;
	(void)dptr;
	(void)desc;
	return no_cuda("wsync_dslab_tensor");
}

int wsync_dslab_copy_from_device(wsync_dslab *s, const uint64_t *src, size_t n, void *stream)
{
	(void)s;
	(void)src;
	(void)n;
	(void)stream;
	return no_cuda("wsync_dslab_copy_from_device");
}

int wsync_pub_commit_gpu(wsync_pub *p, void *stream, uint64_t step, uint64_t *version_out)
{
	(void)p;
	(void)stream;
	(void)step;
	(void)version_out;
	return no_cuda("wsync_pub_commit_gpu");
}

#endif
