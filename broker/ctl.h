/*
 * broker/ctl.h — the control segment: header, model table, session table.
 *
 * Only the broker writes it; clients and monitors map it read-only. A new
 * segment is built under a temporary name and renamed over the old one, so a
 * crash never leaves a half-written control segment under the real name.
 */
#ifndef WSYNC_BROKER_CTL_H
#define WSYNC_BROKER_CTL_H

#include <stddef.h>
#include <stdint.h>

#include "broker.h"
#include "shm/layout.h"

#define CTL_MODELS_OFFSET   ((uint32_t)sizeof(struct wsync_ctl_header))
#define CTL_SESSIONS_OFFSET (CTL_MODELS_OFFSET + \
                             WSYNC_MAX_MODELS * (uint32_t)sizeof(struct wsync_ctl_model))
#define CTL_BYTES           ((uint64_t)CTL_SESSIONS_OFFSET + \
                             WSYNC_MAX_SESSIONS * sizeof(struct wsync_ctl_session))

/* Creates the new segment under a temporary name, maps it, fills the header
 * (state STARTING) and empty tables: 0 or -errno. */
int  ctl_create(struct broker *b);
/* Renames the new segment over the real name: 0 or -errno. */
int  ctl_install(struct broker *b);
/* Unmaps and closes; unlinks the real name when unlink_it. */
void ctl_destroy(struct broker *b, bool unlink_it);

/* Validates a copy of an old segment: 0 or -EINVAL with a reason. */
int  ctl_validate(const void *buf, size_t len, uid_t uid, char *why, size_t whylen);

static inline struct wsync_ctl_model *ctl_model(const struct broker *b, uint32_t id)
{
	return (struct wsync_ctl_model *)((char *)b->ctl + CTL_MODELS_OFFSET) + id;
}
static inline struct wsync_ctl_session *ctl_session(const struct broker *b, uint32_t idx)
{
	return (struct wsync_ctl_session *)((char *)b->ctl + CTL_SESSIONS_OFFSET) + idx;
}

/* Segment paths (with the leading slash, for shm_open). */
int ctl_name(const struct broker *b, char *buf, size_t len);
int ctl_tmp_name(const struct broker *b, char *buf, size_t len);

#endif
