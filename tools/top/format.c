/*
 * tools/top/format.c — wsync-top's lines and JSON documents: one format for
 * the screen and for batch mode, so both show the same figures.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "shm/proto.h"
#include "top.h"
#include "shm/cuda_discover.h"

static const char *fmt_rate(char *buf, size_t len, const struct top_view *v, double x,
                            bool bytes)
{
	if (!v->have_rates)
		return "-";
	if (bytes) {
		fmt_bytes(buf, len, (uint64_t)x);
		strncat(buf, "/s", len - strlen(buf) - 1);
	} else {
		snprintf(buf, len, "%.1f", x);
	}
	return buf;
}

void top_fmt_header(const struct top_view *v, char *l1, char *l2, size_t len)
{
	const struct snap *s = v->snap;
	char up[32], used[32], lim[32], cpu[32];

	if (!v->attached) {
		snprintf(l1, len, "wsync-top: %s; retrying every interval", v->why);
		l2[0] = 0;
		return;
	}
	if (v->broker_cpu_pct >= 0)
		snprintf(cpu, sizeof(cpu), "%.1f%%", v->broker_cpu_pct);
	else
		snprintf(cpu, sizeof(cpu), "-");
	snprintf(l1, len, "wsync-top - instance %s  pid %" PRIu32 "  generation %" PRIu64
	         "  %s  up %s  broker cpu %s", s->instance, s->broker_pid, s->generation,
	         snap_state_name(s->state), fmt_age(up, sizeof(up), s->now_ns - s->started_ns),
	         cpu);
	snprintf(l2, len, "shm %s / %s   models %" PRIu32 "   sessions %" PRIu32
	         "   interval %s", fmt_bytes(used, sizeof(used), s->shm_used),
	         fmt_bytes(lim, sizeof(lim), s->shm_limit), s->n_models, s->n_sessions,
	         v->have_rates ? fmt_age(up, sizeof(up), (int64_t)(v->interval_s * 1e9)) : "-");
}

const char top_models_title[] =
	"MODEL                    VERSION     STEP      AGE    RATE          BW       SLAB  SLOTS  COLL    LAG CHECKSUM";

void top_fmt_model(const struct top_view *v, uint32_t i, char *buf, size_t len)
{
	const struct snap_model *m = &v->snap->models[i];
	char age[32], hz[32], bw[32], sz[32], slots[16], cs[32];

	snprintf(slots, sizeof(slots), "%" PRIu32 "/%" PRIu32, m->slots_used, m->n_slots);
	snprintf(buf, len, "%-24.24s %7" PRIu64 " %8" PRIu64 " %8s %7s %11s %10s %6s %5" PRIu32
	         " %6" PRIu64 " %s", m->name, m->version, m->step,
	         m->version ? fmt_age(age, sizeof(age), v->snap->now_ns - m->commit_ns) : "-",
	         fmt_rate(hz, sizeof(hz), v, v->rate_hz[i], false),
	         fmt_rate(bw, sizeof(bw), v, v->bandwidth[i], true),
	         fmt_bytes(sz, sizeof(sz), m->bytes), slots, m->collectors, m->worst_lag,
	         fmt_checksum(cs, sizeof(cs), m));
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
		snprintf(buf, len, "%-24.24s [%s] no version being written; last version: %s "
		         "from first to last commit", m->name, bar, last);
		return true;
	}
	snprintf(buf, len, "%-24.24s [%s] %d/%" PRIu32 " committed: %s; waiting %s for %s; "
	         "last version: %s from first to last commit", m->name, bar,
	         __builtin_popcount(done), n, fmt_ranks(yes, sizeof(yes), done, n, true),
	         fmt_age(age, sizeof(age), v->snap->now_ns - m->group_first_ns),
	         fmt_ranks(no, sizeof(no), done, n, false), last);
	return true;
}

const char top_sessions_title[] =
	"     PID NAME             ROLE    MODELS               VERSION    LAG    WAITS TIMEOUTS       CONN";

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
	snprintf(buf, len, "%-24.24s %-54.54s %s", m->name, gpus,
	         m->dev_flags & WSYNC_DEV_HOST_MIRROR ? "yes" : "no");
	return true;
}

void top_fmt_session(const struct top_view *v, const struct snap_session *e,
                     char *buf, size_t len)
{
	const struct snap *s = v->snap;
	char models[64], ver[32] = "-", lag[24] = "-", con[32];

	fmt_session_models(models, sizeof(models), s, e);
	if (e->view_version)
		snprintf(ver, sizeof(ver), "%" PRIu64 "%s", e->view_version, e->held ? "*" : "");
	if (e->lag_known)
		snprintf(lag, sizeof(lag), "%" PRIu64, e->lag);
	snprintf(buf, len, "%8" PRIu32 " %-16.16s %-7s %-20.20s %7s %6s %8" PRIu32 " %8" PRIu32
	         " %10s", e->pid, e->name, snap_roles_name(e->roles), models, ver, lag,
	         e->waits, e->timeouts, fmt_age(con, sizeof(con), s->now_ns - e->connected_ns));
}

void top_print_text(const struct top_view *v)
{
	char l1[TOP_LINE], l2[TOP_LINE], line[TOP_LINE];
	uint32_t idx[WSYNC_MAX_SESSIONS], n;

	top_fmt_header(v, l1, l2, sizeof(l1));
	printf("%s\n", l1);
	if (!v->attached) {
		printf("\n");
		fflush(stdout);
		return;
	}
	printf("%s\n\n%s\n", l2, top_models_title);
	for (uint32_t i = 0; i < v->snap->n_models; i++) {
		top_fmt_model(v, i, line, sizeof(line));
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
	printf("\n%s\n", top_sessions_title);
	n = top_session_order(v, SORT_LAG, -1, idx);
	for (uint32_t i = 0; i < n; i++) {
		top_fmt_session(v, &v->snap->sessions[idx[i]], line, sizeof(line));
		printf("%s\n", line);
	}
	printf("\n");
	fflush(stdout);
}

int top_print_json(const struct top_view *v)
{
	json_t *doc, *models;
	int err;

	if (!v->attached) {
		doc = json_pack("{s:b, s:s}", "attached", 0, "error", v->why);
	} else {
		doc = json_pack("{s:b, s:o, s:o}", "attached", 1,
		                "status", snap_json_status(v->snap),
		                "sessions", snap_json_sessions(v->snap));
		models = snap_json_models(v->snap);
		for (uint32_t i = 0; i < v->snap->n_models; i++) {
			json_t *m = json_array_get(models, i);

			json_object_set_new(m, "rate_hz", v->have_rates ? json_real(v->rate_hz[i]) :
			                    json_null());
			json_object_set_new(m, "bandwidth_bps", v->have_rates ?
			                    json_real(v->bandwidth[i]) : json_null());
		}
		json_object_set_new(doc, "models", models);
		json_object_set_new(json_object_get(doc, "status"), "broker_cpu_pct",
		                    v->broker_cpu_pct >= 0 ? json_real(v->broker_cpu_pct) :
		                    json_null());
		json_object_set_new(doc, "interval_s", v->have_rates ? json_real(v->interval_s) :
		                    json_null());
	}
	if (!doc)
		return -1;
	err = json_dumpf(doc, stdout, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(9));
	json_decref(doc);
	putchar('\n');
	fflush(stdout);
	return err;
}
