/*
 * tools/bench/table.c — the result table of wsync-bench: rows, the machine
 * line, the printed table and the JSON file.
 *
 * Every row has a value; most have a reference measured in the same run and
 * the ratio value / reference; some have a target, on the ratio or on the
 * value, which the table marks as met or missed. The bench never fails on a
 * missed target: it reports.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

enum target_kind { TGT_NONE, TGT_RATIO, TGT_VALUE, TGT_TEXT };

struct bench_row {
	char   scenario[16];
	char   figure[144];
	char   unit[8];
	double value;
	bool   has_ref;
	char   ref_name[48];
	double ref;
	enum target_kind tgt;
	double tgt_max;
	char   tgt_text[32];
	bool   skipped;
	char   reason[240];
};

static struct bench_row **rows;
static size_t n_rows, cap_rows;

struct machine {
	long   cores;
	char   cpu[128];
	double mem_gib;
	char   kernel[160];
	char   date[32];
};

static struct machine machine;

/* ---- rows --------------------------------------------------------------- */

static struct bench_row *row_new(const char *scenario, const char *figure)
{
	struct bench_row *r = calloc(1, sizeof *r);

	if (!r)
		return NULL;
	if (n_rows == cap_rows) {
		size_t cap = cap_rows ? cap_rows * 2 : 64;
		struct bench_row **grown = realloc(rows, cap * sizeof *grown);

		if (!grown) {
			free(r);
			return NULL;
		}
		rows = grown;
		cap_rows = cap;
	}
	snprintf(r->scenario, sizeof r->scenario, "%s", scenario);
	snprintf(r->figure, sizeof r->figure, "%s", figure);
	rows[n_rows++] = r;
	return r;
}

/* Rows are tiny; when memory runs out the bench prints what it has. A
 * scratch row absorbs the calls on a row that could not be added. */
static struct bench_row scratch_row;

struct bench_row *row_add(const char *scenario, const char *figure,
                          const char *unit, double value)
{
	struct bench_row *r = row_new(scenario, figure);

	if (!r) {
		say_error("out of memory for the result table");
		return &scratch_row;
	}
	snprintf(r->unit, sizeof r->unit, "%s", unit);
	r->value = value;
	return r;
}

void row_ref(struct bench_row *r, const char *ref_name, double ref)
{
	r->has_ref = ref > 0;
	r->ref = ref;
	snprintf(r->ref_name, sizeof r->ref_name, "%s", ref_name);
}

void row_target_ratio(struct bench_row *r, double max_ratio)
{
	r->tgt = TGT_RATIO;
	r->tgt_max = max_ratio;
}

void row_target_value(struct bench_row *r, double max_value)
{
	r->tgt = TGT_VALUE;
	r->tgt_max = max_value;
}

void row_target_text(struct bench_row *r, const char *text)
{
	r->tgt = TGT_TEXT;
	snprintf(r->tgt_text, sizeof r->tgt_text, "%s", text);
}

void row_skip(const char *scenario, const char *figure, const char *fmt, ...)
{
	struct bench_row *r = row_new(scenario, figure);
	va_list ap;

	if (!r)
		return;
	r->skipped = true;
	va_start(ap, fmt);
	vsnprintf(r->reason, sizeof r->reason, fmt, ap);
	va_end(ap);
}

void table_free(void)
{
	for (size_t i = 0; i < n_rows; i++)
		free(rows[i]);
	free(rows);
	rows = NULL;
	n_rows = cap_rows = 0;
}

/* ---- judgements and formatting ------------------------------------------- */

static double row_ratio(const struct bench_row *r)
{
	return r->has_ref ? r->value / r->ref : 0;
}

/* 1 met, 0 missed, -1 no target or nothing to judge. */
static int row_met(const struct bench_row *r)
{
	if (r->skipped)
		return -1;
	switch (r->tgt) {
	case TGT_RATIO:
		return r->has_ref ? row_ratio(r) <= r->tgt_max : -1;
	case TGT_VALUE:
		return r->value <= r->tgt_max;
	default:
		return -1;
	}
}

static void fmt_num(char *buf, size_t len, double v)
{
	double a = v < 0 ? -v : v;

	if (a >= 100)
		snprintf(buf, len, "%.0f", v);
	else if (a >= 10)
		snprintf(buf, len, "%.1f", v);
	else if (a >= 1)
		snprintf(buf, len, "%.2f", v);
	else
		snprintf(buf, len, "%.3f", v);
}

