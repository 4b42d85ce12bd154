/*
 * tools/bench/acquire_base.h — the acquire loop against an earlier
 * release's own build (acquire_base.c).
 */
#ifndef WSYNC_TOOLS_BENCH_ACQUIRE_BASE_H
#define WSYNC_TOOLS_BENCH_ACQUIRE_BASE_H

#include <stddef.h>

struct bench;

/* main of 2026-11-25, before the memory guard for model moves */
#define ACQ_BASE_REF "caa0b9c"

struct acq_base {
	char ref[48];                   /* what was compared with */
	double base_ns, cur_ns;         /* median ns per pair, 1 thread */
};

/* Builds (once) and runs the 1-thread loop against the release and this
 * tree; 0, or -1 with why (the row is then skipped). */
int acq_against_base(struct bench *b, struct acq_base *res, char *why, size_t wlen);

#endif
