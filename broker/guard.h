/*
 * broker/guard.h — surviving a model page that a client truncated.
 *
 * The publisher of a model holds a read-write fd of its model page, so it
 * can ftruncate() it; the broker's next access to its mapping would then
 * raise SIGBUS. The guard catches that fault for watched mappings only,
 * puts a private zero page in place so the faulting access completes, and
 * flags the mapping; the loop then repairs the page (model.c) before it
 * handles the next completion. Any other SIGBUS stays fatal.
 */
#ifndef WSYNC_BROKER_GUARD_H
#define WSYNC_BROKER_GUARD_H

#include <stdbool.h>
#include <stddef.h>

/* Installs the SIGBUS handler: 0 or -errno. */
int  guard_init(void);
/* Watches a page-aligned mapping of len bytes; false if the table is full. */
bool guard_watch(void *addr, size_t len);
void guard_unwatch(void *addr);
/* Whether any watched mapping faulted since the last guard_take() calls. */
bool guard_pending(void);
/* Whether the mapping at addr faulted; clears its flag. */
bool guard_take(void *addr);

#endif
