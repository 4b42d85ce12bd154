/* broker/group.c — sharded publisher groups; see group.h. */
#include "group.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "log.h"
#include "model.h"
#include "outbox.h"
#include "peer.h"
#include "publish.h"
#include "shm/clock.h"
#include "shm/shard.h"

static uint32_t all_ranks(const struct pub_group *g)
{
	return g->size >= 32 ? UINT32_MAX : (1u << g->size) - 1;
}

static void group_free(struct pub_group *g)
{
	for (uint32_t r = 0; r < WSYNC_MAX_RANKS; r++)
		free(g->parts[r]);
	free(g);
}

bool group_rank_of(const struct model *m, const struct peer *p, uint32_t *rank)
{
	if (!m->group)
		return false;
	for (uint32_t r = 0; r < m->group->size; r++) {
		if (m->group->rank[r] == p) {
			if (rank)
				*rank = r;
			return true;
		}
	}
	return false;
}

int group_join(struct broker *b, struct model *m, struct peer *p, uint32_t size,
               uint32_t rank, uint32_t timeout_ms, bool sums, wsync_shard *parts,
               size_t n_parts, char *why, size_t whylen)
{
	struct pub_group *g = m->group;
	const wsync_shard *all[WSYNC_MAX_RANKS];
	size_t counts[WSYNC_MAX_RANKS];
	bool complete = true;
	uint32_t mine;
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
	} else if (group_rank_of(m, p, &mine)) {
		snprintf(why, whylen, "model '%s': this session already publishes rank %u of the "
		         "group; each rank needs a client of its own (one wsync_connect per "
		         "rank)", m->name, mine);
		return -EBUSY;
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
	/* A rank that left keeps its parts: a rank coming back must declare
	 * the same ones, or parts that fit the others'. */
	err = wsync_shards_check(m->tensors, m->n_tensors, all, counts, size, complete,
	                         why, whylen);
	if (err) {
		if (!m->group)
			group_free(g);
		return err;
	}
	free(g->parts[rank]);
	g->rank[rank] = p;
	g->sums[rank] = sums;
	g->parts[rank] = parts;
	g->n_parts[rank] = n_parts;
	memset(&g->dropped[rank], 0, sizeof(g->dropped[rank]));
	m->group = g;
	atomic_store(&m->ctl->group_size, size);
	log_info("model '%s': rank %u of %u is session %u '%s' pid %d (%zu parts)", m->name,
	         rank, size, p->id, p->name, (int)p->pid, n_parts);
	return 0;
}

int group_ready(const struct model *m, char *why, size_t whylen)
{
	const struct pub_group *g = m->group;
	char ranks[128];
	size_t at = 0;
	int missing = 0;

	ranks[0] = '\0';
	for (uint32_t r = 0; r < g->size; r++) {
		if (g->rank[r])
			continue;
		if (at < sizeof(ranks)) {
			int n = snprintf(ranks + at, sizeof(ranks) - at, "%s%u", missing ? ", " : "",
			                 r);
			at = n < 0 ? sizeof(ranks) : at + (size_t)n;
		}
		missing++;
	}
	if (!missing)
		return 0;
	snprintf(why, whylen, "model '%s': waiting for rank%s %s of %u to open it", m->name,
	         missing > 1 ? "s" : "", ranks, g->size);
	return -EAGAIN;
}

void group_begun(struct model *m, uint32_t rank)
{
	m->group->begun |= 1u << rank;
}

static void answer(struct broker *b, struct peer *p, uint32_t seq, int err, const char *why,
                   const struct model *m, uint64_t version, uint32_t flags)
{
	union wsync_msg_any msg;

	if (err) {
		outbox_error(&b->out, p, seq, WSYNC_MSG_COMMIT, err, why);
		return;
	}
	wsync_msg_init(&msg.hdr, WSYNC_MSG_COMMIT_OK, seq);
	msg.commit_ok.model_id = m->id;
	msg.commit_ok.version = version;
	msg.commit_ok.flags = flags;
	outbox_reply(&b->out, p, &msg);
}

static void group_reset(struct model *m)
{
	m->group->committed = 0;
	m->group->begun = 0;
	m->group->deadline_ns = -1;
	atomic_store(&m->ctl->group_committed, 0);
	atomic_store(&m->ctl->group_first_ns, 0);
}

/* Drops the version in progress: the ranks that committed are answered
 * with err, those that began it and did not commit yet keep the reason for
 * when they do. */
static void group_drop(struct broker *b, struct model *m, int err, const char *why)
{
	struct pub_group *g = m->group;
	char text[WSYNC_ERRMSG_MAX];

	if (!g || !m->granted)
		return;
	snprintf(text, sizeof(text), "model '%s': v%llu was dropped: %s", m->name,
	         (unsigned long long)m->grant_version, why);
	for (uint32_t r = 0; r < g->size; r++) {
		struct group_dropped *d = &g->dropped[r];

		if (g->committed & (1u << r)) {
			answer(b, g->rank[r], g->commit_seq[r], err, text, m, 0, 0);
		} else if (g->begun & (1u << r)) {
			d->version = m->grant_version;
			d->err = err;
			snprintf(d->why, sizeof(d->why), "%s", why);
		}
	}
	publish_abort(b, m);
	group_reset(m);
	log_info("%s", text);
}

/* The rank that forms a complete version's checksum: the lowest that
 * keeps checksums, WSYNC_MAX_RANKS when none does. */
