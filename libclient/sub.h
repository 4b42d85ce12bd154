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
	const struct wsync_model_page *page;  /* ro */
	const struct wsync_ctl_model *entry;  /* ro, written by the broker only */
	uint64_t incarnation;                 /* entry->incarnation at open */
	_Atomic(struct sub_maps *) maps;      /* NULL until the model is READY */
	_Atomic int efd;                      /* wsync_sub_fd eventfd, -1 = none */
	_Atomic uint64_t last_version;        /* newest version acquired */
	_Atomic int64_t spin_ns;              /* wsync_sub_set_spin, 0 = none */
	_Atomic bool explicit_ack;            /* wsync_sub_set_ack: acquire leaves
	                                         the session's acquired word alone */
	/* a device model's slots on its GPU d, mapped read-only by the first
	 * acquire on that GPU (under c->lock), then read without a lock;
	 * gpu_sub.c sets gpu_release with the first, to unmap them at close */
	_Atomic(struct gpu_map *) gpu[WSYNC_MAX_DEVICES];
	void (*gpu_release)(struct wsync_sub *s);  /* NULL = nothing mapped */
};


/* -EIDRM once the model of a subscription was deleted or replaced. */
static inline int wsync_sub_check_model(const struct wsync_sub *s)
{
	if (atomic_load_explicit(&s->entry->incarnation, memory_order_acquire) == s->incarnation)
		return 0;
	return wsync_fail(-EIDRM, "model '%s' was deleted or replaced since this "
	                  "subscription opened it; subscribe again", s->model);
}

/* wsync_sub_acquire with the deadline of a wait for what needs the broker;
 * -ESTALE (not -EAGAIN) while the model's latest is being restored. A
 * device model without host mirror is refused (-ENODEV) unless device. */
int wsync_sub_acquire_by(struct wsync_sub *s, int64_t deadline_ns, bool device,
                         wsync_view *out);
/* The newest version a collector may take, and the word it came from: the
 * model page's latest while it equals the ctl entry's latest or grant, else
 * the ctl entry's latest (sub.c explains). */
uint64_t wsync_sub_trusted_latest(const struct wsync_sub *s, const _Atomic uint64_t **src);

#endif /* WSYNC_SUB_H */
