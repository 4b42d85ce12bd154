/*
 * libclient/client.c — connecting to a broker and closing the connection.
 *
 * HELLO is the first request; its reply brings the control segment (mapped
 * read-only, for the broker's state) and this session's page (mapped
 * read-write: the hazard records the broker scans before it reuses a slot).
 *
 * Closing: what is still open through the client (publishers,
 * subscriptions) is closed first, each through the close hook it linked in
 * at open (struct client_handle), so this file, below the publisher and
 * subscriber files, never calls them.
 *
 * Do not use one client in both the parent and the child of a fork().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <linux/membarrier.h>

#include "client.h"
#include "conn.h"
#include "endpoint.h"
#include "maps.h"
#include "shm/clock.h"
#include "shm/errmsg.h"

#define WSYNC_REPLY_TIMEOUT_MS_DEFAULT 30000
#define REPLY_TIMEOUT_MS_MAX (24ll * 3600 * 1000)   /* deadlines stay far from overflow */

static int64_t reply_timeout_ns(void)
{
	const char *env = secure_getenv("WSYNC_REPLY_TIMEOUT_MS");
	char *end;
	long long ms;

	if (!env || !*env)
		return (int64_t)WSYNC_REPLY_TIMEOUT_MS_DEFAULT * 1000000;
	errno = 0;
	ms = strtoll(env, &end, 10);
	if (errno || *end || ms <= 0)
		return (int64_t)WSYNC_REPLY_TIMEOUT_MS_DEFAULT * 1000000;
	if (ms > REPLY_TIMEOUT_MS_MAX)
		ms = REPLY_TIMEOUT_MS_MAX;
	return (int64_t)ms * 1000000;
}

/* The uid a broker may run as for us: ours, root's, or the one named by
 * $WSYNC_BROKER_UID (a number or a user name), for a broker of another user
 * that admits us through --group. */
static bool broker_uid_trusted(uid_t uid, char *named, size_t len)
{
	const char *env = secure_getenv("WSYNC_BROKER_UID");

	named[0] = '\0';
	if (uid == getuid() || uid == geteuid() || uid == 0)
		return true;
	if (!env || !*env)
		return false;
	snprintf(named, len, "%s", env);
	return wsync_uid_parse(env) == (int64_t)uid;
}

/* Who serves the socket: a process of a trusted uid, else -EPERM. A
 * squatter (another user who created our default run directory first and
 * runs a broker there) gets no request and no weights. */
static int client_check_peer(struct wsync_client *c)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	char named[64];

	if (getsockopt(c->sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
	    len != sizeof(cred))
		return wsync_fail(-EPROTO, "cannot tell who serves %s: %s", c->endpoint,
		                  strerror(errno));
	if (!broker_uid_trusted(cred.uid, named, sizeof(named)))
		return wsync_fail(-EPERM, "%s is served by uid %u (pid %d), not by this user "
		                  "or root%s%s; refusing to talk to it (set WSYNC_BROKER_UID=%u "
		                  "to trust a broker of that user)", c->endpoint,
		                  (unsigned)cred.uid, (int)cred.pid,
		                  named[0] ? " or WSYNC_BROKER_UID=" : "", named,
		                  (unsigned)cred.uid);
	c->broker_uid = cred.uid;
	return 0;
}

static bool name_char_ok(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-' ||
	       ch == ':' || ch == '/';
}

/* A name the broker accepts: "pid-<pid>" by default, else the given one
 * truncated, with characters outside [A-Za-z0-9._:/-] replaced by '_'. */
static void client_name_make(const char *in, char out[WSYNC_INSTANCE_MAX])
{
	size_t n = 0;

	if (in)
		for (; in[n] && n < WSYNC_INSTANCE_MAX - 1; n++)
			out[n] = name_char_ok(in[n]) ? in[n] : '_';
	out[n] = '\0';
	if (n == 0) {
		snprintf(out, WSYNC_INSTANCE_MAX, "pid-%d", (int)getpid());
		return;
	}
	if (out[0] == '.' || out[0] == '/')
		out[0] = '_';
}

static int client_socket_connect(struct wsync_client *c)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, err;

	if (strlen(c->endpoint) >= sizeof(sa.sun_path))
		return wsync_fail(-ENAMETOOLONG, "socket path '%s' is too long", c->endpoint);
	err = wsync_endpoint_check(c->endpoint);
	if (err)
		return err;
	memcpy(sa.sun_path, c->endpoint, strlen(c->endpoint) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return wsync_fail(-errno, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = -errno;
		close(fd);
		if (err == -ENOENT || err == -ECONNREFUSED)
			return wsync_fail(err, "no broker at %s (is wsyncd running?)", c->endpoint);
		return wsync_fail(err, "connect to %s: %s", c->endpoint, strerror(-err));
	}
	c->sock = fd;
	return client_check_peer(c);
}

