/*
 * tools/bench/gpu_copy.c — the gpu rows measured in one process: device
 * publish, fan-out to a peer GPU and through pinned host memory, acquire of
 * a device view, and the copies of views into the caller's device buffer,
 * each next to the bare driver copy it is built on, taken in the same
 * repeat on the same GPUs (docs/BENCHMARKS.md, "GPU rows").
 *
 * Runs in a child (child_spawn) with GPU a's primary context current, as a
 * trainer's thread has it. Every copy is timed to its completion: on the
 * caller's stream, then cuStreamSynchronize (a bare cuMemcpyDtoD returns
 * before the copy is done).
 */
#include <stdio.h>
#include <string.h>

#include "bench_gpu.h"

#ifdef WSYNC_HAVE_CUDA_H

struct copy_run {
	const struct gb_plan *pl;
	struct gb_copy_res *res;
	struct gb_cuda g;
	char uuid_a[WSYNC_GPU_UUID_LEN];
	CUcontext ctx_c;                 /* GPU c's, for the staged reference */
	bool have_ctx_c;
	struct gb_dbuf src, dst, dst_b, dst_c;   /* src, dst on a */
	void *pinned;                    /* bytes of pinned host memory */
	wsync_client *c, *rc;            /* publisher, reader */
	wsync_pub *p1, *p_peer, *p_staged, *p_host;
	wsync_sub *s1, *s_host;
	uint64_t step;
};

/* After a copy issued on the stream (issued: 0, or -1 with the error set),
 * waits for it: 0 and the ms since t0, or -1. */
static int synced(struct copy_run *r, int issued, int64_t t0, double *ms)
{
	if (issued || gb_cu(&r->g, r->g.cu.api.cu_cuStreamSynchronize(r->g.stream),
	                    "cuStreamSynchronize"))
		return -1;
	*ms = gb_ms_since(t0);
	return 0;
}

/* ---- what wsync does --------------------------------------------------- */

/* begin_gpu on a, the slab copied from src on the stream, commit_gpu
 * (fan-out to the model's other GPUs, synchronise, commit): ms. */
static int pub_dev(struct copy_run *r, wsync_pub *p, double *ms)
{
	int64_t t0 = mono_ns();
	wsync_dslab s;
	int err;

	err = wsync_pub_begin_gpu(p, r->uuid_a, 10 * NS_PER_S, &s);
	if (err)
		return gb_wsync(&r->g, err, "wsync_pub_begin_gpu");
	if (gb_cu(&r->g, r->g.cu.api.cu_cuMemcpyDtoDAsync(s.base, r->src.ptr, s.bytes,
	                                                  r->g.stream),
	          "cuMemcpyDtoDAsync into the slab")) {
		wsync_pub_abort(p);
		return -1;
	}
	err = wsync_pub_commit_gpu(p, r->g.stream, ++r->step, NULL);
	if (err)
		return gb_wsync(&r->g, err, "wsync_pub_commit_gpu");
	*ms = gb_ms_since(t0);
	return 0;
}

static int pub_host(struct copy_run *r)
{
	const char *what = "";
	int err = publish_once(r->p_host, r->pinned, NULL, ++r->step, NULL, &what);

	return err ? gb_wsync(&r->g, err, what) : 0;
}

/* acquire + release pairs, ns per pair: a device view on a (gpu) or a host
 * view of the host model. */
static int acquire_pairs(struct copy_run *r, bool gpu, double *ns)
{
	int n = r->pl->acquire_pairs;
	int64_t t0 = mono_ns();

	for (int i = 0; i < n; i++) {
		wsync_dview dv;
		wsync_view v;
		int err;

		if (gpu) {
			err = wsync_sub_acquire_gpu(r->s1, r->uuid_a, &dv);
			if (err)
				return gb_wsync(&r->g, err, "wsync_sub_acquire_gpu");
			wsync_sub_release_gpu(r->s1, &dv, WSYNC_STREAM_NONE);
		} else {
			err = wsync_sub_acquire(r->s_host, &v);
			if (err)
				return gb_wsync(&r->g, err, "wsync_sub_acquire");
			wsync_sub_release(r->s_host, &v);
		}
	}
	*ns = (double)(mono_ns() - t0) / n;
	return 0;
}

/* wsync_view_copy_to_device of the host model's latest version into dst. */
static int view_copy(struct copy_run *r, double *ms)
{
	wsync_view v;
	int64_t t0;
	int err;

	err = wsync_sub_acquire(r->s_host, &v);
	if (err)
		return gb_wsync(&r->g, err, "wsync_sub_acquire");
	t0 = mono_ns();
	err = wsync_view_copy_to_device(&v, 0, r->dst.ptr, v.bytes, r->g.stream);
	err = synced(r, err ? gb_wsync(&r->g, err, "wsync_view_copy_to_device") : 0, t0, ms);
	wsync_sub_release(r->s_host, &v);
	return err;
}

