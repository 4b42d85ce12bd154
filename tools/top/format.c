/*
 * tools/top/format.c — wsync-top's columns, lines and JSON documents: one
 * format for the screen and for batch mode, so both show the same figures.
 *
 * Columns have a priority: a screen shows the most important ones that fit
 * (an 80-column terminal keeps the model's version, rate, pinned slots, collectors
 * and lag, the session's pid, name, version and lag), in their fixed order,
 * and the name column takes what room is left, up to the longest name.
 * Batch mode shows every column and whole names.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "shm/cuda_discover.h"
#include "shm/proto.h"
#include "top.h"

const struct top_col top_model_cols[MC_N] = {
	[MC_NAME]     = { "MODEL",    12,  0, true },
	[MC_VERSION]  = { "VERSION",   8,  1, false },
	[MC_STEP]     = { "STEP",      8,  8, false },
	[MC_AGE]      = { "AGE",       7,  7, false },
	[MC_RATE]     = { "RATE",      6,  2, false },
	[MC_BW]       = { "BW",       11,  9, false },
	[MC_SLAB]     = { "SLAB",     10, 10, false },
	[MC_SLOTS]    = { "PINNED",    6,  3, false },
	[MC_COLL]     = { "COLL",      4,  4, false },
	[MC_LAG]      = { "LAG",       6,  5, false },
	[MC_BEHIND]   = { "BEHIND",    7,  6, false },
	[MC_OVER]     = { "OVER",      5, 12, false },
	[MC_PUB]      = { "PUB",       7, 11, false },
	[MC_CHECKSUM] = { "CHECKSUM", 16, 13, true },
};

/* BOUND comes after what an 80-column screen always kept: it shows there
 * when the names leave room (OVER likewise), and on any wider screen. */
const struct top_col top_session_cols[SC_N] = {
	[SC_ID]       = { "ID",        5, 14, false },
	[SC_PID]      = { "PID",       7,  0, false },
	[SC_NAME]     = { "NAME",     12,  1, true },
	[SC_ROLE]     = { "ROLE",      7,  2, true },
	[SC_MODELS]   = { "MODELS",   10,  9, true },
	[SC_VERSION]  = { "VERSION",   9,  3, false },
	[SC_SLOT]     = { "SLOT",      4,  7, false },
	[SC_LAG]      = { "LAG",       6,  4, false },
	[SC_BEHIND]   = { "BEHIND",    7,  5, false },
	[SC_BOUND]    = { "BOUND",     9,  8, false },
	[SC_HELD]     = { "HELD",      7,  6, false },
	[SC_ACQ]      = { "ACQUIRES", 10, 13, false },
	[SC_WAITS]    = { "WAITS",     8, 10, false },
	[SC_TIMEOUTS] = { "TIMEOUTS",  8, 11, false },
	[SC_CONN]     = { "CONN",      8, 12, false },
};

/* The name column first gets what its longest name needs, up to this, when
 * the screen has room; columns of lower priority get what is left. */
#define FLEX_CAP 24

void top_layout_make(const struct top_col *cols, int ncols, int width, int flex,
                     int flex_need, struct top_layout *out)
{
	bool on[TOP_COLS_MAX] = { false };
	int w_of[TOP_COLS_MAX] = { 0 };
	int used = 0;

	for (int c = 0; c < ncols; c++)
		w_of[c] = cols[c].width;
	out->n = 0;
	if (width <= 0) {
		for (int c = 0; c < ncols; c++)
			on[c] = true;
		if (flex >= 0 && flex_need > w_of[flex])
			w_of[flex] = flex_need;
	} else {
		for (int p = 0; p < ncols; p++)
			for (int c = 0; c < ncols; c++) {
				int w, want = cols[c].width;

				if (cols[c].prio != p)
					continue;
				if (c == flex && flex_need > want)
					want = flex_need < FLEX_CAP ? flex_need : FLEX_CAP;
				w = want + (used ? 1 : 0);
				if (used + w > width) {
					w = cols[c].width + (used ? 1 : 0);
					want = cols[c].width;
				}
				if (used + w <= width) {
					on[c] = true;
					w_of[c] = want;
					used += w;
				}
			}
		/* what is left widens the name, up to its longest */
		if (flex >= 0 && on[flex] && flex_need > w_of[flex]) {
			int grow = flex_need - w_of[flex];

			w_of[flex] += grow < width - used ? grow : width - used;
		}
	}
	for (int c = 0; c < ncols; c++) {
		if (!on[c])
			continue;
		out->which[out->n] = c;
		out->width[out->n] = w_of[c];
		out->n++;
	}
}

