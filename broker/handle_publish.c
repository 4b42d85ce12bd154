/*
 * broker/handle_publish.c — the publisher's requests: PUB_OPEN (the layout
 * checked against the broker's own computation), BEGIN, COMMIT, ABORT.
 *
 * The commit path (handle_commit) is the one place where the broker meets
 * a value the publisher wrote without asking: page->latest. It is loaded
 * once, seq_cst, and only compared: either it is exactly the grant (booked)
 * or the model's latest is put back (publish.c explains the invariants).
 */
#include "handlers.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "fault.h"
#include "gpu_slab.h"
#include "group.h"
#include "log.h"
#include "model.h"
#include "mover.h"
#include "publish.h"
#include "request.h"
#include "session.h"
#include "shm/clock.h"
#include "shm/tensor_layout.h"
#include "uids.h"


static int layout_read(struct req *r, int fd, uint32_t n, uint32_t n_parts,
                       wsync_tensor_desc **out)
{
	size_t want = (size_t)n * sizeof(wsync_tensor_desc) +
	              (size_t)n_parts * sizeof(wsync_shard), done = 0;
	struct statfs sfs;
	struct stat st;
	char *buf;

	/* Only tmpfs/hugetlbfs: a read from them cannot block the broker. */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || fstatfs(fd, &sfs) < 0 ||
	    (sfs.f_type != TMPFS_MAGIC && sfs.f_type != HUGETLBFS_MAGIC))
		return req_fail(r, -EINVAL, "the layout fd is not a memfd");
	if ((uint64_t)st.st_size != want)
		return req_fail(r, -EINVAL, "the layout memfd holds %lld bytes; %u tensors "
		                "and %u parts need exactly %zu", (long long)st.st_size, n,
		                n_parts, want);
	buf = fault_malloc(want);
	if (!buf)
		return req_fail(r, -ENOMEM, "out of memory for %u tensor descriptors", n);
	while (done < want) {
		ssize_t k = pread(fd, buf + done, want - done, (off_t)done);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			free(buf);
			return req_fail(r, -EINVAL, "reading the layout memfd: %s",
			                k < 0 ? strerror(errno) : "it shrank");
		}
		done += (size_t)k;
	}
	*out = (wsync_tensor_desc *)buf;
	return 0;
}

/* Recomputes the canonical layout from the copy; it must be exactly what
 * the client computed. On success *canon is the broker's own array. */
static int layout_check(struct req *r, const wsync_tensor_desc *in,
                        wsync_tensor_desc **canon, uint64_t *hash)
{
	const struct wsync_msg_pub_open *p = &r->m->pub_open;
	char why[WSYNC_ERRMSG_MAX - 160];
	wsync_tensor_desc *out;
	uint64_t bytes;
	int err;

	out = fault_malloc((size_t)p->n_tensors * sizeof(*out));
	if (!out)
		return req_fail(r, -ENOMEM, "out of memory for %u tensor descriptors",
		                p->n_tensors);
	err = wsync_layout_compute(in, p->n_tensors, out, &bytes, why, sizeof(why));
	if (err) {
		err = req_fail(r, -EINVAL, "model '%s': %s", p->model, why);
		goto out_free;
	}
	for (uint32_t i = 0; i < p->n_tensors; i++) {
		if (in[i].offset != out[i].offset) {
			err = req_fail(r, -EINVAL, "model '%s': tensor %u '%.64s' is at offset "
			               "%llu, the canonical layout puts it at %llu", p->model,
			               i, out[i].name, (unsigned long long)in[i].offset,
			               (unsigned long long)out[i].offset);
			goto out_free;
		}
	}
	if (bytes != p->bytes) {
		err = req_fail(r, -EINVAL, "model '%s': the client computed %llu bytes per "
		               "slab, the canonical layout needs %llu", p->model,
		               (unsigned long long)p->bytes, (unsigned long long)bytes);
		goto out_free;
	}
	*hash = wsync_layout_hash(out, p->n_tensors);
	if (*hash != p->layout_hash) {
		err = req_fail(r, -EINVAL, "model '%s': layout hash 0x%016llx differs from "
		               "the canonical 0x%016llx", p->model,
		               (unsigned long long)p->layout_hash, (unsigned long long)*hash);
		goto out_free;
	}
	*canon = out;
	return 0;

out_free:
	free(out);
	return err;
}

