/*
 * broker/handlers.c — requests: checks first, then one handler per type.
 *
 * Every message is validated statically (wsync_msg_validate) and then
 * against the session's state; a handler either sends its *_OK reply and
 * returns 0, or returns -errno with the reason in req.why, and the
 * dispatcher sends the ERROR. Protocol violations are counted; the 16th, a
 * message before HELLO, a truncated message or fds where none belong end
 * the session.
 *
 * The commit path (handle_commit) is the one place where the broker meets
 * a value the publisher wrote without asking: page->latest. It is loaded
 * once, seq_cst, and only compared: either it is exactly the grant (booked)
 * or the model's latest is put back and the publisher is cut off
 * (publish.c explains the invariants).
 */
#include "handlers.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "fault.h"
#include "gpu_slab.h"
#include "ctl.h"
#include "group.h"
#include "log.h"
#include "loop.h"
#include "model.h"
#include "publish.h"
#include "readers.h"
#include "session.h"
#include "state.h"
#include "shm/clock.h"
#include "shm/proto.h"
#include "shm/tensor_layout.h"

struct req {
	struct broker *b;
	struct session *s;
	const union wsync_msg_any *m;
	int     *fds;
	int      n_fds;
	bool     disconnect;             /* end the session after the reply */
	char     why[WSYNC_ERRMSG_MAX];
};

static int req_fail(struct req *r, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int req_fail(struct req *r, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->why, sizeof(r->why), fmt, ap);
	va_end(ap);
	return err;
}

/* Takes ownership of the one fd the request carries, or -1. */
static int req_take_fd(struct req *r)
{
	int fd;

	if (r->n_fds < 1 || r->fds[0] < 0)
		return -1;
	fd = r->fds[0];
	r->fds[0] = -1;
	return fd;
}

static void reply(struct req *r, union wsync_msg_any *msg, uint32_t type,
                  const int *fds, int n_fds)
{
	msg->hdr.magic = WSYNC_PROTO_MAGIC;
	msg->hdr.type = (uint16_t)type;
	msg->hdr.version = WSYNC_PROTO_VERSION;
	msg->hdr.len = (uint32_t)wsync_msg_size(type);
	msg->hdr.seq = r->m->hdr.seq;
	loop_send(r->b, r->s, msg, fds, n_fds);
}

static void send_error(struct broker *b, struct session *s, uint32_t seq,
                       uint32_t req_type, int err, const char *why)
{
	union wsync_msg_any e;

	wsync_msg_init(&e.hdr, WSYNC_MSG_ERROR, seq);
	e.error.err = err;
	e.error.req_type = (uint16_t)(wsync_msg_size(req_type) ? req_type : 0);
	snprintf(e.error.msg, sizeof(e.error.msg), "%s", why);
	loop_send(b, s, &e, NULL, 0);
}

void handle_refusal(struct broker *b, struct session *s, uint32_t seq, uint32_t req_type)
{
	send_error(b, s, seq, req_type, s->reject_err, s->reject_why);
	session_disconnect(b, s, s->reject_why);
}

/* The model named by a request's model id, if this session opened it. */
static struct model *req_model(struct req *r, uint32_t id)
{
	struct model *m = model_get(r->b, id);

	if (!m || !(r->s->models & (UINT64_C(1) << id)))
		return NULL;
	return m;
}

static struct model *req_published(struct req *r, uint32_t id)
{
	struct model *m = req_model(r, id);

	return m && m->state == WSYNC_MODEL_READY &&
	       (m->pub == r->s || group_rank_of(m, r->s, NULL)) ? m : NULL;
}

static int declare(struct req *r, const char *name, struct model **out)
{
	return model_declare(r->b, name, -1, state_floor(r->b->floors, name), out,
	                     r->why, sizeof(r->why));
}

/* ---- HELLO ----------------------------------------------------------------- */

