/*
 * tools/bench/bench_common.h — what the parts of wsync-bench share: options, the
 * result table, statistics, clocks, child processes and the private broker.
 *
 * Processes: every scenario that needs several processes forks them from
 * this program while it is single-threaded and holds no wsync client, so a
 * child never inherits a connection or a lock. Children die with the bench
 * (PR_SET_PDEATHSIG) and are killed by the cleanup if the bench fails or is
 * interrupted. They report through MAP_SHARED anonymous memory created before
 * the fork.
 */
#ifndef WSYNC_TOOLS_BENCH_COMMON_H
#define WSYNC_TOOLS_BENCH_COMMON_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wsync.h"

#define NS_PER_US ((int64_t)1000)
#define NS_PER_MS ((int64_t)1000000)
#define NS_PER_S  ((int64_t)1000000000)
#define MIB       ((size_t)1 << 20)

/* ---- options and run state ------------------------------------------- */

enum bench_scenario {
	SC_PUBLISH   = 1u << 0,
	SC_ACQUIRE   = 1u << 1,
	SC_WAKE      = 1u << 2,
	SC_SUSTAINED = 1u << 3,
	SC_PEERS     = 1u << 4,
	SC_SHARD     = 1u << 5,
	SC_CHECKSUM  = 1u << 6,
	SC_GPU       = 1u << 7,
	SC_SCALE     = 1u << 8,
	SC_E2E       = 1u << 9,
	SC_HOSTILE   = 1u << 10,
	SC_PYTHON    = 1u << 11,
	SC_SERVING   = 1u << 12,
	SC_TORCHRL   = 1u << 13,
	SC_ALL       = (1u << 14) - 1,
};

struct bench {
	/* options */
	const char *wsyncd;
	const char *python;
	const char *peers_script;      /* NULL: found next to the binary */
	const char *json_path;
	bool quick;
	int repeats;                   /* measured repetitions per figure */
	unsigned only;                 /* enum bench_scenario bits */
	/* the private broker */
	char dir[64];                  /* temporary directory, XDG_RUNTIME_DIR */
	char endpoint[108];            /* <dir>/bench.sock */
	char instance[32];             /* bench-<pid> */
	char broker_log[96];
	pid_t broker_pid;
	const char *huge_pages;        /* the broker's --huge-pages, NULL: its default */
	/* results */
	int failures;                  /* scenarios that could not run */
	double others_pct;             /* CPU used by other processes, % of
	                                  the machine during the run; < 0 unknown */
	double steal_pct;              /* time the hypervisor took, % */
};

/* ---- what else ran meanwhile ----------------------------------------------- */

struct cpu_mark {
	int64_t wall_ns;
	int64_t busy_ns, steal_ns;     /* whole machine, from /proc/stat */
	int64_t ours_ns;               /* this process and its reaped children */
};

int  cpu_mark_take(struct cpu_mark *m);
/* Fills b->others_pct and b->steal_pct from two marks. */
void cpu_marks_compare(struct bench *b, const struct cpu_mark *a,
                       const struct cpu_mark *z);

/* ---- clocks, sleeping, randomness ------------------------------------- */

int64_t  mono_ns(void);
int64_t  thread_cpu_ns(void);
void     sleep_ns(int64_t ns);
/* A small per-process xorshift generator (seeded from the pid and time). */
uint64_t rand_u64(void);
int64_t  rand_range(int64_t lo, int64_t hi);   /* uniform in [lo, hi] */

/* ---- statistics (each sorts v in place) --------------------------------- */

double stat_median(double *v, size_t n);
/* Nearest-rank percentile, p in (0, 1]. */
double stat_pct(double *v, size_t n, double p);
double stat_max(const double *v, size_t n);

/* ---- memory -------------------------------------------------------------- */

/* MAP_SHARED | MAP_ANONYMOUS memory, zeroed, that children inherit; NULL on
 * failure. Freed with shared_free. */
void *shared_alloc(size_t bytes);
void  shared_free(void *p, size_t bytes);
/* Page-aligned private memory, every page touched (filled with a pattern),
 * so copies from/to it do not fault. NULL on failure. */
void *warm_alloc(size_t bytes);
void  warm_free(void *p, size_t bytes);

/* ---- the result table ---------------------------------------------------- */

struct bench_row;

/* A measured row. unit: "ms", "us", "ns", "/s", "%" or "". */
struct bench_row *row_add(const char *scenario, const char *figure,
                          const char *unit, double value);
