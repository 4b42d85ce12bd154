/*
 * budget_floors — every name ever granted a version leaves a version
 * floor, so another uid cycling through new names must not grow the
 * broker's memory without bound (DESIGN invariant 10). Needs root (skipped
 * otherwise): the burst comes from another uid admitted through --group.
 *
 *  1. The other uid opens 600 new names, takes a grant of each and leaves
 *     (each leaves a floor), while an honest trainer's commit round trip
 *     stays near its idle figure.
 *  2. A name whose floor was folded into the shared floors still starts
 *     above the version it was granted: versions never go down.
 *  3. The broker's fds and memory come back; at a clean stop its versions
 *     file keeps at most 256 floors of that uid's names (the budget; the
 *     rest went into at most 256 shared floors), and the next start
 *     reads the shared floors back: a folded name still starts above 1.
 */
#include "tests/lib/harness.h"
#include "tests/lib/hostile.h"
#include "tests/lib/raw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NAMES 600
#define SHARE 256                        /* the broker's STATE_UID_FLOORS */

static struct broker G;
static uid_t other_uid;
static gid_t other_gid;
static struct chan up;

/* PUB_OPEN of name, retrying while the uid's share of time is spent. */
static uint32_t open_retrying(struct raw *r, const char *name, const wsync_tensor_desc *d)
{
	uint32_t id;
	int err;

	while ((err = raw_pub_open(r, name, d, 2, 2, NULL, &id, NULL)) == -EBUSY)
		harness_sleep_ms(2);
	TEST_ASSERT_MSG(err == 0, "PUB_OPEN of '%s': %d", name, err);
	return id;
}

/* BEGIN on id: the version granted. */
static uint64_t grant(struct raw *r, uint32_t id)
{
	int fds[WSYNC_MSG_MAX_FDS], nfds = WSYNC_MSG_MAX_FDS;
	union wsync_msg_any m;

	raw_init(r, &m, WSYNC_MSG_BEGIN);
	m.begin.m.model_id = id;
	raw_request(r->fd, &m, sizeof m.begin, NULL, 0, WSYNC_MSG_GRANT, fds, &nfds);
	raw_close_fds(fds, nfds);
	return m.grant.version;
}

static void leave(struct raw *r, uint32_t id)
{
	union wsync_msg_any m;

	raw_init(r, &m, WSYNC_MSG_CLOSE);
	m.close.m.model_id = id;
	m.close.what = WSYNC_CLOSE_PUB;
	raw_request(r->fd, &m, sizeof m.close, NULL, 0, WSYNC_MSG_CLOSE_OK, NULL, NULL);
}

static int other_user(void *arg)
{
	wsync_tensor_desc d[2];
	struct raw r;
	uint64_t v;
	uint32_t id;

	(void)arg;
	hostile_become(other_uid, other_gid);
	harness_model_2t(d);
	raw_hello(&r, &G, "names");
	for (int i = 0; i < NAMES; i++) {
		char name[32];

		snprintf(name, sizeof name, "floors.%d", i);
		id = open_retrying(&r, name, d);
		/* 1, or above a shared floor its name's bucket holds */
		TEST_GT_U64(grant(&r, id), 0);
		leave(&r, id);
		if (i == NAMES / 2)
			chan_send(&up, 1);   /* halfway: the parent measures */
	}
	/* 2. the first name's own floor was folded: it still starts above 1 */
	id = open_retrying(&r, "floors.0", d);
	v = grant(&r, id);
	harness_log("'floors.0' granted v%llu after its floor was folded", (unsigned long long)v);
	TEST_GT_U64(v, 1);
	leave(&r, id);
	raw_close(&r);
	chan_send(&up, 2);
	return 0;
}

int main(void)
{
	struct hostile_base base;
	wsync_client *c;
	wsync_pub *honest;
	char path[320], *text, *line;
	int own = 0, shared = 0, skip;
	FILE *fp;
	pid_t kid;

	skip = hostile_other_start(&G, "publish many names as another uid", &other_uid, &other_gid,
	                           "floors.honest", &c, &honest);
	if (skip)
		return skip;
	hostile_base_take(&G, honest, &base);

	chan_open(&up);
	kid = harness_fork(other_user, NULL);
	TEST_EQ_U64(chan_recv(&up, kid), 1);
	hostile_check_rtt(&G, honest, &base, "while another uid cycles through new names");
	TEST_EQ_U64(chan_recv(&up, kid), 2);
	harness_expect_exit0(kid, "the other uid");
	hostile_check_settled(&G, &base, 2 * 1024, "the other uid left 600 names");
	hostile_other_finish(&G, c, honest);

	/* 3. what the versions file keeps */
	snprintf(path, sizeof path, "%s/wsync/%s.versions", G.dir, G.name);
	fp = fopen(path, "r");
	TEST_ASSERT_MSG(fp, "no versions file at %s", path);
	text = calloc(1, 1 << 20);
	TEST_ASSERT(text);
	fread(text, 1, (1 << 20) - 1, fp);
	fclose(fp);
	for (line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		if (strstr(line, " floors.") && !strstr(line, "floors.honest"))
			own++;
		else if (strstr(line, " *"))
			shared++;
	}
	free(text);
	harness_log("versions file: %d floors of uid %u's names, %d shared floors", own,
	            (unsigned)other_uid, shared);
	TEST_ASSERT_MSG(own <= SHARE, "%d floors of one uid's names kept", own);
	TEST_ASSERT(shared > 0 && shared <= 256);

	TEST_ASSERT(harness_broker_restart(&G) == 0);
	TEST_OK(harness_connect(&G, "after-restart", &c));
	TEST_OK(harness_pub_open_2t(c, "floors.1", 0, &honest));
	{
		uint64_t v;

		TEST_OK(harness_publish(honest, 1, HARNESS_S, &v));
		harness_log("'floors.1' after a restart: v%llu", (unsigned long long)v);
		TEST_GT_U64(v, 1);
	}
	hostile_other_finish(&G, c, honest);
	return 0;
}