static void fmt_value(char *buf, size_t len, double v, const char *unit)
{
	char num[32];

	fmt_num(num, sizeof num, v);
	if (!unit[0])
		snprintf(buf, len, "%s", num);
	else if (!strcmp(unit, "%") || !strcmp(unit, "/s"))
		snprintf(buf, len, "%s%s", num, unit);
	else
		snprintf(buf, len, "%s %s", num, unit);
}

/* The target column; with_verdict adds "met" or "MISSED". */
static void fmt_target(char *buf, size_t len, const struct bench_row *r, bool with_verdict)
{
	char num[32];
	int met = with_verdict ? row_met(r) : -1;
	const char *verdict = met == 1 ? "  met" : met == 0 ? "  MISSED" : "";

	switch (r->tgt) {
	case TGT_RATIO:
		fmt_num(num, sizeof num, r->tgt_max);
		snprintf(buf, len, "<= %sx%s", num, verdict);
		break;
	case TGT_VALUE:
		fmt_num(num, sizeof num, r->tgt_max);
		snprintf(buf, len, "<= %s %s%s", num, r->unit, verdict);
		break;
	case TGT_TEXT:
		snprintf(buf, len, "%s", r->tgt_text);
		break;
	default:
		buf[0] = '\0';
	}
}

struct cells {
	char value[48], ref[112], ratio[24], target[64];
};

static void row_cells(const struct bench_row *r, struct cells *c)
{
	char refv[48];

	memset(c, 0, sizeof *c);
	if (r->skipped) {
		snprintf(c->value, sizeof c->value, "skipped");
		return;
	}
	fmt_value(c->value, sizeof c->value, r->value, r->unit);
	if (r->has_ref) {
		fmt_value(refv, sizeof refv, r->ref, r->unit);
		snprintf(c->ref, sizeof c->ref, "%s %s", refv, r->ref_name);
		snprintf(c->ratio, sizeof c->ratio, "%.2fx", row_ratio(r));
	}
	fmt_target(c->target, sizeof c->target, r, true);
}

/* ---- the machine ------------------------------------------------------------ */

static void machine_read(void)
{
	char line[512];
	struct utsname u;
	time_t now = time(NULL);
	FILE *f;

	machine.cores = sysconf(_SC_NPROCESSORS_ONLN);
	snprintf(machine.cpu, sizeof machine.cpu, "unknown CPU");
	if ((f = fopen("/proc/cpuinfo", "r"))) {
		while (fgets(line, sizeof line, f)) {
			char *colon = strchr(line, ':');

			if (strncmp(line, "model name", 10) || !colon)
				continue;
			colon += 1 + (colon[1] == ' ');
			colon[strcspn(colon, "\n")] = '\0';
			snprintf(machine.cpu, sizeof machine.cpu, "%s", colon);
			break;
		}
		fclose(f);
	}
	if ((f = fopen("/proc/meminfo", "r"))) {
		unsigned long long kib;

		while (fgets(line, sizeof line, f))
			if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
				machine.mem_gib = (double)kib / (1024.0 * 1024.0);
		fclose(f);
	}
	if (!uname(&u))
		snprintf(machine.kernel, sizeof machine.kernel, "%.64s %.64s", u.sysname, u.release);
	strftime(machine.date, sizeof machine.date, "%Y-%m-%d %H:%M", localtime(&now));
}

void table_print_header(const struct bench *b)
{
	machine_read();
	printf("wsync-bench %s: %ld cores, %s, %.1f GiB, %s\n", wsync_version_string(),
	       machine.cores, machine.cpu, machine.mem_gib, machine.kernel);
	printf("%s run, %d repeats, %s; medians over repeats, latencies as p50/p99 "
	       "over all samples\n", b->quick ? "quick" : "full", b->repeats, machine.date);
	fflush(stdout);
}

/* ---- the printed table ---------------------------------------------------------- */

struct widths {
	int scenario, figure, value, ref, ratio;
};

static int imax(int a, int b)
{
	return a > b ? a : b;
}

