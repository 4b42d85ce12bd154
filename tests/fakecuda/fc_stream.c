/*
 * tests/fakecuda/fc_stream.c — streams, events and copies of the fake driver.
 *
 * Each stream has a worker thread that runs its operations in order. An
 * asynchronous copy returns at once; the worker sleeps
 * FAKECUDA_COPY_DELAY_US before each quarter of it, so a reader that skips
 * cuStreamSynchronize or cuEventSynchronize sees old or half-copied bytes,
 * as on a GPU. fakecuda_hold_streams(true) stops every worker before its
 * next operation, for tests that need the "not yet copied" state without
 * depending on time. Synchronous copies run in the caller's thread. The
 * NULL stream is one shared worker, made on first use; CU_STREAM_LEGACY
 * and CU_STREAM_PER_THREAD name it too (one host thread per test process
 * uses it, so the per-thread stream needs no worker of its own).
 *
 * Contexts, as on a GPU: a stream and an event belong to the context
 * current when they were made; work on the NULL stream is issued in the
 * caller's current context. The issuing context's device must have access
 * to every device end of a copy (fc_mem_check); an event is recorded only
 * on a stream of its own context; a host end that is not pinned for the
 * issuing context (fc_host_pinned) makes the copy synchronous: it returns
 * once the stream reached it and it is done, as the driver's pageable
 * copies do.
 *
 * One lock (sq_lock) and one condition variable guard every queue, counter
 * and event; every change broadcasts.
 */
#include "fc_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct fc_op {                         /* rows of width bytes; a 1D copy is one row */
	struct fc_op *next;
	void         *dst;
	const void   *src;
	size_t        n;                   /* width */
	size_t        rows, dpitch, spitch;
};

struct CUstream_st {
	struct CUstream_st *next;
	pthread_t     thread;
	struct fc_op *head, *tail;
	uint64_t      submitted, done;
	bool          stop;
	CUcontext     ctx;                 /* NULL: the NULL stream, any context's */
};

struct CUevent_st {
	struct CUevent_st  *next;
	struct CUstream_st *stream;        /* NULL: never recorded, or complete */
	uint64_t            seq;           /* complete when stream->done >= seq */
	CUcontext           ctx;           /* current when it was created */
};

static pthread_mutex_t sq_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  sq_cond = PTHREAD_COND_INITIALIZER;
static bool            sq_hold;
static struct CUstream_st *streams, *null_stream;
static struct CUevent_st  *events;
static uint64_t            sq_pageable;    /* fakecuda_pageable_copies */

/*
 * fork(): CUDA state does not survive it (a real driver refuses to work in
 * the child), and neither do the stream workers here. The child starts with
 * no streams, no null stream and no events, and a fresh lock and condition
 * variable (the parent's workers may have been waiting on the old one, and
 * glibc's condition variables do not survive waiters that vanish). Tests
 * that fork after using the fake keep working, with new streams.
 */
static void fork_prepare(void)
{
	pthread_mutex_lock(&sq_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&sq_lock);
}

static void fork_child(void)
{
	pthread_mutex_init(&sq_lock, NULL);
	pthread_cond_init(&sq_cond, NULL);
	streams = null_stream = NULL;
	events = NULL;
	sq_hold = false;
}

