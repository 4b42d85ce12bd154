/*
 * tools/common/seg.h — a broker's control segment, mapped without a session.
 *
 * Monitors (wsyncctl status/models/sessions/ping/metrics, wsync-top) never
 * connect: a connection would count them as clients, and a stopped broker
 * would make them wait. They read what the broker itself names: its state
 * file <rundir>/<name>.state holds the generation's directory in /dev/shm,
 * whose `ctl` file is the control segment. Everything on that path is
 * checked as a client checks what it is given: the state file a regular
 * file of a trusted uid (ours, root, or $WSYNC_BROKER_UID) that nobody else
 * can write, the directory exactly the instance's name pattern, owned by
 * that uid and 0700, the segment a regular file of that uid with one link,
 * no group or other write bit, the right magic, layout version, uid, name
 * and sizes. Nothing another uid planted is read.
 *
 * The mapping is read-only; only the broker writes the segment, so a
 * monitor reads each word once (relaxed) and sees it whole.
 */
#ifndef WSYNC_TOOLS_COMMON_SEG_H
#define WSYNC_TOOLS_COMMON_SEG_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shm/layout.h"

struct seg {
	const struct wsync_ctl_header *ctl;  /* NULL when not attached */
	size_t   bytes;
	uid_t    uid;                        /* the broker's */
	char     instance[WSYNC_INSTANCE_MAX];
	char     state_path[PATH_MAX];       /* <rundir>/<name>.state */
	char     dir[256];                   /* the generation's directory name */
	char     where[PATH_MAX];            /* what the user named, for messages */
};

/*
 * Finds the broker of endpoint (NULL: $WSYNC_ENDPOINT, else the default
 * instance; a string with '/' is a socket path, whose state file is the
 * one the broker's pointer "<path>.wsync" names (broker/rundir.h), else
 * looked for as <stem>.state next to it, one directory up, and in the run
 * directory; anything else an instance name) and maps its control segment.
 * 0, or -ENOENT (no broker there: no state file, or it names a generation
 * that is gone), -EPERM (something on the path is not the broker's own),
 * -EPROTO (not a control segment this tool understands), another -errno;
 * a message in why either way.
 */
int  seg_attach(const char *endpoint, struct seg *out, char *why, size_t whylen);
void seg_detach(struct seg *s);
/* Whether the state file still names the generation mapped (a restarted
 * broker installs another). */
int  seg_current(const struct seg *s);

/* The instance name an endpoint names (for messages), into buf. */
const char *seg_endpoint_text(const char *endpoint, char *buf, size_t len);

#endif
