/*
 * broker/monitor.h — the models' figures for monitors (monitor.c).
 */
#ifndef WSYNC_BROKER_MONITOR_H
#define WSYNC_BROKER_MONITOR_H

#include <stdint.h>

struct model;

/* Records a commit of m (its commits counter already counts it). */
void monitor_commit(struct model *m, uint64_t version, uint32_t slot, int64_t ns);
/* Brings m's history up to its latest version and mirrors its publisher's
 * pid, its latest checksum and the commits counter the tick's lags are
 * counted against into its ctl entry (the tick). */
void monitor_model(struct model *m);

#endif
