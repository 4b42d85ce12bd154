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
#define CTL_BOUNDS_OFFSET   (CTL_SESSIONS_OFFSET + \
                             WSYNC_MAX_SESSIONS * (uint32_t)sizeof(struct wsync_ctl_session))
#define CTL_BYTES           ((uint64_t)CTL_BOUNDS_OFFSET + \
                             WSYNC_MAX_SESSIONS * sizeof(struct wsync_session_bound))
/* The size of a segment of a broker before the bounds table: still adopted. */
#define CTL_BYTES_NO_BOUNDS ((uint64_t)CTL_BOUNDS_OFFSET)

/* Creates the new segment under a temporary name, maps it, fills the header
 * (state STARTING) and empty tables: 0 or -errno. */
int  ctl_create(struct broker *b);
/* Makes this generation the one to adopt next: writes its directory's
 * name into the state file (temporary file + rename). 0 or -errno. */
int  ctl_install(struct broker *b);
/* Reads the directory name out of a state file, which must be a regular
 * file of uid that nobody else can write: 0 or -errno with a reason. */
int  ctl_read_state(const char *path, uid_t uid, char *dir, size_t len, char *why,
                    size_t whylen);
/* Unmaps and closes; when unlink_it, removes the generation's directory
 * (and the state file if it names it). */
void ctl_destroy(struct broker *b, bool unlink_it);

/* Validates a copy of an old segment of len bytes (CTL_BYTES, or
 * CTL_BYTES_NO_BOUNDS from a broker before the bounds table): 0 or -EINVAL
 * with a reason. */
int  ctl_validate(const void *buf, size_t len, uid_t uid, char *why, size_t whylen);

static inline struct wsync_ctl_model *ctl_model(const struct broker *b, uint32_t id)
{
	return (struct wsync_ctl_model *)((char *)b->ctl + CTL_MODELS_OFFSET) + id;
}
static inline struct wsync_ctl_session *ctl_session(const struct broker *b, uint32_t idx)
{
	return (struct wsync_ctl_session *)((char *)b->ctl + CTL_SESSIONS_OFFSET) + idx;
}

static inline struct wsync_session_bound *ctl_bound(const struct broker *b, uint32_t idx)
{
	return (struct wsync_session_bound *)((char *)b->ctl + CTL_BOUNDS_OFFSET) + idx;
}

/* The control segment's name in the generation's directory. */
#define CTL_SEG_NAME "ctl"

#endif
