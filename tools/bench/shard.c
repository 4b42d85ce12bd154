/*
 * tools/bench/shard.c — the "shard" scenario: one 256 MiB version written by
 * a group of 4 publisher ranks (processes), 64 MiB each, against the same
 * bytes copied by 4 threads of memcpy (the reference: no broker at all), and
 * against what users do without groups: gather the shards into one process
 * (one memcpy of 256 MiB) and publish from there.
 *
 * A sample: the ranks meet at a counter in shared memory, rank 0 takes the
 * start time, every rank begins, copies its 64 MiB part with
 * wsync_slice_write (one memcpy) and commits; the last commit to return
 * takes the end time. wsync_pub_commit of a rank returns only once every
 * rank committed and the version is visible, so the figure is the time
 * until collectors can take the whole version.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

#define SH_RANKS  4
#define SH_ROWS   4096                  /* one f32 tensor [4096, sh_bytes / 16 KiB] */
#define SH_COLS   (sh_bytes / 4 / SH_ROWS)

/* 256 MiB, or 32 MiB with --quick (the smoke test runs it under ASan too) */
static size_t sh_bytes = 256 * MIB;

struct sh_shared {
	_Atomic int ready, go, done;
	_Atomic int64_t start_ns, end_ns;
	_Atomic int failed;
	char error[256];
};

struct sh_rank {
	struct bench *b;
	struct sh_shared *sh;
	int rank, samples;
};

static void sh_layout(wsync_tensor_desc *d)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->name, sizeof(d->name), "w");
	d->dtype = WSYNC_F32;
	d->ndim = 2;
	d->shape[0] = SH_ROWS;
	d->shape[1] = (uint64_t)SH_COLS;
}

static int sh_rank_main(void *arg)
{
	struct sh_rank *rk = arg;
	struct sh_shared *sh = rk->sh;
	uint64_t rows = SH_ROWS / SH_RANKS;
	wsync_shard part = { 0, 0, rk->rank * rows, (rk->rank + 1) * rows };
	wsync_model_opts o = { .group_size = SH_RANKS, .rank = (uint32_t)rk->rank };
	wsync_tensor_desc d;
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	void *src = warm_alloc(sh_bytes / SH_RANKS);
	int err;

	sh_layout(&d);
	if (!src)
		return 1;
	err = wsync_connect(rk->b->endpoint, "bench-rank", &c);
	if (!err)
		err = wsync_pub_open_shard(c, "shard-bench", &d, 1, &o, &part, 1, &p);
	if (err) {
		wsync_error_text(sh->error, sizeof(sh->error), "rank open", err);
		atomic_store(&sh->failed, 1);
		return 1;
	}
	atomic_fetch_add(&sh->ready, 1);
	for (int i = 1; i <= rk->samples; i++) {
		wsync_slab slab;
		wsync_slice s;

		while (atomic_load(&sh->go) < i && !atomic_load(&sh->failed))
			;
		if (atomic_load(&sh->failed))
			break;
		if (rk->rank == 0)
			atomic_store(&sh->start_ns, mono_ns());
		err = wsync_pub_begin(p, 10 * NS_PER_S, &slab);
		if (!err)
			err = wsync_slab_part(&slab, 0, &s);
		if (!err) {
			wsync_slice_write(slab.base, src, &s);
			err = wsync_pub_commit(p, (uint64_t)i, NULL);
		}
		if (err) {
			wsync_error_text(sh->error, sizeof(sh->error), "rank publish", err);
			atomic_store(&sh->failed, 1);
			break;
		}
		{
			int64_t now = mono_ns(), prev = atomic_load(&sh->end_ns);

			while (now > prev && !atomic_compare_exchange_weak(&sh->end_ns, &prev, now))
				;
		}
		atomic_fetch_add(&sh->done, 1);
	}
	/* stay until the parent has seen every rank's last sample: a rank that
	 * exits first would look to it like one that died */
	while (atomic_load(&sh->go) <= rk->samples && !atomic_load(&sh->failed))
		sleep_ns(100 * NS_PER_US);
	wsync_close(c);
	warm_free(src, sh_bytes / SH_RANKS);
	return atomic_load(&sh->failed);
}

struct sh_copy {
	void *dst;
	const void *src;
	size_t bytes;
};

static void *sh_copy_thread(void *arg)
{
	struct sh_copy *c = arg;

	memcpy(c->dst, c->src, c->bytes);
	return NULL;
}

/* The reference: 4 threads, each copying 64 MiB into its quarter. */
static double sh_memcpy4(void *dst, void *const *srcs)
{
	pthread_t th[SH_RANKS];
	struct sh_copy jobs[SH_RANKS];
	int64_t t0 = mono_ns();

	for (int r = 0; r < SH_RANKS; r++) {
		jobs[r] = (struct sh_copy){ (char *)dst + r * (sh_bytes / SH_RANKS), srcs[r],
		                            sh_bytes / SH_RANKS };
		pthread_create(&th[r], NULL, sh_copy_thread, &jobs[r]);
	}
	for (int r = 0; r < SH_RANKS; r++)
		pthread_join(th[r], NULL);
	return (double)(mono_ns() - t0) / NS_PER_MS;
}

