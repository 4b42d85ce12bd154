/* broker/session.c — the session table and the life of one session. */
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fault.h"
#include "ctl.h"
#include "log.h"
#include "loop.h"
#include "model.h"
#include "publish.h"
#include "readers.h"
#include "shm/clock.h"
#include "shm/segment.h"
#include "stats.h"

struct session *session_new(struct broker *b, int fd, pid_t pid, uid_t uid, gid_t gid)
{
	struct session *s = fault_calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	if (++b->next_session_id == 0)
		b->next_session_id = 1;
	s->id = b->next_session_id;
	s->index = -1;
	s->state = SESSION_NEW;
	s->fd = fd;
	s->pid = pid;
	s->uid = uid;
	s->gid = gid;
	s->page_fd = -1;
	s->connected_ns = wsync_real_ns();
	s->accepted_mono_ns = wsync_mono_ns();
	snprintf(s->name, sizeof(s->name), "pid-%d", (int)pid);
	s->all_next = b->all_sessions;
	if (s->all_next)
		s->all_next->all_pprev = &s->all_next;
	s->all_pprev = &b->all_sessions;
	b->all_sessions = s;
	b->n_pending++;
	return s;
}

int session_admit(struct broker *b, struct session *s)
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
static void session_leave_new(struct broker *b, struct session *s,
                              enum session_state state)
{
	if (s->state == SESSION_NEW)
		b->n_pending--;
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
	 * says HELLO holds no entry (loop.c bounds those apart). */
	if (s->index < 0 && session_admit(b, s)) {
		snprintf(why, whylen, "broker '%s' has its maximum of %d sessions",
		         b->cfg.name, WSYNC_MAX_SESSIONS);
		log_warn("refused session %u pid %d: %s", s->id, (int)s->pid, why);
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
	s->page = map;
	s->page_fd = fd;
	s->page->magic = WSYNC_MAGIC_SESSION;
	s->page->layout_version = WSYNC_LAYOUT_VERSION;
	s->page->session_id = s->id;
	snprintf(s->name, sizeof(s->name), "%s", name);
	session_leave_new(b, s, SESSION_ACTIVE);

	e = ctl_session(b, (uint32_t)s->index);
	e->pid = (uint32_t)s->pid;
	e->uid = (uint32_t)s->uid;
	atomic_store(&e->roles, 0);
	e->connected_ns = s->connected_ns;
	atomic_store(&e->models, 0);
	snprintf(e->name, sizeof(e->name), "%s", s->name);
	stats_clear(&e->stats);
	atomic_store(&e->id, s->id);          /* publishes the entry */
	log_info("session %u '%s' pid %d uid %u connected", s->id, s->name,
	         (int)s->pid, (unsigned)s->uid);
	return 0;

out_close:
	close(fd);
	return err;
}

void session_mirror(struct broker *b, struct session *s)
{
	struct wsync_ctl_session *e;
	uint32_t roles = 0;

	if (s->index < 0 || s->state != SESSION_ACTIVE)
		return;
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		if (!(s->models & (UINT64_C(1) << i)))
			continue;
		if (s->m[i].pub)
			roles |= WSYNC_ROLE_PUB;
		if (s->m[i].subs)
			roles |= WSYNC_ROLE_SUB;
	}
	e = ctl_session(b, (uint32_t)s->index);
	atomic_store(&e->models, s->models);
	atomic_store(&e->roles, roles);
}

int session_open_model(struct broker *b, struct session *s, struct model *m)
{
	uint64_t bit = UINT64_C(1) << m->id;
	int err;

	if (!(s->models & bit)) {
		err = model_add_member(m, s);
		if (err)
			return err;
		s->models |= bit;
	}
	session_mirror(b, s);
	return 0;
}

void session_release_model(struct broker *b, struct session *s, struct model *m)
{
	struct session_model *sm = &s->m[m->id];
	uint64_t bit = UINT64_C(1) << m->id;

	if (!sm->subs && sm->ev) {
		loop_notifier_release(b, sm->ev);
		sm->ev = NULL;
	}
	if (!sm->pub && !sm->subs && (s->models & bit)) {
		model_remove_member(m, s);
		s->models &= ~bit;
		memset(sm, 0, sizeof(*sm));
	}
	session_mirror(b, s);
	model_drop_if_unused(b, m);
}

void session_forget_model(struct broker *b, struct session *s, struct model *m)
{
	struct session_model *sm = &s->m[m->id];
	uint64_t bit = UINT64_C(1) << m->id;

	if (sm->ev)
		loop_notifier_release(b, sm->ev);
	memset(sm, 0, sizeof(*sm));
	if (s->models & bit) {
		model_remove_member(m, s);
		s->models &= ~bit;
	}
	session_mirror(b, s);
}

static void session_drop_models(struct broker *b, struct session *s)
{
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		struct session_model *sm = &s->m[i];
		struct model *m = b->models[i];

		if (!(s->models & (UINT64_C(1) << i)) || !m)
			continue;
		if (sm->pub)
			publish_leave(b, m, s, "disconnected");
		if (sm->subs) {
			m->subscribers--;
			atomic_store(&m->ctl->subscribers, m->subscribers);
			sm->subs = 0;
		}
		session_release_model(b, s, m);
	}
	s->models = 0;
}

void session_disconnect(struct broker *b, struct session *s, const char *why)
{
	enum session_state was = s->state;

	if (was == SESSION_CLOSING)
		return;
	/* Its hazards stop counting here: the client is gone or cut off. */
	session_drop_models(b, s);
	session_leave_new(b, s, SESSION_CLOSING);
	readers_session_gone(b, s);
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
	if (was == SESSION_ACTIVE)
		log_info("session %u '%s' pid %d disconnected: %s", s->id, s->name,
		         (int)s->pid, why);
	else
		log_debug("session %u pid %d closed before HELLO: %s", s->id, (int)s->pid, why);
	loop_close_session(b, s);
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
			char buf[SESSION_CMSG_BYTES];
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
	(void)b;
	*s->all_pprev = s->all_next;
	if (s->all_next)
		s->all_next->all_pprev = s->all_pprev;
	if (s->page)
		munmap(s->page, WSYNC_SESSION_PAGE_BYTES);
	if (s->page_fd >= 0)
		close(s->page_fd);
	if (s->fd >= 0) {
		session_drain(s->fd);
		close(s->fd);
	}
	free(s);
}
