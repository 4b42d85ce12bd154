/*
 * broker/session.c — the session table, the life of one session, and the
 * one point where sessions end (see session.h).
 *
 * Why nothing re-enters: session_doom only writes the session's own flag,
 * reason and list link. Every function that can discover trouble — a send
 * (loop_send refusing), a handler (a violation), a scan (readers, groups),
 * the tick — calls session_doom at most, never the teardown. The teardown
 * (session_teardown) is called from one place, session_settle, which runs
 * after each event, outside every scan: it pops one doomed session, tears it
 * down, and only then looks at the next. A teardown calls state modules
 * downward (groups, publishing, readers, models); they queue what they owe
 * others in the outbox, and settle delivers it before the next teardown, so
 * a send failing there dooms that session, which is torn down in a later
 * turn of the same loop, never inside this one. A torn-down session is
 * CLOSING and not doomed-able again, so no session is torn down twice. No
 * list is walked while an element of it is freed: the teardown frees waits
 * and notifiers of the one session it holds, and session memory is freed
 * only by the loop's release, after settle.
 */
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "fault.h"
#include "group.h"
#include "log.h"
#include "model.h"
#include "monitor.h"
#include "outbox.h"
#include "publish.h"
#include "readers.h"
#include "shm/clock.h"
#include "shm/segment.h"
#include "stats.h"
#include "uids.h"

struct session *session_new(struct broker *b, int fd, pid_t pid, uid_t uid, gid_t gid)
{
	struct session *s = fault_calloc(1, sizeof(*s));

	if (!s) {
		close(fd);
		return NULL;
	}
	if (!uids_trusted(b, uid) && !(s->p.books = uids_join(b, uid))) {
		free(s);
		close(fd);
		return NULL;
	}
	if (++b->next_session_id == 0)
		b->next_session_id = 1;
	s->p.id = b->next_session_id;
	s->p.pid = pid;
	s->p.uid = uid;
	s->gid = gid;
	s->index = -1;
	s->state = SESSION_NEW;
	s->page_fd = -1;
	s->connected_ns = wsync_real_ns();
	s->accepted_mono_ns = wsync_mono_ns();
	snprintf(s->p.name, sizeof(s->p.name), "pid-%d", (int)pid);
	s->all_next = b->all_sessions;
	if (s->all_next)
		s->all_next->all_pprev = &s->all_next;
	s->all_pprev = &b->all_sessions;
	b->all_sessions = s;
	b->n_pending++;
	s->pend_prev = b->pending_last;
	if (b->pending_last)
		b->pending_last->pend_next = s;
	else
		b->pending_first = s;
	b->pending_last = s;
	loop_conn_start(b->loop, &s->conn, fd);
	return s;
}

/* Takes an entry of the session table: 0 or -EAGAIN (table full). */
static int session_admit(struct broker *b, struct session *s)
{
	if (b->n_sessions >= WSYNC_MAX_SESSIONS)
		return -EAGAIN;
	for (int i = 0; i < WSYNC_MAX_SESSIONS; i++) {
		if (b->sessions[i])
			continue;
		b->sessions[i] = s;
		s->index = i;
		b->n_sessions++;
		atomic_fetch_add(&b->ctl->sessions_total, 1);
		return 0;
	}
	return -EAGAIN;
}

/* s leaves SESSION_NEW for state. */
static void session_leave_new(struct broker *b, struct session *s, enum session_state state)
{
	if (s->state == SESSION_NEW) {
		b->n_pending--;
		if (s->pend_prev)
			s->pend_prev->pend_next = s->pend_next;
		else
			b->pending_first = s->pend_next;
		if (s->pend_next)
			s->pend_next->pend_prev = s->pend_prev;
		else
			b->pending_last = s->pend_prev;
		s->pend_next = s->pend_prev = NULL;
	}
	s->state = state;
}

void session_reject(struct broker *b, struct session *s, int err, const char *why)
{
	session_leave_new(b, s, SESSION_REJECTED);
	s->reject_err = err;
	snprintf(s->reject_why, sizeof(s->reject_why), "%s", why);
	b->n_rejected++;
}