/* "it lives on 3 GPUs (flags 0x1), this open names 2 (flags 0x0)" */
static void devices_describe(const struct model *m, const struct model_devices *dev,
                             char *buf, size_t len)
{
	snprintf(buf, len, "it lives on %u GPU%s (flags 0x%x), this open names %u (flags "
	         "0x%x)", m->gpu ? m->gpu->n_devices : 0,
	         m->gpu && m->gpu->n_devices == 1 ? "" : "s", m->gpu ? m->gpu->dev_flags : 0,
	         dev->n, dev->flags);
}

/*
 * A PUB_OPEN of a model someone publishes is refused without reading its
 * layout, work in proportion to its size that a client could ask for again
 * and again: the layout's hash, size and tensor count in the message say
 * whether it is the same (-EBUSY, which a trainer waiting for its earlier
 * self to be reaped retries) or another (-EEXIST, a violation).
 */
static int pub_open_refuse_early(struct req *r, const struct model *m,
                                 const struct model_devices *dev)
{
	const struct wsync_msg_pub_open *p = &r->m->pub_open;

	if (p->layout_hash != m->hash || p->bytes != m->bytes || p->n_tensors != m->n_tensors)
		return req_fail(r, -EEXIST, "model '%s' is published by %s with another layout "
		                "(%u tensors, %llu bytes, hash 0x%016llx; this open: %u, %llu, "
		                "0x%016llx): close it first, or publish under another name",
		                m->name, m->pub ? m->pub->name : "a group", m->n_tensors,
		                (unsigned long long)m->bytes, (unsigned long long)m->hash,
		                p->n_tensors, (unsigned long long)p->bytes,
		                (unsigned long long)p->layout_hash);
	if (!model_devices_match(m, dev)) {
		char diff[160];

		devices_describe(m, dev, diff, sizeof(diff));
		return req_fail(r, -EEXIST, "model '%s' is published on other GPUs: %s",
		                m->name, diff);
	}
	if (m->pub)
		return req_fail(r, -EBUSY, "model '%s' is already published by session %u "
		                "'%s' (pid %d)", m->name, m->pub->id, m->pub->name,
		                (int)m->pub->pid);
	return req_fail(r, -EBUSY, "model '%s' is published by a group of %u ranks", m->name,
	                m->group->size);
}

/* Whether any slot of m holds a version (LATEST, OLD, GRANTED): memory a
 * collector may be reading, or may be handed a view of. */
static bool model_holds_version(const struct model *m)
{
	if (m->state != WSYNC_MODEL_READY)
		return false;
	for (uint32_t k = 0; k < m->books.n_slots; k++)
		if (m->books.state[k] != WSYNC_SLOT_FREE)
			return true;
	return false;
}

/* A publisher of a uid other than the broker's and root: one layout and
 * the models the uid owns are bounded (uids.h), checked before a byte of
 * the layout is read. */
