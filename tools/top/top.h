/*
 * tools/top/top.h — what the files of wsync-top share.
 *
 * wsync-top attaches like any client (wsync_connect maps the broker's
 * control segment read-only) and then reads that segment once per refresh:
 * a refresh costs the broker nothing. Rates come from two snapshots: the
 * commits counter and the slab size over the time between them. The
 * latest version's checksum is read through one subscription per model,
 * opened once (acquire/release only afterwards, no message).
 */
#ifndef WSYNC_TOOLS_TOP_H
#define WSYNC_TOOLS_TOP_H

#include <stdbool.h>
#include <stdint.h>

#include "tools/common/snap.h"

enum top_sort { SORT_LAG, SORT_PID, SORT_WAITS, SORT_TIMEOUTS, SORT_AGE, SORT_N };

struct top_opts {
	const char *endpoint;            /* NULL: $WSYNC_ENDPOINT, else default */
	bool batch, json;
	long iterations;                 /* -n; 0 = forever */
	double delay_s;                  /* -d */
};

/* One refresh: the snapshot and what was derived from the one before. */
struct top_view {
	bool attached;                   /* a broker is there */
	char why[512];                   /* when not: what happened */
	struct snap *snap;               /* valid when attached */
	bool have_rates;                 /* a previous snapshot of the same
	                                    generation existed */
	double rate_hz[WSYNC_MAX_MODELS];       /* by index in snap->models */
	double bandwidth[WSYNC_MAX_MODELS];     /* bytes per second */
	double broker_cpu_pct;           /* < 0 unknown */
	double interval_s;
};

struct top_state {
	struct top_opts o;
	wsync_client *c;
	wsync_sub *subs[WSYNC_MAX_MODELS];
	struct snap *prev;               /* the previous refresh's snapshot */
	int64_t prev_mono_ns;
	uint64_t prev_cpu_ticks;
	uint32_t prev_cpu_pid;
	struct top_view v;
};

/* top_sample.c: attaching, refreshing, figures. */
void top_state_init(struct top_state *t, const struct top_opts *o);
void top_state_free(struct top_state *t);
/* Takes a new snapshot (attaching or re-attaching as needed) into t->v. */
void top_refresh(struct top_state *t);
/* The sessions of the view in display order: indexes into snap->sessions,
 * only those that opened model_id (-1: all). Returns the count. */
uint32_t top_session_order(const struct top_view *v, enum top_sort sort, int model_id,
                           uint32_t *idx);
const char *top_sort_name(enum top_sort s);

/* top_format.c: -b and --json. */
void top_print_text(const struct top_view *v);
int  top_print_json(const struct top_view *v);

/* top_screen.c: the interactive screen. Returns the exit code. */
int  top_interactive(struct top_state *t);

#endif

/* top_format.c: the lines both the screen and batch mode print. */
#define TOP_LINE 512
void top_fmt_header(const struct top_view *v, char *l1, char *l2, size_t len);
extern const char top_models_title[];
void top_fmt_model(const struct top_view *v, uint32_t i, char *buf, size_t len);
/* A publisher group's progress: its ranks, which committed the version
 * being written and since when, how long the last one took from first to
 * last commit. False (nothing written) for a model of one publisher. */
extern const char top_groups_title[];
bool top_fmt_group(const struct top_view *v, uint32_t i, char *buf, size_t len);
/* Where a device model lives: its GPUs (short UUIDs) and whether it has a
 * host mirror. False (nothing written) for a host model. */
extern const char top_devices_title[];
bool top_fmt_devices(const struct top_view *v, uint32_t i, char *buf, size_t len);
extern const char top_sessions_title[];
void top_fmt_session(const struct top_view *v, const struct snap_session *e,
                     char *buf, size_t len);
