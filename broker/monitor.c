/*
 * broker/monitor.c — what monitors read of each model, kept by the broker:
 * the history of its commits (which commit each version was, for lag in
 * commits and milliseconds; stats.h), its publisher's pid and the checksum
 * of its latest version, mirrored into its ctl entry once a tick.
 *
 * Every commit is recorded when it is booked (monitor_commit, from
 * publish_book), so lags are exact; the tick adds the latest version and the
 * versions still in slots as well, which covers versions adopted at start.
 * The checksum is mirrored at each commit too (a model published faster
 * than the tick would otherwise never show one), with checksum_version as
 * a sequence word: 0 while the pair is rewritten, then the version it
 * belongs to (release); a monitor takes the checksum only when it reads
 * the same version before and after it (tools/common/snap.c).
 * Everything here is informational: nothing read or written decides
 * anything in the broker, and only the broker writes these words.
 */
#include "monitor.h"

#include <stdatomic.h>

#include "group.h"
#include "model.h"
#include "peer.h"

#define RELAXED memory_order_relaxed

/* The checksum its publisher stored with version v in slot (0 = none)
 * into the ctl entry, for monitors. */
static void mirror_checksum(struct model *m, uint32_t slot, uint64_t v)
{
	struct wsync_ctl_model *e = m->ctl;
	uint64_t sum = 0;

	if (v && m->page && slot < WSYNC_MAX_SLOTS &&
	    atomic_load_explicit(&m->page->slots[slot].version, RELAXED) == v)
		sum = atomic_load_explicit(&m->page->slots[slot].checksum, RELAXED);
	if (atomic_load_explicit(&e->checksum_version, RELAXED) == (sum ? v : 0) &&
	    atomic_load_explicit(&e->checksum, RELAXED) == sum)
		return;
	atomic_store_explicit(&e->checksum_version, 0, RELAXED);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&e->checksum, sum, RELAXED);
	atomic_store_explicit(&e->checksum_version, sum ? v : 0, memory_order_release);
}

void monitor_commit(struct model *m, uint64_t version, uint32_t slot, int64_t ns)
{
	struct stats_point pt = {
		.version = version,
		.count = atomic_load_explicit(&m->ctl->commits, RELAXED),
		.ns = ns,
		.exact = true,
	};

	stats_history_add(&m->hist, &pt);
	mirror_checksum(m, slot, version);
}

/* Versions still in slots between the newest point and the latest `top`
 * (exclusive), in order, with the commit time their slot's metadata gives. */
static void observe_slots(const struct model *m, struct stats_history *h, uint64_t top,
                          uint64_t commits)
{
	/* Counting from the newest point; with none, from version 0 when every
	 * version up to the latest was committed (commits == top: a model that
	 * never skipped one), as a point of count 0. */
	struct stats_point origin = { .version = 0, .count = 0, .exact = true };
	const struct stats_point *last = h->n ? stats_point_at(h, h->n - 1) :
	                                 commits == top ? &origin : NULL;
	uint64_t low = last ? last->version : 0;
	bool gapless = last && last->exact && top - last->version == commits - last->count;

	for (;;) {
		uint64_t best = UINT64_MAX;
		uint32_t slot = 0;
		struct stats_point pt;
		int64_t ns;

		for (uint32_t k = 0; k < m->books.n_slots && k < WSYNC_MAX_SLOTS; k++) {
			uint64_t v = m->books.version[k];

			if ((m->books.state[k] == WSYNC_SLOT_OLD ||
			     m->books.state[k] == WSYNC_SLOT_LATEST) && v > low && v < top && v < best) {
				best = v;
				slot = k;
			}
		}
		if (best == UINT64_MAX)
			return;
		ns = 0;
		if (m->page && atomic_load_explicit(&m->page->slots[slot].version, RELAXED) == best)
			ns = atomic_load_explicit(&m->page->slots[slot].published_ns, RELAXED);
		pt.version = best;
		pt.ns = ns > 0 ? ns : 0;
		pt.exact = gapless;
		if (gapless) {
			pt.count = last->count + (best - last->version);
		} else {
			/* below the latest's count by at least one per later version seen */
			pt.count = commits > (top - best) ? commits - (top - best) : 0;
			if (last && pt.count <= last->count)
				pt.count = last->count + 1;
		}
		stats_history_add(h, &pt);
		low = best;
	}
}

void monitor_model(struct model *m)
{
	struct wsync_ctl_model *e = m->ctl;
	uint64_t latest = atomic_load_explicit(&e->latest, RELAXED);
	uint64_t v = wsync_latest_version(latest);
	uint32_t slot = wsync_latest_slot(latest);
	uint64_t commits = atomic_load_explicit(&e->commits, RELAXED);
	int64_t ns = atomic_load_explicit(&e->last_commit_ns, RELAXED);
	struct stats_history *h = &m->hist;
	uint32_t pid = 0;

	if (m->pub)
		pid = (uint32_t)m->pub->pid;
	else if (m->group && m->group->rank[0])
		pid = (uint32_t)m->group->rank[0]->pid;
	atomic_store_explicit(&e->publisher_pid, pid, RELAXED);

	if (m->state != WSYNC_MODEL_READY || slot == WSYNC_SLOT_NONE || !v) {
		h->latest = 0;
		atomic_store_explicit(&e->stats_commits, 0, RELAXED);
		mirror_checksum(m, WSYNC_SLOT_NONE, 0);
		return;
	}
	if (!h->n || v > stats_point_at(h, h->n - 1)->version) {
		struct stats_point pt = { .version = v, .count = commits, .ns = ns, .exact = true };

		observe_slots(m, h, v, commits);
		stats_history_add(h, &pt);
	}
	h->latest = v;
	h->commits = commits;
	h->latest_ns = ns;
	atomic_store_explicit(&e->stats_commits, commits | WSYNC_STATS_COMMITS_SET, RELAXED);
	mirror_checksum(m, slot, v);
}