static int ctl_check(const struct wsync_client *c, const struct wsync_msg_hello_ok *ok)
{
	const struct wsync_ctl_header *h = c->ctl;

	if (h->magic != WSYNC_MAGIC_CTL)
		return wsync_fail(-EPROTO, "control segment of %s has a bad magic", c->endpoint);
	if (h->layout_version != WSYNC_LAYOUT_VERSION)
		return wsync_fail(-EPROTO, "broker at %s uses layout version %u, this library %u",
		                  c->endpoint, h->layout_version, WSYNC_LAYOUT_VERSION);
	if (h->header_bytes != sizeof(*h) || h->generation != ok->generation)
		return wsync_fail(-EPROTO, "control segment of %s does not match the broker's "
		                  "answer (header %u bytes, generation %llu vs %llu)", c->endpoint,
		                  h->header_bytes, (unsigned long long)h->generation,
		                  (unsigned long long)ok->generation);
	/* the tables are indexed by model id and session index: they must lie
	 * inside the mapping */
	if (h->max_models != WSYNC_MAX_MODELS || h->max_sessions != WSYNC_MAX_SESSIONS ||
	    h->models_offset < sizeof(*h) ||
	    (uint64_t)h->models_offset + WSYNC_MAX_MODELS * sizeof(struct wsync_ctl_model) >
	    ok->ctl_bytes ||
	    h->sessions_offset < sizeof(*h) ||
	    (uint64_t)h->sessions_offset + WSYNC_MAX_SESSIONS * sizeof(struct wsync_ctl_session) >
	    ok->ctl_bytes)
		return wsync_fail(-EPROTO, "control segment of %s has tables outside its %llu "
		                  "bytes", c->endpoint, (unsigned long long)ok->ctl_bytes);
	return 0;
}

static int session_check(const struct wsync_client *c)
{
	const struct wsync_session_page *sp = c->session;

	if (sp->magic != WSYNC_MAGIC_SESSION || sp->layout_version != WSYNC_LAYOUT_VERSION ||
	    sp->session_id != c->session_id)
		return wsync_fail(-EPROTO, "session page from %s does not match (magic, layout "
		                  "version %u, session %u, expected %u)", c->endpoint,
		                  sp->layout_version, sp->session_id, c->session_id);
	for (uint32_t i = 0; i < WSYNC_MAX_VIEWS; i++)
		if (atomic_load_explicit(&sp->hazards[i].pin, memory_order_relaxed))
			return wsync_fail(-EPROTO, "session page from %s arrives with hazard %u set",
			                  c->endpoint, i);
	return 0;
}

/* Whether this process receives the broker's pin barrier: registered at
 * every connect (the registration belongs to the address space, so a child
 * after fork() registers its own). ThreadSanitizer cannot see the barrier,
 * so a TSan build keeps the fenced pin store. */
static bool client_pin_barrier(const struct wsync_client *c)
{
#if defined(SYS_membarrier) && !defined(WSYNC_TSAN)
	if (!(atomic_load_explicit(&c->ctl->features, memory_order_relaxed) &
	      WSYNC_CTL_PIN_BARRIER))
		return false;
	return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
#else
	(void)c;
	return false;
#endif
}

