/*
 * libclient/sub_wait.c — waiting for a newer version, and the notify eventfd.
 *
 * Why a commit cannot be missed: the publisher stores latest, then
 * increments page->seq, then wakes. The wait reads seq first and latest
 * second, and sleeps only while seq still holds the value read. If our latest
 * load misses the new version, our seq load came before the increment too
 * (the increment follows the latest store), so the futex compares against a
 * value that has changed by then, or will change and wake us.
 *
 * The version looked at is the trusted latest (sub.c): a page word the
 * broker does not stand behind wakes nobody into a view.
 *
 * A broker that shuts down cleanly sets its state STOPPED in the control
 * segment (which only it writes; the model page is the publisher's too),
 * then bumps seq and wakes everyone. One that dies wakes nobody, so the
 * sleep is cut into slices of 200 ms and the session socket is checked for
 * a hang-up between slices: a dead broker is noticed within 200 ms even
 * with WSYNC_FOREVER. Every path back to the top of the loop checks the
 * deadline first, so a wait returns by it whatever the page does.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "conn.h"
#include "shm/clock.h"
#include "shm/errmsg.h"
#include "shm/futex.h"
#include "sub_attach.h"
#include "sub_wait.h"

#define WAIT_SLICE_NS 200000000          /* 200 ms */
#define WAIT_SPIN_MAX_NS 1000000000      /* a spin is for microseconds, not seconds */

static int wait_timed_out(struct wsync_sub *s, uint64_t after, int64_t timeout_ns)
{
	/* people read these: whole milliseconds as such, anything finer in ns */
	bool ms = timeout_ns % 1000000 == 0;
	long long shown = ms ? timeout_ns / 1000000 : timeout_ns;
	const char *unit = ms ? "ms" : "ns";

	atomic_fetch_add_explicit(&s->c->session->timeouts, 1, memory_order_relaxed);
	if (atomic_load_explicit(&s->entry->state, memory_order_acquire) != WSYNC_MODEL_READY)
		return wsync_fail(-ETIMEDOUT, "model '%s': no version within %lld %s: the "
		                  "model has never been published (no publisher opened it; "
		                  "is the name right?)", s->model, shown, unit);
	return wsync_fail(-ETIMEDOUT, "model '%s': no version after v%llu within %lld %s",
	                  s->model, (unsigned long long)after, shown, unit);
}