static int pub_open_bound(struct req *r)
{
	const struct wsync_msg_pub_open *p = &r->m->pub_open;
	uint64_t n = (uint64_t)p->n_tensors + p->n_parts, owned = 0;

	if (!r->p->books)
		return 0;
	if (n > UIDS_MAX_LAYOUT)
		return req_fail(r, -E2BIG, "model '%s': %llu tensors and parts; a layout of uid "
		                "%u may hold %d at most", p->model, (unsigned long long)n,
		                (unsigned)r->p->uid, UIDS_MAX_LAYOUT);
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		const struct model *m = r->b->models[i];

		if (m && m->state == WSYNC_MODEL_READY && m->owner == r->p->uid &&
		    strcmp(m->name, p->model))
			owned += m->n_tensors;
	}
	if (owned + p->n_tensors > UIDS_MAX_TENSORS)
		return req_fail(r, -E2BIG, "model '%s': the models of uid %u already hold %llu "
		                "tensors, and its models may hold %d at most", p->model,
		                (unsigned)r->p->uid, (unsigned long long)owned, UIDS_MAX_TENSORS);
	return 0;
}

/*
 * The memory a publisher is handed read-write must be out of reach of every
 * earlier publisher of another uid, and what collectors read must be out of
 * reach of a publisher of another uid than the one whose memory it is
 * (DESIGN invariant 11, docs/INVARIANTS.md section 11):
 *  - an earlier publisher of another uid may keep its mappings of the page
 *    and slabs after it left, and whatever it writes there would land in
 *    the new publisher's versions;
 *  - a new publisher of a uid other than the broker's and root must never
 *    be handed memory holding versions someone else wrote (the committed
 *    latest, views collectors hold), whoever that was: the broker's uid and
 *    root included.
 * So such a publisher gets new memory first (model_move_start: the latest
 * copied into it on the mover's thread, the reply deferred until then); the slabs themselves it gets only as grants hand it free
 * slots (pub_open_hands_slabs). The memory is a uid's (writer_uid) once
 * that uid was handed it, and stays so across the move its departure
 * makes, whose copy is its own latest. A publisher of the broker's uid or
 * root needs a move only after a writer of another uid (it can write
 * whatever the broker can). Device memory cannot be given anew with the
 * latest version in it, and ranks of one group write the same slabs: both
 * are refused across uids instead.
 */
static int pub_open_take_memory(struct req *r, struct model *m)
{
	uid_t uid = r->p->uid;
	bool trusted = uid == r->b->uid || uid == 0;
	bool move;
	char reason[96];
	int err;

	if (model_moving(r->b, m))
		return 1;                /* its departure's move: answered after it */
	if (m->gpu && !trusted)
		return req_fail(r, -EPERM, "device model '%s': GPU memory handed to a process "
		                "cannot be taken back, so only the broker's user (uid %u) and "
		                "root publish device models, not uid %u", m->name,
		                (unsigned)r->b->uid, (unsigned)uid);
	/* Each move copies the latest slab (on the mover's thread): a uid
	 * whose open or leave moves the model must not make the broker copy
	 * without bound by opening and leaving again and again. The
	 * broker's uid and root are the trainer, never refused. */
	if (!m->gpu && m->state == WSYNC_MODEL_READY && !trusted) {
		int64_t now = wsync_mono_ns();

		if (!model_move_budget_left(m, now))
			return req_fail(r, -EBUSY, "model '%s' moved to new memory %d times in the "
			                "last second (each move copies its latest version): a "
			                "publisher of uid %u may open it again within a second",
			                m->name, MODEL_MOVE_BUDGET, (unsigned)uid);
		int64_t wait = model_move_wait_ns(r->b, now);

		if (wait)
			return req_fail(r, -EBUSY, "model '%s': moves of models to new memory may "
			                "take a tenth of the broker's time, and recent ones took "
			                "more: a publisher of uid %u may open it in %lld ms",
			                m->name, (unsigned)uid, (long long)(wait / 1000000 + 1));
	}
	if (m->has_writer && m->writer_uid != uid && m->group)
		return req_fail(r, -EPERM, "model '%s': its other ranks run as uid %u; the ranks "
		                "of one group run as one user", m->name, (unsigned)m->writer_uid);
	if (m->gpu || m->writer_uid == uid)
		move = false;
	else if (trusted)
		move = m->has_writer && m->writer_uid != r->b->uid && m->writer_uid != 0;
	else
		move = m->has_writer || model_holds_version(m);
	if (move) {
		if (m->has_writer)
			snprintf(reason, sizeof(reason), "a publisher of uid %u follows one of "
			         "uid %u", (unsigned)uid, (unsigned)m->writer_uid);
		else
			snprintf(reason, sizeof(reason), "a publisher of uid %u takes over "
			         "versions it did not write", (unsigned)uid);
		/* the copy runs on the mover's thread: the reply waits for it
		 * (handle_pub_open_moved) */
		err = model_move_start(r->b, m, reason, r->why, sizeof(r->why));
		return err ? err : 1;
	}
	m->has_writer = true;
	m->writer_uid = uid;
	return 0;
}

