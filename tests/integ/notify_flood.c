/*
 * notify_flood — NOTIFY eventfds are budgeted: clients that each ask for an
 * eventfd on 63 models cannot run the broker out of descriptors. The broker
 * runs with RLIMIT_NOFILE 1024 (soft and hard, so it cannot raise it; the
 * test sets it for itself and its children before starting the broker); 15
 * collectors subscribe to 63 models each (declared beforehand by a holder
 * process, as one client may keep only 16 names nobody publishes) and call
 * wsync_sub_fd on every one: 945 eventfds, more than the broker can hold beside its segments.
 * Past its budget NOTIFY fails with -EMFILE and a message saying so; the
 * broker keeps serving: a new client publishes and reads while the flood is
 * still held, and every eventfd is given back when the collectors go.
 *
 * A broker without the budget runs into its fd limit: it can no longer
 * accept or create segments, and the new client fails.
 */
#include "tests/lib/harness.h"

#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

#define FLOODERS 15
#define MODELS   63                    /* one table entry left for "policy" */

#define AWAITED  16                    /* the broker's SESSION_MAX_AWAITED */
#define HOLDERS  ((MODELS + AWAITED - 1) / AWAITED)

static struct broker B;
static struct chan up, down, hup, hdown;

/* Keeps the MODELS names declared (subscribed, never published) until told:
 * one client may keep only AWAITED such names in the table, so it takes
 * several; the flooders then subscribe to models that exist. */
static int holder(void *arg)
{
	static wsync_sub *subs[MODELS];
	wsync_client *c[HOLDERS];
	char name[32];

	(void)arg;
	for (int k = 0; k < HOLDERS; k++) {
		snprintf(name, sizeof name, "holder-%d", k);
		if (harness_connect(&B, name, &c[k]))
			return 2;
	}
	for (int i = 0; i < MODELS; i++) {
		snprintf(name, sizeof name, "n%d", i);
		if (wsync_sub_open(c[i / AWAITED], name, &subs[i])) {
			fprintf(stderr, "holder: %s: %s\n", name, wsync_errmsg());
			return 3;
		}
	}
	chan_send(&hup, 1);
	chan_recv(&hdown, getppid());
	for (int k = 0; k < HOLDERS; k++)
		wsync_close(c[k]);
	return 0;
}

static int flooder(void *arg)
{
	int me = (int)(intptr_t)arg, ok = 0, refused = 0;
	static wsync_sub *subs[MODELS];
	char name[32], client[32];
	wsync_client *c;
	snprintf(client, sizeof client, "flood-%d", me);
	if (harness_connect(&B, client, &c))
		return 2;
	for (int i = 0; i < MODELS; i++) {
		snprintf(name, sizeof name, "n%d", i);
		if (wsync_sub_open(c, name, &subs[i]))
			return 3;
		int fd = wsync_sub_fd(subs[i]);
		if (fd >= 0) {
			ok++;
		} else if (fd == -EMFILE) {
			if (!strstr(wsync_errmsg(), "eventfds")) {
				fprintf(stderr, "flooder %d: unclear message: %s\n", me,
				        wsync_errmsg());
				return 4;
			}
			refused++;
		} else {
			fprintf(stderr, "flooder %d: wsync_sub_fd: %d %s\n", me, fd,
			        wsync_errmsg());
			return 5;
		}
	}
	chan_send(&up, (uint64_t)refused << 32 | (uint64_t)ok);
	chan_recv(&down, getppid());       /* hold everything until told */
	wsync_close(c);
	return 0;
}


int main(void)
{
	struct rlimit low = { 1024, 1024 };
	pid_t kids[FLOODERS];
	/* The whole test runs under it; each process needs far fewer. */
	TEST_ASSERT(setrlimit(RLIMIT_NOFILE, &low) == 0);
	if (harness_broker_start(&B, NULL))
		return 1;
	harness_publish_and_read(&B, "policy", 7);             /* "policy" and its fds stay */
	chan_open(&up);
	chan_open(&down);
	chan_open(&hup);
	chan_open(&hdown);
	pid_t keeper = harness_fork(holder, NULL);
	chan_recv(&hup, keeper);
	int base = harness_broker_fd_settle(&B, 0, 300);
	for (int i = 0; i < FLOODERS; i++)
		kids[i] = harness_fork(flooder, (void *)(intptr_t)i);
	uint64_t ok = 0, refused = 0;
	for (int i = 0; i < FLOODERS; i++) {
		uint64_t v = chan_recv(&up, 0);
		ok += v & 0xffffffffu;
		refused += v >> 32;
	}
	harness_log("NOTIFY: %llu eventfds taken, %llu refused with -EMFILE; broker fds %d",
	            (unsigned long long)ok, (unsigned long long)refused,
	            harness_broker_fd_count(&B));
	TEST_ASSERT_MSG(refused > 0, "no NOTIFY was refused: the broker took %llu eventfds "
	                "with a limit of 1024 fds", (unsigned long long)ok);
	harness_publish_and_read(&B, "policy", 7);
	for (int i = 0; i < FLOODERS; i++)
		chan_send(&down, 1);
	for (int i = 0; i < FLOODERS; i++)
		harness_expect_exit0(kids[i], "flooder");
	int now = harness_broker_fd_settle(&B, base, 10000);
	TEST_ASSERT_MSG(now <= base, "broker fds %d after the flood, %d before", now, base);
	chan_send(&hdown, 1);
	harness_expect_exit0(keeper, "holder");
	harness_broker_finish(&B);
	return 0;
}
