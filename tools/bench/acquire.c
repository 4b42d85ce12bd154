/*
 * tools/bench/acquire.c — scenario "acquire": wsync_sub_acquire followed by
 * wsync_sub_release of the latest version, in ns per pair, with 1, 4, 16
 * and 64 reader threads in one process and with 4 processes of 16 threads,
 * first while nothing is published, then while a publisher commits a small
 * model at about 100 Hz.
 *
 * Each reader thread counts its pairs and its own CPU time
 * (CLOCK_THREAD_CPUTIME_ID), so with more threads than cores the time a
 * thread spends preempted does not count; what remains is the cost of the
 * pair, including cache-line traffic between readers and the publisher.
 * The figure is the median thread, median over repeats.
 *
 * Reference: the bare hazard-pointer protocol (load latest, store a pin,
 * reload latest, clear the pin) in the same threads, without the library.
 * Threads share one client per process up to 32 threads (a client holds at
 * most WSYNC_MAX_VIEWS views at once, and gives home records to 31 of its
 * threads; the 32nd claims a record by compare-and-swap); 64 threads in
 * one process use two.
 *
 * The co-runner check: before and after its pairs each thread times a
 * block of independent adds, bound by how many instructions the core
 * issues per cycle. On a VM whose vCPU shares a physical core with another
 * guest's busy hyperthread (nothing inside the VM shows it: no load, no
 * steal), that block and an acquire+release (some 45 cycles of nearly
 * full issue) both take about twice as long for seconds at a time, while
 * the bare loop, bound by its xchg's latency, barely moves. A repeat whose
 * median thread took the block ACQ_ALU_SHARED times longer than the best
 * of the run is left out and run again (up to as many again): the figure
 * is the library's cost on a core of its own, and the bench says how many
 * repeats it left out.
 * One more row gives each of 4 threads a client of its own, to show what
 * sharing a client costs; another runs the 1-thread loop against the
 * 2026-11-25 build (or $WSYNC_BENCH_BASELINE), its own broker and library,
 * built once from git (acquire_base.c), and where that cannot be had holds
 * the figure against what that build took, kept as a multiple of the bare
 * loop (ACQ_PREV_RATIO).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acquire_base.h"
#include "bench_common.h"

#define ACQ_MAX_THREADS        64
#define ACQ_THREADS_PER_CLIENT 32
#define ACQ_MODEL_BYTES        (64 * 1024)
#define ACQ_BATCH              64      /* pairs between looks at the stop flag */
/* The 2026-11-25 build's acquire+release, 1 thread, nothing published, as a
 * multiple of the bare hazard loop: 4.5x (43-49 ns against 9.7-10.3 ns in
 * its quieter runs), both builds run alternately on an Intel Xeon @ 2.50GHz,
 * 2 vCPU. */
#define ACQ_PREV_RATIO         4.5
#define ACQ_PREV_RATIO_TEXT    "4.5 (2026-11-25)"
/* issue 35: acquire+release of the latest version, 1 thread, under 20 ns */
#define ACQ_TARGET_1_NS        20
#define ACQ_ALU_ROUNDS         1000    /* of 8 independent adds: one block */
#define ACQ_ALU_NS             (1 * NS_PER_MS)   /* CPU time of one check */
/* A block this much slower than the run's best: the core was shared. The
 * Xeon below reads 0.77-0.83 us alone and 1.45-1.55 us shared. */
#define ACQ_ALU_SHARED         1.15

enum acq_mode { ACQ_WSYNC, ACQ_BARE };

struct acq_pin {
	_Alignas(64) _Atomic uint64_t word;
};

struct acq_shared {
	_Atomic int ready;              /* reader processes ready to go */
	_Atomic int go, stop;
	_Atomic int failed;
	char error[320];
	_Alignas(64) _Atomic uint64_t latest;     /* bare mode's latest */
	struct acq_pin pins[ACQ_MAX_THREADS];     /* bare mode's hazards */
	double   ns_per_pair[ACQ_MAX_THREADS];
	double   alu_ns[ACQ_MAX_THREADS];           /* the co-runner check */
	uint64_t eagain[ACQ_MAX_THREADS];
	/* the publisher child */
	_Atomic int published, pub_stop;
	_Atomic uint64_t commits;
};