/*
 * Whether PUB_OPEN_OK hands p every slab (so that no grant waits for a
 * mapping) or only the page, each slab then coming with the grant of its
 * slot (publish_current), which is free when granted. A publisher of the
 * broker's uid or root gets them all; one of another uid only while no
 * slot holds a version, so it never holds a writable fd of a slot a
 * collector may be reading (the copied latest, a held view).
 */
static bool pub_open_hands_slabs(const struct broker *b, const struct model *m, uid_t uid)
{
	return uid == b->uid || uid == 0 || !model_holds_version(m);
}

/*
 * The end of a PUB_OPEN once m's memory may be handed to this publisher:
 * its group's rank taken (*parts then the group's), its membership, the
 * reply with the page and, where it may have them, the slabs. 0 after the
 * reply, or -errno with the reason in r->why.
 */
static int pub_open_finish(struct req *r, struct model *m, wsync_shard **parts)
{
	const struct wsync_msg_pub_open *p = &r->m->pub_open;
	struct broker *b = r->b;
	struct session *s = r->s;
	bool group = p->group_size > 1;
	int fds[1 + WSYNC_MAX_SLOTS], n_fds;
	union wsync_msg_any ok;
	int err;

	if (group) {
		err = group_join(b, m, &s->p, p->group_size, p->rank, p->group_timeout_ms,
		                 p->flags & WSYNC_OPEN_CHECKSUM, *parts, p->n_parts, r->why,
		                 sizeof(r->why));
		if (err)
			return err;
		*parts = NULL;                /* the group's now */
	}
	err = session_open_model(b, s, m);
	if (err) {
		if (group)
			group_leave(b, m, &s->p, "its open failed");
		return req_fail(r, err, "model '%s': too many sessions", p->model);
	}
	if (!group)
		m->pub = &s->p;
	s->p.m[m->id].pub = true;
	s->p.m[m->id].fds_sent = 0;
	atomic_store(&m->ctl->publisher, s->p.id);
	session_mirror(b, s);
	log_info("model '%s': publisher is session %u '%s' pid %d", m->name, s->p.id,
	         s->p.name, (int)s->p.pid);

	/* The page and, where it may have them, every slab, writable: the
	 * publisher maps them all now, off its publish path, and no grant
	 * needs to carry an fd. */
	fds[0] = m->page_fd;
	n_fds = 1;
	if (pub_open_hands_slabs(b, m, s->p.uid)) {
		for (uint32_t k = 0; k < m->books.n_slots; k++)
			fds[n_fds++] = m->slab_fd[k];
		s->p.m[m->id].fds_sent = m->books.n_slots >= 32 ? UINT32_MAX
		                                              : (1u << m->books.n_slots) - 1;
	}
	memset(&ok, 0, sizeof(ok));
	ok.pub_open_ok.model_id = m->id;
	ok.pub_open_ok.n_slots = m->books.n_slots;
	ok.pub_open_ok.bytes = m->bytes;
	ok.pub_open_ok.generation = b->generation;
	ok.pub_open_ok.incarnation = m->incarnation;
	req_reply(r, &ok, WSYNC_MSG_PUB_OPEN_OK, fds, n_fds);
	return 0;
}

