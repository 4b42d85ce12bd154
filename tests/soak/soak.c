/*
 * soak — `make soak`: the crash soak for SOAK_SECONDS (default 120) of
 * random SIGKILLs of the broker, trainers, the ranks of a publisher group
 * (SOAK_RANKS, default 4; 0: no group) and collectors (seeded: SOAK_SEED
 * repeats the sequence of choices). See tests/lib/faults.h, soak_run, for
 * what is checked; fault_soak_short runs the same for ~8 s in `make test`.
 */
#include "tests/lib/faults.h"

#include <stdio.h>
#include <stdlib.h>

static int env_int(const char *name, int dflt)
{
	const char *s = getenv(name);

	return s && *s ? atoi(s) : dflt;
}

int main(void)
{
	const char *seed = getenv("SOAK_SEED");
	struct soak_opts o = {
		.seconds = env_int("SOAK_SECONDS", 120),
		.seed = seed ? strtoull(seed, NULL, 10) : 0,
		.trainers = env_int("SOAK_TRAINERS", 2),
		.collectors = env_int("SOAK_COLLECTORS", 4),
		.broker_kills = env_int("SOAK_BROKER_KILL_PCT", 15),
		.ranks = env_int("SOAK_RANKS", 4),
	};
	struct soak_result r;

	if (o.seconds < 1) {
		fprintf(stderr, "soak: SOAK_SECONDS must be at least 1\n");
		return 2;
	}
	soak_run(&o, &r);
	TEST_ASSERT(r.views > 0 && r.commits > 0);
	TEST_ASSERT(o.ranks == 0 || r.group_versions > 0);
	return 0;
}
