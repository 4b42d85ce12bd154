/*
 * fault_soak_short — the crash soak of `make soak`, bounded to ~8 s of kills:
 * 2 trainers publish verifiable contents (every word derived from the step),
 * a publisher group of 3 ranks publishes a third model (each rank its parts),
 * 3 collectors verify every view completely (and again after holding it),
 * while the broker, trainers, ranks and collectors are SIGKILLed and restarted at
 * seeded random times (the seed is printed; SOAK_SEED=N repeats it). Passes
 * when no view was torn or went backward (per collector, across its
 * reconnects and restarts), every trainer, rank and collector recovered, no slot
 * is left granted once every client is gone, only the live generation's
 * segments exist, and after the clean stop nothing of the instance remains.
 */
#include "tests/lib/faults.h"

#include <stdlib.h>

int main(void)
{
	const char *seed = getenv("SOAK_SEED");
	struct soak_opts o = {
		.seconds = 8,
		.seed = seed ? strtoull(seed, NULL, 10) : 0,
		.trainers = 2,
		.collectors = 3,
		.broker_kills = 15,
		.ranks = 3,
	};
	struct soak_result r;

	soak_run(&o, &r);
	TEST_ASSERT(r.kills_broker + r.kills_trainer + r.kills_collector > 0);
	TEST_ASSERT(r.kills_rank > 0 && r.group_versions > 0);
	TEST_ASSERT(r.views > 0 && r.commits > 0);
	return 0;
}