/* A move is done (reaped, or failed to start): whoever waits for it is
 * answered, as handlers.h says. */
static void move_answer(struct broker *b, struct model_move *mv)
{
	struct session *s;
	wsync_shard *parts;
	struct model *m;
	struct req r;
	int err;

	s = mv->requester && !mv->requester->doomed ? session_of_peer(mv->requester) : NULL;
	memset(&r, 0, sizeof(r));
	r.b = b;
	r.s = s;
	r.m = &mv->open;
	err = publish_move_done(b, mv, s != NULL, r.why, sizeof(r.why));
	m = mv->m;
	if (mv->closer && !mv->closer->doomed) {
		struct req cr = { .b = b, .s = session_of_peer(mv->closer), .p = mv->closer,
		                  .m = &mv->close };
		union wsync_msg_any ok;

		memset(&ok, 0, sizeof(ok));
		ok.close_ok.model_id = mv->close.close.m.model_id;
		req_reply(&cr, &ok, WSYNC_MSG_CLOSE_OK, NULL, 0);
	}
	if (!s) {
		if (err == -ECANCELED)
			log_info("model '%s': its move is dropped: the publisher it was for left",
			         m ? m->name : "?");
		goto out_free;
	}
	r.p = &s->p;
	if (mv->for_leave && m) {
		/* the departure's move is done (or failed, and withdrew the
		 * latest): the open that waited for it goes on from here */
		err = pub_open_take_memory(&r, m);
		if (err > 0) {               /* it moves again, for this one */
			m->move->requester = &s->p;
			m->move->open = mv->open;
			m->move->parts = mv->parts;
			mv->parts = NULL;
			goto out_free;
		}
	} else if (!err) {
		m->has_writer = true;
		m->writer_uid = s->p.uid;
	}
	if (!err) {
		parts = mv->parts;
		err = pub_open_finish(&r, m, &parts);
		mv->parts = parts;
	}
	if (err)
		session_send_error(b, s, mv->open.hdr.seq, WSYNC_MSG_PUB_OPEN, err, r.why);
out_free:
	model_move_free(mv);
}

void handle_pub_open_moved(struct broker *b)
{
	struct model_move *mv = b->move;

	if (!mv || !mover_reap(b->mover))
		return;                       /* a late or spurious wake */
	b->move = NULL;
	move_answer(b, mv);
	/* the worker is free: the next departure's move waiting for it (one
	 * that cannot start is answered as a failed copy) */
	while ((mv = model_move_next(b)))
		move_answer(b, mv);
}

