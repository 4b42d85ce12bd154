/*
 * broker/mover.h — the one worker thread that does a move's slow part (new
 * slabs, the copy of the latest version) off the event loop (mover.c says
 * what it may touch and why the hand-off is race-free).
 *
 * One job at a time: a function and its argument. The loop submits it,
 * the worker runs it and then writes 1 to the loop's wake eventfd; the
 * loop, woken, reaps it. The mover knows nothing of models or sessions.
 */
#ifndef WSYNC_BROKER_MOVER_H
#define WSYNC_BROKER_MOVER_H

#include <stdbool.h>

struct mover;

/* Starts the worker; wake_fd is written (8 bytes, 1) after each job. 0 or
 * -errno. */
int  mover_start(struct mover **out, int wake_fd);
/* Hands work(arg) to the worker: 0, or -EBUSY while a job is submitted and
 * not reaped. From here until mover_reap returns true, arg is the
 * worker's. */
int  mover_submit(struct mover *mv, void (*work)(void *), void *arg);
/* Fds mover_close may hold at once; past them it closes on the spot. */
#define MOVER_MAX_CLOSE 64
/* Closes fd on the worker, between jobs: for the last fd of large memory,
 * whose close frees it. From this call on the fd is the worker's; NULL mv
 * (or a full list) closes it here. */
void mover_close(struct mover *mv, int fd);
/* Whether a job is submitted and not reaped yet. */
bool mover_busy(struct mover *mv);
/* true if the submitted job is done: it is reaped (its argument the
 * caller's again) and the mover takes the next. false if none is, or it
 * still runs. */
bool mover_reap(struct mover *mv);
/* Waits for the job in flight to finish, stops the worker and joins it,
 * frees mv. Returns whether a job was done and not reaped (its argument the
 * caller's again). NULL is a no-op. */
bool mover_stop(struct mover *mv);

#endif