bool top_layout_span(const struct top_layout *l, int col, int *x, int *w)
{
	int at = 0;

	for (int i = 0; i < l->n; i++) {
		if (l->which[i] == col) {
			*x = at;
			*w = l->width[i];
			return true;
		}
		at += l->width[i] + 1;
	}
	return false;
}

void top_row_render(const struct top_layout *l, const struct top_col *cols,
                    char (*cells)[TOP_CELL], char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = 0;
	for (int i = 0; i < l->n && at < len; i++) {
		int c = l->which[i], w = l->width[i];
		const char *cell = cells[c];
		int n = (int)strlen(cell);
		int r;

		/* a cell wider than its column is cut; '+' says so for names */
		if (n > w) {
			r = snprintf(buf + at, len - at, "%s%.*s%s", i ? " " : "", w > 1 ? w - 1 : w,
			             cell, w > 1 ? "+" : "");
		} else {
			r = snprintf(buf + at, len - at, cols[c].left ? "%s%-*s" : "%s%*s",
			             i ? " " : "", w, cell);
		}
		if (r < 0)
			break;
		at += (size_t)r;
	}
	/* no trailing blanks */
	while (at > 0 && at < len && buf[at - 1] == ' ')
		buf[--at] = 0;
}

void top_title_cells(const struct top_col *cols, int ncols, int mark, bool desc,
                     char (*cells)[TOP_CELL])
{
	for (int c = 0; c < ncols; c++)
		snprintf(cells[c], TOP_CELL, "%s%s", cols[c].title,
		         c == mark ? (desc ? " v" : " ^") : "");
}

int top_name_need(const struct top_view *v, bool models)
{
	const struct snap *s = v->snap;
	int w = 0;

	if (!s)
		return 0;
	for (uint32_t i = 0; i < (models ? s->n_models : s->n_sessions); i++) {
		int n = (int)strlen(models ? s->models[i].name : s->sessions[i].name);

		if (n > w)
			w = n;
	}
	return w;
}

static const char *fmt_rate(char *buf, size_t len, const struct top_view *v, double x,
                            bool bytes)
{
	if (!v->have_rates) {
		snprintf(buf, len, "-");
	} else if (bytes) {
		fmt_bytes(buf, len, (uint64_t)x);
		strncat(buf, "/s", len - strlen(buf) - 1);
	} else {
		snprintf(buf, len, "%.1f", x);
	}
	return buf;
}

void top_model_cells(const struct top_view *v, uint32_t i, char (*c)[TOP_CELL])
{
	const struct snap_model *m = &v->snap->models[i];

	snprintf(c[MC_NAME], TOP_CELL, "%s", m->name);
	snprintf(c[MC_VERSION], TOP_CELL, "%" PRIu64, m->version);
	snprintf(c[MC_STEP], TOP_CELL, "%" PRIu64, m->step);
	if (m->version)
		fmt_age(c[MC_AGE], TOP_CELL, v->snap->now_ns - m->commit_ns);
	else
		snprintf(c[MC_AGE], TOP_CELL, "-");
	fmt_rate(c[MC_RATE], TOP_CELL, v, v->rate_hz[i], false);
	fmt_rate(c[MC_BW], TOP_CELL, v, v->bandwidth[i], true);
	fmt_bytes(c[MC_SLAB], TOP_CELL, m->bytes);
	snprintf(c[MC_SLOTS], TOP_CELL, "%" PRIu32 "/%" PRIu32, m->slots_pinned, m->n_slots);
	snprintf(c[MC_COLL], TOP_CELL, "%" PRIu32, m->collectors);
	{
		struct snap_session worst = { .lag_known = m->worst_known, .lag = m->worst_lag,
		                              .lag_ms = m->worst_lag_ms,
		                              .lag_estimated = m->worst_estimated };

		fmt_lag(c[MC_LAG], TOP_CELL, &worst);
		fmt_lag_ms(c[MC_BEHIND], TOP_CELL, &worst);
	}
	/* collectors past the staleness bound they declared, of those that
	 * declared one */
	if (m->bounded)
		snprintf(c[MC_OVER], TOP_CELL, "%s%" PRIu32 "/%" PRIu32, m->over_bound ? "!" : "",
		         m->over_bound, m->bounded);
	else
		snprintf(c[MC_OVER], TOP_CELL, "-");
	snprintf(c[MC_PUB], TOP_CELL, m->publisher_pid ? "%" PRIu32 : "-", m->publisher_pid);
	fmt_checksum(c[MC_CHECKSUM], TOP_CELL, m);
}

