/*
 * tools/top/screen.c — wsync-top's interactive screen (ncurses).
 *
 * Layout, top to bottom: two header lines, a status line (sort, model,
 * pause), the models (what fits of them), a selected model's slot map (who
 * pins which slot, since when), publisher groups and GPU models when there
 * are some, then the sessions from a scroll position, with a cursor row and
 * a last line that says how many more there are above and below and gives
 * the cursor's session in full. Columns fit the terminal's width (format.c)
 * and grow with it; a resize redraws at the new size.
 *
 * Input is polled every 100 ms, so keys answer at once while refreshes keep
 * their interval; -n N stops after N refreshes here too.
 */
#include <locale.h>
#include <ncurses.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "top.h"

#define SLOT_LINES_MAX WSYNC_MAX_SLOTS

struct screen {
	struct top_state *t;
	char sel[WSYNC_NAME_MAX];        /* selected model, "" = all */
	int sort;                        /* enum top_scol */
	bool desc;
	bool paused, full_names;
	int cursor, offset;              /* in the sorted session list */
	int page;                        /* session rows shown last time */
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
	if (y < 0 || y >= LINES)
		return;
	move(y, 0);
	clrtoeol();
	attron(attr);
	addnstr(s, COLS);
	if (attr & A_REVERSE)            /* a title bar spans the width */
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
	sc->cursor = sc->offset = 0;
}

static int draw_models(struct screen *sc, int y, int sel, int room)
{
	const struct top_view *v = &sc->t->v;
	char cells[TOP_COLS_MAX][TOP_CELL], line[TOP_LINE];
	struct top_layout l;
	uint32_t n = v->snap->n_models;
	int shown = (int)n <= room ? (int)n : room - 1, first = 0;

	top_layout_make(top_model_cols, MC_N, COLS, MC_NAME, top_name_need(v, true), &l);
	top_title_cells(top_model_cols, MC_N, -1, false, cells);
	top_row_render(&l, top_model_cols, cells, line, sizeof(line));
	put_line(y++, line, A_REVERSE);
	if (shown < 0)
		shown = 0;
	/* the selected model is always among those shown, highlighted */
	if (shown > 0 && sel >= shown)
		first = sel - shown + 1;
	for (int i = first; i < first + shown; i++) {
		top_model_cells(v, (uint32_t)i, cells);
		top_row_render(&l, top_model_cols, cells, line, sizeof(line));
		put_line(y++, line, i == sel ? A_BOLD | A_UNDERLINE : 0);
	}
	if (shown < (int)n) {
		int below = (int)n - first - shown;

		if (first)
			snprintf(line, sizeof(line), "  ... %u more models (%d above, %d below; "
			         "m selects one)", n - shown, first, below);
		else
			snprintf(line, sizeof(line), "  ... %u more models (m selects one)", n - shown);
		put_line(y++, line, A_DIM);
	}
	return y;
}


/* One line per model that fmt has a line for (publisher groups, GPU
 * models), under its title, from y while y < end: what does not fit is
 * counted on a last line, never dropped silently. Returns the next y. */
static int draw_section(const struct top_view *v, int y, int end, const char *title,
                        bool (*fmt)(const struct top_view *, uint32_t, char *, size_t),
                        int sel, const char *what)
{
	char line[TOP_LINE];
	uint32_t n = 0, shown = 0;

	for (uint32_t i = 0; i < v->snap->n_models; i++)
		n += fmt(v, i, line, sizeof(line));
	if (!n || y >= end - 1)
		return y;
	put_line(y++, title, A_REVERSE);
	for (uint32_t i = 0; i < v->snap->n_models; i++) {
		if (!fmt(v, i, line, sizeof(line)))
			continue;
		/* the last free line says what is left, unless it is this one */
		if (y >= end - 1 && shown + 1 < n)
			break;
		put_line(y++, line, (int)i == sel ? A_BOLD : 0);
		shown++;
	}
	if (shown < n) {
		snprintf(line, sizeof(line), "  ... %u more %s (-b shows all)", n - shown, what);
		put_line(y++, line, A_DIM);
	}
	return y;
}