static int handle_hello(struct req *r)
{
	const struct wsync_msg_hello *h = &r->m->hello;
	struct broker *b = r->b;
	union wsync_msg_any ok;
	int fds[2], err;

	if (h->layout_version != WSYNC_LAYOUT_VERSION) {
		r->disconnect = true;
		return req_fail(r, -EPROTO, "client has shared-memory layout version %u, "
		                "broker '%s' has %u", h->layout_version, b->cfg.name,
		                WSYNC_LAYOUT_VERSION);
	}
	err = session_hello(b, r->s, h->name, r->why, sizeof(r->why));
	if (err) {
		r->disconnect = true;
		return err;
	}
	memset(&ok, 0, sizeof(ok));
	ok.hello_ok.session_id = r->s->id;
	ok.hello_ok.max_slots = b->cfg.max_slots;
	ok.hello_ok.generation = b->generation;
	ok.hello_ok.ctl_bytes = CTL_BYTES;
	ok.hello_ok.broker_pid = (uint32_t)b->pid;
	ok.hello_ok.session_index = (uint32_t)r->s->index;
	fds[0] = b->ctl_ro_fd;
	fds[1] = r->s->page_fd;
	reply(r, &ok, WSYNC_MSG_HELLO_OK, fds, 2);
	return 0;
}

/* ---- PUB_OPEN -------------------------------------------------------------- */

/* Copies the publisher's descriptors, then n_parts wsync_shard (a rank of
 * a group), out of its memfd, once. */
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

static int handle_pub_open(struct req *r)
{
	const struct wsync_msg_pub_open *p = &r->m->pub_open;
	struct broker *b = r->b;
	struct session *s = r->s;
	wsync_tensor_desc *in = NULL, *canon = NULL;
	uint32_t n_slots = p->slots;
	int fds[1 + WSYNC_MAX_SLOTS];
	wsync_shard *parts = NULL;
	bool group = p->group_size > 1;
	bool declared_here = false;
	union wsync_msg_any ok;
	struct model *m;
	uint64_t hash = 0;
	struct model_devices dev = { .n = p->n_devices, .flags = p->dev_flags,
	                             .uuid = p->devices };
	int fd, err;

	fd = req_take_fd(r);
	if (fd < 0)
		return req_fail(r, -EINVAL, "PUB_OPEN of '%s' came without its layout memfd",
		                p->model);
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
			snprintf(diff, sizeof(diff), "it lives on %u GPU%s (flags 0x%x), this open "
			         "names %u (flags 0x%x)", m->gpu ? m->gpu->n_devices : 0,
			         m->gpu && m->gpu->n_devices == 1 ? "" : "s",
			         m->gpu ? m->gpu->dev_flags : 0, dev.n, dev.flags);
		}
		if (differs) {
			if (!(p->flags & WSYNC_OPEN_REPLACE)) {
				err = req_fail(r, -EEXIST, "model '%s': layout differs from the "
				               "existing one: %s (open it with the replace flag to "
				               "replace it)", p->model, diff);
				goto out_free;
			}
			if (model_published(m)) {
				err = req_fail(r, -EBUSY, "model '%s' cannot be replaced: it has a "
				               "publisher", p->model);
				goto out_free;
			}
			model_delete(b, m, "replaced with another layout");
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
		err = declare(r, p->model, &m);
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
	}
	if (group) {
		err = group_join(b, m, s, p->group_size, p->rank, p->group_timeout_ms, parts,
		                 p->n_parts, r->why, sizeof(r->why));
		if (err)
			goto out_undeclare;
		parts = NULL;                 /* the group's now */
	}
	err = session_open_model(b, s, m);
	if (err) {
		if (group)
			group_leave(b, m, s, "its open failed");
		err = req_fail(r, err, "model '%s': too many sessions", p->model);
		goto out_undeclare;
	}
	if (!group)
		m->pub = s;
	s->m[m->id].pub = true;
	s->m[m->id].fds_sent = 0;
	atomic_store(&m->ctl->publisher, s->id);
	session_mirror(b, s);
	free(canon);
	log_info("model '%s': publisher is session %u '%s' pid %d", m->name, s->id,
	         s->name, (int)s->pid);

	/* The page and every slab, writable: the publisher maps them all now,
	 * off its publish path, and no grant needs to carry an fd. */
	fds[0] = m->page_fd;
	for (uint32_t k = 0; k < m->books.n_slots; k++)
		fds[1 + k] = m->slab_fd[k];
	s->m[m->id].fds_sent = m->books.n_slots >= 32 ? UINT32_MAX
	                                              : (1u << m->books.n_slots) - 1;
	memset(&ok, 0, sizeof(ok));
	ok.pub_open_ok.model_id = m->id;
	ok.pub_open_ok.n_slots = m->books.n_slots;
	ok.pub_open_ok.bytes = m->bytes;
	ok.pub_open_ok.generation = b->generation;
	ok.pub_open_ok.incarnation = m->incarnation;
	reply(r, &ok, WSYNC_MSG_PUB_OPEN_OK, fds, 1 + (int)m->books.n_slots);
	return 0;