void top_session_cells(const struct top_view *v, const struct snap_session *e,
                       char (*c)[TOP_CELL])
{
	const struct snap *s = v->snap;

	snprintf(c[SC_ID], TOP_CELL, "%" PRIu32, e->id);
	snprintf(c[SC_PID], TOP_CELL, "%" PRIu32, e->pid);
	snprintf(c[SC_NAME], TOP_CELL, "%s", e->name);
	snprintf(c[SC_ROLE], TOP_CELL, "%s", snap_roles_name(e->roles));
	fmt_session_models(c[SC_MODELS], TOP_CELL, s, e);
	if (e->view_version)
		snprintf(c[SC_VERSION], TOP_CELL, "%" PRIu64 "%s", e->view_version,
		         e->held ? "*" : "");
	else
		snprintf(c[SC_VERSION], TOP_CELL, "-");
	snprintf(c[SC_SLOT], TOP_CELL, e->slot >= 0 ? "%d" : "-", e->slot);
	fmt_lag(c[SC_LAG], TOP_CELL, e);
	fmt_lag_ms(c[SC_BEHIND], TOP_CELL, e);
	fmt_bound(c[SC_BOUND], TOP_CELL, e, true);
	if (e->held)
		fmt_age(c[SC_HELD], TOP_CELL, (int64_t)(e->view_ms * 1e6));
	else
		snprintf(c[SC_HELD], TOP_CELL, "-");
	snprintf(c[SC_ACQ], TOP_CELL, "%" PRIu32, e->acquires);
	snprintf(c[SC_WAITS], TOP_CELL, "%" PRIu32, e->waits);
	snprintf(c[SC_TIMEOUTS], TOP_CELL, "%" PRIu32, e->timeouts);
	fmt_age(c[SC_CONN], TOP_CELL, s->now_ns - e->connected_ns);
}

void top_fmt_header(const struct top_view *v, char *l1, char *l2, size_t len)
{
	const struct snap *s = v->snap;
	char up[32], used[32], lim[32], cpu[32], iv[32];

	if (!v->attached) {
		snprintf(l1, len, "wsync-top: %s; retrying every interval", v->why);
		l2[0] = 0;
		return;
	}
	if (v->broker_cpu_pct >= 0)
		snprintf(cpu, sizeof(cpu), "%.1f%%", v->broker_cpu_pct);
	else
		snprintf(cpu, sizeof(cpu), "-");
	snprintf(l1, len, "wsync-top - %s  pid %" PRIu32 "  gen %" PRIu64
	         "  %s  up %s  cpu %s", s->instance, s->broker_pid, s->generation,
	         s->health.state == HEALTH_OK ? "running" : health_reason(s->health.state),
	         fmt_age(up, sizeof(up), s->uptime_ns), cpu);
	snprintf(l2, len, "shm %s / %s   models %" PRIu32 "   sessions %" PRIu32
	         "   interval %s%s%s", fmt_bytes(used, sizeof(used), s->shm_used),
	         fmt_bytes(lim, sizeof(lim), s->shm_limit), s->n_models, s->n_sessions,
	         v->have_rates ? fmt_age(iv, sizeof(iv), (int64_t)(v->interval_s * 1e9)) : "-",
	         s->health.state == HEALTH_OK ? "" : "   ",
	         s->health.state == HEALTH_OK ? "" : s->health.text);
}

const char top_groups_title[] =
	"GROUP                    RANKS (#: committed the version being written)";

/* "0-2,5": the ranks below n whose bit in mask is want; "none" if none. */
static const char *fmt_ranks(char *buf, size_t len, uint32_t mask, uint32_t n, bool want)
{
	size_t o = 0;

	buf[0] = 0;
	for (uint32_t r = 0, e; r < n && o < len; r = e + 1) {
		if (!!(mask & (UINT32_C(1) << r)) != want) {
			e = r;
			continue;
		}
		for (e = r; e + 1 < n && !!(mask & (UINT32_C(1) << (e + 1))) == want; e++)
			;
		o += (size_t)snprintf(buf + o, len - o, e > r ? "%s%" PRIu32 "-%" PRIu32 :
		                      "%s%" PRIu32, o ? "," : "", r, e);
	}
	if (!buf[0])
		snprintf(buf, len, "none");
	return buf;
}

