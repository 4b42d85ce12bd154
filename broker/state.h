/*
 * broker/state.h — <rundir>/<name>.versions: the highest version ever
 * granted per model name, written at clean shutdown, read at startup, so
 * versions keep going up across clean restarts (the control segment does
 * the same across crashes).
 */
#ifndef WSYNC_BROKER_STATE_H
#define WSYNC_BROKER_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "broker.h"

struct hwm_floor {
	uint64_t hwm;
	char     name[WSYNC_NAME_MAX];
};

struct hwm_floors {
	size_t n, cap;
	struct hwm_floor *v;
};

/* Reads path ("<hwm> <name>" per line; a missing file is empty, malformed
 * lines are skipped with a warning). 0 or -errno. */
int  state_load(const char *path, struct hwm_floors **out);
/* The floor for a model name, 0 if none. f may be NULL. */
uint64_t state_floor(const struct hwm_floors *f, const char *name);
/* Remembers hwm as the floor of name (kept if higher): 0 or -ENOMEM. */
int  state_floor_raise(struct hwm_floors *f, const char *name, uint64_t hwm);
/* Writes every model's hwm and the floors of names not in the table,
 * atomically (temporary file + rename). 0 or -errno. */
int  state_save(const char *path, const struct broker *b);
void state_free(struct hwm_floors *f);

#endif