/* The reference the row is compared with (same unit); ratio = value / ref. */
void row_ref(struct bench_row *r, const char *ref_name, double ref);
/* Target on the ratio (ratio <= max), or on the value itself. */
void row_target_ratio(struct bench_row *r, double max_ratio);
void row_target_value(struct bench_row *r, double max_value);
/* Free text in the target column (no pass/miss judgement). */
void row_target_text(struct bench_row *r, const char *text);
/* A row that could not be measured, with the reason. */
void row_skip(const char *scenario, const char *figure, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

void table_print_header(const struct bench *b);
void table_print(void);
int  table_write_json(const struct bench *b, const char *path);
void table_free(void);

/* ---- messages ------------------------------------------------------------- */

/* Reads the last len - 1 bytes of the file at path into buf, NUL-terminated:
 * the count, or -1 (buf empty) if it cannot be read. */
ssize_t file_tail(const char *path, char *buf, size_t len);
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void say_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "what: <strerror>: <detail>" into buf, for a wsync call that returned err. */
void wsync_error_text(char *buf, size_t len, const char *what, int err);

/* ---- child processes -------------------------------------------------------- */

typedef int (*child_fn)(void *arg);

/* Forks a child that runs fn(arg) and exits with its result. The child dies
 * with the bench. Returns the pid, or -1. */
pid_t child_spawn(child_fn fn, void *arg);
/* Tracks a process forked elsewhere (group: it leads its own process group,
 * which is killed with it). */
int   child_track(pid_t pid, bool group);
/* Reaps pid, waiting up to timeout_ms, then kills it. Returns its exit code,
 * or -1 if it was killed or died of a signal. */
int   child_reap(pid_t pid, int timeout_ms);
/* True if pid has exited (it is reaped; child_reap still reports it). */
bool  child_exited(pid_t pid);
/* Kills every child still running and reaps it. */
void  child_kill_all(void);
/* True when every process in pids sleeps (state S) in the kernel. */
bool  procs_sleeping(const pid_t *pids, int n);

/*
 * Polls *counter (shared memory) until it reaches want, sleeping a little
 * between looks. Returns 0, -ETIMEDOUT, or -ECHILD if one of pids exited
 * first.
 */
int   wait_counter(_Atomic int *counter, int want, int64_t timeout_ns,
                   const pid_t *pids, int n);
/* The same without sleeping: spins, yielding the CPU between looks. */
int   spin_counter(_Atomic int *counter, int want, int64_t timeout_ns,
                   const pid_t *pids, int n);

/* ---- the private broker, cleanup -------------------------------------------- */

int  broker_start(struct bench *b);
/* SIGTERM and wait; 0 if it exited with status 0. */
int  broker_stop(struct bench *b);
/* Stops the broker (a clean stop frees its slabs) and starts a fresh one
 * with --huge-pages huge_pages (NULL: the broker's default). */
int  broker_restart(struct bench *b, const char *huge_pages);
/* Broker CPU time (user + system) in ns so far, from /proc; -1 on failure. */
int64_t broker_cpu_ns(const struct bench *b);
/* Installs handlers so SIGINT/SIGTERM/SIGHUP stop children and the broker
 * and remove the temporary directory before the bench dies. */
void cleanup_install(struct bench *b);
/* Removes the temporary directory and any shared-memory object the broker
 * left behind; returns the number of leftover segments found. */
int  cleanup_files(struct bench *b);

/* ---- models and copies ------------------------------------------------------- */

/* n_tensors f32 tensors of bytes / n_tensors each ("layer<i>.weight").
 * bytes / n_tensors must be a multiple of 4. Returns a calloc'ed array. */
wsync_tensor_desc *model_layout(size_t bytes, size_t n_tensors);
int  model_open(wsync_client *c, const char *model, size_t bytes, size_t n_tensors,
                uint32_t slots, wsync_pub **out);
/* The same with opts.flags (WSYNC_PUB_UNGUARDED). */
int  model_open_flags(wsync_client *c, const char *model, size_t bytes, size_t n_tensors,
                      uint32_t slots, uint32_t flags, wsync_pub **out);
/* The same with any options (devices: the GPU rows). */
int  model_open_opts(wsync_client *c, const char *model, size_t bytes, size_t n_tensors,
                     const wsync_model_opts *opts, wsync_pub **out);

/* Copies each tensor of src (laid out contiguously, in slab order) to
 * dst + tensors[i].offset, with memcpy, on the calling thread. */
void copy_tensors(void *dst, const void *src, const wsync_tensor_desc *tensors,
                  size_t n);

/* A copy split across threads: the calling thread and threads - 1 helper
 * threads, kept for reuse. */
struct pcopy;
struct pcopy *pcopy_new(int threads);
void pcopy_free(struct pcopy *pc);

/* Plain contiguous memcpy split across the threads. */
void pcopy_flat(struct pcopy *pc, void *dst, const void *src, size_t bytes);

/* How publish_once copies: NULL or lib_threads 0 (and not lib_default), a
 * memcpy per tensor on the calling thread; else the library's
 * wsync_slab_copy_tensors with that many threads. */
struct copier {
	unsigned lib_threads;
	bool lib_default;           /* wsync_slab_copy_tensors with threads 0 (as
	                               many as pay, measured by the library) */
};

/* begin, copy the tensors from src (NULL: no copy), commit. Returns 0 or the
 * failing call's code; *err_what names it. */
int  publish_once(wsync_pub *p, const void *src, const struct copier *how,
                  uint64_t step, uint64_t *version, const char **err_what);

/* ---- scenarios ------------------------------------------------------------------ */

int bench_publish(struct bench *b);
int bench_acquire(struct bench *b);
int bench_wake(struct bench *b);
int bench_sustained(struct bench *b);
int bench_peers(struct bench *b);
int bench_shard(struct bench *b);
/* checksum: XXH3-64 of 256 MiB (WSYNC_PUB_CHECKSUM) against memcpy. */
int bench_checksum(struct bench *b);
/* e2e: 256 MiB to 4 collectors with default options, against the fastest
 * copy this machine can do (the best of 1..N threads of memcpy). */
int bench_e2e(struct bench *b);
int bench_gpu(struct bench *b);
int bench_hostile(struct bench *b);
/* python: the Python binding against the C library, same run
 * (tools/bench/python.c, tools/bench/python_bench.py). */
int bench_python(struct bench *b);
/* The Python scripts of the python and serving scenarios (python.c): name
 * found beside this binary's source tree or installed share/wsync (0, else
 * -1 with path the last place looked); run with --endpoint and --repeats
 * (and extra, one more argument, if not NULL) for at most limit_s seconds,
 * stdout into out; the number
 * after "key": in the script's JSON line for row. */
int bench_py_find(const char *name, char *path, size_t len);
int bench_py_run(struct bench *b, const char *script, const char *extra, int limit_s,
                 char *out, size_t len, char *why, size_t whylen);
int bench_py_value(const char *out, const char *row, const char *key, double *v,
                   char *why, size_t whylen);
/* serving: rollout workers acting while a trainer publishes, each way of
 * moving the weights (tools/bench/serving.c, serving_bench.py). */
int bench_serving(struct bench *b);
/* torchrl: update_policy_weights_() in TorchRL's loop, wsync's scheme against
 * TorchRL's SharedMem and MultiProcess schemes (tools/bench/torchrl.c,
 * tools/bench/torchrl_bench.py). */
int bench_torchrl(struct bench *b);
/* scale: publish, first publish, first acquire, end-to-end at 256 MiB, 1 GiB
 * and 2 GiB, on 4 KiB and on huge pages (tools/bench/scale.c). */
int bench_scale(struct bench *b);
/* Writes back the nr_hugepages that scale changed, if it did (signal-safe). */
void scale_restore_pages(void);

/* ---- fan-out: one publisher, N collector processes waiting (wake, peers) --- */

enum fan_mode {
	FAN_WSYNC,        /* commit -> wsync_sub_wait returns */
	FAN_RAW_FUTEX,    /* store + FUTEX_WAKE -> futex wait returns */
};

struct fan_cfg {
	enum fan_mode mode;
	const char *endpoint;
	const char *model;          /* a fresh name */
	size_t bytes, n_tensors;    /* model size; a source buffer is copied in */
	int collectors;
	uint32_t slots;             /* of the model, 0 = the default */
	int warmup, samples;        /* warm-up samples are not reported */
	int64_t pause_min_ns, pause_max_ns;   /* idle before each sample */
	bool hot;                   /* no pause, and the publisher never sleeps
	                               between samples: cores stay awake */
	int64_t spin_ns;            /* collectors: wsync_sub_set_spin, 0 = none */
	bool lib_copy;              /* copy with wsync_slab_copy_tensors, threads 0
	                               (the library's default), not a memcpy per
	                               tensor */
	uint32_t model_flags;       /* wsync_model_opts.flags of the model */
	/* called before each sample's pause, collectors armed and waiting */
	void (*between)(void *arg, int sample);
	void *between_arg;
	/* FAN_RAW_FUTEX: before each wake (collectors asleep) the publisher
	 * also begins, copies and commits a version of a model of its own
	 * that nobody waits on: the bare wake after what a commit's round
	 * trip to the broker leaves on the machine */
	bool raw_commit;
	/* CPU + 1 to pin the publisher (this process, while it runs) and the
	 * collectors to; 0 = not pinned */
	int pin_pub, pin_col;
};

struct fan_result {
	int samples, collectors;
	int64_t *t_begin;           /* [samples]: before wsync_pub_begin */
	int64_t *t_copy;            /* [samples]: begun, before the copy */
	int64_t *t_commit;          /* [samples]: before the commit / wake */
	int64_t *t_done;            /* [samples]: the commit call returned */
	int64_t *t_held;            /* [samples * collectors]: view held */
	int not_asleep;             /* samples where a collector was not yet
	                               asleep when the commit started */
	char error[400];            /* set when fan_run fails */
};

int  fan_run(const struct fan_cfg *cfg, struct fan_result *res);
void fan_result_free(struct fan_result *res);
/* Per sample: latency of the last collector (max) or of the median one,
 * measured from t_begin, t_copy or t_commit, in ns. out has res->samples
 * entries. */
enum fan_from { FAN_FROM_BEGIN, FAN_FROM_COPY, FAN_FROM_COMMIT };
void fan_latencies(const struct fan_result *res, enum fan_from from, bool last,
                   double *out);

#endif /* WSYNC_TOOLS_BENCH_COMMON_H */
