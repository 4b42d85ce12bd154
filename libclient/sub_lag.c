/*
 * libclient/sub_lag.c — a collector's staleness bound (wsync_sub_set_max_lag,
 * docs/LIVE.md): wsync_sub_acquire refuses a newest version older than
 * max_age and waits for a newer one instead, up to the bound's timeout.
 *
 * wsync_sub_acquire lives here, above sub.c (acquire_by) and sub_wait.c,
 * so that the bound calls down into both and nothing calls back up.
 *
 * The age is the version's commit time (CLOCK_REALTIME, stamped by the
 * publisher) against this clock: on one machine both read the same clock.
 * The bound costs nothing on the acquire path while it is off (one load).
 *
 * Both calls also declare the bound in the session page for monitors
 * (layout.h lag_bound_ns, lag_bound_versions): the broker mirrors it for
 * the tools while the subscription is open and zeroes it when the next one
 * opens the model. Informational: nobody acts on it.
 */
#include <errno.h>
#include <stdatomic.h>

#include "client.h"
#include "sub.h"
#include "shm/clock.h"
#include "shm/errmsg.h"

int wsync_sub_set_max_lag(wsync_sub *s, int64_t max_age_ns, int64_t timeout_ns)
{
	if (!s)
		return wsync_fail(-EINVAL, "wsync_sub_set_max_lag: subscription is NULL");
	if (max_age_ns < 0)
		return wsync_fail(-EINVAL, "model '%s': max_age %lld ns is negative", s->model,
		                  (long long)max_age_ns);
	if (timeout_ns < 0 && timeout_ns != WSYNC_FOREVER)
		return wsync_fail(-EINVAL, "model '%s': timeout %lld ns is negative", s->model,
		                  (long long)timeout_ns);
	atomic_store_explicit(&s->lag_timeout_ns, timeout_ns, memory_order_relaxed);
	atomic_store_explicit(&s->max_age_ns, max_age_ns, memory_order_relaxed);
	atomic_store_explicit(&s->c->session->lag_bound_ns[s->model_id], (uint64_t)max_age_ns,
	                      memory_order_relaxed);
	return 0;
}

int wsync_sub_declare_max_lag(wsync_sub *s, uint32_t versions, int64_t max_age_ns)
{
	if (!s)
		return wsync_fail(-EINVAL, "wsync_sub_declare_max_lag: subscription is NULL");
	if (max_age_ns < 0)
		return wsync_fail(-EINVAL, "model '%s': max_age %lld ns is negative", s->model,
		                  (long long)max_age_ns);
	atomic_store_explicit(&s->c->session->lag_bound_versions[s->model_id], versions,
	                      memory_order_relaxed);
	atomic_store_explicit(&s->c->session->lag_bound_ns[s->model_id], (uint64_t)max_age_ns,
	                      memory_order_relaxed);
	return 0;
}

static __attribute__((noinline))
int acquire_bounded(struct wsync_sub *s, int64_t max_age_ns, wsync_view *out)
{
	int64_t timeout = atomic_load_explicit(&s->lag_timeout_ns, memory_order_relaxed);
	int64_t deadline = wsync_deadline(timeout), left, published;
	uint64_t version, step;
	int err;

	err = wsync_sub_acquire_by(s, -1, false, out);
	if (err)
		return err == -ESTALE ? -EAGAIN : err;
	for (;;) {
		published = out->published_ns;
		if (wsync_real_ns() - published <= max_age_ns)
			return 0;
		version = out->version;
		step = out->step;
		wsync_sub_release(s, out);
		left = deadline < 0 ? WSYNC_FOREVER : deadline - wsync_mono_ns();
		if (deadline >= 0 && left < 0)
			left = 0;
		err = left == 0 ? -ETIMEDOUT : wsync_sub_wait(s, version, left, out);
		if (err == -ETIMEDOUT)
			return wsync_fail(-ETIMEDOUT, "model '%s': no version within max_lag %.3f s "
			                  "after waiting %.3f s: the trainer's last commit is v%llu "
			                  "(step %llu), %.3f s ago", s->model, max_age_ns / 1e9,
			                  timeout / 1e9, (unsigned long long)version,
			                  (unsigned long long)step,
			                  (wsync_real_ns() - published) / 1e9);
		if (err)
			return err;
	}
}

int wsync_sub_acquire(wsync_sub *s, wsync_view *out)
{
	int64_t max_age;
	int err;

	if (!s || !out)
		return wsync_fail(-EINVAL, "wsync_sub_acquire: subscription and out must not be NULL");
	max_age = atomic_load_explicit(&s->max_age_ns, memory_order_relaxed);
	if (__builtin_expect(max_age != 0, 0))
		return acquire_bounded(s, max_age, out);
	err = wsync_sub_acquire_by(s, -1, false, out);
	return __builtin_expect(err == -ESTALE, 0) ? -EAGAIN : err;   /* the message stays */
}