int handle_pub_open(struct req *r)
{
	const struct wsync_msg_pub_open *p = &r->m->pub_open;
	struct broker *b = r->b;
	struct session *s = r->s;
	wsync_tensor_desc *in = NULL, *canon = NULL;
	uint32_t n_slots = p->slots;
	wsync_shard *parts = NULL;
	bool group = p->group_size > 1;
	bool declared_here = false;
	struct model *m;
	uint64_t hash = 0;
	struct model_devices dev = { .n = p->n_devices, .flags = p->dev_flags,
	                             .uuid = p->devices };
	int fd, err;

	fd = req_take_fd(r);
	if (fd < 0)
		return req_fail(r, -EINVAL, "PUB_OPEN of '%s' came without its layout memfd",
		                p->model);
	m = model_find(b, p->model);
	if (m && m->state == WSYNC_MODEL_READY && (m->pub || (m->group && !group))) {
		close(fd);
		return pub_open_refuse_early(r, m, &dev);
	}
	err = pub_open_bound(r);
	if (err) {
		close(fd);
		return err;
	}
	/* A move for a departure with nobody waiting (on the worker or queued
	 * for it): this open waits for it (pub_open_take_memory). Any other:
	 * one waiter at a time. */
	if (m && model_moving(b, m) && (m->move->requester || !m->move->for_leave)) {
		close(fd);
		return req_fail(r, -EBUSY, "model '%s' is moving to new memory for a publisher "
		                "of another uid, who opens it: try again once it has",
		                p->model);
	}
	if (n_slots == 0)
		n_slots = WSYNC_DEFAULT_SLOTS < b->cfg.max_slots ? WSYNC_DEFAULT_SLOTS
		                                                 : b->cfg.max_slots;
	if (n_slots < WSYNC_MIN_SLOTS || n_slots > b->cfg.max_slots) {
		close(fd);
		return req_fail(r, -EINVAL, "model '%s': %u slots asked, broker '%s' allows "
		                "%d..%u", p->model, p->slots, b->cfg.name, WSYNC_MIN_SLOTS,
		                b->cfg.max_slots);
	}
	err = layout_read(r, fd, p->n_tensors, p->n_parts, &in);
	close(fd);
	if (err || !in)
		return err ? err : -EINVAL;
	if (p->n_parts) {
		parts = fault_malloc((size_t)p->n_parts * sizeof(*parts));
		if (!parts) {
			free(in);
			return req_fail(r, -ENOMEM, "out of memory for %u parts", p->n_parts);
		}
		memcpy(parts, in + p->n_tensors, (size_t)p->n_parts * sizeof(*parts));
	}
	err = layout_check(r, in, &canon, &hash);
	free(in);
	if (err)
		goto out_free;

	m = model_find(b, p->model);
	if (m && m->state == WSYNC_MODEL_READY) {
		char diff[WSYNC_ERRMSG_MAX - 160];
		bool differs = wsync_layout_diff(canon, p->n_tensors, m->tensors, m->n_tensors,
		                                 diff, sizeof(diff)) != 0;

		if (!differs && !model_devices_match(m, &dev)) {
			differs = true;
			devices_describe(m, &dev, diff, sizeof(diff));
		}
		if (differs) {
			if (!(p->flags & WSYNC_OPEN_REPLACE)) {
				err = req_fail(r, -EEXIST, "model '%s': layout differs from the "
				               "existing one: %s (open it with the replace flag to "
				               "replace it)", p->model, diff);
				goto out_free;
			}
			if (!model_owned_by(m, s->p.uid, b->uid)) {
				err = req_fail(r, -EPERM, "model '%s' belongs to uid %u: only its "
				               "owner, the broker's user (uid %u) and root may "
				               "replace it", p->model, (unsigned)m->owner,
				               (unsigned)b->uid);
				goto out_free;
			}
			if (model_published(m)) {
				err = req_fail(r, -EBUSY, "model '%s' cannot be replaced: it has a "
				               "publisher", p->model);
				goto out_free;
			}
			session_delete_model(b, m, "replaced with another layout");
			m = NULL;
		}
	}
	if (m && m->pub) {
		err = req_fail(r, -EBUSY, "model '%s' is already published by session %u "
		               "'%s' (pid %d)", p->model, m->pub->id, m->pub->name,
		               (int)m->pub->pid);
		goto out_free;
	}
	if (m && m->group && !group) {
		err = req_fail(r, -EBUSY, "model '%s' is published by a group of %u ranks",
		               p->model, m->group->size);
		goto out_free;
	}
	if (!m) {
		err = req_declare(r, p->model, &m);
		if (err)
			goto out_free;
		declared_here = true;
	}
	if (m->state == WSYNC_MODEL_DECLARED) {
		err = model_make_ready(b, m, canon, p->n_tensors, p->bytes, hash, n_slots,
		                       &dev, r->why, sizeof(r->why));
		if (err)
			goto out_undeclare;
		canon = NULL;                 /* the model's now */
		model_set_owner(m, s->p.uid);
	}
	err = pub_open_take_memory(r, m);
	if (err < 0)
		goto out_undeclare;
	if (err > 0) {                   /* answered once the model moved */
		m->move->requester = &s->p;
		m->move->open = *r->m;
		m->move->parts = parts;
		free(canon);
		return 0;
	}
	err = pub_open_finish(r, m, &parts);
	if (err)
		goto out_undeclare;
	free(canon);
	return 0;

out_undeclare:
	if (declared_here && !m->n_members && !model_published(m))
		model_undeclare(b, m, "its first PUB_OPEN failed");
out_free:
	free(parts);
	free(canon);
	return err;
}

