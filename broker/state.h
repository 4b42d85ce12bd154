/*
 * broker/state.h — <rundir>/<name>.versions: the highest version ever
 * granted per model name, written at clean shutdown, read at startup, so
 * versions keep going up across clean restarts (the control segment does
 * the same across crashes).
 */
#ifndef WSYNC_BROKER_STATE_H
#define WSYNC_BROKER_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "broker.h"

/*
 * Every name ever granted a version keeps a floor, or a client that reused
 * a name could see its versions go down. Floors are budgeted: a uid other
 * than the broker's and root leaves at most STATE_UID_FLOORS of them, and
 * all floors together are at most STATE_MAX_FLOORS; past that the oldest
 * (of that uid, or of all) is folded into one of STATE_FOLD_BUCKETS shared
 * floors chosen by a hash of the name, and its memory freed. A name's floor
 * is the higher of its own and its bucket's, so versions still only go up;
 * the cost is that a new name whose bucket holds a folded floor starts its
 * versions above it rather than at 1. Names are found through a hash table
 * with a random seed (no linear scan, no crafted collisions).
 */
#define STATE_UID_FLOORS   256
#define STATE_MAX_FLOORS   65536
#define STATE_FOLD_BUCKETS 256

struct hwm_floor;
struct floor_owner;

struct hwm_floors {
	size_t   n;                      /* floors */
	struct hwm_floor **tab;          /* hash buckets (a power of two) */
	size_t   n_tab;
	uint64_t seed;
	struct hwm_floor *first, *last;  /* every floor, oldest first */
	struct floor_owner **owners;     /* uids whose floors are budgeted */
	uint32_t n_owners, owners_cap;
	uint64_t fold[STATE_FOLD_BUCKETS];
	size_t   folded;                 /* floors folded since state_trim_due */
};

/* Reads path ("<hwm> <name>" per line; a missing file is empty, malformed
 * lines are skipped with a warning). 0 or -errno. */
int  state_load(const char *path, struct hwm_floors **out);
/* The floor for a model name, 0 if none. f may be NULL. */
uint64_t state_floor(const struct hwm_floors *f, const char *name);
/* Remembers hwm as the floor of name (kept if higher): 0 or -ENOMEM. A
 * new floor counts against owner's budget when budgeted (a uid other than
 * the broker's and root left it), against the total always. */
int  state_floor_raise(struct hwm_floors *f, const char *name, uint64_t hwm, uid_t owner,
                       bool budgeted);
/* Whether floors were folded (their memory freed) since the last call. */
bool state_trim_due(struct hwm_floors *f);
/* Writes every model's hwm and the floors of names not in the table,
 * atomically (temporary file + rename). 0 or -errno. */
int  state_save(const char *path, const struct broker *b);
void state_free(struct hwm_floors *f);

#endif