int session_hello(struct broker *b, struct session *s, const char *name,
                  char *why, size_t whylen)
{
	struct wsync_ctl_session *e;
	void *map;
	int fd, err, seals;

	/* The table entry is taken here, not at accept: a connection that never
	 * says HELLO holds no entry (the events bound those apart). */
	if (s->index < 0 && session_admit(b, s)) {
		snprintf(why, whylen, "broker '%s' has its maximum of %d sessions",
		         b->cfg.name, WSYNC_MAX_SESSIONS);
		log_warn("refused session %u pid %d: %s", s->p.id, (int)s->p.pid, why);
		return -EAGAIN;
	}
	fd = fault_memfd_create("wsync-session", WSYNC_SESSION_PAGE_BYTES);
	if (fd < 0) {
		snprintf(why, whylen, "cannot create a session page: %s", strerror(-fd));
		return fd;
	}
	/* The client can write the page but must never shrink it under us. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
		err = -EIO;
		snprintf(why, whylen, "session page is not sealed against shrinking");
		goto out_close;
	}
	err = fault_seg_map(fd, WSYNC_SESSION_PAGE_BYTES, 1, 1, &map);
	if (err) {
		snprintf(why, whylen, "cannot map a session page: %s", strerror(-err));
		goto out_close;
	}
	s->p.page = map;
	s->page_fd = fd;
	s->p.page->magic = WSYNC_MAGIC_SESSION;
	s->p.page->layout_version = WSYNC_LAYOUT_VERSION;
	s->p.page->session_id = s->p.id;
	snprintf(s->p.name, sizeof(s->p.name), "%s", name);
	session_leave_new(b, s, SESSION_ACTIVE);
	s->p.active = true;

	e = ctl_session(b, (uint32_t)s->index);
	e->pid = (uint32_t)s->p.pid;
	e->uid = (uint32_t)s->p.uid;
	atomic_store(&e->roles, 0);
	e->connected_ns = s->connected_ns;
	atomic_store(&e->models, 0);
	snprintf(e->name, sizeof(e->name), "%s", s->p.name);
	stats_clear(&e->stats);
	stats_clear_bound(ctl_bound(b, (uint32_t)s->index));
	atomic_store(&e->id, s->p.id);        /* publishes the entry */
	log_debug("session %u '%s' pid %d uid %u connected", s->p.id, s->p.name,
	          (int)s->p.pid, (unsigned)s->p.uid);
	return 0;

out_close:
	close(fd);
	return err;
}

/* ---- sending, and the marks a failed send leaves ---------------------------- */

void session_doom(struct broker *b, struct session *s, const char *why)
{
	if (s->p.doomed || s->state == SESSION_CLOSING)
		return;
	s->p.doomed = true;
	snprintf(s->doom_why, sizeof(s->doom_why), "%s", why);
	s->doomed_next = b->doomed;
	b->doomed = s;
}

void session_doom_all(struct broker *b, const char *why)
{
	for (struct session *s = b->all_sessions; s; s = s->all_next)
		session_doom(b, s, why);
}

int session_send(struct broker *b, struct session *s, const union wsync_msg_any *msg,
                 const int *fds, int n_fds)
{
	int err;

	if (s->p.doomed || s->state == SESSION_CLOSING)
		return -ENOTCONN;
	err = loop_send(b->loop, &s->conn, msg, fds, n_fds);
	if (!err && n_fds > 0) {
		s->fds_unread += (uint32_t)n_fds;
		if (s->p.books)
			uids_fds_add(b, s->p.books, (uint32_t)n_fds);
	}
	if (err == -ENOBUFS)
		session_doom(b, s, "it does not read its replies");
	else if (err == -ENOMEM)
		session_doom(b, s, "out of memory for its reply");
	else if (err == -EMFILE || err == -ENFILE)
		session_doom(b, s, "the broker is out of file descriptors for its reply");
	else if (err)
		session_doom(b, s, strerror(-err));
	return err;
}

/* Forgets the fds of s's replies once its peer read them all: nothing in
 * its socket's send queue, and no send of it still to complete (a reply
 * queued in this event is not in the socket yet). */