__attribute__((constructor)) static void fork_handlers(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* In quarters, each after the delay: of the bytes of one row, or of the
 * rows of a 2D copy. */
static void op_run(const struct fc_op *op, unsigned delay_us)
{
	if (op->rows > 1) {
		size_t quarter = (op->rows + 3) / 4;

		for (size_t r = 0; r < op->rows; r++) {
			if (delay_us && r % quarter == 0)
				usleep(delay_us);
			memmove((char *)op->dst + r * op->dpitch,
			        (const char *)op->src + r * op->spitch, op->n);
		}
		return;
	}
	size_t quarter = (op->n + 3) / 4;

	for (size_t at = 0; at < op->n; at += quarter) {
		size_t len = op->n - at < quarter ? op->n - at : quarter;

		if (delay_us)
			usleep(delay_us);
		memmove((char *)op->dst + at, (const char *)op->src + at, len);
	}
}

static void *stream_worker(void *arg)
{
	struct CUstream_st *s = arg;

	pthread_mutex_lock(&sq_lock);
	for (;;) {
		struct fc_op *op;

		while (!s->stop && (!s->head || sq_hold))
			pthread_cond_wait(&sq_cond, &sq_lock);
		if (!s->head)
			break;                     /* stopping, and drained */
		op = s->head;
		pthread_mutex_unlock(&sq_lock);
		if (op->n)
			op_run(op, fc_cfg.copy_delay_us);
		pthread_mutex_lock(&sq_lock);
		s->head = op->next;
		if (!s->head)
			s->tail = NULL;
		s->done++;
		free(op);
		pthread_cond_broadcast(&sq_cond);
	}
	pthread_mutex_unlock(&sq_lock);
	return NULL;
}

static struct CUstream_st *stream_new(CUcontext ctx)
{
	struct CUstream_st *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->ctx = ctx;
	if (pthread_create(&s->thread, NULL, stream_worker, s)) {
		free(s);
		return NULL;
	}
	return s;
}

/* Stops the worker once its queue is empty and frees s; s is unlinked. */
static void stream_free(struct CUstream_st *s)
{
	pthread_mutex_lock(&sq_lock);
	s->stop = true;
	pthread_cond_broadcast(&sq_cond);
	for (struct CUevent_st *e = events; e; e = e->next)
		if (e->stream == s)
			e->stream = NULL;          /* its work will be done when we return */
	pthread_mutex_unlock(&sq_lock);
	pthread_join(s->thread, NULL);
	free(s);
}

/* The stream an operation goes to and the context that issues it there;
 * NULL (and the handles that name the default streams) is the shared
 * default stream, issued in the caller's current context. */
static CUresult stream_resolve(CUstream in, struct CUstream_st **out, CUcontext *ctx)
{
	bool known = false;

	if (fc_need_ctx())
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&sq_lock);
	if (!in || in == CU_STREAM_LEGACY || in == CU_STREAM_PER_THREAD) {
		if (!null_stream)
			null_stream = stream_new(NULL);
		*out = null_stream;
		known = null_stream != NULL;
		if (ctx)
			*ctx = fc_current;
	} else {
		for (struct CUstream_st *s = streams; s; s = s->next)
			known |= s == in;
		*out = in;
		if (ctx && known)
			*ctx = in->ctx;
	}
	pthread_mutex_unlock(&sq_lock);
	return known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* Queues op on s; with wait, returns once s has run it (a pageable copy). */
static CUresult stream_push(struct CUstream_st *s, struct fc_op *op, bool wait)
{
	uint64_t seq;

	pthread_mutex_lock(&sq_lock);
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	seq = ++s->submitted;
	pthread_cond_broadcast(&sq_cond);
	if (wait) {
		sq_pageable++;
		while (s->done < seq)
			pthread_cond_wait(&sq_cond, &sq_lock);
	}
	pthread_mutex_unlock(&sq_lock);
	return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *out, unsigned int flags)
{
	struct CUstream_st *s;

	FC_ENTER("cuStreamCreate");
	if (fc_need_ctx())
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!out || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	s = stream_new(fc_current);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&sq_lock);
	s->next = streams;
	streams = s;
	pthread_mutex_unlock(&sq_lock);
	*out = s;
	return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream s)
{
	bool found = false;

	FC_ENTER("cuStreamDestroy_v2");
	pthread_mutex_lock(&sq_lock);
	for (struct CUstream_st **pp = &streams; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			found = true;
			break;
		}
	pthread_mutex_unlock(&sq_lock);
	if (!found)
		return CUDA_ERROR_INVALID_HANDLE;
	stream_free(s);
	return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream in)
{
	struct CUstream_st *s;
	CUresult r;

	FC_ENTER("cuStreamSynchronize");
	r = stream_resolve(in, &s, NULL);
	if (r)
		return r;
	pthread_mutex_lock(&sq_lock);
	while (s->done < s->submitted)
		pthread_cond_wait(&sq_cond, &sq_lock);
	pthread_mutex_unlock(&sq_lock);
	return CUDA_SUCCESS;
}