out_undeclare:
	if (declared_here && !m->n_members && !model_published(m))
		model_undeclare(b, m, "its first PUB_OPEN failed");
out_free:
	free(parts);
	free(canon);
	return err;
}

/* ---- SUB_OPEN, ATTACH ------------------------------------------------------- */

/* Layout then slabs, read-only; returns how many fds were written. */
static int ready_fds(const struct model *m, int *fds)
{
	int n = 0;

	fds[n++] = m->layout_ro_fd;
	for (uint32_t k = 0; k < m->books.n_slots; k++)
		fds[n++] = m->slab_ro_fd[k];
	return n;
}

static int handle_sub_open(struct req *r)
{
	const struct wsync_msg_sub_open *p = &r->m->sub_open;
	struct session *s = r->s;
	int fds[WSYNC_MSG_MAX_FDS], n_fds = 0, err;
	union wsync_msg_any ok;
	struct session_model *sm;
	struct model *m;

	m = model_find(r->b, p->model);
	if (!m) {
		err = declare(r, p->model, &m);
		if (err)
			return err;
	}
	err = session_open_model(r->b, s, m);
	if (err) {
		model_drop_if_unused(r->b, m);
		return req_fail(r, err, "model '%s': too many sessions", p->model);
	}
	sm = &s->m[m->id];
	if (sm->subs++ == 0) {
		m->subscribers++;
		atomic_store(&m->ctl->subscribers, m->subscribers);
	}
	session_mirror(r->b, s);
	log_debug("session %u '%s': subscribed to '%s'", s->id, s->name, m->name);

	memset(&ok, 0, sizeof(ok));
	ok.sub_open_ok.model_id = m->id;
	ok.sub_open_ok.state = m->state;
	ok.sub_open_ok.incarnation = m->incarnation;
	fds[n_fds++] = m->page_ro_fd;
	if (m->state == WSYNC_MODEL_READY) {
		ok.sub_open_ok.n_slots = m->books.n_slots;
		ok.sub_open_ok.n_tensors = m->n_tensors;
		ok.sub_open_ok.bytes = m->bytes;
		ok.sub_open_ok.layout_bytes = m->layout_bytes;
		n_fds += ready_fds(m, fds + n_fds);
	}
	reply(r, &ok, WSYNC_MSG_SUB_OPEN_OK, fds, n_fds);
	return 0;
}

static int handle_attach(struct req *r)
{
	uint32_t id = r->m->attach.m.model_id;
	struct model *m = req_model(r, id);
	int fds[WSYNC_MSG_MAX_FDS], n_fds;
	union wsync_msg_any ok;

	if (!m || !r->s->m[id].subs)
		return req_fail(r, -EIDRM, "ATTACH of model %u, which this session does not "
		                "subscribe to (deleted?)", id);
	if (m->state != WSYNC_MODEL_READY)
		return req_fail(r, -ENODATA, "model '%s' has no layout yet (no publisher "
		                "opened it)", m->name);
	memset(&ok, 0, sizeof(ok));
	ok.attach_ok.model_id = m->id;
	ok.attach_ok.n_slots = m->books.n_slots;
	ok.attach_ok.n_tensors = m->n_tensors;
	ok.attach_ok.bytes = m->bytes;
	ok.attach_ok.layout_bytes = m->layout_bytes;
	ok.attach_ok.incarnation = m->incarnation;
	n_fds = ready_fds(m, fds);
	reply(r, &ok, WSYNC_MSG_ATTACH_OK, fds, n_fds);
	return 0;
}

/* A publisher's or subscriber's slots of its model on one of the model's
 * GPUs: the exported VMM fds, which the client imports and maps. */
