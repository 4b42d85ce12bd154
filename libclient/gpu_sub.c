/*
 * libclient/gpu_sub.c — device views: the newest version's read-only device
 * pointer on a GPU of the model, pinned exactly like a host view.
 *
 * The pin (hazard) is what keeps the broker from granting the slot while
 * the view is held; on a GPU the reads are asynchronous, so the view must
 * outlive the kernels that read it. Release therefore synchronises the
 * reading stream first and clears the pin after: cuMemUnmap and a cleared
 * pin would otherwise let the next version overwrite bytes a kernel is
 * still reading. Mappings are per subscription and GPU, made on the first
 * use under the client lock and then read without one (release/acquire on
 * s->gpu[d], never changed until the subscription closes); the first also
 * sets s->gpu_release, through which sub.c unmaps them all when the
 * subscription closes, without knowing what they are.
 *
 * Copies out of a view run on the caller's stream, on the view's GPU or
 * on one that reaches it peer to peer (gpu_map.c gave those access); a
 * destination on a GPU that does not reach it is refused with -EXDEV
 * rather than handed to a driver that would fail it or fault. A strided
 * part (wsync_dview_slice_read) is one cuMemcpy2DAsync, not one copy per
 * row.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpu.h"
#include "gpu_map.h"
#include "shm/clock.h"
#include "shm/errmsg.h"
#include "sub.h"
#include "sub_wait.h"

#ifdef WSYNC_HAVE_CUDA_H

/* s->gpu_release: unmaps the subscription's GPUs when it closes. */
static void sub_gpu_release(struct wsync_sub *s)
{
	for (uint32_t d = 0; d < WSYNC_MAX_DEVICES; d++) {
		wsync_gpu_map_free(atomic_load(&s->gpu[d]));
		atomic_store(&s->gpu[d], NULL);
	}
}

static int sub_gpu_map(struct wsync_sub *s, uint32_t device, int64_t deadline_ns,
                       struct gpu_map **out)
{
	struct gpu_map *g = atomic_load_explicit(&s->gpu[device], memory_order_acquire);
	int err = 0;

	if (g) {
		*out = g;
		return 0;
	}
	client_lock(s->c);
	g = atomic_load_explicit(&s->gpu[device], memory_order_relaxed);
	if (!g) {
		err = wsync_gpu_map_attach(s->c, s->model, s->model_id, s->entry, device, false,
		                           deadline_ns, &g);
		if (!err) {
			s->gpu_release = sub_gpu_release;
			atomic_store_explicit(&s->gpu[device], g, memory_order_release);
		}
	}
	client_unlock(s->c);
	if (!err)
		*out = g;
	return err;
}

/* Turns a pinned host-form view into a device view on GPU device (mapping
 * the GPU's slots by deadline_ns the first time). */
static int dview_fill(struct wsync_sub *s, uint32_t device, int64_t deadline_ns,
                      wsync_dview *out)
{
	const wsync_view *v = &out->priv_view;
	struct gpu_map *g;
	int err;

	err = sub_gpu_map(s, device, deadline_ns, &g);
	if (!err && v->priv_slot >= g->n_slots)
		err = wsync_fail(-EPROTO, "model '%s': slot %u of %u mapped on the GPU", s->model,
		                 v->priv_slot, g->n_slots);
	if (err) {
		wsync_sub_release(s, &out->priv_view);
		return err;
	}
	out->version = v->version;
	out->step = v->step;
	out->published_ns = v->published_ns;
	out->base = g->base[v->priv_slot];
	out->bytes = v->bytes;
	out->n_tensors = v->n_tensors;
	out->tensors = v->tensors;
	out->priv_device = device;
	out->priv_pad = 0;
	return 0;
}

/* The GPU of a mapping already made whose UUID is spelled exactly as
 * wsync_gpu_uuid spells it (what callers pass): a string compare instead
 * of parsing, so that a device acquire costs what a host one does. */
static bool device_mapped(struct wsync_sub *s, const char *uuid, uint32_t *device)
{
	for (uint32_t d = 0; d < WSYNC_MAX_DEVICES; d++) {
		const struct gpu_map *g = atomic_load_explicit(&s->gpu[d], memory_order_acquire);

		if (g && !strcmp(uuid, g->uuid_text)) {
			*device = d;
			return true;
		}
	}
	return false;
}

int wsync_sub_acquire_gpu(wsync_sub *s, const char *uuid, wsync_dview *out)
{
	uint32_t device;
	int err = 0;

	if (!s || !uuid || !out)
		return wsync_fail(-EINVAL, "wsync_sub_acquire_gpu: subscription, uuid and out "
		                  "must not be NULL");
	/* the acquire checks that the model is still the one mapped */
	if (!device_mapped(s, uuid, &device)) {
		/* device models are never given new memory (broker/model.c
		 * model_rotate): moved means gone for them */
		err = wsync_sub_check_model(s);
		if (err == WSYNC_SUB_MOVED)
			err = wsync_fail(-EIDRM, "model '%s' moved to other memory; subscribe "
			                 "again", s->model);
		if (!err)
			err = wsync_gpu_model_device(s->entry, s->model, uuid, &device);
	}
	if (err == -ENODATA)
		return wsync_fail(-ENODATA, "model '%s': nothing published yet", s->model);
	if (err)
		return err;
	err = wsync_sub_acquire_by(s, -1, true, &out->priv_view);
	if (err)
		return err == -ESTALE ? -EAGAIN : err;
	return dview_fill(s, device, -1, out);
}

