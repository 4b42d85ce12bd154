/*
 * broker/slots.h — which slot a publisher may write next.
 *
 * Pure functions over the broker's books and the sessions' hazard records,
 * so they can be unit-tested without a broker. The invariant they serve
 * (no torn reads): a slot is handed out for writing only if it is not the
 * latest, not already granted, and no live session pins it.
 *
 * Why one scan is enough: a reader stores its pin and then re-reads
 * `latest` (seq_cst); the broker books the store that moved `latest` away
 * from the slot (seq_cst) and then reads the pins (seq_cst). Either the
 * broker's pin load sees the reader's pin, or the reader's second load of
 * `latest` sees the newer value (the reader retries and never reads the
 * slot). With seq_cst pins that is the single total order; with pins
 * stored without a fence (WSYNC_CTL_PIN_BARRIER) it is pin_barrier(),
 * which falls in the reader's thread either after its pin store (the scan
 * sees the pin) or before its re-load (which sees the booking). See
 * docs/INVARIANTS.md.
 */
#ifndef WSYNC_BROKER_SLOTS_H
#define WSYNC_BROKER_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/layout.h"

struct slot_books {
	uint32_t n_slots;
	uint8_t  state[WSYNC_MAX_SLOTS];     /* enum wsync_slot_state */
	uint64_t version[WSYNC_MAX_SLOTS];   /* version held, 0 = none */
};

/*
 * The pin barrier (shm/layout.h, WSYNC_CTL_PIN_BARRIER): a full memory
 * barrier on every CPU running a thread of a registered client, so that a
 * pin stored there without a fence is ordered against the booking store
 * before it and the scan after it. pin_barrier_works() tries it once (at
 * start); pin_barrier() runs it before a scan, 0 or -errno.
 */
bool pin_barrier_works(void);
int pin_barrier(void);

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