static void reply_grant(struct req *r, const struct model *m, const struct grant *g)
{
	union wsync_msg_any ok;

	memset(&ok, 0, sizeof(ok));
	ok.grant.model_id = m->id;
	ok.grant.slot = g->slot;
	ok.grant.version = g->version;
	ok.grant.flags = g->has_fd ? WSYNC_GRANT_HAS_FD : 0;
	req_reply(r, &ok, WSYNC_MSG_GRANT, &g->fd, g->has_fd ? 1 : 0);
}

int handle_begin(struct req *r)
{
	uint32_t id = r->m->begin.m.model_id;
	struct model *m = req_published(r, id);
	struct grant g;
	int err;

	if (!m)
		return req_fail(r, -EPROTO, "BEGIN on model %u, which this session does not "
		                "publish", id);
	if (m->group) {
		err = group_ready(m, r->why, sizeof(r->why));
		if (err)
			return err;
	}
	if (m->granted) {
		publish_current(m, r->p, &g);
	} else {
		publish_check_latest(r->b, m, "seen at BEGIN");
		err = publish_grant(r->b, m, r->p, &g, r->why, sizeof(r->why));
		if (err == -EBUSY) {
			atomic_fetch_add(&m->ctl->busy, 1);
			if (!m->busy_logged)  /* once per spell; the rest at debug */
				log_info("%s", r->why);
			m->busy_logged = true;
			return err;
		}
		if (err)
			return err;
		m->busy_logged = false;
	}
	if (m->group) {
		uint32_t rank = 0;

		group_rank_of(m, r->p, &rank);
		group_begun(m, rank);
	}
	reply_grant(r, m, &g);
	return 0;
}

int handle_commit(struct req *r)
{
	const struct wsync_msg_commit *c = &r->m->commit;
	struct model *m = req_published(r, c->m.model_id);
	union wsync_msg_any ok;
	struct grant g;
	uint64_t grant, prev, cur;
	int64_t ns;

	if (!m)
		return req_fail(r, -EPROTO, "COMMIT on model %u, which this session does not "
		                "publish", c->m.model_id);
	if (m->group) {
		uint32_t rank = 0;
		int err;

		group_rank_of(m, r->p, &rank);
		err = group_commit(r->b, m, rank, r->m->hdr.seq, c->slot, c->version, c->step,
		                   r->why, sizeof(r->why));
		if (err == -EPROTO) {   /* this rank broke the protocol: it is cut off */
			session_leave_pub(r->b, r->s, m, "cut off: a COMMIT that does not "
			                  "match the grant");
			session_release_model(r->b, r->s, m);
		}
		return err;             /* 0: answered when the group is complete */
	}
	if (!m->granted || c->slot != m->grant_slot || c->version != m->grant_version) {
		if (!m->granted)
			req_fail(r, -EPROTO, "model '%s': COMMIT of v%llu slot %u without a grant; "
			         "this client no longer publishes the model", m->name,
			         (unsigned long long)c->version, c->slot);
		else
			req_fail(r, -EPROTO, "model '%s': COMMIT of v%llu slot %u, the grant is "
			         "v%llu slot %u; this client no longer publishes the model", m->name,
			         (unsigned long long)c->version, c->slot,
			         (unsigned long long)m->grant_version, m->grant_slot);
		/* Only the publishing role is cut off, not the session (its
		 * subscriptions are not at fault). A grant already in `latest`
		 * is real data and is booked (publish_leave). */
		session_leave_pub(r->b, r->s, m, "cut off: a COMMIT that does not match its "
		                  "grant");
		session_release_model(r->b, r->s, m);   /* READY: never freed here */
		return -EPROTO;
	}
	/* The message is the commit; the page word is only the publisher's
	 * hint to collectors, and someone else may have written over it. */
	grant = wsync_latest_pack(m->grant_version, m->grant_slot);
	prev = m->latest;
	ns = atomic_load(&m->page->slots[c->slot].published_ns);
	publish_book(r->b, m, c->step, ns > 0 ? ns : wsync_real_ns());
	cur = atomic_load(&m->page->latest);
	if (cur == prev) {
		/* a publisher that leaves the store to the broker (two hops) */
		atomic_store(&m->page->latest, m->latest);
		model_wake(m);
	} else if (cur != grant) {
		publish_check_latest(r->b, m, "seen at COMMIT");
		model_wake(m);
	}

	memset(&ok, 0, sizeof(ok));
	ok.commit_ok.model_id = m->id;
	ok.commit_ok.version = c->version;
	g.has_fd = false;
	g.fd = -1;
	if (publish_grant(r->b, m, r->p, &g, NULL, 0) == 0) {
		ok.commit_ok.flags = WSYNC_NEXT_GRANTED | (g.has_fd ? WSYNC_NEXT_HAS_FD : 0);
		ok.commit_ok.next_slot = g.slot;
		ok.commit_ok.next_version = g.version;
		m->busy_logged = false;
	}
	req_reply(r, &ok, WSYNC_MSG_COMMIT_OK, &g.fd, g.has_fd ? 1 : 0);
	return 0;
}