static int handle_gpu_attach(struct req *r)
{
	const struct wsync_msg_gpu_attach *a = &r->m->gpu_attach;
	struct model *m = req_model(r, a->m.model_id);
	int fds[WSYNC_MAX_SLOTS];
	union wsync_msg_any ok;

	if (!m)
		return req_fail(r, -EIDRM, "GPU_ATTACH of model %u, which this session has not "
		                "open (deleted?)", a->m.model_id);
	if (m->state != WSYNC_MODEL_READY)
		return req_fail(r, -ENODATA, "model '%s' has no layout yet (no publisher "
		                "opened it)", m->name);
	if (!m->gpu)
		return req_fail(r, -ENODEV, "model '%s' is a host model: it has no GPU slabs",
		                m->name);
	if (a->device >= m->gpu->n_devices)
		return req_fail(r, -ENODEV, "model '%s' lives on %u GPUs, not on its GPU %u",
		                m->name, m->gpu->n_devices, a->device);
	/* An exported VMM allocation carries no access mode: whoever imports it
	 * may map it writable. Host slabs reach other users (--group) as
	 * read-only fds; device slabs cannot, so only the broker's own user
	 * (and root) read them, and another user only as their publisher. */
	if (r->s->uid != r->b->uid && r->s->uid != 0 && m->pub != r->s &&
	    !group_rank_of(m, r->s, NULL))
		return req_fail(r, -EPERM, "model '%s': device memory cannot be shared read-only "
		                "with another user (uid %u; the broker runs as %u): read its host "
		                "mirror instead (WSYNC_DEV_HOST_MIRROR)", m->name,
		                (unsigned)r->s->uid, (unsigned)r->b->uid);
	for (uint32_t k = 0; k < m->books.n_slots; k++)
		fds[k] = m->gpu->fd[a->device][k];
	memset(&ok, 0, sizeof(ok));
	ok.gpu_attach_ok.model_id = m->id;
	ok.gpu_attach_ok.device = a->device;
	ok.gpu_attach_ok.n_slots = m->books.n_slots;
	ok.gpu_attach_ok.dev_bytes = m->gpu->dev_bytes;
	ok.gpu_attach_ok.incarnation = m->incarnation;
	reply(r, &ok, WSYNC_MSG_GPU_ATTACH_OK, fds, (int)m->books.n_slots);
	return 0;
}

/* ---- BEGIN, COMMIT, ABORT --------------------------------------------------- */

static void reply_grant(struct req *r, const struct model *m, const struct grant *g)
{
	union wsync_msg_any ok;

	memset(&ok, 0, sizeof(ok));
	ok.grant.model_id = m->id;
	ok.grant.slot = g->slot;
	ok.grant.version = g->version;
	ok.grant.flags = g->has_fd ? WSYNC_GRANT_HAS_FD : 0;
	reply(r, &ok, WSYNC_MSG_GRANT, &g->fd, g->has_fd ? 1 : 0);
}

static int handle_begin(struct req *r)
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
		publish_current(m, r->s, &g);
		reply_grant(r, m, &g);
		return 0;
	}
	publish_check_latest(r->b, m, "seen at BEGIN");
	err = publish_grant(r->b, m, r->s, &g, r->why, sizeof(r->why));
	if (err == -EBUSY) {
		atomic_fetch_add(&m->ctl->busy, 1);
		if (!m->busy_logged)         /* once per spell; the rest at debug */
			log_info("%s", r->why);
		m->busy_logged = true;
		return err;
	}
	if (err)
		return err;
	m->busy_logged = false;
	reply_grant(r, m, &g);
	return 0;
}