/* HELLO -> HELLO_OK: maps the control segment and the session page. */
static int client_hello(struct wsync_client *c, const char *client_name)
{
	const struct wsync_msg_hello_ok *ok;
	union wsync_msg_any m;
	struct conn_reply rep;
	void *addr;
	int err;

	wsync_msg_init(&m.hdr, WSYNC_MSG_HELLO, 0);
	m.hello.layout_version = WSYNC_LAYOUT_VERSION;
	m.hello.pid = (uint32_t)getpid();
	client_name_make(client_name, m.hello.name);
	err = wsync_conn_call(c, &m, NULL, 0, WSYNC_MSG_HELLO_OK, &rep);
	/* Closed before it answered HELLO: nobody is serving this socket (a
	 * broker that just died still completes connects while the kernel
	 * tears it down), which to the caller is a refused connection. */
	if (err == -ENOTCONN || err == -ECONNRESET || err == -EPIPE)
		return wsync_fail(-ECONNREFUSED, "broker at %s closed the connection "
		                  "before answering (it may have just exited)", c->endpoint);
	if (err)
		return err;
	ok = &rep.msg.hello_ok;
	if (rep.n_fds < 2 || ok->ctl_bytes < sizeof(struct wsync_ctl_header)) {
		err = wsync_fail(-EPROTO, "HELLO_OK from %s with %d fds and a control segment of "
		                 "%llu bytes", c->endpoint, rep.n_fds,
		                 (unsigned long long)ok->ctl_bytes);
		goto out_close;
	}
	c->session_id = ok->session_id;
	c->max_slots = ok->max_slots;
	c->broker_pid = ok->broker_pid;
	c->generation = ok->generation;
	err = wsync_map_fd(rep.fds[0], ok->ctl_bytes, 0, 0, "control segment", &addr);
	if (err)
		goto out_close;
	c->ctl = addr;
	c->ctl_bytes = ok->ctl_bytes;
	err = ctl_check(c, ok);
	if (err)
		goto out_close;
	c->self = (const struct wsync_ctl_session *)((const char *)c->ctl +
	                                             c->ctl->sessions_offset) + ok->session_index;
	if (atomic_load(&c->self->id) != c->session_id) {
		err = wsync_fail(-EPROTO, "session %u is not in entry %u of the control segment "
		                 "of %s", c->session_id, ok->session_index, c->endpoint);
		goto out_close;
	}
	err = wsync_map_fd(rep.fds[1], sizeof(*c->session), 1, 0, "session page", &addr);
	if (err)
		goto out_close;
	c->session = addr;
	err = session_check(c);
	c->pin_barrier = !err && client_pin_barrier(c);
out_close:
	wsync_reply_close_fds(&rep, 0);
	return err;
}