int handle_abort(struct req *r)
{
	const struct wsync_msg_abort *a = &r->m->abort;
	struct model *m = req_published(r, a->m.model_id);
	union wsync_msg_any ok;
	uint64_t cur, grant;

	if (!m)
		return req_fail(r, -EPROTO, "ABORT on model %u, which this session does not "
		                "publish", a->m.model_id);
	if (m->group) {
		uint32_t rank = 0;
		int err;

		group_rank_of(m, r->p, &rank);
		err = group_abort(r->b, m, rank, a->slot, a->version, r->why, sizeof(r->why));
		if (err)
			return err;
		memset(&ok, 0, sizeof(ok));
		ok.abort_ok.model_id = m->id;
		req_reply(r, &ok, WSYNC_MSG_ABORT_OK, NULL, 0);
		return 0;
	}
	if (!m->granted || a->slot != m->grant_slot || a->version != m->grant_version)
		return req_fail(r, -EPROTO, "model '%s': ABORT of v%llu slot %u does not match "
		                "the grant", m->name, (unsigned long long)a->version, a->slot);
	grant = wsync_latest_pack(m->grant_version, m->grant_slot);
	cur = atomic_load(&m->page->latest);
	if (cur == grant) {
		/* Already visible to readers: it can only be a commit now. */
		struct wsync_slot_meta *meta = &m->page->slots[m->grant_slot];
		int64_t ns = atomic_load(&meta->published_ns);

		publish_book(r->b, m, atomic_load(&meta->step), ns > 0 ? ns : wsync_real_ns());
		model_wake(m);
		return req_fail(r, -EPROTO, "model '%s': v%llu was already published; "
		                "booked as a commit", m->name, (unsigned long long)a->version);
	}
	publish_abort(r->b, m);
	publish_check_latest(r->b, m, "seen at ABORT");
	log_debug("model '%s': v%llu slot %u aborted", m->name,
	          (unsigned long long)a->version, a->slot);
	memset(&ok, 0, sizeof(ok));
	ok.abort_ok.model_id = m->id;
	req_reply(r, &ok, WSYNC_MSG_ABORT_OK, NULL, 0);
	return 0;
}