/* wsync_dview_copy_to_device of the device model's latest version on a. */
static int dview_copy(struct copy_run *r, double *ms)
{
	wsync_dview v;
	int64_t t0;
	int err;

	err = wsync_sub_acquire_gpu(r->s1, r->uuid_a, &v);
	if (err)
		return gb_wsync(&r->g, err, "wsync_sub_acquire_gpu");
	t0 = mono_ns();
	err = wsync_dview_copy_to_device(&v, 0, r->dst.ptr, v.bytes, r->g.stream);
	err = synced(r, err ? gb_wsync(&r->g, err, "wsync_dview_copy_to_device") : 0, t0, ms);
	wsync_sub_release_gpu(r->s1, &v, r->g.stream);
	return err;
}

/* ---- the bare driver references ------------------------------------------ */

/* A device-to-device copy of the slab from src (on a) to dst: ms. */
static int ref_dtod(struct copy_run *r, CUdeviceptr dst, double *ms)
{
	int64_t t0 = mono_ns();
	CUresult cr = r->g.cu.api.cu_cuMemcpyDtoDAsync(dst, r->src.ptr, r->pl->bytes,
	                                               r->g.stream);

	return synced(r, gb_cu(&r->g, cr, "cuMemcpyDtoDAsync"), t0, ms);
}

/* The slab from pinned host memory to dst on a: ms. */
static int ref_htod(struct copy_run *r, double *ms)
{
	int64_t t0 = mono_ns();
	CUresult cr = r->g.cu.api.cu_cuMemcpyHtoDAsync(r->dst.ptr, r->pinned, r->pl->bytes,
	                                               r->g.stream);

	return synced(r, gb_cu(&r->g, cr, "cuMemcpyHtoDAsync"), t0, ms);
}

/* From a to c without peer access, as whole-slab copies: down to pinned
 * memory on a's stream, then up with c's context current. */
static int ref_staged(struct copy_run *r, double *ms)
{
	const struct wsync_cuda_api *api = &r->g.cu.api;
	int64_t t0 = mono_ns();
	int rc;

	if (gb_cu(&r->g, api->cu_cuMemcpyDtoHAsync(r->pinned, r->src.ptr, r->pl->bytes,
	                                           r->g.stream), "cuMemcpyDtoHAsync") ||
	    gb_cu(&r->g, api->cu_cuStreamSynchronize(r->g.stream), "cuStreamSynchronize") ||
	    gb_cu(&r->g, api->cu_cuCtxSetCurrent(r->ctx_c), "cuCtxSetCurrent"))
		return -1;
	rc = gb_cu(&r->g, api->cu_cuMemcpyHtoD(r->dst_c.ptr, r->pinned, r->pl->bytes),
	           "cuMemcpyHtoD");
	*ms = gb_ms_since(t0);
	if (gb_cu(&r->g, api->cu_cuCtxSetCurrent(r->g.ctx), "cuCtxSetCurrent"))
		return -1;
	return rc;
}

/* ---- one repeat, setup, teardown -------------------------------------------- */

static int copy_repeat(struct copy_run *r, int i)
{
	struct gb_copy_res *x = r->res;
	const struct gb_plan *pl = r->pl;

	if (ref_dtod(r, r->dst.ptr, &x->dtod[i]) || pub_dev(r, r->p1, &x->pub1[i]))
		return -1;
	if (pl->b >= 0 && (ref_dtod(r, r->dst_b.ptr, &x->peer_ref[i]) ||
	                   pub_dev(r, r->p_peer, &x->pub_peer[i])))
		return -1;
	if (pl->c >= 0 && (ref_staged(r, &x->staged_ref[i]) ||
	                   pub_dev(r, r->p_staged, &x->pub_staged[i])))
		return -1;
	if (acquire_pairs(r, false, &x->acq_host[i]) || acquire_pairs(r, true, &x->acq_gpu[i]))
		return -1;
	return ref_htod(r, &x->htod[i]) || view_copy(r, &x->view_copy[i]) ||
	       dview_copy(r, &x->dview_copy[i]) ? -1 : 0;
}

