/* broker/uids.c — each uid's books; see uids.h. */
#include "uids.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <linux/sockios.h>
#include <unistd.h>

#include "fault.h"
#include "log.h"
#include "shm/clock.h"
#include "shm/proto.h"

/* A uid (or a trusted session) may leave RLIMIT_NOFILE / UIDS_FDS_PART fds
 * unread, between two replies' worth and UIDS_FDS_SHARE_MAX; all the
 * untrusted uids together a quarter of the limit, so the broker's own uid
 * always keeps three quarters of what the kernel allows in flight. */
#define UIDS_FDS_PART      16
#define UIDS_FDS_SHARE_MIN (2 * WSYNC_MSG_MAX_FDS)
#define UIDS_FDS_SHARE_MAX 4096
#define UIDS_FDS_OTHERS    4

void uids_init(struct broker *b)
{
	struct rlimit rl;
	uint64_t lim = UINT64_C(1) << 20, share;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		lim = rl.rlim_cur;
	share = lim / UIDS_FDS_PART;
	if (share < UIDS_FDS_SHARE_MIN)
		share = UIDS_FDS_SHARE_MIN;
	if (share > UIDS_FDS_SHARE_MAX)
		share = UIDS_FDS_SHARE_MAX;
	b->fds_share = (uint32_t)share;
	b->fds_others_max = lim / UIDS_FDS_OTHERS > share ? (uint32_t)(lim / UIDS_FDS_OTHERS)
	                                                 : (uint32_t)share;
	if (b->fds_others_max > 16 * UIDS_FDS_SHARE_MAX)
		b->fds_others_max = 16 * UIDS_FDS_SHARE_MAX;
}

uint32_t uids_fds_share(const struct broker *b)
{
	return b->fds_share;
}

static struct uid_books *uids_find(struct broker *b, uid_t uid)
{
	for (uint32_t i = 0; i < b->n_uids; i++)
		if (b->uids[i]->uid == uid)
			return b->uids[i];
	return NULL;
}

struct uid_books *uids_join(struct broker *b, uid_t uid)
{
	struct uid_books *u = uids_find(b, uid);

	if (u) {
		u->sessions++;
		return u;
	}
	if (b->n_uids == b->uids_cap) {
		uint32_t cap = b->uids_cap ? 2 * b->uids_cap : 8;
		struct uid_books **v = fault_realloc(b->uids, cap * sizeof(*v));

		if (!v)
			return NULL;
		b->uids = v;
		b->uids_cap = cap;
	}
	u = fault_calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->uid = uid;
	u->sessions = 1;
	u->work_ns = UIDS_WORK_BURST_NS;
	u->work_at_ns = wsync_mono_ns();
	b->uids[b->n_uids++] = u;
	return u;
}

void uids_leave(struct broker *b, struct uid_books *u)
{
	(void)b;
	u->sessions--;
}

uint32_t uids_outq(int fd)
{
	int n = 0;

	if (ioctl(fd, SIOCOUTQ, &n) < 0 || n < 0)
		return 0;
	return (uint32_t)n;
}

void uids_fds_add(struct broker *b, struct uid_books *u, uint32_t n)
{
	u->fds_unread += n;
	b->fds_others += n;
}

void uids_fds_sub(struct broker *b, struct uid_books *u, uint32_t n)
{
	u->fds_unread -= n;
	b->fds_others -= n;
}

bool uids_fds_over(const struct broker *b, const struct uid_books *u, uint32_t n,
                   char *why, size_t whylen)
{
	if (u->fds_unread + n > b->fds_share) {
		snprintf(why, whylen, "the sessions of uid %u have %u fds in replies they did "
		         "not read (limit %u per user): read the replies first", (unsigned)u->uid,
		         u->fds_unread, b->fds_share);
		return true;
	}
	if (b->fds_others + n > b->fds_others_max) {
		snprintf(why, whylen, "clients of other users than the broker's have %u fds in "
		         "replies they did not read (limit %u in all): try again later",
		         b->fds_others, b->fds_others_max);
		return true;
	}
	return false;
}

bool uids_linger(struct broker *b, struct uid_books *u, int fd, uint32_t fds)
{
	(void)b;
	if (u->n_linger == u->linger_cap) {
		uint32_t cap = u->linger_cap ? 2 * u->linger_cap : 4;
		struct uid_linger *v = fault_realloc(u->linger, cap * sizeof(*v));

		if (!v)
			return false;
		u->linger = v;
		u->linger_cap = cap;
	}
	u->linger[u->n_linger++] = (struct uid_linger){ fd, fds };
	return true;
}

void uids_linger_look(struct broker *b, struct uid_books *u)
{
	for (uint32_t i = 0; i < u->n_linger;) {
		struct uid_linger *l = &u->linger[i];

		if (uids_outq(l->fd)) {
			i++;
			continue;
		}
		close(l->fd);
		uids_fds_sub(b, u, l->fds);
		*l = u->linger[--u->n_linger];
	}
	if (!u->n_linger) {
		free(u->linger);
		u->linger = NULL;
		u->linger_cap = 0;
	}
}

int64_t uids_work_wait_ns(struct uid_books *u, int64_t now_ns)
{
	if (now_ns > u->work_at_ns)
		u->work_ns += (now_ns - u->work_at_ns) / UIDS_WORK_SHARE;
	if (u->work_ns > UIDS_WORK_BURST_NS)
		u->work_ns = UIDS_WORK_BURST_NS;
	u->work_at_ns = now_ns;
	return u->work_ns >= 0 ? 0 : -u->work_ns * UIDS_WORK_SHARE;
}

void uids_work_charge(struct uid_books *u, int64_t ns)
{
	if (ns > 0)
		u->work_ns -= ns;
}

uint64_t uids_mute_count(struct uid_books *u, int64_t now_ns)
{
	uint64_t n;

	u->mutes++;
	if (u->mutes_logged_ns && now_ns - u->mutes_logged_ns < UIDS_MUTE_LOG_NS)
		return 0;
	n = u->mutes - u->mutes_logged;
	u->mutes_logged = u->mutes;
	u->mutes_logged_ns = now_ns;
	return n;
}

static void uids_drop(struct broker *b, uint32_t i)
{
	struct uid_books *u = b->uids[i];

	for (uint32_t k = 0; k < u->n_linger; k++)
		close(u->linger[k].fd);
	b->fds_others -= u->fds_unread;
	free(u->linger);
	free(u);
	b->uids[i] = b->uids[--b->n_uids];
}

void uids_tick(struct broker *b)
{
	for (uint32_t i = 0; i < b->n_uids;) {
		struct uid_books *u = b->uids[i];

		uids_linger_look(b, u);
		/* a debt of work outlives the sessions: a uid that reconnects
		 * must not start with a full bucket */
		if (!u->sessions && !u->n_linger && !uids_work_wait_ns(u, wsync_mono_ns()) &&
		    u->work_ns == UIDS_WORK_BURST_NS) {
			if (u->fds_unread)
				log_error("uid %u: %u fds in flight counted with nothing holding them",
				          (unsigned)u->uid, u->fds_unread);
			uids_drop(b, i);
			continue;
		}
		i++;
	}
	if (!b->n_uids) {
		free(b->uids);
		b->uids = NULL;
		b->uids_cap = 0;
	}
}

void uids_free_all(struct broker *b)
{
	while (b->n_uids)
		uids_drop(b, b->n_uids - 1);
	free(b->uids);
	b->uids = NULL;
	b->uids_cap = 0;
}