int wsync_sub_set_spin(wsync_sub *s, int64_t spin_ns)
{
	if (!s)
		return wsync_fail(-EINVAL, "wsync_sub_set_spin: subscription is NULL");
	if (spin_ns < 0 || spin_ns > WAIT_SPIN_MAX_NS)
		return wsync_fail(-EINVAL, "model '%s': spin of %lld ns outside 0..%lld",
		                  s->model, (long long)spin_ns, (long long)WAIT_SPIN_MAX_NS);
	atomic_store_explicit(&s->spin_ns, spin_ns, memory_order_relaxed);
	return 0;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/*
 * Watches the futex word for up to spin_ns (never past the deadline) before
 * the caller sleeps: a collector with a core of its own then sees a commit
 * within the cost of a cache-line transfer instead of a wake-up. Returns as
 * soon as the word moved; the caller re-checks latest either way.
 */
static void wait_spin(const _Atomic uint32_t *seqw, uint32_t seq, int64_t spin_ns,
                      int64_t deadline)
{
	int64_t until = wsync_mono_ns() + spin_ns;

	if (deadline >= 0 && deadline < until)
		until = deadline;
	for (;;) {
		for (int i = 0; i < 64; i++) {
			if (atomic_load_explicit(seqw, memory_order_acquire) != seq)
				return;
			cpu_relax();
		}
		if (wsync_mono_ns() >= until)
			return;
	}
}

int wsync_sub_wait(wsync_sub *s, uint64_t after_version, int64_t timeout_ns,
                   wsync_view *out)
{
	return wsync_sub_wait_any(s, after_version, timeout_ns, false, out);
}

/* The wait with hazard record idx: it guards the page the wait reads and
 * sleeps on, and becomes the view's when the wait returns one. */
static int wait_in(struct wsync_sub *s, uint32_t idx, uint64_t after_version,
                   int64_t timeout_ns, bool device, wsync_view *out)
{
	bool spun = false, attach_tried = false;
	/* the futex only reads the word; the page is mapped read-only */
	_Atomic uint32_t *seqw;
	int64_t deadline, checked;
	struct wsync_client *c;

	if (!s || !out)
		return wsync_fail(-EINVAL, "wsync_sub_wait: subscription and out must not be NULL");
	if (timeout_ns < 0 && timeout_ns != WSYNC_FOREVER)
		return wsync_fail(-EINVAL, "model '%s': timeout %lld ns is negative",
		                  s->model, (long long)timeout_ns);
	c = s->c;
	deadline = wsync_deadline(timeout_ns);
	/* The socket is looked at once per slice per client, not before every
	 * sleep: a wake that a commit answers in microseconds should not pay a
	 * poll() for a broker death noticed within a slice anyway. Kept per
	 * client, so waits with timeouts shorter than a slice still look. */
	atomic_fetch_add_explicit(&c->session->waits, 1, memory_order_relaxed);

	for (;;) {
		/* the page moves when the model moves to new memory: look again
		 * each time round (the broker wakes the old one's sleepers); the
		 * guard keeps the one we sleep on mapped */
		const struct wsync_model_page *page;
		uint32_t seq;
		const _Atomic uint64_t *src;
		uint64_t l;
		int64_t now, until;
		int err;

		(void)wsync_sub_guard(s, idx, &page);
		seqw = (_Atomic uint32_t *)&page->seq;
		seq = atomic_load_explicit(seqw, memory_order_acquire);
		l = wsync_sub_trusted_latest(s, page, &src);
		if (wsync_latest_version(l) > after_version &&
		    wsync_latest_slot(l) != WSYNC_SLOT_NONE) {
			err = wsync_sub_acquire_in(s, idx, deadline, device, out);
			if (!err && out->version > after_version)
				return 0;
			if (!err) {          /* moved back under us: wait on, same record */
				atomic_store_explicit(&client_hazard(c, idx)->pin, 0,
				                      memory_order_release);
				atomic_store_explicit(&c->hz[idx].maps, NULL, memory_order_relaxed);
				memset(out, 0, sizeof(*out));
			} else if (err != -ESTALE) {
				return err;
			}
			/* -ESTALE: latest is being restored; the broker wakes us */
		}
		if (client_broker_gone(c))
			return client_fail_gone(c, s->model);
		err = wsync_sub_check_model(s);
		if (err == WSYNC_SUB_MOVED) {
			/* the model was given new memory: map it, then look again */
			err = wsync_sub_attach(s, deadline);
			if (err && err != -EAGAIN)
				return err;
			continue;
		}
		if (err)
			return err;
		if (client_is_dead(c))
			return wsync_conn_fail_dead(c);
		if (!client_session_live(c)) {
			wsync_conn_mark_dead(c, "the broker ended this client's session");
			return wsync_fail(-ECONNRESET, "model '%s': the broker ended this client's "
			                  "session (its log says why); connect again", s->model);
		}
		now = wsync_mono_ns();
		checked = atomic_load_explicit(&c->hangup_checked_ns, memory_order_relaxed);
		if (now - checked >= WAIT_SLICE_NS) {
			atomic_store_explicit(&c->hangup_checked_ns, now, memory_order_relaxed);
			if (wsync_conn_hung_up(c))
				return wsync_fail(-ENOTCONN, "model '%s': broker went away", s->model);
		}
		if (deadline >= 0 && now >= deadline)
			return wait_timed_out(s, after_version, timeout_ns);
		/* The model got its layout since we subscribed: map its slabs
		 * now, while nothing newer is there, rather than on the path of
		 * the first version's wake-up. */
		if (!attach_tried && !atomic_load_explicit(&s->maps, memory_order_acquire) &&
		    atomic_load_explicit(&s->entry->state, memory_order_acquire) == WSYNC_MODEL_READY) {
			attach_tried = true;
			err = wsync_sub_attach(s, deadline);
			if (err && err != -ETIMEDOUT && err != -ENODATA)
				return err;
			continue;
		}
		if (!spun && atomic_load_explicit(&s->spin_ns, memory_order_relaxed) > 0) {
			/* once per wait: spin, then look at latest again */
			spun = true;
			wait_spin(seqw, seq, atomic_load_explicit(&s->spin_ns, memory_order_relaxed),
			          deadline);
			continue;
		}
		until = now + WAIT_SLICE_NS;
		if (deadline >= 0 && deadline < until)
			until = deadline;
		err = wsync_futex_wait(seqw, seq, until);
		if (err && err != -ETIMEDOUT && err != -EINTR)
			return wsync_fail(err, "model '%s': futex wait: %s", s->model, strerror(-err));
	}
}

int wsync_sub_wait_any(struct wsync_sub *s, uint64_t after_version, int64_t timeout_ns,
                       bool device, wsync_view *out)
{
	uint32_t idx;
	int err;

	if (!s || !out)
		return wsync_fail(-EINVAL, "wsync_sub_wait: subscription and out must not be NULL");
	err = wsync_sub_hz_take(s, &idx);
	if (err)
		return err;
	err = wait_in(s, idx, after_version, timeout_ns, device, out);
	if (err)
		wsync_sub_hz_put(s, idx);
	return err;
}

int wsync_sub_fd(wsync_sub *s)
{
	struct wsync_client *c;
	union wsync_msg_any m;
	struct conn_reply rep;
	int efd, err;

	if (!s)
		return wsync_fail(-EINVAL, "wsync_sub_fd: subscription is NULL");
	efd = atomic_load_explicit(&s->efd, memory_order_acquire);
	if (efd >= 0)
		return efd;
	c = s->c;
	client_lock(c);
	efd = atomic_load_explicit(&s->efd, memory_order_acquire);
	if (efd >= 0)
		goto out_unlock;
	efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (efd < 0) {
		err = wsync_fail(-errno, "model '%s': eventfd: %s", s->model, strerror(errno));
		goto out_err;
	}
	wsync_msg_init(&m.hdr, WSYNC_MSG_NOTIFY, 0);
	m.notify.m.model_id = s->model_id;
	err = wsync_conn_call(c, &m, &efd, 1, WSYNC_MSG_NOTIFY_OK, &rep);
	if (err)
		goto out_close;
	wsync_reply_close_fds(&rep, 0);
	if (rep.msg.notify_ok.model_id != s->model_id) {
		err = wsync_fail(-EPROTO, "model '%s': NOTIFY_OK names model %u, not %u",
		                 s->model, rep.msg.notify_ok.model_id, s->model_id);
		goto out_close;
	}
	atomic_store_explicit(&s->efd, efd, memory_order_release);
	/* A version committed before the broker knew the fd must not go
	 * unnoticed: signal it now. */
	{
		const _Atomic uint64_t *src;

		if (wsync_latest_version(wsync_sub_trusted_latest(s, sub_page(s), &src)) >
		    atomic_load_explicit(&s->last_version, memory_order_relaxed))
			(void)eventfd_write(efd, 1);
	}
out_unlock:
	client_unlock(c);
	return efd;

out_close:
	close(efd);
out_err:
	client_unlock(c);
	return err;
}