static void session_fds_look(struct broker *b, struct session *s)
{
	if (!s->fds_unread || s->conn.fd < 0 || s->conn.sends || uids_outq(s->conn.fd))
		return;
	if (s->p.books)
		uids_fds_sub(b, s->p.books, s->fds_unread);
	s->fds_unread = 0;
}

/* Looks again at every socket of u, at most once per 10 ms: the uid's
 * other sessions may have read their replies since they last asked. */
static void uid_fds_look(struct broker *b, struct uid_books *u)
{
	int64_t now = wsync_mono_ns();

	if (now - u->refreshed_ns < 10 * 1000000)
		return;
	u->refreshed_ns = now;
	for (struct session *o = b->all_sessions; o; o = o->all_next)
		if (o->p.books == u)
			session_fds_look(b, o);
	uids_linger_look(b, u);
}

int session_fds_budget(struct broker *b, struct session *s, char *why, size_t whylen)
{
	const uint32_t need = WSYNC_MSG_MAX_FDS;        /* the most one reply carries */

	session_fds_look(b, s);
	if (!s->p.books) {
		if (s->fds_unread + need <= b->fds_share)
			return 0;
		snprintf(why, whylen, "session %u has %u fds in replies it did not read "
		         "(limit %u per session): read the replies first", s->p.id,
		         s->fds_unread, b->fds_share);
		return -ENOBUFS;
	}
	if (!uids_fds_over(b, s->p.books, need, why, whylen))
		return 0;
	uid_fds_look(b, s->p.books);
	return uids_fds_over(b, s->p.books, need, why, whylen) ? -ENOBUFS : 0;
}

void session_send_error(struct broker *b, struct session *s, uint32_t seq,
                        uint32_t req_type, int err, const char *why)
{
	union wsync_msg_any e;

	wsync_msg_init(&e.hdr, WSYNC_MSG_ERROR, seq);
	e.error.err = err;
	e.error.req_type = (uint16_t)(wsync_msg_size(req_type) ? req_type : 0);
	snprintf(e.error.msg, sizeof(e.error.msg), "%s", why);
	session_send(b, s, &e, NULL, 0);
}

/* ---- models ------------------------------------------------------------------ */

void session_mirror(struct broker *b, struct session *s)
{
	struct wsync_ctl_session *e;
	uint32_t roles = 0;

	if (s->index < 0 || s->state != SESSION_ACTIVE)
		return;
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		if (!(s->p.models & (UINT64_C(1) << i)))
			continue;
		if (s->p.m[i].pub)
			roles |= WSYNC_ROLE_PUB;
		if (s->p.m[i].subs)
			roles |= WSYNC_ROLE_SUB;
	}
	e = ctl_session(b, (uint32_t)s->index);
	atomic_store(&e->models, s->p.models);
	atomic_store(&e->roles, roles);
}

int session_open_model(struct broker *b, struct session *s, struct model *m)
{
	uint64_t bit = UINT64_C(1) << m->id;
	int err;

	if (!(s->p.models & bit)) {
		err = model_add_member(m, &s->p);
		if (err)
			return err;
		s->p.models |= bit;
	}
	session_mirror(b, s);
	return 0;
}

static void notifier_drop(struct broker *b, struct session *s, uint32_t id)
{
	if (s->ev[id]) {
		loop_notifier_release(b->loop, s->ev[id]);
		s->ev[id] = NULL;
	}
}

/* Checksum mismatches the peer's collectors counted in model i since the
 * last look, added to its ctl entry (informational: a lie only misleads
 * monitors). Looked at every tick, and when the peer lets go of the model,
 * so a collector that verifies and leaves at once is counted. */
static void session_count_verify_failures(struct broker *b, struct peer *p, uint32_t i)
{
	uint32_t now, grew;

	if (!p->page || !(p->models & (UINT64_C(1) << i)) || !b->models[i] || !b->models[i]->ctl)
		return;
	now = atomic_load_explicit(&p->page->verify_failed[i], memory_order_relaxed);
	grew = now - p->m[i].verify_seen;
	p->m[i].verify_seen = now;
	if (grew)
		atomic_fetch_add_explicit(&b->models[i]->ctl->checksum_failures, grew,
		                          memory_order_relaxed);
}

