/*
 * broker/slots.h — which slot a publisher may write next.
 *
 * Pure functions over the broker's books and the sessions' hazard records,
 * so they can be unit-tested without a broker. The invariant they serve
 * (no torn reads): a slot is handed out for writing only if it is not the
 * latest, not already granted, and no live session pins it.
 *
 * Why one scan is enough: a reader stores its pin (seq_cst) and then re-reads
 * `latest` (seq_cst); the broker reads `latest` (seq_cst) and then the pins
 * (seq_cst). In the single total order of seq_cst operations, either the
 * broker's pin load comes after the reader's pin store (the broker sees the
 * pin), or the reader's second load of `latest` comes after the publisher's
 * store that moved `latest` away from the slot (the reader retries and never
 * reads the slot). See docs/INVARIANTS.md.
 */
#ifndef WSYNC_BROKER_SLOTS_H
#define WSYNC_BROKER_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#include "shm/layout.h"

struct slot_books {
	uint32_t n_slots;
	uint8_t  state[WSYNC_MAX_SLOTS];     /* enum wsync_slot_state */
	uint64_t version[WSYNC_MAX_SLOTS];   /* version held, 0 = none */
};

/*
 * Bitmask of the slots of model_id (bits < n_slots) pinned by any of the
 * n session pages. Pins naming another model, or a slot >= n_slots, are
 * ignored (a client cannot make the broker index out of bounds).
 */
uint32_t hazard_scan(uint32_t model_id, uint32_t n_slots,
                     struct wsync_session_page *const *pages, size_t n);

/*
 * The slot to grant next, or -EBUSY: a FREE slot first (lowest index), else
 * the OLD slot with the lowest version that is not pinned. LATEST and GRANTED
 * slots are never chosen.
 */
int slot_pick(const struct slot_books *b, uint32_t pinned);

/*
 * Writes "slot 0 v12 pinned by 2 readers; slot 1 latest v13; ..." for an
 * -EBUSY answer. holders[i] (may be NULL) names who pins slot i.
 */
void slot_describe_busy(const struct slot_books *b, uint32_t pinned,
                        const char *const *holders, char *buf, size_t len);

#endif