CUresult cuStreamQuery(CUstream in)
{
	struct CUstream_st *s;
	bool idle;
	CUresult r;

	FC_ENTER("cuStreamQuery");
	r = stream_resolve(in, &s, NULL);
	if (r)
		return r;
	pthread_mutex_lock(&sq_lock);
	idle = s->done >= s->submitted;
	pthread_mutex_unlock(&sq_lock);
	return idle ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

/* ---- events ------------------------------------------------------------ */

static bool event_known(struct CUevent_st *ev)
{
	for (struct CUevent_st *e = events; e; e = e->next)
		if (e == ev)
			return true;
	return false;
}

CUresult cuEventCreate(CUevent *out, unsigned int flags)
{
	struct CUevent_st *e;

	FC_ENTER("cuEventCreate");
	if (fc_need_ctx())
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!out || (flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
	                                 CU_EVENT_INTERPROCESS)))
		return CUDA_ERROR_INVALID_VALUE;
	e = calloc(1, sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->ctx = fc_current;
	pthread_mutex_lock(&sq_lock);
	e->next = events;
	events = e;
	pthread_mutex_unlock(&sq_lock);
	*out = e;
	return CUDA_SUCCESS;
}

/* The stream and the event must belong to one context (the driver's
 * cuEventRecord says so, and fails otherwise). */
CUresult cuEventRecord(CUevent ev, CUstream in)
{
	struct CUstream_st *s;
	CUcontext ctx = NULL;
	CUresult r;

	FC_ENTER("cuEventRecord");
	r = stream_resolve(in, &s, &ctx);
	if (r)
		return r;
	pthread_mutex_lock(&sq_lock);
	if (!event_known(ev) || ev->ctx != ctx) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else {
		ev->stream = s;
		ev->seq = s->submitted;
	}
	pthread_mutex_unlock(&sq_lock);
	return r;
}

static bool event_done(struct CUevent_st *ev)
{
	return !ev->stream || ev->stream->done >= ev->seq;
}

CUresult cuEventSynchronize(CUevent ev)
{
	CUresult r = CUDA_SUCCESS;

	FC_ENTER("cuEventSynchronize");
	pthread_mutex_lock(&sq_lock);
	if (!event_known(ev))
		r = CUDA_ERROR_INVALID_HANDLE;
	while (!r && !event_done(ev))
		pthread_cond_wait(&sq_cond, &sq_lock);
	pthread_mutex_unlock(&sq_lock);
	return r;
}

CUresult cuEventQuery(CUevent ev)
{
	CUresult r;

	FC_ENTER("cuEventQuery");
	pthread_mutex_lock(&sq_lock);
	r = !event_known(ev) ? CUDA_ERROR_INVALID_HANDLE
	  : event_done(ev)   ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
	pthread_mutex_unlock(&sq_lock);
	return r;
}

CUresult cuEventDestroy_v2(CUevent ev)
{
	CUresult r = CUDA_ERROR_INVALID_HANDLE;

	FC_ENTER("cuEventDestroy_v2");
	pthread_mutex_lock(&sq_lock);
	for (struct CUevent_st **pp = &events; *pp; pp = &(*pp)->next)
		if (*pp == ev) {
			*pp = ev->next;
			free(ev);
			r = CUDA_SUCCESS;
			break;
		}
	pthread_mutex_unlock(&sq_lock);
	return r;
}

/* ---- copies --------------------------------------------------------------- */

/* Checks both ends for the device `by` that issues the copy: device ends
 * must be device memory it may reach, the destination writable. */