/* The models s subscribes to that are awaited, as a bit per table entry. */
static uint64_t session_awaited_mask(const struct broker *b, const struct session *s)
{
	uint64_t mask = 0;

	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		const struct model *m = b->models[i];

		if ((s->p.models & (UINT64_C(1) << i)) && s->p.m[i].subs && m &&
		    model_awaited(m))
			mask |= UINT64_C(1) << i;
	}
	return mask;
}

uint32_t session_awaited(const struct broker *b, const struct session *s)
{
	return (uint32_t)__builtin_popcountll(session_awaited_mask(b, s));
}

uint32_t uid_awaited(const struct broker *b, uid_t uid)
{
	uint64_t mask = 0;

	for (uint32_t i = 0; i < WSYNC_MAX_SESSIONS; i++) {
		const struct session *s = b->sessions[i];

		if (s && s->p.uid == uid)
			mask |= session_awaited_mask(b, s);
	}
	return (uint32_t)__builtin_popcountll(mask);
}

void session_release_model(struct broker *b, struct session *s, struct model *m)
{
	struct peer_model *sm = &s->p.m[m->id];
	uint64_t bit = UINT64_C(1) << m->id;

	if (!sm->subs)
		notifier_drop(b, s, m->id);
	if (!sm->pub && !sm->subs && (s->p.models & bit)) {
		uint32_t seen;

		session_count_verify_failures(b, &s->p, m->id);
		seen = sm->verify_seen;
		model_remove_member(m, &s->p);
		s->p.models &= ~bit;
		memset(sm, 0, sizeof(*sm));
		sm->verify_seen = seen;          /* the page keeps counting */
	}
	session_mirror(b, s);
	model_drop_if_unused(b, m);
}

void session_leave_pub(struct broker *b, struct session *s, struct model *m, const char *why)
{
	if (group_rank_of(m, &s->p, NULL))
		group_leave(b, m, &s->p, why);
	else
		publish_leave(b, m, &s->p, why);
}

/* s forgets m entirely (it is being deleted; s does not publish it). */
static void session_forget_model(struct broker *b, struct session *s, struct model *m)
{
	uint64_t bit = UINT64_C(1) << m->id;

	notifier_drop(b, s, m->id);
	memset(&s->p.m[m->id], 0, sizeof(s->p.m[m->id]));
	if (s->p.models & bit) {
		model_remove_member(m, &s->p);
		s->p.models &= ~bit;
	}
	session_mirror(b, s);
}

void session_delete_model(struct broker *b, struct model *m, const char *why)
{
	while (m->n_members)
		session_forget_model(b, session_of_peer(m->members[m->n_members - 1]), m);
	model_delete(b, m, why);
	/* its publishers' waits learn of it at the next look */
	outbox_timer_in(&b->out, 0);
}

/* ---- the teardown point -------------------------------------------------------- */

/* Drops every model s has open; its hazards stop counting after this. The
 * other ranks of its groups are told why it went. */
static void session_drop_models(struct broker *b, struct session *s, const char *why)
{
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		struct peer_model *sm = &s->p.m[i];
		struct model *m = b->models[i];

		if (!(s->p.models & (UINT64_C(1) << i)) || !m)
			continue;
		if (sm->pub)
			session_leave_pub(b, s, m, why);
		if (sm->subs) {
			m->subscribers--;
			atomic_store(&m->ctl->subscribers, m->subscribers);
			sm->subs = 0;
		}
		session_release_model(b, s, m);
	}
	s->p.models = 0;
}

/* ---- pacing: a uid past its share of work is read at the pace it refills --- */

static void session_mute_unlink(struct broker *b, struct session *s)
{
	*s->mute_pprev = s->mute_next;
	if (s->mute_next)
		s->mute_next->mute_pprev = s->mute_pprev;
	s->mute_next = NULL;
	s->mute_pprev = NULL;
	s->muted = false;
	b->n_muted--;
	atomic_store(&b->ctl->sessions_muted, b->n_muted);
}

