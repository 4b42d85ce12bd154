/* broker/broker.c — startup and clean shutdown, in that order of steps. */
#include "broker.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "adopt.h"
#include "ctl.h"
#include "events.h"
#include "log.h"
#include "loop.h"
#include "model.h"
#include "mover.h"
#include "pages.h"
#include "publish.h"
#include "readers.h"
#include "rundir.h"
#include "service.h"
#include "session.h"
#include "state.h"
#include "uids.h"
#include "shm/clock.h"

#define BROKER_DRAIN_NS (3 * 1000000000ll)

static void startup_fail(const char *msg)
{
	fprintf(stderr, "wsyncd: %s\n", msg);
}

static void units(uint64_t bytes, char *buf, size_t len)
{
	static const char *const suffix[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned i = 0;
	double v = (double)bytes;

	while (v >= 1024 && i < 4) {
		v /= 1024;
		i++;
	}
	snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", v, suffix[i]);
}

int broker_start(struct broker *b, const struct config *cfg)
{
	char err[PATH_MAX + 512], limit[32];
	int adopted, e;

	memset(b, 0, sizeof(*b));
	b->cfg = *cfg;
	b->uid = geteuid();
	b->pid = getpid();
	b->started_ns = wsync_real_ns();
	b->ctl_fd = b->ctl_ro_fd = b->lock_fd = b->listen_fd = b->seg_dirfd = -1;
	if (snprintf(b->lock_path, sizeof(b->lock_path), "%s/%s.lock", cfg->rundir,
	             cfg->name) >= (int)sizeof(b->lock_path) ||
	    snprintf(b->versions_path, sizeof(b->versions_path), "%s/%s.versions",
	             cfg->rundir, cfg->name) >= (int)sizeof(b->versions_path) ||
	    snprintf(b->state_path, sizeof(b->state_path), "%s/%s.state",
	             cfg->rundir, cfg->name) >= (int)sizeof(b->state_path)) {
		startup_fail("run directory path too long");
		return -ENAMETOOLONG;
	}

	/* --huge-pages on without huge pages fails before anything is made */
	e = pages_start(b, err, sizeof(err));
	if (e)
		goto out_fail;
	e = rundir_prepare(cfg, err, sizeof(err));
	if (e)
		goto out_fail;
	e = rundir_lock(b->lock_path, cfg->name, err, sizeof(err));
	if (e < 0)
		goto out_fail;
	b->lock_fd = e;
	e = state_load(b->versions_path, &b->floors);
	if (e == -ENOMEM) {
		snprintf(err, sizeof(err), "out of memory reading %s", b->versions_path);
		goto out_unlock;
	}
	/* The socket first: connections wait in its backlog until the loop
	 * runs, and a bad --socket fails before any segment is touched. */
	e = rundir_listen(cfg, &b->sock_bound, err, sizeof(err));
	if (e < 0)
		goto out_floors;
	b->listen_fd = e;
	adopted = adopt_start(b, err, sizeof(err));
	if (adopted < 0) {
		e = adopted;
		goto out_close_listen;
	}
	uids_init(b);
	e = events_start(b);
	if (e) {
		snprintf(err, sizeof(err), "cannot set up io_uring or the mover thread: %s", strerror(-e));
		goto out_segments;
	}
	/* Last: nothing after it can fail, so no error path removes it. */
	e = rundir_point(cfg, b->state_path, &b->pointer_made, err, sizeof(err));
	if (e < 0)
		log_warn("%s; wsyncctl and wsync-top reach this broker by its name (--name "
		         "%s), not by its socket", err, cfg->name);
	b->pointed = e > 0;
	atomic_store(&b->ctl->state, WSYNC_BROKER_RUNNING);
	units(cfg->shm_limit, limit, sizeof(limit));
	service_ready("serving");
	log_info("broker '%s' started: socket %s, generation %" PRIu64 ", shm limit %s "
	         "(%" PRIu64 " bytes), max %u slots per model, %d model(s) adopted%s%s%s",
	         cfg->name, cfg->socket_path, b->generation, limit, cfg->shm_limit,
	         cfg->max_slots, adopted, cfg->has_group ? ", group " : "",
	         cfg->has_group ? cfg->group : "", cfg->keep ? "" : ", --no-keep");
	return 0;

out_segments:
	/* Adopted models stay for the next start: no data is lost. */
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++)
		if (b->models[i])
			model_destroy(b, b->models[i], false);
	ctl_destroy(b, adopted == 0);
out_close_listen:
	close(b->listen_fd);
	rundir_unlink_socket(cfg->socket_path, &b->sock_bound);
out_floors:
	state_free(b->floors);
out_unlock:
	unlink(b->lock_path);
	close(b->lock_fd);
out_fail:
	startup_fail(err);
	return e;
}

