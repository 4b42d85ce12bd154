/*
 * broker/events.h — the broker's answers to its loop's events (events.c).
 */
#ifndef WSYNC_BROKER_EVENTS_H
#define WSYNC_BROKER_EVENTS_H

#include "broker.h"

/* Creates the loop with the broker's callbacks (b->loop): 0 or -errno. */
int events_start(struct broker *b);

#endif