static CUresult copy_check(CUdeviceptr dst, bool dst_dev, CUdeviceptr src, bool src_dev,
                           size_t n, int by)
{
	if (dst_dev && fc_mem_check(dst, n, true, by))
		return CUDA_ERROR_INVALID_VALUE;
	if (src_dev && fc_mem_check(src, n, false, by))
		return CUDA_ERROR_INVALID_VALUE;
	if ((!dst_dev && !dst) || (!src_dev && !src))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static CUresult copy_sync(const char *fn, CUdeviceptr dst, bool dst_dev, CUdeviceptr src,
                          bool src_dev, size_t n)
{
	CUresult r;

	FC_ENTER(fn);
	if (fc_need_ctx())
		return CUDA_ERROR_INVALID_CONTEXT;
	r = copy_check(dst, dst_dev, src, src_dev, n, fc_current->dev);
	if (r)
		return r;
	memmove((void *)dst, (const void *)src, n);
	return CUDA_SUCCESS;
}

/* Whether the host ends of a copy issued in ctx are pinned there: a span
 * of `span` bytes from each. */
static bool copy_pinned(CUdeviceptr dst, bool dst_dev, CUdeviceptr src, bool src_dev,
                        size_t span_dst, size_t span_src, CUcontext ctx)
{
	return (dst_dev || fc_host_pinned((void *)dst, span_dst, ctx)) &&
	       (src_dev || fc_host_pinned((const void *)src, span_src, ctx));
}

static CUresult op_queue(struct CUstream_st *s, struct fc_op *tmpl, bool wait)
{
	struct fc_op *op = malloc(sizeof(*op));

	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*op = *tmpl;
	op->next = NULL;
	return stream_push(s, op, wait);
}

static CUresult copy_async(const char *fn, CUdeviceptr dst, bool dst_dev, CUdeviceptr src,
                           bool src_dev, size_t n, CUstream in)
{
	struct fc_op op = { .dst = (void *)dst, .src = (const void *)src, .n = n, .rows = 1,
	                    .dpitch = n, .spitch = n };
	struct CUstream_st *s;
	CUcontext ctx = NULL;
	CUresult r;

	FC_ENTER(fn);
	r = stream_resolve(in, &s, &ctx);
	if (!r)
		r = copy_check(dst, dst_dev, src, src_dev, n, ctx->dev);
	if (!r)
		r = op_queue(s, &op, !copy_pinned(dst, dst_dev, src, src_dev, n, n, ctx));
	return r;
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return copy_sync("cuMemcpyDtoD_v2", dst, true, src, true, n);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	return copy_sync("cuMemcpyHtoD_v2", dst, true, (uintptr_t)src, false, n);
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	return copy_sync("cuMemcpyDtoH_v2", (uintptr_t)dst, false, src, true, n);
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy_async("cuMemcpyDtoDAsync_v2", dst, true, src, true, n, s);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	return copy_async("cuMemcpyHtoDAsync_v2", dst, true, (uintptr_t)src, false, n, s);
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy_async("cuMemcpyDtoHAsync_v2", (uintptr_t)dst, false, src, true, n, s);
}

/* Each end is checked with its own context's device. */
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                           CUcontext src_ctx, size_t n, CUstream in)
{
	struct fc_op op = { .dst = (void *)dst, .src = (const void *)src, .n = n, .rows = 1,
	                    .dpitch = n, .spitch = n };
	struct CUstream_st *s;
	CUresult r;

	FC_ENTER("cuMemcpyPeerAsync");
	if (!dst_ctx || !src_ctx || !dst_ctx->retains || !src_ctx->retains)
		return CUDA_ERROR_INVALID_CONTEXT;
	r = stream_resolve(in, &s, NULL);
	if (!r && (fc_mem_check(dst, n, true, dst_ctx->dev) ||
	           fc_mem_check(src, n, false, src_ctx->dev)))
		r = CUDA_ERROR_INVALID_VALUE;
	if (!r)
		r = op_queue(s, &op, false);
	return r;
}