void broker_stop(struct broker *b)
{
	bool keep = b->cfg.keep;
	struct mover *mover;
	int err;

	service_stopping();
	b->stopping = true;
	/* The last beat is the stop: monitors count a stopped broker's uptime
	 * up to it. */
	atomic_store(&b->ctl->heartbeat_ns, wsync_real_ns());
	/* Waiters first: every wait returns now. STOPPED (in memory only the
	 * broker writes) before the wake, so a woken waiter sees it. */
	atomic_store(&b->ctl->state, WSYNC_BROKER_STOPPED);
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++)
		if (b->models[i])
			model_close_page(b->models[i]);
	/* Every session ends through the one teardown point, which settles
	 * outstanding grants (and may version a restore), so the versions file
	 * is written after it. */
	session_doom_all(b, "the broker is shutting down");
	session_settle(b);
	if (!loop_drain(b->loop, BROKER_DRAIN_NS))
		log_warn("shutdown: operations still in flight after %lld s",
		         (long long)(BROKER_DRAIN_NS / 1000000000));
	/* A move in progress finishes first, then the worker is joined: a
	 * takeover's is dropped (its requester's session is gone), a
	 * departure's applied (the next start adopts this memory). The mover
	 * is gone before that: the old slabs close here (mover_close). */
	mover = b->mover;
	b->mover = NULL;
	if (mover_stop(mover) && b->move) {
		char why[WSYNC_ERRMSG_MAX];

		publish_move_done(b, b->move, false, why, sizeof(why));
		model_move_free(b->move);
	}
	b->move = NULL;
	/* Departures' moves still queued are copied here, in the loop, as the
	 * stop's own departures are (nobody is left to wait for it); a stop
	 * that removes the weights drops them, as it makes no move. */
	for (struct model_move *mv; (mv = model_move_dequeue(b));) {
		char why[WSYNC_ERRMSG_MAX];

		if (keep) {
			model_move_work_here(b, mv);
			publish_move_done(b, mv, true, why, sizeof(why));
		}
		model_move_free(mv);
	}
	readers_free_all(b);
	err = state_save(b->versions_path, b);
	if (err)
		log_error("cannot write %s: %s; the next start relies on the control "
		          "segment for version numbers", b->versions_path, strerror(-err));
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++)
		if (b->models[i])
			model_destroy(b, b->models[i], !keep);
	ctl_destroy(b, !keep);
	loop_free(b->loop);
	b->loop = NULL;
	/* Only if the drain timed out: the ring is gone, nothing points here. */
	while (b->all_sessions)
		session_free(b, b->all_sessions);
	uids_free_all(b);
	close(b->listen_fd);
	if (rundir_unlink_socket(b->cfg.socket_path, &b->sock_bound) == -ESTALE)
		log_warn("%s is another broker's socket now: left in place",
		         b->cfg.socket_path);
	if (b->pointed)
		rundir_unpoint(&b->cfg, &b->pointer_made);
	state_free(b->floors);
	log_info("broker '%s' stopped%s", b->cfg.name,
	         keep ? "; each model's latest version kept for the next start" : "");
	unlink(b->lock_path);
	close(b->lock_fd);
}