static int draw_extras(struct screen *sc, int y, int sel, int bottom)
{
	const struct top_view *v = &sc->t->v;
	char line[TOP_LINE];
	static char slots[SLOT_LINES_MAX][TOP_LINE];

	if (sel >= 0 && y + 3 < bottom) {
		int n = top_fmt_slots(v, (uint32_t)sel, slots, SLOT_LINES_MAX);

		const struct snap_model *m = &v->snap->models[sel];
		int room, shown;

		snprintf(line, sizeof(line), "%s  of %s", top_slots_title, m->name);
		put_line(y++, line, A_REVERSE);
		room = bottom - 2 - y;
		shown = n <= room ? n : room - 1;
		if (shown < 0)
			shown = 0;
		for (int i = 0; i < shown; i++)
			put_line(y++, slots[i], 0);
		if (shown < n) {
			/* cut short: say how many slots are not shown, and how many of
			 * those are pinned (wsync-top -b shows them all) */
			int pinned = 0;

			for (int k = shown; k < n; k++)
				for (uint32_t j = 0; j < v->snap->n_sessions; j++)
					if (v->snap->sessions[j].slot == k &&
					    v->snap->sessions[j].view_model == m->id) {
						pinned++;
						break;
					}
			snprintf(line, sizeof(line), "  ... %d more slots, %d of them pinned "
			         "(-b shows all)", n - shown, pinned);
			put_line(y++, line, A_DIM);
		}
	}
	y = draw_section(v, y, bottom - 3, top_groups_title, top_fmt_group, sel, "groups");
	return draw_section(v, y, bottom - 3, top_devices_title, top_fmt_devices, sel,
	                    "GPU models");
}

static void draw_sessions(struct screen *sc, int y, int sel)
{
	const struct top_view *v = &sc->t->v;
	char cells[TOP_COLS_MAX][TOP_CELL], line[TOP_LINE];
	uint32_t idx[WSYNC_MAX_SESSIONS];
	struct top_layout l;
	int n, rows, x, w, need = top_name_need(v, false);

	top_layout_make(top_session_cols, SC_N, sc->full_names ? 0 : COLS, SC_NAME,
	                need, &l);
	if (sc->full_names) {
		/* whole names: keep what still fits after the name column */
		struct top_layout all = l;

		l.n = 0;
		for (int i = 0, used = 0; i < all.n; i++) {
			int cw = all.width[i] + (i ? 1 : 0);

			if (all.which[i] != SC_NAME && all.which[i] != SC_PID && used + cw > COLS)
				continue;
			l.which[l.n] = all.which[i];
			l.width[l.n++] = all.width[i];
			used += cw;
		}
	}
	top_title_cells(top_session_cols, SC_N, sc->sort, sc->desc, cells);
	top_row_render(&l, top_session_cols, cells, line, sizeof(line));
	put_line(y, line, A_REVERSE);
	if (top_layout_span(&l, sc->sort, &x, &w) && x < COLS) {
		/* the sort column stands out of the title bar */
		attron(A_BOLD | A_UNDERLINE);
		mvaddnstr(y, x, line + x, w < COLS - x ? w : COLS - x);
		attroff(A_BOLD | A_UNDERLINE);
	}
	y++;
	n = (int)top_session_order(v, sc->sort, sc->desc, sel >= 0 ?
	                           (int)v->snap->models[sel].id : -1, idx);
	rows = LINES - y - 1;            /* the last line says what is not shown */
	if (rows < 1)
		rows = 1;
	sc->page = rows;
	if (sc->cursor >= n)
		sc->cursor = n ? n - 1 : 0;
	if (sc->cursor < sc->offset)
		sc->offset = sc->cursor;
	if (sc->cursor >= sc->offset + rows)
		sc->offset = sc->cursor - rows + 1;
	if (sc->offset > n - rows)
		sc->offset = n > rows ? n - rows : 0;
	for (int i = sc->offset; i < n && i < sc->offset + rows && y < LINES - 1; i++) {
		top_session_cells(v, &v->snap->sessions[idx[i]], cells);
		top_row_render(&l, top_session_cols, cells, line, sizeof(line));
		put_line(y++, line, i == sc->cursor ? A_STANDOUT : 0);
	}
	if (n) {
		const struct snap_session *e = &v->snap->sessions[idx[sc->cursor]];
		int below = n - sc->offset - rows;
		char more[96] = "", lag[24], ms[32];

		if (below > 0 || sc->offset > 0)
			snprintf(more, sizeof(more), "-- %d more below, %d above -- ",
			         below > 0 ? below : 0, sc->offset);
		snprintf(line, sizeof(line), "%s%d/%d: pid %u '%s' %s, lag %s (%s)", more,
		         sc->cursor + 1, n, e->pid, e->name, snap_roles_name(e->roles),
		         fmt_lag(lag, sizeof(lag), e), fmt_lag_ms(ms, sizeof(ms), e));
		put_line(LINES - 1, line, A_DIM);
	}
}