static void table_widths(struct widths *w)
{
	struct cells c;

	*w = (struct widths){ 8, 6, 5, 9, 5 };
	for (size_t i = 0; i < n_rows; i++) {
		row_cells(rows[i], &c);
		w->scenario = imax(w->scenario, (int)strlen(rows[i]->scenario));
		w->figure = imax(w->figure, (int)strlen(rows[i]->figure));
		w->value = imax(w->value, (int)strlen(c.value));
		w->ref = imax(w->ref, (int)strlen(c.ref));
		w->ratio = imax(w->ratio, (int)strlen(c.ratio));
	}
}

static void print_rule(const struct widths *w)
{
	int total = w->scenario + w->figure + w->value + w->ref + w->ratio + 6 * 2 + 14;

	for (int i = 0; i < total; i++)
		putchar('-');
	putchar('\n');
}

void table_print(void)
{
	struct widths w;
	struct cells c;

	table_widths(&w);
	printf("\n%-*s  %-*s  %*s  %-*s  %*s  %s\n", w.scenario, "scenario", w.figure,
	       "figure", w.value, "value", w.ref, "reference", w.ratio, "ratio", "target");
	print_rule(&w);
	for (size_t i = 0; i < n_rows; i++) {
		const struct bench_row *r = rows[i];

		if (i && strcmp(r->scenario, rows[i - 1]->scenario))
			putchar('\n');
		row_cells(r, &c);
		if (r->skipped) {
			printf("%-*s  %-*s  %*s  %s\n", w.scenario, r->scenario, w.figure,
			       r->figure, w.value, c.value, r->reason);
			continue;
		}
		printf("%-*s  %-*s  %*s  %-*s  %*s  %s\n", w.scenario, r->scenario, w.figure,
		       r->figure, w.value, c.value, w.ref, c.ref, w.ratio, c.ratio, c.target);
	}
	fflush(stdout);
}

/* ---- JSON --------------------------------------------------------------------- */

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void json_num(FILE *f, double v)
{
	fprintf(f, "%.6g", v);
}

static void json_row(FILE *f, const struct bench_row *r)
{
	char target[64];
	int met = row_met(r);

	fputs("    {\"scenario\": ", f);
	json_str(f, r->scenario);
	fputs(", \"figure\": ", f);
	json_str(f, r->figure);
	fputs(", \"unit\": ", f);
	json_str(f, r->unit);
	fputs(", \"value\": ", f);
	if (r->skipped)
		fputs("null", f);
	else
		json_num(f, r->value);
	fputs(", \"reference_name\": ", f);
	json_str(f, r->has_ref ? r->ref_name : "");
	fputs(", \"reference\": ", f);
	if (r->has_ref && !r->skipped)
		json_num(f, r->ref);
	else
		fputs("null", f);
	fputs(", \"ratio\": ", f);
	if (r->has_ref && !r->skipped)
		json_num(f, row_ratio(r));
	else
		fputs("null", f);
	fmt_target(target, sizeof target, r, false);
	fputs(", \"target\": ", f);
	json_str(f, r->tgt == TGT_NONE ? "" : target);
	fprintf(f, ", \"met\": %s", met == 1 ? "true" : met == 0 ? "false" : "null");
	fputs(", \"skipped\": ", f);
	if (r->skipped)
		json_str(f, r->reason);
	else
		fputs("null", f);
	fputc('}', f);
}

int table_write_json(const struct bench *b, const char *path)
{
	FILE *f = fopen(path, "w");
	int bad;

	if (!f)
		return -1;
	fprintf(f, "{\n  \"version\": ");
	json_str(f, wsync_version_string());
	fprintf(f, ",\n  \"machine\": {\"cores\": %ld, \"cpu\": ", machine.cores);
	json_str(f, machine.cpu);
	fprintf(f, ", \"memory_gib\": %.1f, \"kernel\": ", machine.mem_gib);
	json_str(f, machine.kernel);
	fprintf(f, "},\n  \"mode\": \"%s\",\n  \"repeats\": %d,\n  \"failures\": %d,\n"
	        "  \"others_cpu_pct\": %.2f,\n  \"steal_pct\": %.2f,\n  \"rows\": [\n",
	        b->quick ? "quick" : "full", b->repeats, b->failures, b->others_pct,
	        b->steal_pct);
	for (size_t i = 0; i < n_rows; i++) {
		json_row(f, rows[i]);
		fputs(i + 1 < n_rows ? ",\n" : "\n", f);
	}
	fputs("  ]\n}\n", f);
	bad = ferror(f);
	return fclose(f) || bad ? -1 : 0;
}