static int handle_commit(struct req *r)
{
	const struct wsync_msg_commit *c = &r->m->commit;
	struct model *m = req_published(r, c->m.model_id);
	union wsync_msg_any ok;
	struct grant g;
	uint64_t grant;
	int64_t ns;

	if (!m)
		return req_fail(r, -EPROTO, "COMMIT on model %u, which this session does not "
		                "publish", c->m.model_id);
	if (m->group) {
		uint32_t rank = 0;
		int err;

		group_rank_of(m, r->s, &rank);
		err = group_commit(r->b, m, rank, r->m->hdr.seq, c->slot, c->version, c->step,
		                   r->why, sizeof(r->why));
		if (err == -EPROTO) {   /* this rank broke the protocol: it is cut off */
			publish_leave(r->b, m, r->s, "cut off: a COMMIT that does not match "
			              "the grant");
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
		publish_leave(r->b, m, r->s, "cut off: a COMMIT that does not match its grant");
		session_release_model(r->b, r->s, m);   /* READY: never freed here */
		return -EPROTO;
	}
	/* The message is the commit; the page word is only the publisher's
	 * hint to collectors, and someone else may have written over it. */
	grant = wsync_latest_pack(m->grant_version, m->grant_slot);
	ns = atomic_load(&m->page->slots[c->slot].published_ns);
	publish_book(r->b, m, c->step, ns > 0 ? ns : wsync_real_ns());
	if (atomic_load(&m->page->latest) != grant) {
		publish_check_latest(r->b, m, "seen at COMMIT");
		model_wake(m);
	}

	memset(&ok, 0, sizeof(ok));
	ok.commit_ok.model_id = m->id;
	ok.commit_ok.version = c->version;
	g.has_fd = false;
	g.fd = -1;
	if (publish_grant(r->b, m, r->s, &g, NULL, 0) == 0) {
		ok.commit_ok.flags = WSYNC_NEXT_GRANTED | (g.has_fd ? WSYNC_NEXT_HAS_FD : 0);
		ok.commit_ok.next_slot = g.slot;
		ok.commit_ok.next_version = g.version;
		m->busy_logged = false;
	}
	reply(r, &ok, WSYNC_MSG_COMMIT_OK, &g.fd, g.has_fd ? 1 : 0);
	return 0;
}

static int handle_abort(struct req *r)
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
		char why[64];

		group_rank_of(m, r->s, &rank);
		if (m->granted && a->slot == m->grant_slot && a->version == m->grant_version) {
			snprintf(why, sizeof(why), "rank %u aborted it", rank);
			group_drop(r->b, m, -ECONNABORTED, why);
		} else if (a->version != m->group->dropped_version) {
			return req_fail(r, -EPROTO, "model '%s': ABORT of v%llu slot %u does not "
			                "match the grant", m->name, (unsigned long long)a->version,
			                a->slot);
		}
		memset(&ok, 0, sizeof(ok));
		ok.abort_ok.model_id = m->id;
		reply(r, &ok, WSYNC_MSG_ABORT_OK, NULL, 0);
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
	reply(r, &ok, WSYNC_MSG_ABORT_OK, NULL, 0);
	return 0;
}

/* ---- NOTIFY, CLOSE ---------------------------------------------------------- */