static void draw(struct screen *sc)
{
	const struct top_view *v = &sc->t->v;
	char l1[TOP_LINE], l2[TOP_LINE], line[TOP_LINE];
	int y = 0, sel = sel_index(sc), room;
	bool ok = v->attached && v->snap->health.state == HEALTH_OK;

	erase();
	top_fmt_header(v, l1, l2, sizeof(l1));
	put_line(y++, l1, ok ? 0 : A_BOLD);
	put_line(y++, l2, ok ? 0 : A_BOLD);
	snprintf(line, sizeof(line), "%ssort: %s %s  model: %.60s  names: %s  %.100s  "
	         "(q quit, h help)", sc->paused ? "[paused] " : "",
	         top_session_cols[sc->sort].title, sc->desc ? "desc" : "asc",
	         sel >= 0 ? sc->sel : "all", sc->full_names ? "full" : "fit", sc->note);
	put_line(y++, line, 0);
	if (!v->attached) {
		refresh();
		return;
	}
	/* models get at most half of what is left, sessions the rest */
	room = (LINES - y - 4) / 2;
	if (room < 1)
		room = 1;
	y = draw_models(sc, y, sel, room);
	y = draw_extras(sc, y, sel, LINES - 3);
	draw_sessions(sc, y, sel);
	refresh();
}

static void show_help(void)
{
	static const char *const lines[] = {
		"wsync-top keys",
		"",
		"  q            quit",
		"  up, down     move the cursor in the sessions (j, k); PgUp, PgDn, Home, End",
		"  m, right     select the next model: its sessions, its slot map; M, left back",
		"  s, >         sort sessions by the next column; < the one before",
		"  r            reverse the sort",
		"  f            whole names, even if other columns must go",
		"  p, space     pause / resume refreshing",
		"  d            set the refresh interval (seconds)",
		"  h, ?         this help",
		"",
		"RATE and BW: commits per second and slab bytes per second over the last",
		"interval. LAG: commits a session did not take (~: an estimate); BEHIND:",
		"how long ago the version it reads was superseded; both from the broker's",
		"last tick. VERSION n*: held now, in SLOT, for HELD. Models: the worst",
		"collector. PUB: the publisher's pid.",
		"SLOTS (a selected model): each slot's state and version, who pins it.",
		"GROUP: a model published by a group of ranks; [#.] its ranks, # those",
		"that committed the version being written.",
		"ON GPUS: a model kept on GPUs and whether a host copy is kept too.",
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

static void next_sort(struct screen *sc, int step)
{
	do
		sc->sort = (sc->sort + step + SC_N) % SC_N;
	while (!top_sortable(sc->sort));
	/* numbers read best largest first, names and ids in order */
	sc->desc = sc->sort != SC_NAME && sc->sort != SC_ID && sc->sort != SC_PID;
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
	case 'j':
		sc->cursor++;
		break;
	case KEY_UP:
	case 'k':
		if (sc->cursor > 0)
			sc->cursor--;
		break;
	case KEY_NPAGE:
		sc->cursor += sc->page;
		break;
	case KEY_PPAGE:
		sc->cursor = sc->cursor > sc->page ? sc->cursor - sc->page : 0;
		break;
	case KEY_HOME:
	case 'g':
		sc->cursor = 0;
		break;
	case KEY_END:
	case 'G':
		sc->cursor = WSYNC_MAX_SESSIONS;
		break;
	case 'm':
	case KEY_RIGHT:
		select_index(sc, sel + 1 < n ? sel + 1 : -1);
		break;
	case 'M':
	case KEY_LEFT:
		select_index(sc, sel < 0 ? n - 1 : sel - 1);
		break;
	case 's':
	case '>':
		next_sort(sc, 1);
		break;
	case '<':
		next_sort(sc, -1);
		break;
	case 'r':
	case 'I':
		sc->desc = !sc->desc;
		break;
	case 'f':
		sc->full_names = !sc->full_names;
		break;
	case 'p':
	case ' ':
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
	struct screen sc = { .t = t, .sort = SC_LAG, .desc = true };
	const char *term = getenv("TERM");
	double next = 0;
	bool go_on = true;
	long refreshes = 0;
	SCREEN *scr;

	/* never escape codes into a pipe or a file, nor a curses error */
	if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO) || !term || !*term) {
		fprintf(stderr, "wsync-top: no terminal (try -b)\n");
		return 3;
	}
	setlocale(LC_ALL, "");
	scr = newterm(NULL, stdout, stdin);
	if (!scr) {
		fprintf(stderr, "wsync-top: no terminal (TERM=%s is unknown here; try -b)\n", term);
		return 3;
	}
	set_term(scr);
	cbreak();
	noecho();
	keypad(stdscr, TRUE);
	curs_set(0);
	timeout(100);
	while (go_on) {
		int ch;

		if (!sc.paused && now_s() >= next) {
			/* -n N: the Nth screen stays up one interval, then we go */
			if (t->o.iterations && refreshes >= t->o.iterations)
				break;
			top_refresh(t);
			refreshes++;
			next = now_s() + t->o.delay_s;
		}
		draw(&sc);
		ch = getch();
		if (ch != ERR)
			go_on = on_key(&sc, ch, &next);
	}
	endwin();
	delscreen(scr);
	return 0;
}
