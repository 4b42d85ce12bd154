/* broker/readers.c — pending WAIT_READERS requests; see readers.h. */
#include "readers.h"

#include <errno.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "log.h"
#include "model.h"
#include "outbox.h"
#include "peer.h"
#include "shm/clock.h"
#include "uids.h"

#define LAGGARDS_NAMED 3

struct reader_wait {
	struct reader_wait *next, **pprev;       /* in b->reader_waits[model] */
	struct reader_wait *p_next, **p_pprev;   /* in p->wait_list */
	struct peer *p;
	uint32_t seq;
	uint64_t incarnation;
	uint64_t version;
	uint32_t n_readers;              /* 0 = every current subscriber */
	bool     lead;                   /* max_lead: every subscriber that acquired */
	int64_t  since_ns;               /* CLOCK_MONOTONIC when it came */
	int64_t  deadline_ns;            /* CLOCK_MONOTONIC, -1 = none */
};

/* What a model's subscribers acquired, read once per look. */
struct have_table {
	uint32_t n;
	uint64_t got[WSYNC_MAX_SESSIONS];   /* sorted, highest first */
};

static bool is_reader(const struct model *m, const struct peer *p)
{
	return p->active && p->page && p->m[m->id].subs;
}

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x > y ? -1 : x < y;
}

static void have_read(const struct model *m, struct have_table *t)
{
	t->n = 0;
	for (uint32_t i = 0; i < m->n_members; i++) {
		const struct peer *p = m->members[i];

		if (is_reader(m, p))
			t->got[t->n++] = atomic_load(&p->page->acquired[m->id]);
	}
	qsort(t->got, t->n, sizeof(t->got[0]), cmp_desc);
}

/* How many readers acquired a version at all (got is sorted, highest
 * first): the ones a max_lead wait counts; a subscriber that never acquired
 * does not act with any version yet. */
static uint32_t have_count(const struct have_table *t, uint64_t version);

static uint32_t have_acting(const struct have_table *t)
{
	return have_count(t, 1);
}

