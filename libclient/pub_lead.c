/*
 * libclient/pub_lead.c — a publisher's staleness bound (wsync_pub_set_max_lead,
 * docs/LIVE.md): begin waits while a live collector still acts with a version
 * more than max_lead behind the one it would publish.
 *
 * Only the broker maps the collectors' session pages, where each raises the
 * newest version of the model it acquired (acquired[model]; the word
 * wsync_pub_wait_readers reads). So the wait is a WAIT_READERS for
 * version latest + 1 - max_lead with WSYNC_READERS_LEAD set: the broker
 * counts the subscribers that acquired any version (a collector that closed
 * its subscription or died is no reader; one that never acquired acts with
 * nothing yet), answers once all of them have it, or -ETIMEDOUT naming the
 * ones behind, and keeps the waits in the model's stats.
 *
 * A collector's word only grows, and a collector that starts acquires the
 * newest version: once every acting collector had version f, every one has
 * it from then on, so begin asks the broker only when the floor rises above
 * the last one met (lead_ok). With max_lead 1 that is every begin: one
 * round trip, answered at once while the collectors keep up.
 *
 * It sits below pub_grant.c (begin calls it before taking the client lock)
 * and asks the broker itself rather than through models.c's
 * wsync_pub_wait_readers, a layer above the publisher's.
 */
#include <errno.h>
#include <stdatomic.h>

#include "client.h"
#include "conn.h"
#include "pub.h"
#include "shm/clock.h"
#include "shm/errmsg.h"
#include "shm/proto.h"

int wsync_pub_set_max_lead(wsync_pub *p, uint32_t max_lead)
{
	if (!p)
		return wsync_fail(-EINVAL, "wsync_pub_set_max_lead: publisher is NULL");
	if (max_lead > WSYNC_READERS_LEAD_MASK)
		return wsync_fail(-EINVAL, "model '%s': max_lead %u is more than %u", p->model,
		                  max_lead, WSYNC_READERS_LEAD_MASK);
	p->max_lead = max_lead;
	p->lead_ok = 0;
	return 0;
}

/* One WAIT_READERS in lead mode for floor; left ns (-1 = no limit). */
static int lead_ask(struct wsync_pub *p, uint64_t floor, int64_t left, int64_t deadline)
{
	union wsync_msg_any m;
	struct conn_reply rep;
	int err;

	wsync_msg_init(&m.hdr, WSYNC_MSG_WAIT_READERS, 0);
	m.wait_readers.m.model_id = p->model_id;
	m.wait_readers.version = floor;
	m.wait_readers.n_readers = WSYNC_READERS_LEAD | p->max_lead;
	/* the broker keeps the deadline; we wait a little longer for its answer */
	m.wait_readers.timeout_ms = left < 0 ? UINT32_MAX :
	                            left / 1000000 >= UINT32_MAX - 1 ? UINT32_MAX - 1 :
	                            (uint32_t)((left + 999999) / 1000000);
	client_lock(p->c);
	err = wsync_conn_call_by(p->c, &m, NULL, 0, WSYNC_MSG_WAIT_READERS_OK,
	                         deadline < 0 ? -1 : deadline + 200 * 1000000ll, NULL, &rep);
	if (!err)
		wsync_reply_close_fds(&rep, 0);
	client_unlock(p->c);
	return err;
}

int wsync_pub_lead_wait(struct wsync_pub *p, int64_t deadline)
{
	uint64_t latest = wsync_latest_version(atomic_load_explicit(&p->entry->latest,
	                                                            memory_order_acquire));
	uint64_t floor;
	int64_t left;
	int err;

	if (p->last_committed > latest)
		latest = p->last_committed;
	if (latest + 1 <= p->max_lead)
		return 0;
	floor = latest + 1 - p->max_lead;
	if (floor <= p->lead_ok)
		return 0;
	left = deadline < 0 ? -1 : deadline - wsync_mono_ns();
	if (deadline >= 0 && left < 0)
		left = 0;
	err = lead_ask(p, floor, left, deadline);
	if (err)
		return err;       /* -ETIMEDOUT: the broker named the collectors behind */
	p->lead_ok = floor;
	return 0;
}