struct acq_proc {                   /* one reader process */
	struct bench *b;
	struct acq_shared *sh;
	enum acq_mode mode;
	const char *model;
	int first, threads;             /* its threads' indexes in sh */
	int per_client;                 /* threads sharing one client */
};

struct acq_thread {
	struct acq_proc *proc;
	wsync_sub *sub;
	int index;
	_Atomic int *warm;              /* threads of the process past warm-up */
};

static void acq_set_error(struct acq_shared *sh, const char *what, int err)
{
	int expected = 0;

	if (atomic_compare_exchange_strong(&sh->failed, &expected, err ? err : -1))
		wsync_error_text(sh->error, sizeof sh->error, what, err);
	atomic_store(&sh->stop, 1);
}

/* ---- the readers ------------------------------------------------------------ */

static uint64_t acq_bare_pair(struct acq_shared *sh, _Atomic uint64_t *pin)
{
	uint64_t l = atomic_load_explicit(&sh->latest, memory_order_acquire), l2;

	for (;;) {
		atomic_store(pin, l);
		l2 = atomic_load(&sh->latest);
		if (l2 == l)
			break;
		l = l2;
	}
	atomic_store_explicit(pin, 0, memory_order_release);
	return l;
}

/* One block of the co-runner check: eight chains of adds, kept in
 * registers and apart by the empty asm, so nothing but the core's issue
 * width bounds it. */
static void acq_alu_block(void)
{
	uint64_t a = 1, b = 2, c = 3, d = 4, e = 5, f = 6, g = 7, h = 8;

	for (int i = 0; i < ACQ_ALU_ROUNDS; i++) {
		a++, b++, c++, d++, e++, f++, g++, h++;
		__asm__ volatile("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f),
		                 "+r"(g), "+r"(h));
	}
	__asm__ volatile("" : : "r"(a + b + c + d + e + f + g + h));
}

/* ns of this thread's CPU time per block, over ACQ_ALU_NS */
static double acq_alu_ns(void)
{
	int64_t t0 = thread_cpu_ns(), t;
	uint64_t n = 0;

	do {
		for (int k = 0; k < 16; k++)
			acq_alu_block();
		n += 16;
	} while ((t = thread_cpu_ns()) - t0 < ACQ_ALU_NS);
	return (double)(t - t0) / (double)n;
}

/* One batch of pairs; returns the number done, or -1 after an error. */
static int acq_batch(struct acq_thread *t, uint64_t *sink)
{
	struct acq_shared *sh = t->proc->sh;
	wsync_view v;

	if (t->proc->mode == ACQ_BARE) {
		for (int k = 0; k < ACQ_BATCH; k++)
			*sink += acq_bare_pair(sh, &sh->pins[t->index].word);
		return ACQ_BATCH;
	}
	for (int k = 0; k < ACQ_BATCH; k++) {
		int err = wsync_sub_acquire(t->sub, &v);

		if (err == -EAGAIN) {       /* every view of the client held */
			sh->eagain[t->index]++;
			sched_yield();
			return k;
		}
		if (err) {
			acq_set_error(sh, "wsync_sub_acquire", err);
			return -1;
		}
		*sink += v.version;
		wsync_sub_release(t->sub, &v);
	}
	return ACQ_BATCH;
}

