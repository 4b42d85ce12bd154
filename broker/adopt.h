/*
 * broker/adopt.h — startup: a new generation of segments, adopting what a
 * previous broker of this instance left (see adopt.c).
 */
#ifndef WSYNC_BROKER_ADOPT_H
#define WSYNC_BROKER_ADOPT_H

#include <stddef.h>

#include "broker.h"

/*
 * Sets b->generation, creates the generation's private directory and its
 * control segment, re-creates the models of the previous generation named
 * in the state file (checked, see adopt.c), names the new directory in the
 * state file, and removes every other directory of the instance. Returns
 * the number of models adopted, or -errno with a message in err (startup
 * fails).
 */
int adopt_start(struct broker *b, char *err, size_t errlen);

/* Removes every directory of this instance in /dev/shm that is ours, except
 * b->seg_dir and keep (NULL: none); one of another owner is logged and left
 * alone. Returns how many were removed. */
int adopt_sweep(const struct broker *b, const char *keep);

#endif
