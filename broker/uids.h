/*
 * broker/uids.h — what all the sessions of one uid hold together, for the
 * budgets that bound another user as a whole (DESIGN invariant 10: the
 * security boundary is the uid, invariant 5, so many sessions must not buy
 * a user more than one).
 *
 * Only uids other than the broker's and root have books: those two get the
 * same budgets per session (session.h), which stops a buggy client; a
 * process of them can do whatever the broker can anyway.
 *
 * Fds in flight: every fd the broker sends stays "in flight" in the
 * receiver's socket queue until the receiver reads the reply, and the
 * kernel lets one user have at most RLIMIT_NOFILE of them (the broker's,
 * unless it has CAP_SYS_RESOURCE): past that every SCM_RIGHTS send of the
 * broker fails with ETOOMANYREFS, and no client can even complete HELLO.
 * So each session counts the fds of the replies its peer has not read
 * (none left once the socket's send queue, SIOCOUTQ, is empty), a uid's
 * sessions count together, and a request whose reply carries fds is
 * refused past the share (-ENOBUFS). A session torn down with replies
 * unread leaves its socket here (uids_linger) until its peer has read or
 * closed them, still counted: the fds are still in flight.
 *
 * Work: a request that opens or ends a model (PUB_OPEN, SUB_OPEN, CLOSE,
 * DELETE) costs the broker's thread in proportion to the model's layout
 * (read, checked, sorted, its slabs made and unmade), and each is cheap
 * to ask. A uid's requests of those kinds may take 1/UIDS_WORK_SHARE of
 * real time, in bursts of UIDS_WORK_BURST_NS: a bucket of time that fills
 * at that rate and that each such request drains by what it took (measured,
 * like moves, model.h, whose own time is not counted again; at least
 * UIDS_WORK_MIN_NS, what reading and answering it costs besides). While it
 * is below zero the uid's PUB_OPEN is refused (-EBUSY, saying when to try
 * again); SUB_OPEN, CLOSE and DELETE are never refused: a collector must
 * not be refused because its uid also trains a big model. And a session
 * that asks for any of the four while the bucket is below zero is paced:
 * answered, then not read again until the bucket is back at zero
 * (session_mute, the loop's timer), so that a uid past its share costs the
 * broker its share and no more, refusals included, instead of being
 * refused as fast as it asks. What it sends meanwhile waits in its socket;
 * a hangup still ends it at once (the loop polls for one); its sessions
 * that do not ask (BEGIN, COMMIT, ACKED ...) are read as usual.
 * The burst is the moves' (250 ms), so that an honest publisher of another
 * uid may open a model of some hundred MiB (its slabs are reserved,
 * fallocate) without being refused after it; the share is half theirs. One layout of such a uid holds at most
 * UIDS_MAX_LAYOUT tensors and parts, and the models it owns together
 * UIDS_MAX_TENSORS, so no single request takes long either.
 */
#ifndef WSYNC_BROKER_UIDS_H
#define WSYNC_BROKER_UIDS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "broker.h"

struct uid_linger {
	int      fd;                     /* a torn-down session's socket */
	uint32_t fds;                    /* fds in replies still unread there */
};

#define UIDS_WORK_SHARE    20                        /* a twentieth of the time */
#define UIDS_WORK_BURST_NS INT64_C(250000000)        /* 250 ms */
/* What one paced request costs at least (reading, checking and answering
 * it, which its measured time leaves out), so that cheap ones asked by
 * the thousand pay their way too. */
#define UIDS_WORK_MIN_NS   INT64_C(50000)            /* 50 us */
#define UIDS_MUTE_LOG_NS   INT64_C(10000000000)      /* a line per uid per 10 s */
#define UIDS_MAX_LAYOUT    16384                     /* tensors + parts, one layout */
#define UIDS_MAX_TENSORS   65536                     /* of all the models it owns */
/* WAIT_READERS pending for all the sessions of a uid: four sessions' worth
 * (READERS_MAX_PER_PEER each), so that a uid's many sessions cannot keep
 * the broker polling tens of thousands of waits (readers.h). */
#define UIDS_MAX_WAITS     256

struct uid_books {
	uid_t    uid;
	int64_t  work_ns;                /* the work bucket (above) */
	int64_t  work_at_ns;             /* when it was last filled, 0 = never */
	uint32_t sessions;               /* its sessions, in any state */
	uint32_t fds_unread;             /* its sessions' and lingering sockets' */
	uint32_t waits;                  /* its sessions' pending WAIT_READERS */
	int64_t  refreshed_ns;           /* its sessions' queues last looked at */
	struct uid_linger *linger;
	uint32_t n_linger, linger_cap;
	uint64_t mutes;                  /* its sessions paused (session_mute) */
	uint64_t mutes_logged;           /* ...as of the last line about them */
	int64_t  mutes_logged_ns;        /* when that was, 0 = never */
};

/* Whether uid's clients are budgeted per session (the broker's uid, root)
 * rather than per uid. */
static inline bool uids_trusted(const struct broker *b, uid_t uid)
{
	return uid == b->uid || uid == 0;
}

/* Sets the shares from RLIMIT_NOFILE (after main raised it). */
void uids_init(struct broker *b);
/* The books of uid (not trusted), made if new, with one more session:
 * NULL when out of memory. */
struct uid_books *uids_join(struct broker *b, uid_t uid);
/* One session of u less (its fds were settled first). */
void uids_leave(struct broker *b, struct uid_books *u);

/* fds in replies a session or a uid may leave unread (uids_init). */
uint32_t uids_fds_share(const struct broker *b);
/* The bytes the peer of socket fd has not read yet (SIOCOUTQ); 0 on error
 * (a socket that cannot say holds nothing the peer could still read). */
uint32_t uids_outq(int fd);
/* n fds were sent to a session of u / its unread ones were read. */
void uids_fds_add(struct broker *b, struct uid_books *u, uint32_t n);
void uids_fds_sub(struct broker *b, struct uid_books *u, uint32_t n);
/* Whether n more fds in flight would put u (or the uids other than the
 * broker's and root together) past the share; why says which. */
bool uids_fds_over(const struct broker *b, const struct uid_books *u, uint32_t n,
                   char *why, size_t whylen);
/* Takes a torn-down session's socket whose peer has not read fds of its
 * replies: kept, and counted, until the peer read or closed them. false
 * (the caller closes it and the fds stop counting) when out of memory. */
bool uids_linger(struct broker *b, struct uid_books *u, int fd, uint32_t fds);
/* Lets go of u's lingering sockets whose peers read or closed them. */
void uids_linger_look(struct broker *b, struct uid_books *u);

/* 0 if u may ask for expensive work now, else ns until it may (fills
 * the bucket first). */
int64_t uids_work_wait_ns(struct uid_books *u, int64_t now_ns);
/* u's request took ns of the broker's thread. */
void uids_work_charge(struct uid_books *u, int64_t ns);
/* One more session of u paused: the pauses since the last line about u
 * when one is due (one each UIDS_MUTE_LOG_NS), else 0. */
uint64_t uids_mute_count(struct uid_books *u, int64_t now_ns);

/* Each second: lingering sockets looked at, books nobody needs freed. */
void uids_tick(struct broker *b);
/* Shutdown: every socket closed, every book freed. */
void uids_free_all(struct broker *b);

#endif