bool top_fmt_group(const struct top_view *v, uint32_t i, char *buf, size_t len)
{
	const struct snap_model *m = &v->snap->models[i];
	uint32_t n = m->group_size < WSYNC_MAX_RANKS ? m->group_size : WSYNC_MAX_RANKS;
	uint32_t done = m->group_committed;
	char bar[WSYNC_MAX_RANKS + 1], yes[128], no[128], age[32], last[32] = "-";

	if (m->group_size < 2)
		return false;
	for (uint32_t r = 0; r < n; r++)
		bar[r] = done & (UINT32_C(1) << r) ? '#' : '.';
	bar[n] = 0;
	if (m->group_last_ns > 0)
		snprintf(last, sizeof(last), "%.2f ms", (double)m->group_last_ns / 1e6);
	if (!m->group_first_ns) {
		snprintf(buf, len, "%-24s [%s] no version being written; last version: %s "
		         "from first to last commit", m->name, bar, last);
		return true;
	}
	snprintf(buf, len, "%-24s [%s] %d/%" PRIu32 " committed: %s; waiting %s for %s; "
	         "last version: %s from first to last commit", m->name, bar,
	         __builtin_popcount(done), n, fmt_ranks(yes, sizeof(yes), done, n, true),
	         fmt_age(age, sizeof(age), v->snap->now_ns - m->group_first_ns),
	         fmt_ranks(no, sizeof(no), done, n, false), last);
	return true;
}

const char top_devices_title[] =
	"ON GPUS                  GPUS (UUID prefixes)                                   HOST MIRROR";

bool top_fmt_devices(const struct top_view *v, uint32_t i, char *buf, size_t len)
{
	const struct snap_model *m = &v->snap->models[i];
	char gpus[WSYNC_MAX_DEVICES * 16] = "";
	size_t at = 0;

	if (!m->n_devices)
		return false;
	for (uint32_t d = 0; d < m->n_devices && at < sizeof(gpus); d++) {
		char text[WSYNC_GPU_UUID_TEXT];
		int n;

		wsync_gpu_uuid_format(m->dev_uuid[d], text, sizeof(text));
		/* "GPU-" and the first 8 hex digits tell GPUs of a node apart */
		n = snprintf(gpus + at, sizeof(gpus) - at, "%s%.12s", d ? " " : "", text);
		if (n < 0)
			break;
		at += (size_t)n;
	}
	snprintf(buf, len, "%-24s %-54.54s %s", m->name, gpus,
	         m->dev_flags & WSYNC_DEV_HOST_MIRROR ? "yes" : "no");
	return true;
}

const char top_slots_title[] = "SLOT STATE    VERSION  PINNED BY (pid, held for)";

int top_fmt_slots(const struct top_view *v, uint32_t i, char (*lines)[TOP_LINE], int max)
{
	static const char *const states[] = { "free", "old", "latest", "writing" };
	const struct snap *s = v->snap;
	const struct snap_model *m = &s->models[i];
	int n = 0;

	for (uint32_t k = 0; k < m->n_slots && n < max; k++) {
		char ver[32] = "-", who[TOP_LINE] = "";
		size_t at = 0;
		uint32_t pins = 0;

		if (m->slot_state[k] == WSYNC_SLOT_LATEST)
			snprintf(ver, sizeof(ver), "%" PRIu64, m->version);
		for (uint32_t j = 0; j < s->n_sessions; j++) {
			const struct snap_session *e = &s->sessions[j];
			char held[32];

			if (e->slot != (int)k || e->view_model != m->id)
				continue;
			if (!pins++ && m->slot_state[k] != WSYNC_SLOT_LATEST)
				snprintf(ver, sizeof(ver), "%" PRIu64, e->view_version);
			if (at < sizeof(who) - 1)
				at += (size_t)snprintf(who + at, sizeof(who) - at, "%s%s (%" PRIu32 ", %s)",
				                       at ? ", " : "", e->name, e->pid,
				                       fmt_age(held, sizeof(held),
				                               (int64_t)(e->view_ms * 1e6)));
		}
		snprintf(lines[n++], TOP_LINE, "%4" PRIu32 " %-8s %8s  %s", k,
		         states[m->slot_state[k] & 3], ver, pins ? who : "-");
	}
	return n;
}

