/*
 * broker/adopt.h — startup: a new generation of segments, adopting what a
 * previous broker of this instance left (see adopt.c).
 */
#ifndef WSYNC_BROKER_ADOPT_H
#define WSYNC_BROKER_ADOPT_H

#include <stddef.h>

#include "broker.h"

/*
 * Sets b->generation, creates and installs the control segment, re-creates
 * the models of a valid old control segment, and removes every other
 * segment of the instance. Returns the number of models adopted, or -errno
 * with a message in err (startup fails).
 */
int adopt_start(struct broker *b, char *err, size_t errlen);

/* Unlinks every segment of the instance except the control segment and
 * those of generation keep (0: keep none). Returns how many were removed. */
int adopt_sweep(const struct broker *b, uint64_t keep);

#endif
