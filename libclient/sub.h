/*
 * libclient/sub.h — a subscription (struct wsync_sub) and what sub.c gives
 * the files above it (sub_wait.c, gpu_sub.c). Its maps come from
 * sub_attach.c, below sub.c. sub.c states the hazard protocol.
 */
#ifndef WSYNC_SUB_H
#define WSYNC_SUB_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "client.h"
#include "shm/errmsg.h"
#include "shm/layout.h"
#include "wsync.h"

struct gpu_map;
struct sub_maps;

struct wsync_sub {
	struct wsync_client *c;
	struct client_handle handle;     /* in c->handles */
	char model[WSYNC_NAME_MAX];
	uint32_t model_id;
	/* The model page (ro) and the memory incarnation it and maps belong
	 * to. Both move on together, under c->lock, when the subscription
	 * follows its model into new memory (wsync_sub_attach); readers load
	 * them without a lock under a guard (wsync_sub_guard), and what they
	 * replace stays mapped (retired) until no hazard record guards it, so
	 * a view taken before stays valid. */
	_Atomic(const struct wsync_model_page *) page;
	_Atomic uint64_t incarnation;
	uint64_t base_incarnation;            /* the model's, at open (layout.h) */
	const struct wsync_ctl_model *entry;  /* ro, written by the broker only */
	_Atomic(struct sub_maps *) maps;      /* NULL until the model is READY */
	struct sub_retired *retired;          /* under c->lock: replaced mappings */
	_Atomic uint32_t n_retired;           /* entries in retired: a release looks
	                                         at the list only when it is not 0 */
	_Atomic int efd;                      /* wsync_sub_fd eventfd, -1 = none */
	_Atomic uint64_t last_version;        /* newest version acquired */
	_Atomic int64_t spin_ns;              /* wsync_sub_set_spin, 0 = none */
	_Atomic bool explicit_ack;            /* wsync_sub_set_ack: acquire leaves
	                                         the session's acquired word alone */
	_Atomic int64_t max_age_ns;           /* wsync_sub_set_max_lag, 0 = none */
	_Atomic int64_t lag_timeout_ns;
	/* a device model's slots on its GPU d, mapped read-only by the first
	 * acquire on that GPU (under c->lock), then read without a lock;
	 * gpu_sub.c sets gpu_release with the first, to unmap them at close */
	_Atomic(struct gpu_map *) gpu[WSYNC_MAX_DEVICES];
	void (*gpu_release)(struct wsync_sub *s);  /* NULL = nothing mapped */
};


/* A page and maps a subscription no longer reads, kept mapped while a
 * hazard record guards the page: views taken before may still point into
 * them (wsync_sub_reclaim frees them after). */
struct sub_retired {
	struct sub_retired *next;
	const struct wsync_model_page *page;
	struct sub_maps *maps;
};

/*
 * Whether the subscription's model is still in the memory it reads, by
 * incarnation (the subscription's, or a maps' of it): 0 yes;
 * WSYNC_SUB_MOVED when the same model was given new memory (a publisher of
 * another uid took it over) and the subscription must follow it
 * (wsync_sub_follow) before it reads again; -EIDRM once the model was
 * deleted or replaced. One load in the common case.
 */
#define WSYNC_SUB_MOVED 1
static inline int wsync_sub_check_model_in(const struct wsync_sub *s, uint64_t incarnation)
{
	uint64_t inc = atomic_load_explicit(&s->entry->incarnation, memory_order_acquire);

	if (inc == incarnation)
		return 0;
	if (inc && atomic_load_explicit(&s->entry->base_incarnation, memory_order_acquire) ==
	    s->base_incarnation)
		return WSYNC_SUB_MOVED;
	return wsync_fail(-EIDRM, "model '%s' was deleted or replaced since this "
	                  "subscription opened it; subscribe again", s->model);
}

static inline int wsync_sub_check_model(const struct wsync_sub *s)
{
	return wsync_sub_check_model_in(s, atomic_load_explicit(&s->incarnation,
	                                                        memory_order_acquire));
}

static inline const struct wsync_model_page *sub_page(const struct wsync_sub *s)
{
	return atomic_load_explicit(&s->page, memory_order_acquire);
}

/* wsync_sub_acquire with the deadline of a wait for what needs the broker;
 * -ESTALE (not -EAGAIN) while the model's latest is being restored. A
 * device model without host mirror is refused (-ENODEV) unless device. */
int wsync_sub_acquire_by(struct wsync_sub *s, int64_t deadline_ns, bool device,
                         wsync_view *out);
/* The same with hazard record idx, claimed by the caller (a wait guards its
 * page with it): on success the record is the view's; on failure it stays
 * claimed, its pin cleared. */
int wsync_sub_acquire_in(struct wsync_sub *s, uint32_t idx, int64_t deadline_ns,
                         bool device, wsync_view *out);
/* Claims a hazard record for s (-EAGAIN when all are held), and frees it. */
int wsync_sub_hz_take(struct wsync_sub *s, uint32_t *idx);
void wsync_sub_hz_put(struct wsync_sub *s, uint32_t idx);
/* Guards what s reads now with record idx (sub.c): its maps (NULL before
 * READY) and, in *page, the page to read. Stays guarded until the next
 * guard or the put. */
struct sub_maps *wsync_sub_guard(struct wsync_sub *s, uint32_t idx,
                                 const struct wsync_model_page **page);
/* Unmaps what s retired and no hazard record guards; caller holds c->lock
 * (sub_attach.c). */
void wsync_sub_reclaim(struct wsync_sub *s);
/* The newest version a collector may take, and the word it came from: the
 * model page's latest while it equals the ctl entry's latest or grant, else
 * the ctl entry's latest (sub.c explains). page: the subscription's page
 * (sub_page), or the one of the maps the caller reads with. */
uint64_t wsync_sub_trusted_latest(const struct wsync_sub *s,
                                  const struct wsync_model_page *page,
                                  const _Atomic uint64_t **src);

#endif /* WSYNC_SUB_H */