void session_mute(struct broker *b, struct session *s, int64_t wait_ns)
{
	uint64_t n;

	if (s->muted || s->p.doomed || s->state != SESSION_ACTIVE || !s->p.books)
		return;
	loop_conn_mute(b->loop, &s->conn);
	s->muted = true;
	s->mute_next = b->muted;
	if (s->mute_next)
		s->mute_next->mute_pprev = &s->mute_next;
	s->mute_pprev = &b->muted;
	b->muted = s;
	b->n_muted++;
	atomic_store(&b->ctl->sessions_muted, b->n_muted);
	atomic_fetch_add(&b->ctl->work_mutes, 1);
	n = uids_mute_count(s->p.books, wsync_mono_ns());
	if (n)
		log_warn("uid %u asks for more work (opening and closing models) than its "
		         "share of the broker's time (1/%d): its sessions that ask past it are "
		         "not read until it refills (paused %llu times since the last such line; "
		         "this one %lld ms, session %u pid %d)", (unsigned)s->p.uid, UIDS_WORK_SHARE, (unsigned long long)n,
		         (long long)(wait_ns / 1000000), s->p.id, (int)s->p.pid);
	loop_timer_in(b->loop, wait_ns);
}

int64_t session_unmute_due(struct broker *b)
{
	int64_t now = wsync_mono_ns(), next = -1;
	struct session *s, *nx;

	for (s = b->muted; s; s = nx) {
		int64_t wait = uids_work_wait_ns(s->p.books, now);

		nx = s->mute_next;
		if (wait) {
			if (next < 0 || wait < next)
				next = wait;
			continue;
		}
		session_mute_unlink(b, s);
		loop_conn_unmute(b->loop, &s->conn);
	}
	return next;
}

static void session_teardown(struct broker *b, struct session *s)
{
	enum session_state was = s->state;
	const char *why = s->doom_why;

	session_drop_models(b, s, why[0] ? why : "disconnected");
	readers_peer_gone(b, &s->p);
	/* a PUB_OPEN or CLOSE it waits for: the move goes on without it */
	model_move_forget_peer(b, &s->p);
	s->p.active = false;
	/* still muted at the loop: the close ends its hangup poll */
	if (s->muted)
		session_mute_unlink(b, s);
	session_leave_new(b, s, SESSION_CLOSING);
	if (s->index >= 0) {
		struct wsync_ctl_session *e = ctl_session(b, (uint32_t)s->index);

		atomic_store(&e->id, 0);
		atomic_store(&e->models, 0);
		atomic_store(&e->roles, 0);
		b->sessions[s->index] = NULL;
		b->n_sessions--;
		s->index = -1;
	}
	if (was == SESSION_REJECTED)
		b->n_rejected--;
	/* Clients come and go all day: the usual end is debug; a session cut
	 * off (not reading, a violation, out of memory) is worth a line. */
	if (was == SESSION_ACTIVE && !s->normal_end)
		log_info("session %u '%s' pid %d disconnected: %s", s->p.id, s->p.name,
		         (int)s->p.pid, why);
	else if (was == SESSION_ACTIVE)
		log_debug("session %u '%s' pid %d disconnected: %s", s->p.id, s->p.name,
		          (int)s->p.pid, why);
	else
		log_debug("session %u pid %d closed before HELLO: %s", s->p.id,
		          (int)s->p.pid, why);
	loop_conn_close(b->loop, &s->conn);
}

/* Peers a deferred answer could not be queued for (outbox.h) are doomed. */
static void doom_unanswered(struct broker *b)
{
	for (struct session *s = b->all_sessions; s; s = s->all_next) {
		if (s->p.unanswered) {
			s->p.unanswered = false;
			session_doom(b, s, "out of memory for an answer it was owed");
		}
	}
	b->out.unanswered = 0;
}

/* Wakes the eventfd subscribers of each model in mask. */
static void notify_models(struct broker *b, uint64_t mask)
{
	while (mask) {
		uint32_t id = (uint32_t)__builtin_ctzll(mask);
		struct model *m = b->models[id];

		mask &= mask - 1;
		for (uint32_t i = 0; m && i < m->n_members; i++) {
			struct session *s = session_of_peer(m->members[i]);

			if (s->state == SESSION_ACTIVE && !s->p.doomed && s->ev[id])
				loop_notify(b->loop, s->ev[id]);
		}
	}
}