static void *acq_reader(void *argp)
{
	struct acq_thread *t = argp;
	struct acq_shared *sh = t->proc->sh;
	uint64_t sink = 0, pairs = 0;
	int64_t cpu0, cpu1;
	double alu0, alu1;
	int n;

	n = acq_batch(t, &sink);                 /* warm: slab mapped */
	atomic_fetch_add(t->warm, 1);
	if (n < 0)
		return NULL;
	while (!atomic_load(&sh->go) && !atomic_load(&sh->stop))
		sleep_ns(100 * NS_PER_US);
	alu0 = acq_alu_ns();
	cpu0 = thread_cpu_ns();
	while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
		if ((n = acq_batch(t, &sink)) < 0)
			return NULL;
		pairs += (uint64_t)n;
	}
	cpu1 = thread_cpu_ns();
	alu1 = acq_alu_ns();
	if (pairs) {
		sh->ns_per_pair[t->index] = (double)(cpu1 - cpu0) / (double)pairs;
		sh->alu_ns[t->index] = alu0 > alu1 ? alu0 : alu1;
	}
	return sink == 1 ? t : NULL;            /* keeps sink alive */
}

/* Clients and subscriptions of one reader process: one per 32 threads. */
static int acq_open_subs(struct acq_proc *pr, wsync_client **clients, wsync_sub **subs,
                         int n)
{
	for (int i = 0; i < n; i++) {
		int err = wsync_connect(pr->b->endpoint, "bench-acquire", &clients[i]);

		if (err) {
			acq_set_error(pr->sh, "wsync_connect", err);
			return -1;
		}
		err = wsync_sub_open(clients[i], pr->model, &subs[i]);
		if (err) {
			acq_set_error(pr->sh, "wsync_sub_open", err);
			return -1;
		}
	}
	return 0;
}