/* One end of a 2D copy: its first byte, host or device, and the span of
 * its rows. */
static CUresult copy2d_end(CUmemorytype type, const void *host, CUdeviceptr dev, size_t x,
                           size_t y, size_t pitch, CUdeviceptr *at, bool *is_dev)
{
	switch (type) {
	case CU_MEMORYTYPE_HOST:
		*at = (uintptr_t)host;
		*is_dev = false;
		break;
	case CU_MEMORYTYPE_DEVICE:
		*at = dev;
		*is_dev = true;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;     /* arrays and unified: not simulated */
	}
	if (!*at)
		return CUDA_ERROR_INVALID_VALUE;
	*at += y * pitch + x;
	return CUDA_SUCCESS;
}

/* Rows of WidthInBytes from one pitched region to another; pitches at
 * most CU_DEVICE_ATTRIBUTE_MAX_PITCH, each at least the row, as the
 * driver checks. */
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream in)
{
	struct fc_op op;
	struct CUstream_st *s;
	CUdeviceptr dst, src;
	bool dst_dev, src_dev;
	size_t span_dst, span_src;
	CUcontext ctx = NULL;
	CUresult r;

	FC_ENTER("cuMemcpy2DAsync_v2");
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	r = stream_resolve(in, &s, &ctx);
	if (r)
		return r;
	if (p->srcPitch > INT32_MAX || p->dstPitch > INT32_MAX ||
	    p->srcPitch < p->WidthInBytes + p->srcXInBytes ||
	    p->dstPitch < p->WidthInBytes + p->dstXInBytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!p->WidthInBytes || !p->Height)
		return CUDA_SUCCESS;
	r = copy2d_end(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY,
	               p->dstPitch, &dst, &dst_dev);
	if (!r)
		r = copy2d_end(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes,
		               p->srcY, p->srcPitch, &src, &src_dev);
	if (r)
		return r;
	span_dst = (p->Height - 1) * p->dstPitch + p->WidthInBytes;
	span_src = (p->Height - 1) * p->srcPitch + p->WidthInBytes;
	if ((dst_dev && fc_mem_check(dst, span_dst, true, ctx->dev)) ||
	    (src_dev && fc_mem_check(src, span_src, false, ctx->dev)))
		return CUDA_ERROR_INVALID_VALUE;
	op = (struct fc_op){ .dst = (void *)dst, .src = (const void *)src, .n = p->WidthInBytes,
	                     .rows = p->Height, .dpitch = p->dstPitch, .spitch = p->srcPitch };
	return op_queue(s, &op, !copy_pinned(dst, dst_dev, src, src_dev, span_dst, span_src, ctx));
}

/* ---- test controls and accounting --------------------------------------- */

void fakecuda_hold_streams(bool hold)
{
	pthread_mutex_lock(&sq_lock);
	sq_hold = hold;
	pthread_cond_broadcast(&sq_cond);
	pthread_mutex_unlock(&sq_lock);
}

uint64_t fakecuda_pageable_copies(void)
{
	uint64_t n;

	pthread_mutex_lock(&sq_lock);
	n = sq_pageable;
	pthread_mutex_unlock(&sq_lock);
	return n;
}

void fc_stream_live(struct fakecuda_live *out)
{
	pthread_mutex_lock(&sq_lock);
	for (struct CUstream_st *s = streams; s; s = s->next)
		out->streams++;
	for (struct CUevent_st *e = events; e; e = e->next)
		out->events++;
	pthread_mutex_unlock(&sq_lock);
}

void fc_stream_reset(void)
{
	struct CUstream_st *s;

	pthread_mutex_lock(&sq_lock);
	s = null_stream;
	null_stream = NULL;
	sq_hold = false;
	sq_pageable = 0;
	pthread_mutex_unlock(&sq_lock);
	if (s)
		stream_free(s);
}
