/*
 * tools/demo/result.c — the one line a trainer or collector prints at exit,
 * "result <role> key=value ...", which the driver parses for its summary.
 * Printer and parser sit side by side so the two formats stay the same.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "demo.h"

void result_print_trainer(const struct trainer_result *r)
{
	printf("result trainer commits=%" PRIu64 " last_version=%" PRIu64
	       " last_step=%" PRIu64 " busy=%" PRIu64 " elapsed_ns=%" PRId64
	       " bytes=%" PRIu64 " tensors=%" PRIu64 "\n",
	       r->commits, r->last_version, r->last_step, r->busy, r->elapsed_ns,
	       r->bytes, r->tensors);
}

int result_parse_trainer(const char *line, struct trainer_result *r)
{
	int n = sscanf(line, "result trainer commits=%" SCNu64 " last_version=%" SCNu64
	               " last_step=%" SCNu64 " busy=%" SCNu64 " elapsed_ns=%" SCNd64
	               " bytes=%" SCNu64 " tensors=%" SCNu64,
	               &r->commits, &r->last_version, &r->last_step, &r->busy,
	               &r->elapsed_ns, &r->bytes, &r->tensors);

	return n == 7 ? 0 : -EINVAL;
}

void result_print_collector(const struct collector_result *r)
{
	printf("result collector id=%u views=%" PRIu64 " failures=%" PRIu64
	       " max_skip=%" PRIu64 " lag_sum_ns=%" PRId64 " lag_max_ns=%" PRId64
	       " first_version=%" PRIu64 " last_version=%" PRIu64 " broker_gone=%d\n",
	       r->id, r->views, r->failures, r->max_skip, r->lag_sum_ns, r->lag_max_ns,
	       r->first_version, r->last_version, r->broker_gone);
}

int result_parse_collector(const char *line, struct collector_result *r)
{
	int n = sscanf(line, "result collector id=%u views=%" SCNu64 " failures=%" SCNu64
	               " max_skip=%" SCNu64 " lag_sum_ns=%" SCNd64 " lag_max_ns=%" SCNd64
	               " first_version=%" SCNu64 " last_version=%" SCNu64 " broker_gone=%d",
	               &r->id, &r->views, &r->failures, &r->max_skip, &r->lag_sum_ns,
	               &r->lag_max_ns, &r->first_version, &r->last_version,
	               &r->broker_gone);

	return n == 9 ? 0 : -EINVAL;
}