/* Carries out what the state modules queued. */
static void deliver(struct broker *b)
{
	struct out_reply *r;

	while ((r = outbox_take(&b->out)) != NULL) {
		session_send(b, session_of_peer(r->to), &r->msg, NULL, 0);
		free(r);
	}
	if (b->out.notify) {
		uint64_t mask = b->out.notify;

		b->out.notify = 0;
		notify_models(b, mask);
	}
	if (b->out.timer_ns >= 0) {
		loop_timer_in(b->loop, b->out.timer_ns);
		b->out.timer_ns = -1;
	}
	if (b->out.unanswered)
		doom_unanswered(b);
}

void session_settle(struct broker *b)
{
	for (;;) {
		struct session *s;

		deliver(b);
		s = b->doomed;
		if (!s)
			break;
		b->doomed = s->doomed_next;
		s->doomed_next = NULL;
		session_teardown(b, s);
	}
}

/*
 * Reads and drops what the client sent after the session ended (closing any
 * fds that came with it): closing a Unix socket with unread data makes the
 * peer's next read fail with ECONNRESET before it has read the replies
 * queued for it, the refusal that says why among them. Bounded by the
 * socket's buffer; never waits.
 */
static void session_drain(int fd)
{
	for (int i = 0; i < 1024; i++) {
		union {
			char buf[LOOP_CMSG_BYTES];
			struct cmsghdr align;
		} ctl;
		char junk[sizeof(union wsync_msg_any)];
		struct iovec iov = { junk, sizeof(junk) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
		                     .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
		ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || (n == 0 && mh.msg_controllen == 0))
			return;
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
			if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
				continue;
			for (size_t k = 0; k < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
				int x;

				memcpy(&x, CMSG_DATA(cm) + k * sizeof(int), sizeof(int));
				close(x);
			}
		}
	}
}

void session_free(struct broker *b, struct session *s)
{
	*s->all_pprev = s->all_next;
	if (s->all_next)
		s->all_next->all_pprev = s->all_pprev;
	if (s->p.page)
		munmap(s->p.page, WSYNC_SESSION_PAGE_BYTES);
	if (s->page_fd >= 0)
		close(s->page_fd);
	if (s->conn.fd >= 0) {
		session_drain(s->conn.fd);
		/* fds its peer has not read are in flight until it reads or
		 * closes them: its uid keeps counting them (uids.h) */
		if (s->fds_unread && s->p.books && uids_outq(s->conn.fd) &&
		    uids_linger(b, s->p.books, s->conn.fd, s->fds_unread))
			s->fds_unread = 0;       /* the lingering socket keeps the charge */
		else
			close(s->conn.fd);
	}
	if (s->p.books) {
		uids_fds_sub(b, s->p.books, s->fds_unread);
		uids_leave(b, s->p.books);
	}
	free(s);
}

void session_mirror_stats(struct broker *b)
{
	int64_t mono = wsync_clock_ns(CLOCK_MONOTONIC_COARSE), real = wsync_real_ns();
	const struct stats_history *hist[WSYNC_MAX_MODELS] = { 0 };

	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		struct model *m = b->models[i];

		if (!m || !m->ctl)
			continue;
		monitor_model(m);
		if (m->hist.latest)
			hist[i] = &m->hist;
	}
	for (uint32_t i = 0; i < WSYNC_MAX_SESSIONS; i++) {
		struct session *s = b->sessions[i];

		if (!s || s->state != SESSION_ACTIVE || !s->p.page)
			continue;
		uint64_t subscribed = 0;

		stats_mirror(&ctl_session(b, i)->stats, s->p.page, s->p.models, hist, mono, real);
		for (uint32_t m = 0; m < WSYNC_MAX_MODELS; m++)
			if (s->p.m[m].subs)
				subscribed |= UINT64_C(1) << m;
		stats_mirror_bound(ctl_bound(b, i), &ctl_session(b, i)->stats, s->p.page,
		                   subscribed & s->p.models);
		for (uint32_t m = 0; m < WSYNC_MAX_MODELS; m++)
			session_count_verify_failures(b, &s->p, m);
	}
	/* last, with release: a monitor that finds it unchanged after reading
	 * the entries read one tick's figures (stats.c) */
	atomic_store_explicit(&b->ctl->stats_ns, real, memory_order_release);
}
