/*
 * broker/mover.c — the worker thread of moves (see mover.h).
 *
 * Why a thread: a move gives a model new slabs and copies its latest
 * version into one (model.c, model_move_start). For a model of 256 MiB
 * that is about a second of page clearing and memcpy, during which the
 * event loop would answer nobody. The worker does that part; the loop
 * only starts a move and, once woken, applies it (a rename and a few
 * stores), so no request holds the loop for more than a millisecond.
 *
 * What the worker may touch: the job's argument, from mover_submit until
 * mover_reap returns true, the fds handed to mover_close (the loop's no
 * longer: their numbers stay taken until the worker closes them, so the
 * loop never sees one reused under it), and nothing else of the broker's. The work
 * function (model.c, move_work) reads its inputs from that argument — a
 * copy of what it needs of the model, a mapping of the old slab made by
 * the loop, the directory fd, which only closes after mover_stop — and
 * writes its results there: new fds, an error, the time it took. It never
 * reads struct model or struct broker, never logs, never calls the fault
 * injection counters (loop-only state): the loop does all of that before
 * submitting and after reaping.
 *
 * Why the hand-off is race-free: the job's fields (work, arg, done) are
 * read and written only under mv->lock, and the argument changes hands
 * only through them. The loop writes the argument before mover_submit
 * takes the lock, the worker reads it after taking the lock that saw
 * `work` set; the worker writes its results before taking the lock to set
 * `done`, and the loop reads them after mover_reap took the lock that saw
 * `done`. Each unlock/lock pair orders the writes before it with the reads
 * after it, so neither side reads what the other still writes. The wake
 * eventfd only says "look": a spurious or a late wake finds `done` false,
 * or a job already reaped, and reaps nothing.
 *
 * The memory copied is another matter: the old slab may still be written
 * by a process holding its rw fd (a publisher that left). The copy is of
 * whatever it holds then, as it was when the copy ran on the loop; that
 * race is between processes and is what the move's new memory ends.
 */
#include "mover.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* how much nicer the worker is than the loop */
#define MOVER_NICE 10

struct mover {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;             /* a job submitted, or stop */
	void   (*work)(void *);          /* the job, NULL when none submitted */
	void    *arg;
	bool     running;                /* the worker took the job */
	bool     done;                   /* the worker finished it */
	bool     stop;
	int      wake_fd;
	/* fds to close when idle (mover_close): the last fd of a slab frees
	 * its memory, tens of ms for a large one */
	int      closing[MOVER_MAX_CLOSE];
	unsigned n_closing;
};

static bool job_waiting(const struct mover *mv)
{
	return mv->work && !mv->running && !mv->done;
}

static void *mover_main(void *p)
{
	static const uint64_t one = 1;
	struct mover *mv = p;

	id_t tid = (id_t)syscall(SYS_gettid);
	int nice_now;

	/* On a busy machine the loop's thread must win the core: MOVER_NICE
	 * below the loop's priority, best effort (a thread may always lower
	 * its own). */
	errno = 0;
	nice_now = getpriority(PRIO_PROCESS, tid);
	if (!errno && setpriority(PRIO_PROCESS, tid, nice_now + MOVER_NICE > 19 ? 19 :
	                          nice_now + MOVER_NICE) < 0) {
	}
	pthread_mutex_lock(&mv->lock);
	for (;;) {
		int closing[MOVER_MAX_CLOSE];
		void (*work)(void *);
		unsigned n;
		void *arg;

		while (!mv->stop && !mv->n_closing && !job_waiting(mv))
			pthread_cond_wait(&mv->cond, &mv->lock);
		if (mv->n_closing) {
			n = mv->n_closing;
			memcpy(closing, mv->closing, n * sizeof(*closing));
			mv->n_closing = 0;
			pthread_mutex_unlock(&mv->lock);
			for (unsigned i = 0; i < n; i++)
				close(closing[i]);
			pthread_mutex_lock(&mv->lock);
			pthread_cond_broadcast(&mv->cond);   /* mover_stop waits */
			continue;
		}
		if (!job_waiting(mv))
			break;               /* stop, and nothing left to do */
		work = mv->work;
		arg = mv->arg;
		mv->running = true;
		pthread_mutex_unlock(&mv->lock);
		work(arg);
		pthread_mutex_lock(&mv->lock);
		mv->running = false;
		mv->done = true;
		pthread_cond_broadcast(&mv->cond);
		/* a full counter (never: the loop reads it each time) only
		 * delays the wake to the next write */
		if (write(mv->wake_fd, &one, sizeof(one)) < 0) {
		}
	}
	pthread_mutex_unlock(&mv->lock);
	return NULL;
}

int mover_start(struct mover **out, int wake_fd)
{
	struct mover *mv = calloc(1, sizeof(*mv));
	int err;

	if (!mv)
		return -ENOMEM;
	mv->wake_fd = wake_fd;
	err = pthread_mutex_init(&mv->lock, NULL);
	if (err)
		goto out_free;
	err = pthread_cond_init(&mv->cond, NULL);
	if (err)
		goto out_mutex;
	err = pthread_create(&mv->thread, NULL, mover_main, mv);
	if (err)
		goto out_cond;
	*out = mv;
	return 0;

out_cond:
	pthread_cond_destroy(&mv->cond);
out_mutex:
	pthread_mutex_destroy(&mv->lock);
out_free:
	free(mv);
	return -err;
}

int mover_submit(struct mover *mv, void (*work)(void *), void *arg)
{
	int err = 0;

	pthread_mutex_lock(&mv->lock);
	if (mv->work || mv->stop) {
		err = -EBUSY;
	} else {
		mv->work = work;
		mv->arg = arg;
		mv->done = false;
		pthread_cond_broadcast(&mv->cond);
	}
	pthread_mutex_unlock(&mv->lock);
	return err;
}

void mover_close(struct mover *mv, int fd)
{
	bool queued = false;

	if (fd < 0)
		return;
	if (mv) {
		pthread_mutex_lock(&mv->lock);
		if (!mv->stop && mv->n_closing < MOVER_MAX_CLOSE) {
			mv->closing[mv->n_closing++] = fd;
			pthread_cond_broadcast(&mv->cond);
			queued = true;
		}
		pthread_mutex_unlock(&mv->lock);
	}
	if (!queued)
		close(fd);
}

bool mover_busy(struct mover *mv)
{
	bool busy;

	pthread_mutex_lock(&mv->lock);
	busy = mv->work != NULL;
	pthread_mutex_unlock(&mv->lock);
	return busy;
}

bool mover_reap(struct mover *mv)
{
	bool done;

	pthread_mutex_lock(&mv->lock);
	done = mv->work && mv->done;
	if (done) {
		mv->work = NULL;
		mv->arg = NULL;
		mv->done = false;
	}
	pthread_mutex_unlock(&mv->lock);
	return done;
}

bool mover_stop(struct mover *mv)
{
	bool unreaped;

	if (!mv)
		return false;
	pthread_mutex_lock(&mv->lock);
	mv->stop = true;
	pthread_cond_broadcast(&mv->cond);
	/* a job submitted runs to its end: its new memory is then the
	 * caller's to free, never half made; fds to close are closed */
	while ((mv->work && !mv->done) || mv->n_closing)
		pthread_cond_wait(&mv->cond, &mv->lock);
	unreaped = mv->work != NULL;
	pthread_mutex_unlock(&mv->lock);
	pthread_join(mv->thread, NULL);
	pthread_cond_destroy(&mv->cond);
	pthread_mutex_destroy(&mv->lock);
	free(mv);
	return unreaped;
}