static void client_free(struct wsync_client *c)
{
	if (c->session)
		munmap(c->session, sizeof(*c->session));
	if (c->ctl)
		munmap((void *)c->ctl, c->ctl_bytes);
	if (c->sock >= 0)
		close(c->sock);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* Numbers clients so a thread's cached hint names the client it was made
 * for, even if a later client gets the same address. */
static _Atomic uint32_t client_ids;

/* The open clients, so that a thread giving its home record back (at its
 * exit, after the client may have closed) finds the client only while it
 * lives: wsync_close unlinks it under the lock before it frees it. */
static pthread_mutex_t clients_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wsync_client *clients_live;

static void clients_link(struct wsync_client *c)
{
	pthread_mutex_lock(&clients_lock);
	c->live_next = clients_live;
	clients_live = c;
	pthread_mutex_unlock(&clients_lock);
}

static void clients_unlink(struct wsync_client *c)
{
	pthread_mutex_lock(&clients_lock);
	for (struct wsync_client **pp = &clients_live; *pp; pp = &(*pp)->live_next) {
		if (*pp == c) {
			*pp = c->live_next;
			break;
		}
	}
	pthread_mutex_unlock(&clients_lock);
}

bool wsync_process_barrier(void)
{
#ifdef SYS_membarrier
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
		return true;
	/* a forked child may lack the registration its parent made */
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
		return true;
	return syscall(SYS_membarrier, MEMBARRIER_CMD_SHARED, 0, 0) == 0;
#else
	return false;
#endif
}

/*
 * An idle home is the thread's alone: it frees it with plain stores. A busy
 * one is released by whoever holds its view, which stores HZ_IDLE and then
 * loads home again with only a compiler barrier between (sub.c, hz_put);
 * here LEAVING is stored, then the barrier, then owner is loaded again.
 * The barrier falls in the releasing thread either after its store (this
 * load sees HZ_IDLE and frees the record) or before its load (which sees
 * LEAVING and frees it); both may, and client_home_finish lets one win.
 */
static void client_home_drop(struct wsync_client *c, uint32_t idx)
{
	struct hz_claim *h = &c->hz[idx];

	if (atomic_load_explicit(&h->home, memory_order_relaxed) != HZ_HOME_LIVE)
		return;
	if (atomic_load_explicit(&h->owner, memory_order_acquire) == HZ_IDLE) {
		atomic_store_explicit(&h->home, HZ_HOME_NONE, memory_order_relaxed);
		atomic_fetch_sub_explicit(&c->n_homes, 1, memory_order_relaxed);
		atomic_store_explicit(&h->owner, NULL, memory_order_release);
		return;
	}
	atomic_store_explicit(&h->home, HZ_HOME_LEAVING, memory_order_relaxed);
	(void)wsync_process_barrier();
	if (atomic_load_explicit(&h->owner, memory_order_acquire) == HZ_IDLE)
		client_home_finish(c, idx);
}

void wsync_client_home_give_back(uint32_t client_id, uint32_t idx)
{
	if (idx >= WSYNC_MAX_VIEWS)
		return;
	pthread_mutex_lock(&clients_lock);
	for (struct wsync_client *c = clients_live; c; c = c->live_next) {
		if (c->client_id == client_id) {
			client_home_drop(c, idx);
			break;
		}
	}
	pthread_mutex_unlock(&clients_lock);
}

int wsync_connect(const char *endpoint, const char *client_name, wsync_client **out)
{
	struct wsync_client *c;
	int err;

	if (!out)
		return wsync_fail(-EINVAL, "wsync_connect: out must not be NULL");
	/* aligned: the hazard claims are one cache line each (a struct's size
	 * is a multiple of its alignment, as aligned_alloc requires) */
	c = aligned_alloc(_Alignof(struct wsync_client), sizeof(*c));
	if (!c)
		return wsync_fail(-ENOMEM, "wsync_connect: out of memory");
	memset(c, 0, sizeof(*c));
	c->client_id = atomic_fetch_add_explicit(&client_ids, 1, memory_order_relaxed) + 1;
	c->sock = -1;
	c->next_seq = 1;
	c->reply_timeout_ns = reply_timeout_ns();
	err = pthread_mutex_init(&c->lock, NULL);
	if (err) {
		free(c);
		return wsync_fail(-err, "wsync_connect: mutex: %s", strerror(err));
	}
	err = wsync_endpoint_resolve(endpoint, c->endpoint, sizeof(c->endpoint));
	if (err)
		goto out_free;
	err = client_socket_connect(c);
	if (err)
		goto out_free;
	err = client_hello(c, client_name);
	if (err)
		goto out_free;
	clients_link(c);
	*out = c;
	return 0;

out_free:
	client_free(c);
	return err;
}

int wsync_connect_wait(const char *endpoint, const char *client_name, int64_t timeout_ns,
                       wsync_client **out)
{
	int64_t deadline, pause_ns = 5 * 1000000;
	char path[108];
	int err;

	if (timeout_ns < 0 && timeout_ns != WSYNC_FOREVER)
		return wsync_fail(-EINVAL, "wsync_connect_wait: timeout %lld ns is negative",
		                  (long long)timeout_ns);
	deadline = wsync_deadline(timeout_ns);
	for (;;) {
		int64_t left;

		err = wsync_connect(endpoint, client_name, out);
		if (err != -ENOENT && err != -ECONNREFUSED)
			return err;
		left = deadline < 0 ? pause_ns : deadline - wsync_mono_ns();
		if (left <= 0)
			break;
		if (pause_ns > left)
			pause_ns = left;
		nanosleep(&(struct timespec){ .tv_sec = pause_ns / 1000000000,
		                              .tv_nsec = pause_ns % 1000000000 }, NULL);
		pause_ns = pause_ns * 2 > 100 * 1000000 ? 100 * 1000000 : pause_ns * 2;
	}
	if (wsync_endpoint_resolve(endpoint, path, sizeof(path)))
		snprintf(path, sizeof(path), "%s", endpoint ? endpoint : "(default)");
	return wsync_fail(-ETIMEDOUT, "no broker at %s within %lld ms (is wsyncd running?)",
	                  path, (long long)(timeout_ns / 1000000));
}

void wsync_client_handle_add(struct wsync_client *c, struct client_handle *h,
                             void (*close)(struct client_handle *h))
{
	h->close = close;
	h->next = c->handles;
	c->handles = h;
}

void wsync_client_handle_remove(struct wsync_client *c, struct client_handle *h)
{
	for (struct client_handle **pp = &c->handles; *pp; pp = &(*pp)->next) {
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	}
	h->next = NULL;
}

/* What is still open is closed first, newest first, each by its own close
 * (which takes the lock and unlinks it). */
void wsync_close(wsync_client *c)
{
	if (!c)
		return;
	for (;;) {
		struct client_handle *h;

		client_lock(c);
		h = c->handles;
		client_unlock(c);
		if (!h)
			break;
		h->close(h);
	}
	clients_unlink(c);
	client_free(c);
}

int client_fail_gone(const struct wsync_client *c, const char *model)
{
	uint32_t state = atomic_load_explicit(&c->ctl->state, memory_order_acquire);
	const char *sep = model ? "': " : "";

	if (state == WSYNC_BROKER_SUPERSEDED)
		return wsync_fail(-ENOTCONN, "%s%s%sthe broker restarted after this client's "
		                  "generation %llu ended (it crashed): connect again, the "
		                  "versions go on", model ? "model '" : "", model ? model : "",
		                  sep, (unsigned long long)c->generation);
	return wsync_fail(-ENOTCONN, "%s%s%sthe broker shut down", model ? "model '" : "",
	                  model ? model : "", sep);
}