static uint32_t group_hasher(const struct pub_group *g)
{
	for (uint32_t r = 0; r < g->size; r++)
		if (g->rank[r] && g->sums[r])
			return r;
	return WSYNC_MAX_RANKS;
}

/* Every rank committed: one step, then the version is made visible. Its
 * checksum is pending on one rank (group_hasher), which learns it from its
 * COMMIT_OK and hashes the slab, reusing the blocks its own copy hashed
 * (docs/ARCHITECTURE.md, "Checksums"); the broker never reads a slab. */
static void group_complete(struct broker *b, struct model *m)
{
	struct pub_group *g = m->group;
	uint64_t version = m->grant_version, step = g->step[0];
	uint32_t slot = m->grant_slot, hasher = group_hasher(g);
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
	atomic_store(&meta->checksum, 0);
	atomic_store(&m->page->sum_pending[slot],
	             hasher < WSYNC_MAX_RANKS ? g->rank[hasher]->id : 0);
	publish_book(b, m, step, now);     /* ctl latest first */
	atomic_store(&m->page->latest, m->latest);
	model_wake(m);
	for (uint32_t r = 0; r < g->size; r++)
		answer(b, g->rank[r], g->commit_seq[r], 0, NULL, m, version,
		       r == hasher ? WSYNC_COMMIT_HASH : 0);
	atomic_store(&m->ctl->group_last_ns, now - atomic_load(&m->ctl->group_first_ns));
	group_reset(m);
}

/* The answer owed to rank r for a version dropped before its COMMIT or
 * ABORT of it came: true (and err, why) if version is that one. */
static bool dropped_owed(struct model *m, uint32_t r, uint64_t version, int *err,
                         char *why, size_t whylen)
{
	struct group_dropped *d = &m->group->dropped[r];

	if (!d->version || d->version != version)
		return false;
	snprintf(why, whylen, "model '%s': v%llu was dropped: %s", m->name,
	         (unsigned long long)version, d->why);
	*err = d->err;
	d->version = 0;
	return true;
}

int group_commit(struct broker *b, struct model *m, uint32_t rank, uint32_t seq,
                 uint32_t slot, uint64_t version, uint64_t step, char *why, size_t whylen)
{
	struct pub_group *g = m->group;
	int err;

	if (dropped_owed(m, rank, version, &err, why, whylen))
		return err;
	if (!m->granted || slot != m->grant_slot || version != m->grant_version) {
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
	g->begun |= 1u << rank;
	atomic_store(&m->ctl->group_committed, g->committed);
	g->commit_seq[rank] = seq;
	g->step[rank] = step;
	if (g->committed == all_ranks(g)) {
		group_complete(b, m);
		return 0;
	}
	if (g->timeout_ms && g->deadline_ns < 0) {
		g->deadline_ns = wsync_mono_ns() + (int64_t)g->timeout_ms * 1000000;
		outbox_timer_in(&b->out, (int64_t)g->timeout_ms * 1000000);
	}
	return 0;
}

int group_abort(struct broker *b, struct model *m, uint32_t rank, uint32_t slot,
                uint64_t version, char *why, size_t whylen)
{
	char text[64];
	int err;

	if (dropped_owed(m, rank, version, &err, why, whylen))
		return 0;
	if (!m->granted || slot != m->grant_slot || version != m->grant_version) {
		snprintf(why, whylen, "model '%s': ABORT of v%llu slot %u does not match the "
		         "grant", m->name, (unsigned long long)version, slot);
		return -EPROTO;
	}
	snprintf(text, sizeof(text), "rank %u aborted it", rank);
	group_drop(b, m, -ECONNABORTED, text);
	return 0;
}

void group_leave(struct broker *b, struct model *m, struct peer *p, const char *why)
{
	struct pub_group *g = m->group;
	uint32_t r;
	char text[160];

	if (!group_rank_of(m, p, &r))
		return;
	snprintf(text, sizeof(text), "rank %u (session %u '%s' pid %d) left: %s", r, p->id,
	         p->name, (int)p->pid, why);
	group_drop(b, m, -ECONNABORTED, text);
	g->rank[r] = NULL;
	g->committed &= ~(1u << r);
	g->begun &= ~(1u << r);
	memset(&g->dropped[r], 0, sizeof(g->dropped[r]));
	p->m[m->id].pub = false;
	p->m[m->id].fds_sent = 0;
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
	publish_revoke(b, m, p->uid);
}

int64_t group_poll(struct broker *b)
{
	int64_t now = wsync_mono_ns(), next = -1;

	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		struct model *m = b->models[i];
		struct pub_group *g = m ? m->group : NULL;
		char why[160], late[96];
		uint32_t missing;
		size_t at = 0;

		if (!g || g->deadline_ns < 0)
			continue;
		if (now < g->deadline_ns) {
			if (next < 0 || g->deadline_ns - now < next)
				next = g->deadline_ns - now;
			continue;
		}
		missing = all_ranks(g) & ~g->committed;
		late[0] = '\0';
		for (uint32_t r = 0; r < g->size && at < sizeof(late); r++) {
			int n;

			if (!(missing & (1u << r)))
				continue;
			n = snprintf(late + at, sizeof(late) - at, "%s%u", at ? ", " : "", r);
			at = n < 0 ? sizeof(late) : at + (size_t)n;
		}
		snprintf(why, sizeof(why), "rank%s %s missed the group deadline of %u ms",
		         missing & (missing - 1) ? "s" : "", late, g->timeout_ms);
		group_drop(b, m, -ECONNABORTED, why);
	}
	return next;
}
