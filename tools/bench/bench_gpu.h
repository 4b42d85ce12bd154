/*
 * tools/bench/bench_gpu.h — what the files of the "gpu" scenario share
 * (bench_gpu.c plans and prints, bench_gpu_cuda.c holds the driver,
 * bench_gpu_copy.c and bench_gpu_wake.c measure).
 *
 * The bench process itself never loads the CUDA driver: a real driver does
 * not survive fork() once initialised, and every measurement here runs in a
 * child forked from the bench. So a probe child asks the driver what GPUs
 * there are, measuring children each make their own context, and they all
 * report through one struct gb_shared in MAP_SHARED memory.
 */
#ifndef WSYNC_TOOLS_BENCH_GPU_H
#define WSYNC_TOOLS_BENCH_GPU_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bench_common.h"

#define GB_MAX_GPUS     8
#define GB_MAX_REPEATS  32          /* figures per row: the median of these */
#define GB_MAX_SAMPLES  400         /* wake-ups per collector */
#define GB_COLLECTORS   3           /* wake: at most 2 device + 1 host */
#define GB_ERR_LEN      400

/* What the probe child found (bench_gpu.c). */
struct gb_probe {
	bool loaded;                    /* a driver answered */
	bool fake;                      /* ... and it is the tests' fake */
	int  driver_version;
	int  count;                     /* GPUs this process sees (<= GB_MAX_GPUS) */
	bool usable[GB_MAX_GPUS];       /* VMM memory exportable as an fd */
	bool peer[GB_MAX_GPUS][GB_MAX_GPUS];   /* [a][b]: a reaches b's memory */
	char name[GB_MAX_GPUS][96];
	size_t mem[GB_MAX_GPUS];        /* bytes of memory */
	char uuid[GB_MAX_GPUS][WSYNC_GPU_UUID_LEN];
	char why[256];                  /* no driver: why */
};

/* What the measuring children do: GPU ordinals as every child sees them
 * (they inherit the bench's environment); -1 when there is none. */
struct gb_plan {
	int    a;                       /* the publisher's GPU */
	int    b;                       /* a GPU that a reaches peer to peer */
	int    c;                       /* a GPU that a does not reach */
	int    second;                  /* any other usable GPU (wake rows) */
	size_t bytes, n_tensors;        /* the model of the copy rows */
	int    repeats;
	int    acquire_pairs;           /* acquire + release pairs per repeat */
	int    warmup, samples;         /* wake: per collector */
	bool   fake;                    /* the driver is the tests' fake: check leaks */
	char   endpoint[108];
};

/* Figures of the single-process rows (bench_gpu_copy.c), one per repeat:
 * copies in ms, acquire pairs in ns. */
struct gb_copy_res {
	double dtod[GB_MAX_REPEATS];          /* DtoD of the slab on GPU a */
	double pub1[GB_MAX_REPEATS];          /* publish, model on a */
	double peer_ref[GB_MAX_REPEATS];      /* DtoD a -> b, peer to peer */
	double pub_peer[GB_MAX_REPEATS];      /* publish, model on a, b */
	double staged_ref[GB_MAX_REPEATS];    /* DtoH a + HtoD c via pinned memory */
	double pub_staged[GB_MAX_REPEATS];    /* publish, model on a, c */
	double acq_host[GB_MAX_REPEATS];      /* host acquire + release, ns */
	double acq_gpu[GB_MAX_REPEATS];       /* acquire_gpu + release_gpu, ns */
	double htod[GB_MAX_REPEATS];          /* HtoD from pinned memory */
	double view_copy[GB_MAX_REPEATS];     /* wsync_view_copy_to_device */
	double dview_copy[GB_MAX_REPEATS];    /* wsync_dview_copy_to_device */
	char   error[GB_ERR_LEN];
};

/* One wake phase (bench_gpu_wake.c): a publisher and up to GB_COLLECTORS
 * collectors, each on a GPU ordinal or on the host (-1). */