int wsync_sub_wait_gpu(wsync_sub *s, const char *uuid, uint64_t after_version,
                       int64_t timeout_ns, wsync_dview *out)
{
	uint32_t device;
	int64_t deadline;
	int err;

	if (!s || !uuid || !out)
		return wsync_fail(-EINVAL, "wsync_sub_wait_gpu: subscription, uuid and out must "
		                  "not be NULL");
	if (timeout_ns < 0 && timeout_ns != WSYNC_FOREVER)
		return wsync_fail(-EINVAL, "model '%s': timeout %lld ns is negative", s->model,
		                  (long long)timeout_ns);
	deadline = wsync_deadline(timeout_ns);
	/* a model without a layout yet is waited for like any other; which
	 * GPU it has is known once it has one */
	err = wsync_gpu_model_device(s->entry, s->model, uuid, &device);
	if (err && err != -ENODATA)
		return err;
	err = wsync_sub_wait_any(s, after_version, timeout_ns, true, &out->priv_view);
	if (err)
		return err;
	err = wsync_gpu_model_device(s->entry, s->model, uuid, &device);
	if (err) {
		wsync_sub_release(s, &out->priv_view);
		return err;
	}
	return dview_fill(s, device, deadline, out);
}

int wsync_dview_tensor(const wsync_dview *v, const char *name, uint64_t *dptr,
                       const wsync_tensor_desc **desc)
{
	const wsync_tensor_desc *d;
	const void *host;
	int err;

	if (!v || !name || !dptr)
		return wsync_fail(-EINVAL, "wsync_dview_tensor: view, name and dptr must not be "
		                  "NULL");
	err = wsync_view_tensor(&v->priv_view, name, &host, &d);
	if (err)
		return err;
	*dptr = v->base + d->offset;
	if (desc)
		*desc = d;
	return 0;
}

void wsync_sub_release_gpu(wsync_sub *s, wsync_dview *v, void *stream)
{
	const struct wsync_cuda *cu;

	if (!s || !v) {
		wsync_fail(-EINVAL, "wsync_sub_release_gpu: subscription or view is NULL");
		return;
	}
	if (!v->priv_view.priv_sub)
		return;                          /* already released */
	if (stream != WSYNC_STREAM_NONE && !wsync_gpu_driver("wsync_sub_release_gpu", &cu)) {
		CUresult r = cu->api.cu_cuStreamSynchronize((CUstream)stream);

		/* a stream in error has stopped reading: the pin can go either way */
		if (r != CUDA_SUCCESS)
			wsync_fail(wsync_cu_errno(r), "model '%s': synchronising the stream that "
			           "read v%llu: %s", s->model, (unsigned long long)v->version,
			           wsync_cu_name(cu, r));
	}
	wsync_sub_release(s, &v->priv_view);     /* clears priv_view */
	v->base = 0;
}

/* The mapping a held device view points into. */
static const struct gpu_map *dview_map(const wsync_dview *v)
{
	const struct wsync_sub *s = v->priv_view.priv_sub;

	return v->priv_device < WSYNC_MAX_DEVICES
	       ? atomic_load_explicit(&s->gpu[v->priv_device], memory_order_acquire) : NULL;
}

/* The checks both copies out of a view make, then the driver. */
static int copy_ready(const char *what, bool held, uint64_t bytes, uint64_t off, size_t len,
                      const struct wsync_cuda **cu)
{
	if (!held)
		return wsync_fail(-EINVAL, "%s: not a held view", what);
	if (off > bytes || len > bytes - off)
		return wsync_fail(-EINVAL, "%s: %zu bytes at %llu, the view has %llu", what, len,
		                  (unsigned long long)off, (unsigned long long)bytes);
	return wsync_gpu_driver(what, cu);
}

int wsync_view_copy_to_device(const wsync_view *v, uint64_t off, uint64_t dst, size_t len,
                              void *stream)
{
	static const char what[] = "wsync_view_copy_to_device";
	const struct wsync_cuda *cu;
	CUresult r;
	int err;

	err = copy_ready(what, v && v->priv_sub && v->base, v ? v->bytes : 0, off, len, &cu);
	if (err)
		return err;
	r = cu->api.cu_cuMemcpyHtoDAsync(dst, (const char *)v->base + off, len,
	                                 (CUstream)stream);
	/* the view may be released as soon as we return: wait for the read */
	if (r == CUDA_SUCCESS)
		r = cu->api.cu_cuStreamSynchronize((CUstream)stream);
	if (r != CUDA_SUCCESS)
		return wsync_fail(wsync_cu_errno(r), "%s: %s", what, wsync_cu_name(cu, r));
	return 0;
}