void top_print_text(const struct top_view *v)
{
	char l1[TOP_LINE], l2[TOP_LINE], line[TOP_LINE];
	char cells[TOP_COLS_MAX][TOP_CELL];
	uint32_t idx[WSYNC_MAX_SESSIONS], n;
	struct top_layout lm, ls;

	top_fmt_header(v, l1, l2, sizeof(l1));
	printf("%s\n", l1);
	if (!v->attached) {
		printf("\n");
		fflush(stdout);
		return;
	}
	printf("%s\n\n", l2);
	top_layout_make(top_model_cols, MC_N, 0, MC_NAME, top_name_need(v, true), &lm);
	top_title_cells(top_model_cols, MC_N, -1, false, cells);
	top_row_render(&lm, top_model_cols, cells, line, sizeof(line));
	printf("%s\n", line);
	for (uint32_t i = 0; i < v->snap->n_models; i++) {
		top_model_cells(v, i, cells);
		top_row_render(&lm, top_model_cols, cells, line, sizeof(line));
		printf("%s\n", line);
	}
	for (uint32_t i = 0, titled = 0; i < v->snap->n_models; i++) {
		if (!top_fmt_group(v, i, line, sizeof(line)))
			continue;
		if (!titled++)
			printf("\n%s\n", top_groups_title);
		printf("%s\n", line);
	}
	for (uint32_t i = 0, titled = 0; i < v->snap->n_models; i++) {
		if (!top_fmt_devices(v, i, line, sizeof(line)))
			continue;
		if (!titled++)
			printf("\n%s\n", top_devices_title);
		printf("%s\n", line);
	}
	/* every model's slot map, every slot (the screen shows the selected
	 * model's) */
	for (uint32_t i = 0; i < v->snap->n_models; i++) {
		static char slots[WSYNC_MAX_SLOTS][TOP_LINE];
		int k = top_fmt_slots(v, i, slots, WSYNC_MAX_SLOTS);

		printf("\n%s  of %s\n", top_slots_title, v->snap->models[i].name);
		for (int j = 0; j < k; j++)
			printf("%s\n", slots[j]);
	}
	printf("\n");
	top_layout_make(top_session_cols, SC_N, 0, SC_NAME, top_name_need(v, false), &ls);
	top_title_cells(top_session_cols, SC_N, -1, false, cells);
	top_row_render(&ls, top_session_cols, cells, line, sizeof(line));
	printf("%s\n", line);
	n = top_session_order(v, SC_LAG, true, -1, idx);
	for (uint32_t i = 0; i < n; i++) {
		top_session_cells(v, &v->snap->sessions[idx[i]], cells);
		top_row_render(&ls, top_session_cols, cells, line, sizeof(line));
		printf("%s\n", line);
	}
	printf("\n");
	fflush(stdout);
}

int top_print_json(const struct top_view *v)
{
	json_t *doc, *models, *status;
	int err;

	if (!v->attached) {
		doc = json_pack("{s:b, s:b, s:s, s:s}", "ok", 0, "attached", 0, "error", v->why,
		                "reason", "no_broker");
	} else {
		status = snap_json_status(v->snap);
		json_object_set_new(status, "broker_cpu_pct", v->broker_cpu_pct >= 0 ?
		                    json_real(v->broker_cpu_pct) : json_null());
		doc = json_pack("{s:b, s:b, s:o, s:o}", "ok", 1, "attached", 1,
		                "status", status, "sessions", snap_json_sessions(v->snap));
		models = snap_json_models(v->snap);
		for (uint32_t i = 0; i < v->snap->n_models; i++) {
			json_t *m = json_array_get(models, i);

			json_object_set_new(m, "rate_hz", v->have_rates ? json_real(v->rate_hz[i]) :
			                    json_null());
			json_object_set_new(m, "bandwidth_bps", v->have_rates ?
			                    json_real(v->bandwidth[i]) : json_null());
		}
		json_object_set_new(doc, "models", models);
		json_object_set_new(doc, "interval_s", v->have_rates ? json_real(v->interval_s) :
		                    json_null());
	}
	err = report_dump(doc);
	json_decref(doc);
	return err;
}
