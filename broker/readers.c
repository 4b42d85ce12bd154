/* broker/readers.c — pending WAIT_READERS requests; see readers.h. */
#include "readers.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "log.h"
#include "loop.h"
#include "model.h"
#include "session.h"
#include "shm/clock.h"

#define LAGGARDS_NAMED 3

struct reader_wait {
	struct reader_wait *next;
	struct session *s;
	uint32_t seq;
	uint32_t model_id;
	uint64_t incarnation;
	uint64_t version;
	uint32_t n_readers;              /* 0 = every current subscriber */
	int64_t  deadline_ns;            /* CLOCK_MONOTONIC, -1 = none */
};

/* Subscribers of m that have version (have), of how many (total); the
 * first laggards named into text. */
static void readers_count(const struct model *m, uint64_t version, uint32_t *have,
                          uint32_t *total, char *text, size_t len)
{
	uint32_t named = 0, late = 0;
	size_t at = 0;

	*have = *total = 0;
	if (text && len)
		text[0] = '\0';
	for (uint32_t i = 0; i < m->n_members; i++) {
		const struct session *s = m->members[i];
		uint64_t got;

		if (s->state != SESSION_ACTIVE || !s->page || !s->m[m->id].subs)
			continue;
		(*total)++;
		got = atomic_load(&s->page->acquired[m->id]);
		if (got >= version) {
			(*have)++;
			continue;
		}
		late++;
		if (text && at < len && named++ < LAGGARDS_NAMED) {
			int n = snprintf(text + at, len - at, "%s'%s' (pid %d) at v%llu",
			                 at ? ", " : "", s->name, (int)s->pid,
			                 (unsigned long long)got);
			at = n < 0 ? len : at + (size_t)n;
		}
	}
	if (text && at < len && late > LAGGARDS_NAMED)
		snprintf(text + at, len - at, ", %u more", late - LAGGARDS_NAMED);
}

static void answer_ok(struct broker *b, const struct reader_wait *w, uint32_t have)
{
	union wsync_msg_any ok;

	wsync_msg_init(&ok.hdr, WSYNC_MSG_WAIT_READERS_OK, w->seq);
	ok.wait_readers_ok.model_id = w->model_id;
	ok.wait_readers_ok.n_readers = have;
	ok.wait_readers_ok.version = w->version;
	loop_send(b, w->s, &ok, NULL, 0);
}

static void answer_error(struct broker *b, const struct reader_wait *w, int err,
                         const char *why)
{
	union wsync_msg_any e;

	wsync_msg_init(&e.hdr, WSYNC_MSG_ERROR, w->seq);
	e.error.err = err;
	e.error.req_type = WSYNC_MSG_WAIT_READERS;
	snprintf(e.error.msg, sizeof(e.error.msg), "%s", why);
	loop_send(b, w->s, &e, NULL, 0);
}

/* Answers w if it is done: true if it was (met, gone, or late). */
static bool wait_settle(struct broker *b, const struct reader_wait *w, int64_t now)
{
	struct model *m = model_get(b, w->model_id);
	char laggards[WSYNC_ERRMSG_MAX - 160], why[WSYNC_ERRMSG_MAX];
	uint32_t have, total, need;

	if (!m || m->incarnation != w->incarnation) {
		answer_error(b, w, -EIDRM, "the model was deleted while its publisher waited "
		             "for its readers");
		return true;
	}
	readers_count(m, w->version, &have, &total, laggards, sizeof(laggards));
	need = w->n_readers ? w->n_readers : total;
	if (have >= need) {
		answer_ok(b, w, have);
		return true;
	}
	if (w->deadline_ns >= 0 && now >= w->deadline_ns) {
		snprintf(why, sizeof(why), "model '%s': %u of %u readers have v%llu (%u "
		         "needed); behind: %s", m->name, have, total,
		         (unsigned long long)w->version, need, laggards[0] ? laggards : "none");
		answer_error(b, w, -ETIMEDOUT, why);
		return true;
	}
	return false;
}

int readers_wait(struct broker *b, struct session *s, struct model *m, uint32_t seq,
                 uint64_t version, uint32_t n_readers, uint32_t timeout_ms,
                 char *why, size_t whylen)
{
	struct reader_wait *w = fault_calloc(1, sizeof(*w));
	int64_t now = wsync_mono_ns();

	if (!w) {
		snprintf(why, whylen, "out of memory for a wait");
		return -ENOMEM;
	}
	w->s = s;
	w->seq = seq;
	w->model_id = m->id;
	w->incarnation = m->incarnation;
	w->version = version;
	w->n_readers = n_readers;
	w->deadline_ns = timeout_ms == UINT32_MAX ? -1 : now + (int64_t)timeout_ms * 1000000;
	if (wait_settle(b, w, now)) {
		free(w);
		return 0;
	}
	w->next = b->reader_waits;
	b->reader_waits = w;
	loop_poll_soon(b, READERS_POLL_NS);
	return 0;
}

bool readers_poll(struct broker *b)
{
	int64_t now = wsync_mono_ns();

	for (struct reader_wait **pp = &b->reader_waits; *pp;) {
		struct reader_wait *w = *pp;

		if (w->s->state == SESSION_ACTIVE && !wait_settle(b, w, now)) {
			pp = &w->next;
			continue;
		}
		*pp = w->next;
		free(w);
	}
	return b->reader_waits != NULL;
}

void readers_session_gone(struct broker *b, struct session *s)
{
	bool any = false;

	for (struct reader_wait **pp = &b->reader_waits; *pp;) {
		struct reader_wait *w = *pp;

		if (w->s == s) {
			*pp = w->next;
			free(w);
			continue;
		}
		any = true;
		pp = &w->next;
	}
	/* a reader that went stops counting: some waits may be met now */
	if (any && readers_poll(b))
		loop_poll_soon(b, READERS_POLL_NS);
}
