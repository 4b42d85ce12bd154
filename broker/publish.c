/*
 * broker/publish.c — grants and commits.
 *
 * Who writes what: the broker alone owns the books (slot states, versions,
 * hwm, the validated `latest`); the publisher of a model writes its slabs,
 * slot metadata, `latest` and `seq` in the model page; readers write only
 * their own session page's hazards.
 *
 * Invariants:
 *  - A slot is granted only when the books say it is neither LATEST nor
 *    GRANTED and no member session pins it (slots.h has the seq_cst argument:
 *    we load `latest`, then the pins).
 *  - Versions come from ++hwm, stored into the ctl entry before the grant
 *    leaves the broker, so they only go up, across restarts too.
 *  - `latest` only ever names a granted, complete slot: every COMMIT and
 *    every publisher departure compares the page's `latest` with the grant;
 *    anything else the page holds is replaced by the last validated value
 *    under a fresh version (so readers that saw the bogus value still see
 *    versions go up) and the publisher is disconnected.
 *
 * The page is written by a client, so every value read from it is used as a
 * comparand or range-checked, never as an index.
 */
#include "publish.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "model.h"
#include "monitor.h"
#include "outbox.h"
#include "peer.h"
#include "shm/clock.h"
#include "slots.h"

#define HOLDER_TEXT 160
#define HOLDERS_NAMED 3

static size_t member_pages(const struct model *m, struct wsync_session_page **pages)
{
	size_t n = 0;

	for (uint32_t i = 0; i < m->n_members; i++) {
		const struct peer *p = m->members[i];

		if (p->active && p->page)
			pages[n++] = p->page;
	}
	return n;
}

/* Who pins each slot: "'collector-3' (pid 811), 'c-4' (pid 812), 2 more". */
static void holders_describe(const struct model *m, uint32_t pinned,
                             char (*text)[HOLDER_TEXT], const char **ptrs)
{
	uint32_t count[WSYNC_MAX_SLOTS] = { 0 };
	uint32_t n_slots = m->books.n_slots;

	for (uint32_t k = 0; k < WSYNC_MAX_SLOTS; k++) {
		text[k][0] = '\0';
		ptrs[k] = NULL;
	}
	for (uint32_t i = 0; i < m->n_members; i++) {
		const struct peer *p = m->members[i];
		uint32_t mine = 0;

		if (!p->active || !p->page)
			continue;
		for (uint32_t h = 0; h < WSYNC_MAX_VIEWS; h++) {
			uint64_t pin = atomic_load(&p->page->hazards[h].pin);
			uint32_t slot = wsync_pin_slot(pin);

			if (pin && wsync_pin_model(pin) == m->id && slot < n_slots)
				mine |= 1u << slot;
		}
		mine &= pinned;
		for (uint32_t k = 0; k < n_slots; k++) {
			size_t at;

			if (!(mine & (1u << k)) || ++count[k] > HOLDERS_NAMED)
				continue;
			at = strlen(text[k]);
			snprintf(text[k] + at, HOLDER_TEXT - at, "%s'%s' (pid %d)",
			         count[k] > 1 ? ", " : "", p->name, (int)p->pid);
		}
	}
	for (uint32_t k = 0; k < n_slots; k++) {
		size_t at = strlen(text[k]);

		if (count[k] > HOLDERS_NAMED)
			snprintf(text[k] + at, HOLDER_TEXT - at, ", %u more",
			         count[k] - HOLDERS_NAMED);
		if (count[k])
			ptrs[k] = text[k];
	}
}

int publish_grant(struct broker *b, struct model *m, struct peer *p,
                  struct grant *g, char *why, size_t whylen)
{
	struct wsync_session_page *pages[WSYNC_MAX_SESSIONS];
	uint32_t pinned;
	uint64_t version;
	size_t n;
	int slot;

	/* No load of the page's `latest` is needed here: every value it may
	 * honestly hold, and every value a collector accepts from it (the
	 * ctl entry's latest or grant), names a slot the books keep LATEST or
	 * GRANTED, which slot_pick never returns. What orders a collector's
	 * pin against this scan is the seq_cst store that moved the slot out
	 * of LATEST (model_set_latest at booking), before this scan in program
	 * order, and, for collectors that store their pins without a fence,
	 * the pin barrier between the two (docs/INVARIANTS.md). */
	n = member_pages(m, pages);
	if (n && (atomic_load_explicit(&b->ctl->features, memory_order_relaxed) &
	          WSYNC_CTL_PIN_BARRIER)) {
		int err = pin_barrier();

		if (err) {
			if (why)
				snprintf(why, whylen, "model '%s': the pin barrier failed (%s); "
				         "try again", m->name, strerror(-err));
			return -EAGAIN;
		}
	}
	pinned = hazard_scan(m->id, m->books.n_slots, pages, n);
	slot = slot_pick(&m->books, pinned);
	if (slot < 0) {
		if (why) {
			char text[WSYNC_MAX_SLOTS][HOLDER_TEXT];
			const char *ptrs[WSYNC_MAX_SLOTS];
			char desc[WSYNC_ERRMSG_MAX];

			holders_describe(m, pinned, text, ptrs);
			slot_describe_busy(&m->books, pinned, ptrs, desc, sizeof(desc));
			snprintf(why, whylen, "model '%s': no free slot: %s", m->name, desc);
		}
		return -EBUSY;
	}
	version = model_next_version(m);
	if (!version) {
		if (why)
			snprintf(why, whylen, "model '%s': versions exhausted", m->name);
		return -EOVERFLOW;
	}
	model_set_slot(m, (uint32_t)slot, WSYNC_SLOT_GRANTED, version);
	m->granted = true;
	m->grant_slot = (uint32_t)slot;
	m->grant_version = version;
	/* Collectors trust the page's latest while it equals this grant: a
	 * single publisher makes its own version visible (one hop). A group's
	 * version is made visible by the broker alone, once every rank
	 * committed (group.h): its grant is never published. */
	model_set_grant(m, m->group ? 0 : wsync_latest_pack(version, (uint32_t)slot));
	publish_current(m, p, g);
	return 0;
}

