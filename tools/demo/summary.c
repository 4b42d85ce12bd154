/* tools/demo/summary.c — the driver's summary table and verdict. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "demo.h"

static void summary_print_trainer(const struct demo *d)
{
	const struct child *ch = &d->trainer;
	const struct trainer_result *r = &ch->res.trainer;
	char status[96];

	child_describe_status(ch, status, sizeof status);
	if (!ch->has_result) {
		printf("trainer:  no result (%s)\n", status);
		return;
	}
	printf("trainer:  %" PRIu64 " versions published (last: version %" PRIu64
	       ", step %" PRIu64 ") in %.2f s = %.1f versions/s\n",
	       r->commits, r->last_version, r->last_step, (double)r->elapsed_ns / 1e9,
	       r->elapsed_ns > 0 ? (double)r->commits * 1e9 / (double)r->elapsed_ns : 0.0);
	printf("          %.1f MiB in %" PRIu64 " tensors per version, %" PRIu64
	       " begins timed out; %s\n", mib_of(r->bytes), r->tensors, r->busy, status);
}

static void summary_print_collectors(const struct demo *d)
{
	uint64_t published = d->trainer.has_result ? d->trainer.res.trainer.commits : 0;
	char status[96], share[16];

	printf("collector    seen  seen %%  failures  max skipped  max lag ms  mean lag ms"
	       "  last version  status\n");
	for (size_t i = 0; i < d->o.collectors; i++) {
		const struct child *ch = &d->collectors[i];
		const struct collector_result *r = &ch->res.collector;

		child_describe_status(ch, status, sizeof status);
		if (!ch->has_result) {
			printf("%9zu  no result%*s%s\n", i, 69, "", status);
			continue;
		}
		if (published)
			snprintf(share, sizeof share, "%.1f", 100.0 * (double)r->views /
			                                      (double)published);
		else
			snprintf(share, sizeof share, "-");
		printf("%9zu  %6" PRIu64 "  %6s  %8" PRIu64 "  %11" PRIu64 "  %10.2f  %11.2f"
		       "  %12" PRIu64 "  %s\n", i, r->views, share, r->failures, r->max_skip,
		       (double)r->lag_max_ns / 1e6,
		       r->views > 1 ? (double)r->lag_sum_ns / (double)(r->views - 1) / 1e6 : 0.0,
		       r->last_version, status);
	}
	printf("seen %%: of the versions published. max skipped: most versions committed while\n"
	       "the collector was busy with the previous one. lag: from commit to holding the\n"
	       "view, over the views after the first (which includes attaching to the model).\n");
}

void summary_print(const struct demo *d)
{
	char status[96];

	printf("\nsummary: model '%s', %" PRIu64 " collectors, %.1f s\n", d->o.model,
	       d->o.collectors, (double)(d->stopped_ns - d->started_ns) / 1e9);
	summary_print_trainer(d);
	summary_print_collectors(d);
	child_describe_status(&d->broker, status, sizeof status);
	printf("broker:   wsyncd %s\n", status);
}

static void problem(unsigned *count, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void problem(unsigned *count, const char *fmt, ...)
{
	va_list ap;

	if (!(*count)++)
		printf("wsync-demo: FAILED\n");
	printf("  - ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

static void judge_trainer(const struct child *ch, unsigned *n)
{
	char status[96];

	child_describe_status(ch, status, sizeof status);
	if (!ch->has_result)
		problem(n, "trainer: reported no result (%s)", status);
	else if (!ch->res.trainer.commits)
		problem(n, "trainer: published no version (%s)", status);
	else if (!child_exited_cleanly(ch))
		problem(n, "trainer: %s", status);
}

static void judge_collector(const struct child *ch, size_t id, unsigned *n)
{
	const struct collector_result *r = &ch->res.collector;
	char status[96], why[96] = "";

	if (!ch->has_result)
		snprintf(why, sizeof why, "reported no result");
	else if (r->broker_gone)
		snprintf(why, sizeof why, "lost the broker");
	else if (r->failures)
		snprintf(why, sizeof why, "%" PRIu64 " views did not match their step",
		         r->failures);
	else if (!r->views)
		snprintf(why, sizeof why, "saw no version");
	child_describe_status(ch, status, sizeof status);
	if (why[0])
		problem(n, "collector %zu: %s (%s)", id, why, status);
	else if (!child_exited_cleanly(ch))
		problem(n, "collector %zu: %s", id, status);
}

unsigned summary_judge(const struct demo *d)
{
	unsigned n = 0;
	char status[96];

	if (d->interrupts)
		problem(&n, "interrupted");
	if (!d->broker_ready) {
		if (!d->interrupts)
			problem(&n, "the broker did not start");
		return n;
	}
	judge_trainer(&d->trainer, &n);
	for (size_t i = 0; i < d->o.collectors; i++)
		judge_collector(&d->collectors[i], i, &n);
	if (!child_exited_cleanly(&d->broker)) {
		child_describe_status(&d->broker, status, sizeof status);
		problem(&n, "broker: %s (expected exit 0 after SIGTERM)", status);
	}
	return n;
}