static bool fd_is_eventfd(int fd)
{
	char path[64], target[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return false;
	target[n] = '\0';
	return !strcmp(target, "anon_inode:[eventfd]");
}

static int handle_notify(struct req *r)
{
	uint32_t id = r->m->notify.m.model_id;
	struct model *m = req_model(r, id);
	struct session_model *sm;
	union wsync_msg_any ok;
	struct notifier *n;
	int fd, err;

	if (!m || !r->s->m[id].subs)
		return req_fail(r, -EIDRM, "NOTIFY for model %u, which this session does not "
		                "subscribe to (deleted?)", id);
	fd = req_take_fd(r);
	if (fd < 0)
		return req_fail(r, -EINVAL, "NOTIFY came without an eventfd");
	if (!fd_is_eventfd(fd)) {
		close(fd);
		return req_fail(r, -EINVAL, "NOTIFY: the fd is not an eventfd");
	}
	err = notifier_new(r->b, fd, &n);
	if (err == -EMFILE) {
		close(fd);
		log_warn("session %u '%s' pid %d: NOTIFY refused: the broker keeps at most "
		         "%u NOTIFY eventfds", r->s->id, r->s->name, (int)r->s->pid,
		         loop_notifier_budget(r->b));
		return req_fail(r, -EMFILE, "NOTIFY: broker '%s' already holds its maximum of "
		                "%u eventfds; use wsync_sub_wait instead", r->b->cfg.name,
		                loop_notifier_budget(r->b));
	}
	if (err) {
		close(fd);
		return req_fail(r, err, "NOTIFY: %s", strerror(-err));
	}
	sm = &r->s->m[id];
	if (sm->ev)
		loop_notifier_release(r->b, sm->ev);
	sm->ev = n;
	memset(&ok, 0, sizeof(ok));
	ok.notify_ok.model_id = id;
	reply(r, &ok, WSYNC_MSG_NOTIFY_OK, NULL, 0);
	return 0;
}

static int handle_close(struct req *r)
{
	const struct wsync_msg_close *c = &r->m->close;
	struct model *m = req_model(r, c->m.model_id);
	struct session_model *sm;
	union wsync_msg_any ok;

	if (!m)   /* deleted meanwhile, or never opened: nothing to close */
		return req_fail(r, -EIDRM, "CLOSE of model %u, which this session does not "
		                "have open (deleted?)", c->m.model_id);
	sm = &r->s->m[m->id];
	if (c->what == WSYNC_CLOSE_PUB) {
		if (m->pub != r->s && !group_rank_of(m, r->s, NULL))
			return req_fail(r, -EPROTO, "CLOSE of the publisher of '%s', which this "
			                "session is not", m->name);
		publish_leave(r->b, m, r->s, "closed");
	} else {
		if (!sm->subs)
			return req_fail(r, -EIDRM, "CLOSE of a subscription to '%s', which this "
			                "session does not have", m->name);
		if (--sm->subs == 0) {
			m->subscribers--;
			atomic_store(&m->ctl->subscribers, m->subscribers);
		}
	}
	session_release_model(r->b, r->s, m);   /* m may be gone now */
	memset(&ok, 0, sizeof(ok));
	ok.close_ok.model_id = c->m.model_id;
	reply(r, &ok, WSYNC_MSG_CLOSE_OK, NULL, 0);
	return 0;
}

/* ---- DELETE, WAIT_READERS ---------------------------------------------------- */

static int handle_delete(struct req *r)
{
	const struct wsync_msg_delete *d = &r->m->delete_;
	struct model *m = model_find(r->b, d->model);
	union wsync_msg_any ok;
	char why[64 + WSYNC_INSTANCE_MAX];
	uint64_t hwm;

	if (!m)
		return req_fail(r, -ENOENT, "no model '%s' in broker '%s'", d->model,
		                r->b->cfg.name);
	if (m->pub)
		return req_fail(r, -EBUSY, "model '%s' is published by session %u '%s' (pid "
		                "%d): close the publisher first", m->name, m->pub->id,
		                m->pub->name, (int)m->pub->pid);
	if (m->group)
		return req_fail(r, -EBUSY, "model '%s' is published by a group of %u ranks: "
		                "close them first", m->name, m->group->size);
	hwm = m->hwm;
	snprintf(why, sizeof(why), "deleted by session %u '%s'", r->s->id, r->s->name);
	model_delete(r->b, m, why);
	memset(&ok, 0, sizeof(ok));
	ok.delete_ok.hwm = hwm;
	reply(r, &ok, WSYNC_MSG_DELETE_OK, NULL, 0);
	return 0;
}

static int handle_wait_readers(struct req *r)
{
	const struct wsync_msg_wait_readers *w = &r->m->wait_readers;
	struct model *m = req_model(r, w->m.model_id);

	if (!m)
		return req_fail(r, -EIDRM, "WAIT_READERS on model %u, which this session does "
		                "not have open (deleted?)", w->m.model_id);
	if (m->state != WSYNC_MODEL_READY || w->version > m->hwm)
		return req_fail(r, -EINVAL, "model '%s': v%llu was never granted (newest "
		                "v%llu)", m->name, (unsigned long long)w->version,
		                (unsigned long long)m->hwm);
	return readers_wait(r->b, r->s, m, r->m->hdr.seq, w->version, w->n_readers,
	                    w->timeout_ms, r->why, sizeof(r->why));
}

/* ---- dispatch ---------------------------------------------------------------- */

typedef int (*handler_fn)(struct req *r);

static const struct {
	handler_fn fn;
	int fds;                         /* fds the request carries */
} handlers[WSYNC_MSG_TYPE_END] = {
	[WSYNC_MSG_HELLO]    = { handle_hello, 0 },
	[WSYNC_MSG_PUB_OPEN] = { handle_pub_open, 1 },
	[WSYNC_MSG_SUB_OPEN] = { handle_sub_open, 0 },
	[WSYNC_MSG_ATTACH]   = { handle_attach, 0 },
	[WSYNC_MSG_BEGIN]    = { handle_begin, 0 },
	[WSYNC_MSG_COMMIT]   = { handle_commit, 0 },
	[WSYNC_MSG_ABORT]    = { handle_abort, 0 },
	[WSYNC_MSG_NOTIFY]   = { handle_notify, 1 },
	[WSYNC_MSG_CLOSE]    = { handle_close, 0 },
	[WSYNC_MSG_DELETE]   = { handle_delete, 0 },
	[WSYNC_MSG_WAIT_READERS] = { handle_wait_readers, 0 },
	[WSYNC_MSG_GPU_ATTACH] = { handle_gpu_attach, 0 },
};

/* Checks that need no handler; 0 or -errno with the reason in r. */
static int req_screen(struct req *r, size_t len, int msg_flags, uint32_t type)
{
	struct session *s = r->s;
	int err;

	if (msg_flags & MSG_TRUNC) {
		r->disconnect = true;
		return req_fail(r, -EPROTO, "message longer than %zu bytes",
		                sizeof(union wsync_msg_any));
	}
	if (msg_flags & MSG_CTRUNC) {
		if (s->rx.out_of_fds)        /* not the client's fault: refuse, keep it */
			return req_fail(r, -EMFILE, "broker '%s' is out of file descriptors: "
			                "the message's fds could not be received",
			                r->b->cfg.name);
		r->disconnect = true;
		return req_fail(r, -EPROTO, "more than %d fds in one message", WSYNC_MSG_MAX_FDS);
	}
	err = wsync_msg_validate(r->m, len, r->why, sizeof(r->why));
	if (err) {
		if (s->state == SESSION_NEW)
			r->disconnect = true;
		return err;
	}
	if (!handlers[type].fn) {
		if (s->state == SESSION_NEW)
			r->disconnect = true;
		return req_fail(r, -EPROTO, "%s is not a request", wsync_msg_name(type));
	}
	if (r->n_fds > handlers[type].fds) {
		r->disconnect = true;
		return req_fail(r, -EPROTO, "%s carries %d fds, expected %d",
		                wsync_msg_name(type), r->n_fds, handlers[type].fds);
	}
	if (s->state == SESSION_NEW && type != WSYNC_MSG_HELLO) {
		r->disconnect = true;
		return req_fail(r, -EPROTO, "%s before HELLO", wsync_msg_name(type));
	}
	if (s->state != SESSION_NEW && type == WSYNC_MSG_HELLO) {
		r->disconnect = true;
		return req_fail(r, -EPROTO, "a second HELLO");
	}
	return 0;
}

void handle_message(struct broker *b, struct session *s, size_t len, int msg_flags,
                    int *fds, int n_fds)
{
	struct req r = { .b = b, .s = s, .m = &s->rx.msg, .fds = fds, .n_fds = n_fds };
	uint32_t seq = 0, type = 0;
	const char *what;
	bool violation;
	int err;

	atomic_fetch_add(&b->ctl->messages, 1);
	if (len >= sizeof(struct wsync_msg_hdr)) {
		seq = r.m->hdr.seq;
		type = r.m->hdr.type;
	}
	if (s->state == SESSION_REJECTED) {
		handle_refusal(b, s, seq, type);
		return;
	}
	r.why[0] = '\0';
	err = req_screen(&r, len, msg_flags, type);
	violation = err != 0 && err != -EMFILE;
	if (!err) {
		err = handlers[type].fn(&r);
		/* A refused layout cost the broker work proportional to its size:
		 * it counts toward the limit like a protocol error. */
		violation = err == -EPROTO ||
		            (type == WSYNC_MSG_PUB_OPEN && (err == -EINVAL || err == -EEXIST));
	}
	if (!err)
		return;

	atomic_fetch_add(&b->ctl->bad_messages, 1);
	what = wsync_msg_size(type) ? wsync_msg_name(type) : "a message";
	if (!r.why[0])
		snprintf(r.why, sizeof(r.why), "%s", strerror(-err));
	send_error(b, s, seq, type, err, r.why);
	if (violation || r.disconnect)
		log_warn("session %u '%s' pid %d: %s refused: %s", s->id, s->name,
		         (int)s->pid, what, r.why);
	else
		log_debug("session %u '%s' pid %d: %s refused: %s", s->id, s->name,
		          (int)s->pid, what, r.why);
	if (violation && ++s->invalid >= SESSION_MAX_INVALID && !r.disconnect) {
		r.disconnect = true;
		snprintf(r.why, sizeof(r.why), "%d invalid messages", SESSION_MAX_INVALID);
	}
	if (r.disconnect)
		session_disconnect(b, s, r.why);
}