static int copy_buffers(struct copy_run *r)
{
	const struct gb_plan *pl = r->pl;

	if (gb_dbuf_alloc(&r->g, pl->a, pl->bytes, &r->src) ||
	    gb_dbuf_alloc(&r->g, pl->a, pl->bytes, &r->dst) ||
	    (pl->b >= 0 && gb_dbuf_alloc(&r->g, pl->b, pl->bytes, &r->dst_b)) ||
	    (pl->c >= 0 && gb_dbuf_alloc(&r->g, pl->c, pl->bytes, &r->dst_c)) ||
	    gb_pinned_alloc(&r->g, pl->bytes, &r->pinned))
		return -1;
	if (pl->c >= 0) {
		if (gb_ctx_retain(&r->g, pl->c, &r->ctx_c))
			return -1;
		r->have_ctx_c = true;
	}
	/* the weights: warm_alloc's pattern, uploaded once */
	return gb_cu(&r->g, r->g.cu.api.cu_cuMemcpyHtoD(r->src.ptr, r->pinned, pl->bytes),
	             "cuMemcpyHtoD of the source");
}

static int copy_models(struct copy_run *r)
{
	const struct gb_plan *pl = r->pl;
	int on_a[1] = { pl->a }, on_ab[2] = { pl->a, pl->b }, on_ac[2] = { pl->a, pl->c };
	int err;

	err = wsync_gpu_uuid(pl->a, r->uuid_a, sizeof r->uuid_a);
	if (err)
		return gb_wsync(&r->g, err, "wsync_gpu_uuid");
	if ((err = wsync_connect(pl->endpoint, "bench-gpu", &r->c)) ||
	    (err = wsync_connect(pl->endpoint, "bench-gpu-reader", &r->rc)))
		return gb_wsync(&r->g, err, "wsync_connect");
	if (gb_model_open(&r->g, r->c, "gpu-a", pl->bytes, pl->n_tensors, on_a, 1, &r->p1) ||
	    (pl->b >= 0 && gb_model_open(&r->g, r->c, "gpu-peer", pl->bytes, pl->n_tensors,
	                                 on_ab, 2, &r->p_peer)) ||
	    (pl->c >= 0 && gb_model_open(&r->g, r->c, "gpu-staged", pl->bytes, pl->n_tensors,
	                                 on_ac, 2, &r->p_staged)) ||
	    gb_model_open(&r->g, r->c, "gpu-host", pl->bytes, pl->n_tensors, NULL, 0, &r->p_host))
		return -1;
	/* every slot of every model written once: later publishes map nothing */
	for (int i = 0; i < 4; i++) {
		double ms;

		if (pub_dev(r, r->p1, &ms) || (r->p_peer && pub_dev(r, r->p_peer, &ms)) ||
		    (r->p_staged && pub_dev(r, r->p_staged, &ms)) || pub_host(r))
			return -1;
	}
	if ((err = wsync_sub_open(r->rc, "gpu-a", &r->s1)) ||
	    (err = wsync_sub_open(r->rc, "gpu-host", &r->s_host)))
		return gb_wsync(&r->g, err, "wsync_sub_open");
	return 0;
}

static int copy_teardown(struct copy_run *r, int rc)
{
	wsync_sub_close(r->s1);
	wsync_sub_close(r->s_host);
	wsync_pub_close(r->p1);
	wsync_pub_close(r->p_peer);
	wsync_pub_close(r->p_staged);
	wsync_pub_close(r->p_host);
	wsync_close(r->rc);
	wsync_close(r->c);
	if (r->g.loaded) {
		gb_dbuf_free(&r->g, &r->src);
		gb_dbuf_free(&r->g, &r->dst);
		gb_dbuf_free(&r->g, &r->dst_b);
		gb_dbuf_free(&r->g, &r->dst_c);
		gb_pinned_free(&r->g, r->pinned, r->pl->bytes);
		if (r->have_ctx_c)
			gb_ctx_release(&r->g, r->pl->c);
	}
	/* leaks are looked for only after a success: a failure keeps its message */
	return (gb_cuda_down(&r->g, !rc && r->pl->fake) || rc) ? -1 : 0;
}

int gb_copy_child(void *arg)
{
	struct gb_shared *sh = arg;
	struct copy_run r;
	int rc = -1;

	memset(&r, 0, sizeof r);
	r.pl = &sh->plan;
	r.res = &sh->copy;
	if (gb_cuda_up(&r.g, r.pl->a, r.res->error, sizeof r.res->error) ||
	    copy_buffers(&r) || copy_models(&r))
		goto out;
	/* a repeat first that counts nothing: first copies, first views */
	if (copy_repeat(&r, 0))
		goto out;
	for (int i = 0; i < r.pl->repeats; i++)
		if (copy_repeat(&r, i))
			goto out;
	rc = 0;
out:
	return copy_teardown(&r, rc) ? 1 : 0;
}

#else

int gb_copy_child(void *arg)
{
	struct gb_shared *sh = arg;

	snprintf(sh->copy.error, sizeof sh->copy.error, "built without cuda.h");
	return 1;
}

#endif /* WSYNC_HAVE_CUDA_H */
