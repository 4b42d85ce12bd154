/* broker/group.c — sharded publisher groups; see group.h. */
#include "group.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "log.h"
#include "loop.h"
#include "model.h"
#include "publish.h"
#include "session.h"
#include "shm/clock.h"
#include "shm/shard.h"

static uint32_t all_ranks(const struct pub_group *g)
{
	return g->size >= 32 ? UINT32_MAX : (1u << g->size) - 1;
}

void group_free(struct pub_group *g)
{
	if (!g)
		return;
	for (uint32_t r = 0; r < WSYNC_MAX_RANKS; r++)
		free(g->parts[r]);
	free(g);
}

bool group_rank_of(const struct model *m, const struct session *s, uint32_t *rank)
{
	if (!m->group)
		return false;
	for (uint32_t r = 0; r < m->group->size; r++) {
		if (m->group->rank[r] == s) {
			if (rank)
				*rank = r;
			return true;
		}
	}
	return false;
}

int group_join(struct broker *b, struct model *m, struct session *s, uint32_t size,
               uint32_t rank, uint32_t timeout_ms, wsync_shard *parts, size_t n_parts,
               char *why, size_t whylen)
{
	struct pub_group *g = m->group;
	const wsync_shard *all[WSYNC_MAX_RANKS];
	size_t counts[WSYNC_MAX_RANKS];
	bool complete = true;
	int err;

	(void)b;
	if (!g) {
		g = fault_calloc(1, sizeof(*g));
		if (!g) {
			snprintf(why, whylen, "out of memory for a publisher group");
			return -ENOMEM;
		}
		g->size = size;
		g->timeout_ms = timeout_ms;
		g->deadline_ns = -1;
	} else if (g->size != size) {
		snprintf(why, whylen, "model '%s' is published by a group of %u ranks, not %u",
		         m->name, g->size, size);
		return -EINVAL;
	} else if (g->rank[rank]) {
		snprintf(why, whylen, "model '%s': rank %u is already open by session %u '%s' "
		         "(pid %d)", m->name, rank, g->rank[rank]->id, g->rank[rank]->name,
		         (int)g->rank[rank]->pid);
		return -EBUSY;
	}
	for (uint32_t r = 0; r < size; r++) {
		all[r] = r == rank ? parts : g->parts[r];
		counts[r] = r == rank ? n_parts : g->parts[r] ? g->n_parts[r] : 0;
		if (r != rank && !g->rank[r] && !g->parts[r])
			complete = false;
	}
	/* a rank that left keeps its parts: a rank coming back must declare the
	 * same ones, or parts that fit the others' */
	if (g->parts[rank]) {
		free(g->parts[rank]);
		g->parts[rank] = NULL;
		g->n_parts[rank] = 0;
		counts[rank] = n_parts;
		all[rank] = parts;
	}
	err = wsync_shards_check(m->tensors, m->n_tensors, all, counts, size, complete,
	                         why, whylen);
	if (err) {
		if (!m->group)
			group_free(g);
		return err;
	}
	g->rank[rank] = s;
	g->parts[rank] = parts;
	g->n_parts[rank] = n_parts;
	m->group = g;
	atomic_store(&m->ctl->group_size, size);
	log_info("model '%s': rank %u of %u is session %u '%s' pid %d (%zu parts)", m->name,
	         rank, size, s->id, s->name, (int)s->pid, n_parts);
	return 0;
}

int group_ready(const struct model *m, char *why, size_t whylen)
{
	const struct pub_group *g = m->group;
	size_t at = 0;
	int missing = 0;

	for (uint32_t r = 0; r < g->size; r++) {
		if (g->rank[r])
			continue;
		if (at < whylen) {
			int n = snprintf(why + at, whylen - at, "%s%u", missing ? ", " : "", r);
			at = n < 0 ? whylen : at + (size_t)n;
		}
		missing++;
	}
	if (!missing)
		return 0;
	{
		char ranks[128];

		snprintf(ranks, sizeof(ranks), "%s", why);
		snprintf(why, whylen, "model '%s': waiting for rank%s %s of %u to open it",
		         m->name, missing > 1 ? "s" : "", ranks, g->size);
	}
	return -EAGAIN;
}

static void answer(struct broker *b, struct session *s, uint32_t seq, int err,
                   const char *why, const struct model *m, uint64_t version)
{
	union wsync_msg_any msg;

	if (!s || s->state != SESSION_ACTIVE)
		return;
	if (err) {
		wsync_msg_init(&msg.hdr, WSYNC_MSG_ERROR, seq);
		msg.error.err = err;
		msg.error.req_type = WSYNC_MSG_COMMIT;
		snprintf(msg.error.msg, sizeof(msg.error.msg), "%s", why);
	} else {
		wsync_msg_init(&msg.hdr, WSYNC_MSG_COMMIT_OK, seq);
		msg.commit_ok.model_id = m->id;
		msg.commit_ok.version = version;
	}
	loop_send(b, s, &msg, NULL, 0);
}

static void group_reset(struct model *m)
{
	m->group->committed = 0;
	m->group->deadline_ns = -1;
	atomic_store(&m->ctl->group_committed, 0);
	atomic_store(&m->ctl->group_first_ns, 0);
}