struct gb_wake {
	int     pub_gpu;                      /* -1: a host model */
	int     n_collectors;
	int     collector_gpu[GB_COLLECTORS];
	pid_t   collector_pid[GB_COLLECTORS];
	char    model[32];
	_Atomic int opened;                   /* the publisher's first version is there */
	_Atomic int ready;                    /* collectors about to wait, summed */
	_Atomic int done;                     /* collectors that held a version, summed */
	int64_t t_commit[GB_MAX_SAMPLES];     /* before the commit call */
	int64_t t_held[GB_COLLECTORS][GB_MAX_SAMPLES];
	char    error[GB_ERR_LEN];
};

struct gb_shared {
	struct gb_probe    probe;
	struct gb_plan     plan;
	struct gb_copy_res copy;
	struct gb_wake     wake;
};

/* ---- the driver in a measuring child (bench_gpu_cuda.c) ------------------- */

#ifdef WSYNC_HAVE_CUDA_H
#include "shm/cuda_loader.h"

struct gb_cuda {
	struct wsync_cuda cu;
	bool      loaded;
	int       ordinal;              /* the GPU whose primary context is current */
	CUcontext ctx;
	CUstream  stream;
	char     *err;                  /* where failures are described */
	size_t    err_len;
};

/* Loads the driver, makes GPU ordinal's primary context current (as the
 * CUDA runtime of a trainer would have) and creates a stream on it: 0, or
 * -1 with err set. */
int  gb_cuda_up(struct gb_cuda *g, int ordinal, char *err, size_t err_len);
/* Destroys the stream, releases the context and unloads. With check_leaks
 * (the tests' fake driver), -1 if the fake still counts anything alive in
 * this process: memory, mappings, streams or contexts the bench or
 * libwsync did not give back. */
int  gb_cuda_down(struct gb_cuda *g, bool check_leaks);
/* 0 for CUDA_SUCCESS; else -1, err = "what: CUDA_ERROR_...". */
int  gb_cu(struct gb_cuda *g, CUresult r, const char *what);
/* -1, err = "what: <strerror>: <wsync_errmsg>", for a wsync call's err. */
int  gb_wsync(struct gb_cuda *g, int err, const char *what);

/* Device memory on GPU ordinal allocated the way slabs are (VMM: cuMemCreate,
 * reserve, map), read-write for that GPU and every GPU that reaches it peer
 * to peer: references copy the same kind of memory as wsync, and peer copies
 * need no cuCtxEnablePeerAccess. */
struct gb_dbuf {
	CUdeviceptr ptr;
	size_t      size;               /* rounded to the granularity */
};
int  gb_dbuf_alloc(struct gb_cuda *g, int ordinal, size_t bytes, struct gb_dbuf *d);
void gb_dbuf_free(struct gb_cuda *g, struct gb_dbuf *d);
/* Host memory, every page touched, then pinned with cuMemHostRegister for
 * every context (CU_MEMHOSTREGISTER_PORTABLE). */
int  gb_pinned_alloc(struct gb_cuda *g, size_t bytes, void **out);
void gb_pinned_free(struct gb_cuda *g, void *p, size_t bytes);
/* The primary context of another GPU (the caller makes it current). */
int  gb_ctx_retain(struct gb_cuda *g, int ordinal, CUcontext *ctx);
void gb_ctx_release(struct gb_cuda *g, int ordinal);
/* A model of the plan's layout on the GPUs listed by ordinal (n_gpus 0: a
 * host model), 3 slots. */
int  gb_model_open(struct gb_cuda *g, wsync_client *c, const char *model, size_t bytes,
                   size_t n_tensors, const int *gpus, int n_gpus, wsync_pub **out);
#endif

double gb_ms_since(int64_t t0);

/* ---- children ------------------------------------------------------------- */

/* Child entry points (child_spawn); arg is the struct gb_shared. */
int gb_probe_child(void *arg);
int gb_copy_child(void *arg);
/* Runs one wake phase as configured in sh->wake (pub_gpu, collectors,
 * model): forks the collectors and the publisher, waits for them. 0, or -1
 * with sh->wake.error set. Called in the bench process. */
int gb_wake_phase(struct gb_shared *sh);

#endif /* WSYNC_TOOLS_BENCH_GPU_H */