void publish_current(struct model *m, struct peer *p, struct grant *g)
{
	struct peer_model *sm = &p->m[m->id];
	uint32_t bit = 1u << m->grant_slot;

	g->slot = m->grant_slot;
	g->version = m->grant_version;
	g->has_fd = !(sm->fds_sent & bit);
	g->fd = g->has_fd ? m->slab_fd[m->grant_slot] : -1;
	sm->fds_sent |= bit;
}

void publish_notify(struct broker *b, struct model *m)
{
	outbox_notify(&b->out, m->id);
}

void publish_book(struct broker *b, struct model *m, uint64_t step, int64_t ns)
{
	uint32_t slot = m->grant_slot;
	uint64_t v = m->grant_version;

	for (uint32_t i = 0; i < m->books.n_slots; i++)
		if (m->books.state[i] == WSYNC_SLOT_LATEST)
			model_set_slot(m, i, WSYNC_SLOT_OLD, m->books.version[i]);
	model_set_slot(m, slot, WSYNC_SLOT_LATEST, v);
	model_set_latest(m, wsync_latest_pack(v, slot));
	model_set_grant(m, 0);
	m->granted = false;
	atomic_fetch_add(&m->ctl->commits, 1);
	atomic_store(&m->ctl->last_step, step);
	atomic_store(&m->ctl->last_commit_ns, ns);
	monitor_commit(m, v, slot, ns);
	log_debug("model '%s': v%llu committed in slot %u, step %llu", m->name,
	          (unsigned long long)v, slot, (unsigned long long)step);
	publish_notify(b, m);
}

void publish_abort(struct broker *b, struct model *m)
{
	(void)b;
	/* The slab may be half written: it holds no version any more. */
	model_set_slot(m, m->grant_slot, WSYNC_SLOT_FREE, 0);
	model_set_grant(m, 0);
	m->granted = false;
	atomic_fetch_add(&m->ctl->aborts, 1);
}

void publish_restore(struct broker *b, struct model *m, uint64_t seen)
{
	uint64_t seen_v = wsync_latest_version(seen), v;
	uint32_t slot = wsync_latest_slot(m->latest);
	uint64_t latest;

	/* Collectors never took `seen` (it is neither the ctl entry's latest
	 * nor its grant), but one may have taken the grant outstanding, which
	 * is above m->latest: the restored version goes above every version
	 * granted. hwm moves only through grants of our own, never from a
	 * value a client wrote. */
	v = model_next_version(m);
	if (!v)
		v = m->hwm;
	if (m->state == WSYNC_MODEL_READY && slot < m->books.n_slots &&
	    m->books.state[slot] == WSYNC_SLOT_LATEST) {
		struct wsync_slot_meta *meta = &m->page->slots[slot];

		atomic_store(&meta->version, v);
		atomic_store(&meta->step, atomic_load(&m->ctl->last_step));
		atomic_store(&meta->published_ns, atomic_load(&m->ctl->last_commit_ns));
		model_set_slot(m, slot, WSYNC_SLOT_LATEST, v);
	} else {
		slot = WSYNC_SLOT_NONE;
	}
	latest = wsync_latest_pack(v, slot);
	/* The ctl entry first: a collector that sees the page's new value
	 * must find it there (sub.c). */
	model_set_latest(m, latest);
	atomic_store(&m->page->latest, latest);
	model_wake(m);
	publish_notify(b, m);
	log_warn("model '%s': latest held v%llu slot %u, which was never validated; "
	         "restored slot %u under v%llu", m->name, (unsigned long long)seen_v,
	         wsync_latest_slot(seen), slot, (unsigned long long)v);
}

/* The reap rule: a grant already stored in `latest` was published (readers
 * may be reading it), so it is booked; any other grant is dropped. */