/* How many readers have version or newer: the first index below it. */
static uint32_t have_count(const struct have_table *t, uint64_t version)
{
	uint32_t lo = 0, hi = t->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (t->got[mid] >= version)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The first laggards of m for version, named into text (lead: only
 * subscribers that acquired a version). */
static void laggards_name(const struct model *m, uint64_t version, bool lead, char *text,
                          size_t len)
{
	uint32_t named = 0, late = 0;
	size_t at = 0;

	text[0] = '\0';
	for (uint32_t i = 0; i < m->n_members; i++) {
		const struct peer *p = m->members[i];
		uint64_t got;

		if (!is_reader(m, p))
			continue;
		got = atomic_load(&p->page->acquired[m->id]);
		if (got >= version || (lead && got == 0))
			continue;
		late++;
		if (at < len && named++ < LAGGARDS_NAMED) {
			int n = snprintf(text + at, len - at, "%s'%s' (pid %d) at v%llu",
			                 at ? ", " : "", p->name, (int)p->pid,
			                 (unsigned long long)got);
			at = n < 0 ? len : at + (size_t)n;
		}
	}
	if (at < len && late > LAGGARDS_NAMED)
		snprintf(text + at, len - at, ", %u more", late - LAGGARDS_NAMED);
}

static void answer_ok(struct broker *b, const struct reader_wait *w, uint32_t model_id,
                      uint32_t have)
{
	union wsync_msg_any ok;

	wsync_msg_init(&ok.hdr, WSYNC_MSG_WAIT_READERS_OK, w->seq);
	ok.wait_readers_ok.model_id = model_id;
	ok.wait_readers_ok.n_readers = have;
	ok.wait_readers_ok.version = w->version;
	outbox_reply(&b->out, w->p, &ok);
}

/* Answers w if it is done against t (m's readers): true if it was (met,
 * or late). */
static bool wait_settle(struct broker *b, const struct model *m, const struct have_table *t,
                        const struct reader_wait *w, int64_t now)
{
	char laggards[WSYNC_ERRMSG_MAX - 160], why[WSYNC_ERRMSG_MAX];
	uint32_t have = have_count(t, w->version);
	uint32_t need = w->lead ? have_acting(t) : w->n_readers ? w->n_readers : t->n;

	if (have >= need) {
		answer_ok(b, w, m->id, have);
		return true;
	}
	if (w->deadline_ns < 0 || now < w->deadline_ns)
		return false;
	laggards_name(m, w->version, w->lead, laggards, sizeof(laggards));
	if (w->lead) {
		atomic_fetch_add_explicit(&m->ctl->lead_timeouts, 1, memory_order_relaxed);
		snprintf(why, sizeof(why), "model '%s': max_lead %u: %u of %u acting collectors "
		         "have v%llu or newer; behind: %s", m->name,
		         w->n_readers & WSYNC_READERS_LEAD_MASK, have, need,
		         (unsigned long long)w->version, laggards[0] ? laggards : "none");
	} else {
		snprintf(why, sizeof(why), "model '%s': %u of %u readers have v%llu (%u needed); "
		         "behind: %s", m->name, have, t->n, (unsigned long long)w->version, need,
		         laggards[0] ? laggards : "none");
	}
	outbox_error(&b->out, w->p, w->seq, WSYNC_MSG_WAIT_READERS, -ETIMEDOUT, why);
	return true;
}

/* Unlinks w from its model's list and its peer's, and frees it. */
static void wait_free(struct reader_wait *w)
{
	if (w->pprev) {
		*w->pprev = w->next;
		if (w->next)
			w->next->pprev = w->pprev;
	}
	if (w->p_pprev) {
		*w->p_pprev = w->p_next;
		if (w->p_next)
			w->p_next->p_pprev = w->p_pprev;
	}
	w->p->waits--;
	if (w->p->books)
		w->p->books->waits--;
	free(w);
}

/* The ctl entry's reader_waits hint for model id: set while a wait on it
 * pends. Stored, then the subscribers' words read (seq_cst, here and in
 * wsync_sub_ack): a collector acknowledging meanwhile either is seen by that
 * read or sees the hint and sends ACKED. */
static void waits_hint(struct broker *b, uint32_t id)
{
	struct model *m = model_get(b, id);

	if (m && m->ctl)
		atomic_store(&m->ctl->reader_waits, b->reader_waits[id] != NULL);
}

int readers_wait(struct broker *b, struct peer *p, struct model *m, uint32_t seq,
                 uint64_t version, uint32_t n_readers, uint32_t timeout_ms,
                 char *why, size_t whylen)
{
	struct have_table *t;
	struct reader_wait *w;
	int64_t now = wsync_mono_ns();
	bool done;

	if (p->waits >= READERS_MAX_PER_PEER) {
		snprintf(why, whylen, "model '%s': this session already has %d WAIT_READERS "
		         "pending, the most one session may have", m->name, READERS_MAX_PER_PEER);
		return -ENOBUFS;
	}
	if (p->books && p->books->waits >= UIDS_MAX_WAITS) {
		snprintf(why, whylen, "model '%s': the sessions of uid %u already have %d "
		         "WAIT_READERS pending (limit %d per user)", m->name, (unsigned)p->uid,
		         UIDS_MAX_WAITS, UIDS_MAX_WAITS);
		return -ENOBUFS;
	}
	w = fault_calloc(1, sizeof(*w));
	t = fault_malloc(sizeof(*t));
	if (!w || !t) {
		free(w);
		free(t);
		snprintf(why, whylen, "out of memory for a wait");
		return -ENOMEM;
	}
	w->p = p;
	w->seq = seq;
	w->incarnation = m->incarnation;
	w->version = version;
	w->n_readers = n_readers;
	w->lead = (n_readers & WSYNC_READERS_LEAD) != 0;
	w->since_ns = now;
	w->deadline_ns = timeout_ms == UINT32_MAX ? -1 : now + (int64_t)timeout_ms * 1000000;
	p->waits++;
	if (p->books)
		p->books->waits++;
	atomic_store(&m->ctl->reader_waits, 1);
	have_read(m, t);
	done = wait_settle(b, m, t, w, now);
	free(t);
	if (w->lead)
		atomic_store_explicit(&m->ctl->max_lead, n_readers & WSYNC_READERS_LEAD_MASK,
		                      memory_order_relaxed);
	if (done) {
		wait_free(w);
		waits_hint(b, m->id);
		return 0;
	}
	if (w->lead)        /* a begin held back by a collector behind the bound */
		atomic_fetch_add_explicit(&m->ctl->lead_waits, 1, memory_order_relaxed);
	w->next = b->reader_waits[m->id];
	if (w->next)
		w->next->pprev = &w->next;
	w->pprev = &b->reader_waits[m->id];
	b->reader_waits[m->id] = w;
	w->p_next = p->wait_list;
	if (w->p_next)
		w->p_next->p_pprev = &w->p_next;
	w->p_pprev = &p->wait_list;
	p->wait_list = w;
	outbox_timer_in(&b->out, READERS_POLL_NS);
	return 0;
}

/* When to look at w again: every READERS_POLL_NS while it is young, then
 * less often as it ages (an eighth of its age, at most READERS_POLL_MAX_NS),
 * and at its deadline. */
static int64_t look_in(const struct reader_wait *w, int64_t now)
{
	int64_t due = (now - w->since_ns) / 8;

	if (due < READERS_POLL_NS)
		due = READERS_POLL_NS;
	if (due > READERS_POLL_MAX_NS)
		due = READERS_POLL_MAX_NS;
	if (w->deadline_ns >= 0 && w->deadline_ns - now < due)
		due = w->deadline_ns - now;
	return due;
}

/* Answers and frees every wait on model id that is done; ns until its
 * next look (-1: none left). */
static int64_t model_poll(struct broker *b, uint32_t id, struct have_table *t, int64_t now)
{
	struct model *m = model_get(b, id);
	int64_t due_next = -1;

	if (m)
		have_read(m, t);
	for (struct reader_wait *w = b->reader_waits[id], *next; w; w = next) {
		next = w->next;
		if (!m || m->incarnation != w->incarnation) {
			outbox_error(&b->out, w->p, w->seq, WSYNC_MSG_WAIT_READERS, -EIDRM,
			             "the model was deleted while its publisher waited for its "
			             "readers");
		} else if (!wait_settle(b, m, t, w, now)) {
			int64_t due = look_in(w, now);

			if (due_next < 0 || due < due_next)
				due_next = due;
			continue;
		}
		wait_free(w);
	}
	waits_hint(b, id);
	return due_next;
}

int64_t readers_poll(struct broker *b)
{
	int64_t now = wsync_mono_ns(), next = -1;
	struct have_table *t = NULL;

	for (uint32_t id = 0; id < WSYNC_MAX_MODELS; id++) {
		int64_t due;

		if (!b->reader_waits[id])
			continue;
		if (!t) {
			t = fault_malloc(sizeof(*t));
			if (!t) {
				log_warn("out of memory looking at readers; trying again");
				return READERS_POLL_NS;
			}
		}
		due = model_poll(b, id, t, now);
		if (due >= 0 && (next < 0 || due < next))
			next = due;
	}
	free(t);
	return next;
}

void readers_acked(struct broker *b, struct model *m)
{
	struct have_table *t;
	int64_t due;

	if (!b->reader_waits[m->id])
		return;
	t = fault_malloc(sizeof(*t));
	if (!t)
		return;                  /* the poll answers it */
	due = model_poll(b, m->id, t, wsync_mono_ns());
	free(t);
	if (due >= 0)
		outbox_timer_in(&b->out, due);
}

void readers_peer_gone(struct broker *b, struct peer *p)
{
	bool others = false;

	/* its own waits only: a teardown does not walk everybody's */
	while (p->wait_list)
		wait_free(p->wait_list);
	for (uint32_t id = 0; id < WSYNC_MAX_MODELS; id++) {
		others = others || b->reader_waits[id] != NULL;
		waits_hint(b, id);
	}
	/* a reader that went stops counting: some waits may be met now */
	if (others)
		outbox_timer_in(&b->out, 0);
}

void readers_free_all(struct broker *b)
{
	for (uint32_t id = 0; id < WSYNC_MAX_MODELS; id++) {
		while (b->reader_waits[id])
			wait_free(b->reader_waits[id]);
	}
}