static int acq_proc_main(void *arg)
{
	struct acq_proc *pr = arg;
	wsync_client *clients[ACQ_MAX_THREADS] = { 0 };
	wsync_sub *subs[ACQ_MAX_THREADS] = { 0 };
	int n_clients = (pr->threads + pr->per_client - 1) / pr->per_client;
	struct acq_thread th[ACQ_MAX_THREADS];
	pthread_t tids[ACQ_MAX_THREADS];
	_Atomic int warm = 0;
	int started = 0, rc = 1;

	if (pr->mode == ACQ_WSYNC && acq_open_subs(pr, clients, subs, n_clients))
		goto out;
	for (int i = 0; i < pr->threads; i++) {
		th[i] = (struct acq_thread){ pr, subs[i / pr->per_client],
		                             pr->first + i, &warm };
		if (pthread_create(&tids[i], NULL, acq_reader, &th[i])) {
			acq_set_error(pr->sh, "pthread_create", -errno);
			break;
		}
		started++;
	}
	while (atomic_load(&warm) < started)
		sleep_ns(100 * NS_PER_US);
	if (started == pr->threads)
		atomic_fetch_add(&pr->sh->ready, 1);
	for (int i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	rc = atomic_load(&pr->sh->failed) ? 1 : 0;
out:
	for (int i = 0; i < n_clients; i++) {
		wsync_sub_close(subs[i]);
		wsync_close(clients[i]);
	}
	return rc;
}

/* ---- the publisher child ---------------------------------------------------- */

struct acq_pub {
	struct bench *b;
	struct acq_shared *sh;
	const char *model;
	int hz;                          /* 0: publish once, then idle */
};

static int acq_pub_main(void *arg)
{
	struct acq_pub *ap = arg;
	const char *what = "wsync_connect";
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	uint64_t step = 0;
	int64_t next;
	int err;

	err = wsync_connect(ap->b->endpoint, "bench-acquire-pub", &c);
	if (err)
		goto fail;
	what = "wsync_pub_open";
	err = model_open(c, ap->model, ACQ_MODEL_BYTES, 4, 0, &p);
	if (err)
		goto fail;
	err = publish_once(p, NULL, NULL, ++step, NULL, &what);
	if (err)
		goto fail;
	atomic_store(&ap->sh->published, 1);
	next = mono_ns();
	while (!atomic_load(&ap->sh->pub_stop)) {
		if (!ap->hz) {
			sleep_ns(10 * NS_PER_MS);
			continue;
		}
		next += NS_PER_S / ap->hz;
		sleep_ns(next - mono_ns());
		if ((err = publish_once(p, NULL, NULL, ++step, NULL, &what))) {
			acq_set_error(ap->sh, what, err);
			break;
		}
		atomic_fetch_add(&ap->sh->commits, 1);
	}
	goto out;
fail:
	acq_set_error(ap->sh, what, err);
out:
	wsync_pub_close(p);
	wsync_close(c);
	return err ? 1 : 0;
}

/* ---- the parent ---------------------------------------------------------------- */

struct acq_run {
	struct bench *b;
	struct acq_shared *sh;
	int64_t duration_ns;
	double alu_best;                /* the co-runner check's best block, ns */
	int repeats, left_out;          /* repeats run, and left out as shared */
	char error[400];
};

static int acq_error(struct acq_run *r, const char *what)
{
	if (atomic_load(&r->sh->failed))
		snprintf(r->error, sizeof r->error, "%s", r->sh->error);
	else
		snprintf(r->error, sizeof r->error, "%s", what);
	return -1;
}

static void acq_reset(struct acq_shared *sh)
{
	atomic_store(&sh->ready, 0);
	atomic_store(&sh->go, 0);
	atomic_store(&sh->stop, 0);
	memset(sh->ns_per_pair, 0, sizeof sh->ns_per_pair);
	memset(sh->alu_ns, 0, sizeof sh->alu_ns);
	memset(sh->eagain, 0, sizeof sh->eagain);
}

/* How readers are spread: processes, threads per process, threads per
 * client. */
struct acq_shape {
	int procs, threads, per_client;
};

/* One measurement. Returns the median thread's ns per pair, or -1, and
 * the median thread's co-runner check in *alu. */
static double acq_measure(struct acq_run *r, enum acq_mode mode, const char *model,
                          struct acq_shape shape, double *alu)
{
	int procs = shape.procs, threads = shape.threads;
	struct acq_proc pr[ACQ_MAX_THREADS];
	pid_t pids[ACQ_MAX_THREADS];
	double ns[ACQ_MAX_THREADS], checks[ACQ_MAX_THREADS];
	int n = procs * threads, spawned = 0, bad = 0, got = 0;
	unsigned long long eagain = 0;

	acq_reset(r->sh);
	for (int i = 0; i < procs; i++) {
		pr[i] = (struct acq_proc){ r->b, r->sh, mode, model, i * threads, threads,
		                           shape.per_client };
		if ((pids[i] = child_spawn(acq_proc_main, &pr[i])) < 0)
			break;
		spawned++;
	}
	if (spawned == procs &&
	    !wait_counter(&r->sh->ready, procs, 30 * NS_PER_S, pids, procs)) {
		atomic_store(&r->sh->go, 1);
		sleep_ns(r->duration_ns);
	}
	atomic_store(&r->sh->stop, 1);
	for (int i = 0; i < spawned; i++)
		bad |= child_reap(pids[i], 10000) != 0;
	if (bad || spawned < procs)
		return acq_error(r, "a reader process failed");
	for (int i = 0; i < n; i++) {
		if (r->sh->ns_per_pair[i] > 0) {
			checks[got] = r->sh->alu_ns[i];
			ns[got++] = r->sh->ns_per_pair[i];
		}
		eagain += r->sh->eagain[i];
	}
	if (eagain)
		say("acquire: %d x %d threads: %llu acquires found every view of their "
		    "client held (-EAGAIN) and were retried", procs, threads, eagain);
	if (!got)
		return acq_error(r, "no reader thread completed a pair");
	*alu = stat_median(checks, (size_t)got);
	return stat_median(ns, (size_t)got);
}

/* The median of R repeats the co-runner check passed, running up to 3R
 * more where it failed; of all of them where none passed (and the bench
 * says so). *shared: the median of those left out, 0 if none were or
 * all were (the figure is theirs then). The bare
 * loop, bound by latency, is not run again: a shared core moves it by a
 * few percent. */
static double acq_median_of_repeats(struct acq_run *r, enum acq_mode mode,
                                    const char *model, struct acq_shape shape,
                                    const char *what, double *shared)
{
	double v[256], alu[256], kept[256], out[256];
	int R = r->b->repeats < 64 ? r->b->repeats : 64, n = 0, k, o;

	do {
		if ((v[n] = acq_measure(r, mode, model, shape, &alu[n])) < 0)
			return -1;
		if (r->alu_best == 0 || alu[n] < r->alu_best)
			r->alu_best = alu[n];
		n++;
		k = o = 0;
		for (int i = 0; i < n; i++) {
			if (alu[i] <= ACQ_ALU_SHARED * r->alu_best)
				kept[k++] = v[i];
			else
				out[o++] = v[i];
		}
	} while (k < R && n < (mode == ACQ_BARE ? R : 4 * R));
	r->repeats += n;
	r->left_out += o;
	if (shared)
		*shared = o && k ? stat_median(out, (size_t)o) : 0;
	if (k)
		return stat_median(kept, (size_t)k);
	if (mode == ACQ_WSYNC)
		say("acquire: %s: the core was shared in all %d repeats; the figure is a "
		    "shared core's", what, n);
	return stat_median(v, (size_t)n);
}

static pid_t acq_pub_start(struct acq_run *r, struct acq_pub *ap, const char *model,
                           int hz)
{
	pid_t pid;

	*ap = (struct acq_pub){ r->b, r->sh, model, hz };
	atomic_store(&r->sh->published, 0);
	atomic_store(&r->sh->pub_stop, 0);
	atomic_store(&r->sh->commits, 0);
	if ((pid = child_spawn(acq_pub_main, ap)) < 0)
		return -1;
	if (wait_counter(&r->sh->published, 1, 30 * NS_PER_S, &pid, 1)) {
		child_reap(pid, 1000);
		acq_error(r, "the publisher did not publish");
		return -1;
	}
	return pid;
}

static const int acq_threads[] = { 1, 4, 16, 64 };
#define ACQ_N_THREADS (sizeof acq_threads / sizeof acq_threads[0])

struct acq_config {
	struct acq_shape shape;
	size_t bare;                    /* index of its bare reference */
	bool idle_only;
	const char *label;              /* "%d threads" form when NULL */
};

static const struct acq_config acq_configs[] = {
	{ { 1, 1, ACQ_THREADS_PER_CLIENT }, 0, false, NULL },
	{ { 1, 4, ACQ_THREADS_PER_CLIENT }, 1, false, NULL },
	{ { 1, 16, ACQ_THREADS_PER_CLIENT }, 2, false, NULL },
	{ { 1, 64, ACQ_THREADS_PER_CLIENT }, 3, false, NULL },
	{ { 4, 16, ACQ_THREADS_PER_CLIENT }, 3, false, "4 procs x 16 threads" },
	{ { 1, 4, 1 }, 1, true, "4 threads, a client each" },
};

/* The previous release's own build running the same loop (acquire_base.c);
 * where it cannot be had, its figure kept as a multiple of the bare loop,
 * and why. A regression shows as a ratio above 1. */
static void acq_base_row(struct bench *b, double v, double bare)
{
	struct acq_base base;
	struct bench_row *row;
	char fig[160], ref[96], why[400];

	if (acq_against_base(b, &base, why, sizeof why) == 0) {
		snprintf(fig, sizeof fig, "acquire+release, 1 thread, nothing published, same loop, "
		         "%.12s's own build", base.ref);
		snprintf(ref, sizeof ref, "%.40s%s", base.ref,
		         strcmp(base.ref, ACQ_BASE_REF) ? "" : " (2026-11-25)");
		row = row_add("acquire", fig, "ns", base.cur_ns);
		row_ref(row, ref, base.base_ns);
		row_target_ratio(row, 1.0);
		return;
	}
	say("acquire: no run against %s: %s; its figure is estimated", base.ref, why);
	row = row_add("acquire", "acquire+release, 1 thread, nothing published, "
	              "against the 2026-11-25 build (estimated)", "ns", v);
	row_ref(row, "bare loop x " ACQ_PREV_RATIO_TEXT, bare * ACQ_PREV_RATIO);
	row_target_ratio(row, 1.0);
}

static int acq_series(struct acq_run *r, const char *model, int hz, const double *bare)
{
	struct acq_pub ap;
	struct bench_row *row;
	char fig[160], who[48];
	double shared;
	const char *when = hz ? "publisher at 100 Hz" : "nothing published";
	pid_t pub = acq_pub_start(r, &ap, model, hz);
	double v;
	int rc = 0;

	if (pub < 0)
		return -1;
	for (size_t i = 0; i < sizeof acq_configs / sizeof acq_configs[0]; i++) {
		const struct acq_config *cf = &acq_configs[i];

		if (cf->idle_only && hz)
			continue;
		if (cf->label)
			snprintf(who, sizeof who, "%s", cf->label);
		else
			snprintf(who, sizeof who, "%d thread%s", cf->shape.threads,
			         cf->shape.threads > 1 ? "s" : "");
		snprintf(fig, sizeof fig, "acquire+release, %s, %s", who, when);
		if ((v = acq_median_of_repeats(r, ACQ_WSYNC, model, cf->shape, fig,
		                               &shared)) < 0) {
			rc = -1;
			break;
		}
		row = row_add("acquire", fig, "ns", v);
		row_ref(row, "bare hazard loop", bare[cf->bare]);
		row_target_value(row, 100);
		if (i == 0 && !hz) {
			row_target_value(row, ACQ_TARGET_1_NS);
			acq_base_row(r->b, v, bare[cf->bare]);
			if (shared > 0) {
				char sfig[sizeof fig + 64];

				snprintf(sfig, sizeof sfig, "%s, sibling hyperthread busy "
				         "(left out above)", fig);
				row = row_add("acquire", sfig, "ns", shared);
				row_ref(row, "bare hazard loop", bare[cf->bare]);
			}
		}
	}
	atomic_store(&r->sh->pub_stop, 1);
	if (child_reap(pub, 10000) != 0 && !rc)
		rc = acq_error(r, "the publisher failed");
	return rc;
}

int bench_acquire(struct bench *b)
{
	struct acq_run r = { .b = b, .duration_ns = (b->quick ? 80 : 200) * NS_PER_MS };
	double bare[ACQ_N_THREADS];
	int rc = -1;

	r.sh = shared_alloc(sizeof *r.sh);
	if (!r.sh) {
		snprintf(r.error, sizeof r.error, "out of memory");
		goto out;
	}
	atomic_store(&r.sh->latest, 1u << 8);
	for (size_t i = 0; i < ACQ_N_THREADS; i++) {
		struct acq_shape shape = { 1, acq_threads[i], ACQ_THREADS_PER_CLIENT };

		if ((bare[i] = acq_median_of_repeats(&r, ACQ_BARE, "", shape, "bare hazard loop",
		                                     NULL)) < 0)
			goto out;
	}
	if (acq_series(&r, "acq-idle", 0, bare) || acq_series(&r, "acq-busy", 100, bare))
		goto out;
	if (r.left_out)
		say("acquire: %d of %d repeats ran on a core whose other hyperthread was busy "
		    "(a block of independent adds took over %.2fx its best; nothing in this "
		    "VM need show the co-runner) and were left out", r.left_out, r.repeats,
		    ACQ_ALU_SHARED);
	row_add("acquire", "co-runner check: 8000 independent adds, best block of the run",
	        "us", r.alu_best / 1000);
	rc = 0;
out:
	if (rc) {
		say_error("acquire: %s", r.error);
		row_skip("acquire", "acquire+release", "failed: %s", r.error);
	}
	shared_free(r.sh, sizeof *r.sh);
	return rc;
}