int bench_shard(struct bench *b)
{
	int samples = b->repeats + 1, n = 0;   /* the first is a warm-up */
	struct sh_shared *sh = shared_alloc(sizeof(*sh));
	struct sh_rank ranks[SH_RANKS];
	pid_t pids[SH_RANKS];
	double *group = calloc((size_t)samples, sizeof(double));
	double *ref = calloc((size_t)samples, sizeof(double));
	double *gather = calloc((size_t)samples, sizeof(double));
	void *srcs[SH_RANKS] = { 0 }, *dst = NULL, *gbuf = NULL;
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	int err = -1;

	if (!sh || !group || !ref || !gather)
		goto out;
	sh_bytes = b->quick ? 32 * MIB : 256 * MIB;
	/* ranks first, while this process holds no client and no thread */
	for (int r = 0; r < SH_RANKS; r++) {
		ranks[r] = (struct sh_rank){ b, sh, r, samples };
		pids[r] = child_spawn(sh_rank_main, &ranks[r]);
	}
	if (wait_counter(&sh->ready, SH_RANKS, 60 * NS_PER_S, pids, SH_RANKS) ||
	    atomic_load(&sh->failed)) {
		row_skip("shard", "4 ranks x 64 MiB", "the ranks did not start: %s", sh->error);
		goto out_kill;
	}
	for (int i = 1; i <= samples; i++) {
		atomic_store(&sh->end_ns, 0);
		atomic_store(&sh->go, i);
		int rc = wait_counter(&sh->done, i * SH_RANKS, 60 * NS_PER_S, pids, SH_RANKS);

		if (rc || atomic_load(&sh->failed)) {
			row_skip("shard", "4 ranks x 64 MiB", "a rank failed: %s",
			         sh->error[0] ? sh->error : rc == -ECHILD ? "a rank exited"
			         : "no commit within 60 s");
			goto out_kill;
		}
		if (i > 1)
			group[n++] = (double)(atomic_load(&sh->end_ns) -
			                      atomic_load(&sh->start_ns)) / NS_PER_MS;
	}
	atomic_store(&sh->go, samples + 1);     /* the ranks may go */
	for (int r = 0; r < SH_RANKS; r++)
		child_reap(pids[r], 10000);

	/* the references, in this process once the ranks are gone */
	dst = warm_alloc(sh_bytes);
	gbuf = warm_alloc(sh_bytes);
	for (int r = 0; r < SH_RANKS; r++)
		srcs[r] = warm_alloc(sh_bytes / SH_RANKS);
	if (!dst || !gbuf || !srcs[SH_RANKS - 1])
		goto out;
	err = wsync_connect(b->endpoint, "bench-gather", &c);
	if (!err)
		err = model_open(c, "shard-gather", sh_bytes, 1, 0, &p);
	if (err) {
		char text[256];

		wsync_error_text(text, sizeof(text), "gather publisher", err);
		row_skip("shard", "gather then publish", "%s", text);
		goto out;
	}
	for (int i = 0; i <= n; i++) {
		int64_t t0;
		const char *what = NULL;

		ref[i < n ? i : 0] = sh_memcpy4(dst, srcs);
		t0 = mono_ns();
		for (int r = 0; r < SH_RANKS; r++)   /* the gather */
			memcpy((char *)gbuf + r * (sh_bytes / SH_RANKS), srcs[r], sh_bytes / SH_RANKS);
		err = publish_once(p, gbuf, NULL, (uint64_t)i + 1, NULL, &what);
		if (err)
			goto out;
		if (i > 0)                          /* the first is a warm-up */
			gather[i - 1] = (double)(mono_ns() - t0) / NS_PER_MS;
	}
	{
		double m4 = stat_median(ref, (size_t)n);
		struct bench_row *row;

		char what[128];

		snprintf(what, sizeof(what), "memcpy %zu MiB as 4 threads x %zu MiB (reference)",
		         sh_bytes / MIB, sh_bytes / MIB / SH_RANKS);
		row_add("shard", what, "ms", m4);
		snprintf(what, sizeof(what), "4 publisher ranks x %zu MiB: begin, copy, commit "
		         "until visible", sh_bytes / MIB / SH_RANKS);
		row = row_add("shard", what, "ms", stat_median(group, (size_t)n));
		row_ref(row, "memcpy, 4 threads", m4);
		if (!b->quick)   /* at 32 MiB the round trips of 4 processes dominate */
			row_target_ratio(row, 1.2);
		snprintf(what, sizeof(what), "gather into one process, then publish %zu MiB",
		         sh_bytes / MIB);
		row = row_add("shard", what, "ms", stat_median(gather, (size_t)n));
		row_ref(row, "memcpy, 4 threads", m4);
	}
	err = 0;
	goto out;

out_kill:
	atomic_store(&sh->failed, 1);
	for (int r = 0; r < SH_RANKS; r++)
		child_reap(pids[r], 10000);
	err = -1;
out:
	wsync_close(c);
	for (int r = 0; r < SH_RANKS; r++)
		if (srcs[r])
			warm_free(srcs[r], sh_bytes / SH_RANKS);
	if (dst)
		warm_free(dst, sh_bytes);
	if (gbuf)
		warm_free(gbuf, sh_bytes);
	free(group);
	free(ref);
	free(gather);
	if (sh)
		shared_free(sh, sizeof(*sh));
	return err;
}