int wsync_dview_copy_to_device(const wsync_dview *v, uint64_t off, uint64_t dst, size_t len,
                               void *stream)
{
	static const char what[] = "wsync_dview_copy_to_device";
	const struct wsync_cuda *cu;
	CUresult r;
	int err;

	err = copy_ready(what, v && v->priv_view.priv_sub && v->base, v ? v->bytes : 0, off,
	                 len, &cu);
	if (!err && dview_map(v))
		err = wsync_gpu_map_reachable(cu, dview_map(v), dst, what);
	if (err)
		return err;
	/* asynchronous: wsync_sub_release_gpu with this stream waits for it */
	r = cu->api.cu_cuMemcpyDtoDAsync(dst, v->base + off, len, (CUstream)stream);
	if (r != CUDA_SUCCESS)
		return wsync_fail(wsync_cu_errno(r), "%s: %s", what, wsync_cu_name(cu, r));
	return 0;
}

int wsync_dview_slice_read(const wsync_dview *v, const wsync_slice *s, uint64_t dst,
                           void *stream)
{
	static const char what[] = "wsync_dview_slice_read";
	const struct wsync_cuda *cu;
	CUresult res;
	int err;

	if (!v || !v->priv_view.priv_sub || !v->base || !s)
		return wsync_fail(-EINVAL, "wsync_dview_slice_read: not a held device view, or "
		                  "no slice");
	/* the slice's last byte, overflow-checked, inside the view */
	if (s->rows && (s->row_bytes > v->bytes || s->offset > v->bytes - s->row_bytes ||
	                (s->rows > 1 && (s->stride == 0 ||
	                                 s->rows - 1 > (v->bytes - s->row_bytes - s->offset) /
	                                               s->stride))))
		return wsync_fail(-EINVAL, "wsync_dview_slice_read: %llu rows of %llu bytes "
		                  "every %llu from %llu leave the view's %llu bytes",
		                  (unsigned long long)s->rows, (unsigned long long)s->row_bytes,
		                  (unsigned long long)s->stride, (unsigned long long)s->offset,
		                  (unsigned long long)v->bytes);
	err = wsync_gpu_driver(what, &cu);
	if (!err && dview_map(v))
		err = wsync_gpu_map_reachable(cu, dview_map(v), dst, what);
	if (err)
		return err;
	/* packed at dst; a strided part in one 2D copy */
	res = wsync_cu_copy_rows(cu, (struct wsync_cu_end){ false, dst, s->row_bytes },
	                         (struct wsync_cu_end){ false, v->base + s->offset, s->stride },
	                         s->row_bytes, s->rows, (CUstream)stream);
	if (res != CUDA_SUCCESS)
		return wsync_fail(wsync_cu_errno(res), "%s: %llu rows of %llu bytes: %s", what,
		                  (unsigned long long)s->rows, (unsigned long long)s->row_bytes,
		                  wsync_cu_name(cu, res));
	return 0;
}

#else /* built without cuda.h: nothing is ever mapped */

static int no_cuda(const char *what)
{
	const struct wsync_cuda *cu;

	return wsync_gpu_driver(what, &cu);
}

int wsync_sub_acquire_gpu(wsync_sub *s, const char *uuid, wsync_dview *out)
{
	(void)s;
	(void)uuid;
	(void)out;
	return no_cuda("wsync_sub_acquire_gpu");
}

int wsync_sub_wait_gpu(wsync_sub *s, const char *uuid, uint64_t after_version,
                       int64_t timeout_ns, wsync_dview *out)
{
	(void)s;
	(void)uuid;
	(void)after_version;
	(void)timeout_ns;
	(void)out;
	return no_cuda("wsync_sub_wait_gpu");
}

int wsync_dview_tensor(const wsync_dview *v, const char *name, uint64_t *dptr,
                       const wsync_tensor_desc **desc)
{
	(void)v;
	(void)name;
	(void)dptr;
	(void)desc;
	return no_cuda("wsync_dview_tensor");
}

void wsync_sub_release_gpu(wsync_sub *s, wsync_dview *v, void *stream)
{
	(void)stream;
	if (s && v && v->priv_view.priv_sub)
		wsync_sub_release(s, &v->priv_view);
}

int wsync_view_copy_to_device(const wsync_view *v, uint64_t off, uint64_t dst, size_t len,
                              void *stream)
{
	(void)v;
	(void)off;
	(void)dst;
	(void)len;
	(void)stream;
	return no_cuda("wsync_view_copy_to_device");
}

int wsync_dview_slice_read(const wsync_dview *v, const wsync_slice *s, uint64_t dst,
                           void *stream)
{
	(void)v;
	(void)s;
	(void)dst;
	(void)stream;
	return no_cuda("wsync_dview_slice_read");
}

int wsync_dview_copy_to_device(const wsync_dview *v, uint64_t off, uint64_t dst, size_t len,
                               void *stream)
{
	(void)v;
	(void)off;
	(void)dst;
	(void)len;
	(void)stream;
	return no_cuda("wsync_dview_copy_to_device");
}

#endif
