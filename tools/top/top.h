/*
 * tools/top/top.h — what the files of wsync-top share.
 *
 * wsync-top maps the broker's control segment without a session
 * (tools/common/seg.h) and copies it once per refresh: a refresh costs the
 * broker nothing, wsync-top never counts as a collector, and a broker that
 * is stopped, dead or gone is shown as such at the next refresh. Rates come
 * from two snapshots: the commits counter and the slab size over the time
 * between them; the broker's CPU from /proc/<pid>/stat.
 */
#ifndef WSYNC_TOOLS_TOP_H
#define WSYNC_TOOLS_TOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/common/report.h"
#include "tools/common/seg.h"
#include "tools/common/snap.h"

struct top_opts {
	const char *endpoint;            /* NULL: $WSYNC_ENDPOINT, else default */
	bool batch, json;
	long iterations;                 /* -n; 0 = forever */
	double delay_s;                  /* -d */
};

/* One refresh: the snapshot and what was derived from the one before. */
struct top_view {
	bool attached;                   /* a control segment is mapped */
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
	struct seg seg;
	struct snap *prev;               /* the previous refresh's snapshot */
	int64_t prev_mono_ns;
	bool prev_cpu_known;
	uint64_t prev_cpu_ticks;
	uint32_t prev_cpu_pid;
	struct top_view v;
};

/* ---- columns: the screen shows what fits, batch mode all of them ---------- */

enum top_mcol { MC_NAME, MC_VERSION, MC_STEP, MC_AGE, MC_RATE, MC_BW, MC_SLAB, MC_SLOTS,
                MC_COLL, MC_LAG, MC_BEHIND, MC_OVER, MC_PUB, MC_CHECKSUM, MC_N };
enum top_scol { SC_ID, SC_PID, SC_NAME, SC_ROLE, SC_MODELS, SC_VERSION, SC_SLOT, SC_LAG,
                SC_BEHIND, SC_BOUND, SC_HELD, SC_ACQ, SC_WAITS, SC_TIMEOUTS, SC_CONN, SC_N };

#define TOP_CELL 160
#define TOP_LINE 1024
#define TOP_COLS_MAX 16

struct top_col {
	const char *title;
	int width;                       /* at least; the name columns grow */
	int prio;                        /* 0 first: what a narrow screen keeps */
	bool left;                       /* left-aligned */
};
extern const struct top_col top_model_cols[MC_N];
extern const struct top_col top_session_cols[SC_N];

struct top_layout {
	int n;
	int which[TOP_COLS_MAX];         /* column ids, in display order */
	int width[TOP_COLS_MAX];
};

/* Picks the columns that fit in width (by priority, shown in column order);
 * column flex grows to flex_need when room is left. width <= 0: all
 * columns, flex at flex_need. */
void top_layout_make(const struct top_col *cols, int ncols, int width, int flex,
                     int flex_need, struct top_layout *out);
/* A row of cells laid out; mark (-1 none) puts a sort arrow on a title. */
void top_row_render(const struct top_layout *l, const struct top_col *cols,
                    char (*cells)[TOP_CELL], char *buf, size_t len);
void top_title_cells(const struct top_col *cols, int ncols, int mark, bool desc,
                     char (*cells)[TOP_CELL]);
/* Where column `col` starts and how wide it is in a rendered row. */
bool top_layout_span(const struct top_layout *l, int col, int *x, int *w);
void top_model_cells(const struct top_view *v, uint32_t i, char (*cells)[TOP_CELL]);
void top_session_cells(const struct top_view *v, const struct snap_session *e,
                       char (*cells)[TOP_CELL]);
/* The longest model / session name of the view, for the name column. */
int  top_name_need(const struct top_view *v, bool models);

/* ---- sample.c: attaching, refreshing, figures, order ---------------- */

void top_state_init(struct top_state *t, const struct top_opts *o);
void top_state_free(struct top_state *t);
/* Takes a new snapshot (attaching or re-attaching as needed) into t->v. */
void top_refresh(struct top_state *t);
/* The sessions of the view in display order: indexes into snap->sessions,
 * only those that opened model_id (-1: all), sorted by column `sort`
 * (enum top_scol), descending when desc. Returns the count. */
uint32_t top_session_order(const struct top_view *v, int sort, bool desc, int model_id,
                           uint32_t *idx);
/* Whether a session column can be sorted on. */
bool top_sortable(int col);

/* ---- format.c: lines both the screen and batch mode print ---------- */

void top_fmt_header(const struct top_view *v, char *l1, char *l2, size_t len);
/* A publisher group's progress: its ranks, which committed the version
 * being written and since when, how long the last one took from first to
 * last commit. False (nothing written) for a model of one publisher. */
extern const char top_groups_title[];
bool top_fmt_group(const struct top_view *v, uint32_t i, char *buf, size_t len);
/* Where a device model lives: its GPUs (short UUIDs) and whether it has a
 * host mirror. False (nothing written) for a host model. */
extern const char top_devices_title[];
bool top_fmt_devices(const struct top_view *v, uint32_t i, char *buf, size_t len);
/* The slot map of model i: one line per slot, who pins it and since when
 * (the sessions' mirrored pins). Returns the lines written (<= max). */
extern const char top_slots_title[];
int  top_fmt_slots(const struct top_view *v, uint32_t i, char (*lines)[TOP_LINE], int max);

void top_print_text(const struct top_view *v);
int  top_print_json(const struct top_view *v);

/* screen.c: the interactive screen. Returns the exit code. */
int  top_interactive(struct top_state *t);

#endif
