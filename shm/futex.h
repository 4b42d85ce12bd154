/*
 * shm/futex.h — futex wait/wake on words in shared (file-backed) mappings.
 * Shared futexes: no FUTEX_PRIVATE_FLAG, the word is in MAP_SHARED memory.
 */
#ifndef WSYNC_SHM_FUTEX_H
#define WSYNC_SHM_FUTEX_H

#include <stdatomic.h>
#include <stdint.h>

/*
 * Sleeps while *word == expected, until the absolute CLOCK_MONOTONIC time
 * deadline_ns (-1 = no deadline). Returns 0 when woken or when the word
 * already differed (spurious wakes included: the caller re-checks),
 * -ETIMEDOUT at the deadline, -EINTR on a signal.
 */
int wsync_futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t deadline_ns);
/* Wakes up to n sleepers (INT32_MAX: all). Returns the number woken or -errno. */
int wsync_futex_wake(_Atomic uint32_t *word, int n);

#endif