void group_drop(struct broker *b, struct model *m, int err, const char *why)
{
	struct pub_group *g = m->group;
	char text[WSYNC_ERRMSG_MAX];

	if (!g || !m->granted)
		return;
	snprintf(text, sizeof(text), "model '%s': v%llu was dropped: %s", m->name,
	         (unsigned long long)m->grant_version, why);
	g->dropped_version = m->grant_version;
	g->dropped_err = err;
	snprintf(g->dropped_why, sizeof(g->dropped_why), "%s", why);
	for (uint32_t r = 0; r < g->size; r++)
		if (g->committed & (1u << r))
			answer(b, g->rank[r], g->commit_seq[r], err, text, m, 0);
	publish_abort(b, m);
	group_reset(m);
	log_info("%s", text);
}

/* Every rank committed: one step, then the version is made visible. */
static void group_complete(struct broker *b, struct model *m)
{
	struct pub_group *g = m->group;
	uint64_t version = m->grant_version, step = g->step[0];
	uint32_t slot = m->grant_slot;
	struct wsync_slot_meta *meta = &m->page->slots[slot];
	int64_t now = wsync_real_ns();

	for (uint32_t r = 1; r < g->size; r++) {
		if (g->step[r] != step) {
			char why[160];

			snprintf(why, sizeof(why), "the ranks' steps differ (rank 0: %llu, rank %u: "
			         "%llu)", (unsigned long long)step, r,
			         (unsigned long long)g->step[r]);
			group_drop(b, m, -EINVAL, why);
			return;
		}
	}
	atomic_store(&meta->version, version);
	atomic_store(&meta->step, step);
	atomic_store(&meta->published_ns, now);
	atomic_store(&meta->checksum, 0);  /* no rank hashes the whole slab */
	publish_book(b, m, step, now);     /* ctl latest first */
	atomic_store(&m->page->latest, m->latest);
	model_wake(m);
	for (uint32_t r = 0; r < g->size; r++)
		answer(b, g->rank[r], g->commit_seq[r], 0, NULL, m, version);
	atomic_store(&m->ctl->group_last_ns, now - atomic_load(&m->ctl->group_first_ns));
	group_reset(m);
}

int group_commit(struct broker *b, struct model *m, uint32_t rank, uint32_t seq,
                 uint32_t slot, uint64_t version, uint64_t step, char *why, size_t whylen)
{
	struct pub_group *g = m->group;

	if (!m->granted || slot != m->grant_slot || version != m->grant_version) {
		if (version == g->dropped_version) {
			snprintf(why, whylen, "model '%s': v%llu was dropped: %s", m->name,
			         (unsigned long long)version, g->dropped_why);
			return g->dropped_err;
		}
		snprintf(why, whylen, "model '%s': COMMIT of v%llu slot %u by rank %u, the grant "
		         "is %s", m->name, (unsigned long long)version, slot, rank,
		         m->granted ? "another" : "none");
		return -EPROTO;
	}
	if (g->committed & (1u << rank)) {
		snprintf(why, whylen, "model '%s': rank %u committed v%llu twice", m->name, rank,
		         (unsigned long long)version);
		return -EPROTO;
	}
	if (!g->committed)
		atomic_store(&m->ctl->group_first_ns, wsync_real_ns());
	g->committed |= 1u << rank;
	atomic_store(&m->ctl->group_committed, g->committed);
	g->commit_seq[rank] = seq;
	g->step[rank] = step;
	if (g->committed == all_ranks(g)) {
		group_complete(b, m);
		return 0;
	}
	if (g->timeout_ms && g->deadline_ns < 0) {
		g->deadline_ns = wsync_mono_ns() + (int64_t)g->timeout_ms * 1000000;
		loop_poll_soon(b, (int64_t)g->timeout_ms * 1000000);
	}
	return 0;
}

void group_leave(struct broker *b, struct model *m, struct session *s, const char *why)
{
	struct pub_group *g = m->group;
	uint32_t r;
	char text[160];

	if (!group_rank_of(m, s, &r))
		return;
	snprintf(text, sizeof(text), "rank %u (session %u '%s' pid %d) left: %s", r, s->id,
	         s->name, (int)s->pid, why);
	group_drop(b, m, -ECONNABORTED, text);
	g->rank[r] = NULL;
	g->committed &= ~(1u << r);
	log_info("model '%s': %s", m->name, text);
	for (uint32_t k = 0; k < g->size; k++) {
		if (g->rank[k]) {
			atomic_store(&m->ctl->publisher, g->rank[k]->id);
			return;
		}
	}
	atomic_store(&m->ctl->publisher, 0);
	atomic_store(&m->ctl->group_size, 0);
	m->group = NULL;                 /* the last rank went: a new group may form */
	group_free(g);
}

int64_t group_poll(struct broker *b)
{
	int64_t now = wsync_mono_ns(), next = -1;

	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		struct model *m = b->models[i];
		struct pub_group *g = m ? m->group : NULL;
		char why[160];

		if (!g || g->deadline_ns < 0)
			continue;
		if (now < g->deadline_ns) {
			if (next < 0 || g->deadline_ns - now < next)
				next = g->deadline_ns - now;
			continue;
		}
		snprintf(why, sizeof(why), "not every rank committed within the group "
		         "deadline of %u ms (committed: 0x%x of 0x%x)", g->timeout_ms,
		         g->committed, all_ranks(g));
		group_drop(b, m, -ECONNABORTED, why);
	}
	return next;
}