static void grant_settle(struct broker *b, struct model *m)
{
	uint64_t cur = atomic_load(&m->page->latest);

	if (m->granted && cur == wsync_latest_pack(m->grant_version, m->grant_slot)) {
		struct wsync_slot_meta *meta = &m->page->slots[m->grant_slot];
		int64_t ns = atomic_load(&meta->published_ns);

		publish_book(b, m, atomic_load(&meta->step), ns > 0 ? ns : wsync_real_ns());
		model_wake(m);
		return;
	}
	/* a publisher gone mid-write: its version is aborted, and counted so */
	if (m->granted)
		publish_abort(b, m);
	if (cur != m->latest)
		publish_restore(b, m, cur);
}

/* Whether the page's `latest` holds a value the broker stands behind: its
 * last validated one, or the outstanding grant (committed, not yet
 * booked). */
static bool latest_is_valid(const struct model *m, uint64_t cur)
{
	return cur == m->latest ||
	       (m->granted && !m->group &&
	        cur == wsync_latest_pack(m->grant_version, m->grant_slot));
}

/*
 * The page's `latest` is the publisher's hint for one-hop wake-ups, never a
 * fact: collectors take it only while it equals the ctl entry's latest or
 * grant, which only the broker writes. So a forged word is repaired, not
 * punished (the broker cannot tell who wrote a word into shared memory: a
 * publisher cut off earlier may still map the page, and blaming the current
 * publisher would let it take the model from an honest one). With no grant
 * outstanding the last validated latest is republished under a fresh
 * version, above any grant a collector may have taken; with one, the page
 * just gets the validated latest back, so the grant, when committed and
 * booked, is still the newest version.
 */
bool publish_check_latest(struct broker *b, struct model *m, const char *why)
{
	uint64_t cur = atomic_load(&m->page->latest);

	if (latest_is_valid(m, cur)) {
		m->forged_logged = false;
		return true;
	}
	if (!m->forged_logged)
		log_warn("model '%s': latest held v%llu slot %u, which no commit validated (%s; "
		         "publisher: %s); collectors ignored it, the broker repairs it", m->name,
		         (unsigned long long)wsync_latest_version(cur), wsync_latest_slot(cur),
		         why, m->pub ? m->pub->name : "none");
	m->forged_logged = true;
	if (!m->granted) {
		publish_restore(b, m, cur);
		return false;
	}
	atomic_store(&m->page->latest, m->latest);
	model_wake(m);
	return false;
}

void publish_audit(struct broker *b)
{
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		struct model *m = b->models[i];

		if (m && m->page)
			publish_check_latest(b, m, "housekeeping check");
	}
}

void publish_leave(struct broker *b, struct model *m, struct peer *p, const char *why)
{
	if (m->pub != p)
		return;
	if (m->state == WSYNC_MODEL_READY)
		grant_settle(b, m);
	m->pub = NULL;
	atomic_store(&m->ctl->publisher, 0);
	p->m[m->id].pub = false;
	p->m[m->id].fds_sent = 0;
	log_info("model '%s': publisher session %u '%s' pid %d left (%s)", m->name,
	         p->id, p->name, (int)p->pid, why);
	publish_revoke(b, m, p->uid);
}

void publish_revoke(struct broker *b, struct model *m, uid_t uid)
{
	char reason[96], why[WSYNC_ERRMSG_MAX];

	/* The broker's uid and root can do anything the broker can: not a
	 * boundary. Device memory cannot be taken back (and is never handed
	 * to another uid: handle_publish.c). */
	if (uid == b->uid || uid == 0 || m->state != WSYNC_MODEL_READY || m->gpu ||
	    m->granted || !m->has_writer)
		return;
	/* A stop that removes the weights (--no-keep) unlinks this memory
	 * right after: a copy would be thrown away. A stop that keeps them
	 * still moves, since the next start adopts what the departed uid
	 * could otherwise write. */
	if (b->stopping && !b->cfg.keep)
		return;
	snprintf(reason, sizeof(reason), "its publisher of uid %u left", (unsigned)uid);
	/* The copy on the mover's thread, after the moves queued before it
	 * when it is busy; only a stopping broker copies here, in the loop
	 * (nobody is left to wait for it). */
	if (!b->stopping && b->mover) {
		if (model_move_leave(b, m, uid, reason, why, sizeof(why)))
			publish_revoke_failed(m, uid, why);
		return;
	}
	if (!model_rotate(b, m, reason, why, sizeof(why)))
		return;
	publish_revoke_failed(m, uid, why);
}

void publish_revoke_failed(struct model *m, uid_t uid, const char *why)
{
	/* Its latest is in memory uid may still write: never served again.
	 * has_writer stays, so the next publisher of another uid than uid
	 * gets new memory (or is refused), with nothing copied. */
	model_withdraw_latest(m);
	log_error("%s; uid %u may still write its memory, so its latest version is "
	          "withdrawn: collectors get no new view of it until a publisher commits "
	          "v%llu or later", why, (unsigned)uid, (unsigned long long)(m->hwm + 1));
}

int publish_move_done(struct broker *b, struct model_move *mv, bool apply, char *why,
                      size_t whylen)
{
	int err = model_move_finish(b, mv, apply || mv->for_leave, why, whylen);

	if (err && mv->for_leave && mv->m)
		publish_revoke_failed(mv->m, mv->left_uid, why);
	return err;
}
