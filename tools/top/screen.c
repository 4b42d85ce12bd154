/*
 * tools/top/screen.c — wsync-top's interactive screen (ncurses).
 *
 * Keys as in top: q quits; up/down or m select a model (its sessions only
 * are listed; up past the first selects all); s cycles the sessions' sort;
 * p pauses refreshing; d asks for a new interval; h shows help. A resized
 * terminal is redrawn at its new size. Input is polled every 100 ms, so
 * keys answer at once while refreshes keep their interval.
 */
#include <ncurses.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "top.h"

struct screen {
	struct top_state *t;
	char sel[WSYNC_NAME_MAX];        /* selected model, "" = all */
	enum top_sort sort;
	bool paused;
	char note[128];                  /* one-shot message on the status line */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void put_line(int y, const char *s, int attr)
{
	if (y >= LINES)
		return;
	attron(attr);
	mvaddnstr(y, 0, s, COLS);
	if (attr)                        /* a title bar spans the width */
		for (int x = (int)strlen(s); x < COLS; x++)
			mvaddch(y, x, ' ');
	attroff(attr);
}

/* Index of the selected model in the snapshot, -1 if none (all). */
static int sel_index(const struct screen *sc)
{
	const struct snap *s = sc->t->v.snap;

	if (!sc->sel[0] || !s)
		return -1;
	for (uint32_t i = 0; i < s->n_models; i++)
		if (!strcmp(s->models[i].name, sc->sel))
			return (int)i;
	return -1;
}

static void select_index(struct screen *sc, int i)
{
	const struct snap *s = sc->t->v.snap;

	if (!s || i < 0 || (uint32_t)i >= s->n_models)
		sc->sel[0] = 0;
	else
		snprintf(sc->sel, sizeof(sc->sel), "%s", s->models[i].name);
}

static void draw(struct screen *sc)
{
	const struct top_view *v = &sc->t->v;
	char l1[TOP_LINE], l2[TOP_LINE], line[TOP_LINE];
	uint32_t idx[WSYNC_MAX_SESSIONS], n;
	int y = 0, sel = sel_index(sc);

	erase();
	top_fmt_header(v, l1, l2, sizeof(l1));
	put_line(y++, l1, v->attached ? 0 : A_BOLD);
	put_line(y++, l2, 0);
	snprintf(line, sizeof(line), "%s%.100s  sort: %s  model: %.128s   (q quit, h help)",
	         sc->paused ? "[paused] " : "", sc->note, top_sort_name(sc->sort),
	         sel >= 0 ? sc->sel : "all");
	put_line(y++, line, 0);
	if (!v->attached) {
		refresh();
		return;
	}
	put_line(y++, top_models_title, A_REVERSE);
	for (uint32_t i = 0; i < v->snap->n_models; i++) {
		top_fmt_model(v, i, line, sizeof(line));
		put_line(y++, line, (int)i == sel ? A_BOLD | A_UNDERLINE : 0);
	}
	for (uint32_t i = 0, titled = 0; i < v->snap->n_models; i++) {
		if (!top_fmt_group(v, i, line, sizeof(line)))
			continue;
		if (!titled++) {
			y++;
			put_line(y++, top_groups_title, A_REVERSE);
		}
		put_line(y++, line, (int)i == sel ? A_BOLD : 0);
	}
	for (uint32_t i = 0, titled = 0; i < v->snap->n_models; i++) {
		if (!top_fmt_devices(v, i, line, sizeof(line)))
			continue;
		if (!titled++) {
			y++;
			put_line(y++, top_devices_title, A_REVERSE);
		}
		put_line(y++, line, (int)i == sel ? A_BOLD : 0);
	}
	y++;
	put_line(y++, top_sessions_title, A_REVERSE);
	n = top_session_order(v, sc->sort, sel >= 0 ? (int)v->snap->models[sel].id : -1, idx);
	for (uint32_t i = 0; i < n && y < LINES; i++) {
		top_fmt_session(v, &v->snap->sessions[idx[i]], line, sizeof(line));
		put_line(y++, line, 0);
	}
	refresh();
}

static void show_help(void)
{
	static const char *const lines[] = {
		"wsync-top keys",
		"",
		"  q          quit",
		"  up, down   select a model (its sessions only); up past the first: all",
		"  m          select the next model, then all",
		"  s          sort sessions by lag, pid, waits, timeouts, connected time",
		"  p          pause / resume refreshing",
		"  d          set the refresh interval (seconds)",
		"  h, ?       this help",
		"",
		"RATE and BW: commits per second and slab bytes per second over the last",
		"interval. LAG: versions behind the latest (sessions: of the version they",
		"read; models: the worst collector). VERSION n*: held now.",
		"GROUP: a model published by a group of ranks; [#.] its ranks, # those",
		"that committed the version being written, waiting: since its first",
		"commit; last version: its first to its last commit (the slowest rank).",
		"ON GPUS: a model kept on GPUs, the start of each GPU's UUID, and",
		"whether a host copy of every version is kept too.",
		"",
		"press any key",
	};

	erase();
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
		put_line((int)i, lines[i], 0);
	refresh();
	timeout(-1);
	getch();
	timeout(100);
}

static void ask_delay(struct screen *sc)
{
	char buf[32];
	double d;
	char *end;

	put_line(2, "", 0);
	mvaddnstr(2, 0, "refresh interval in seconds: ", COLS);
	clrtoeol();
	echo();
	curs_set(1);
	timeout(-1);
	if (getnstr(buf, sizeof(buf) - 1) != ERR) {
		d = strtod(buf, &end);
		if (end != buf && !*end && d >= 0.1 && d <= 3600)
			sc->t->o.delay_s = d;
		else
			snprintf(sc->note, sizeof(sc->note), "not an interval: '%.20s' ", buf);
	}
	timeout(100);
	curs_set(0);
	noecho();
}

/* Handles a key; false to quit. */
static bool on_key(struct screen *sc, int ch, double *next)
{
	const struct snap *s = sc->t->v.snap;
	int n = s ? (int)s->n_models : 0, sel = sel_index(sc);

	sc->note[0] = 0;
	switch (ch) {
	case 'q':
	case 'Q':
		return false;
	case KEY_DOWN:
		select_index(sc, sel + 1 < n ? sel + 1 : sel);
		break;
	case KEY_UP:
		select_index(sc, sel - 1);
		break;
	case 'm':
		select_index(sc, sel + 1 < n ? sel + 1 : -1);
		break;
	case 's':
		sc->sort = (sc->sort + 1) % SORT_N;
		break;
	case 'p':
		sc->paused = !sc->paused;
		*next = 0;
		break;
	case 'd':
		ask_delay(sc);
		*next = 0;
		break;
	case 'h':
	case '?':
		show_help();
		break;
	case KEY_RESIZE:
		clear();
		break;
	default:
		break;
	}
	return true;
}

int top_interactive(struct top_state *t)
{
	struct screen sc = { .t = t };
	double next = 0;
	bool go_on = true;

	if (!initscr()) {
		fprintf(stderr, "wsync-top: cannot initialise the terminal (try -b)\n");
		return 3;
	}
	cbreak();
	noecho();
	keypad(stdscr, TRUE);
	curs_set(0);
	timeout(100);
	while (go_on) {
		int ch;

		if (!sc.paused && now_s() >= next) {
			top_refresh(t);
			next = now_s() + t->o.delay_s;
		}
		draw(&sc);
		ch = getch();
		if (ch != ERR)
			go_on = on_key(&sc, ch, &next);
	}
	endwin();
	return 0;
}
