/*
 * broker/config.h — wsyncd's options, their defaults and their parsing,
 * kept apart from main() so they can be tested.
 */
#ifndef WSYNC_BROKER_CONFIG_H
#define WSYNC_BROKER_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shm/layout.h"

#define CONFIG_DEFAULT_NAME      "default"
#define CONFIG_DEFAULT_MAX_SLOTS 8
#define CONFIG_SOCKET_MAX        108     /* sizeof(sockaddr_un.sun_path) */

struct config {
	char     name[WSYNC_INSTANCE_MAX];
	char     rundir[PATH_MAX];
	char     socket_path[CONFIG_SOCKET_MAX];
	uint64_t shm_limit;              /* 0 until config_finish() */
	uint32_t max_slots;
	bool     has_group;
	gid_t    gid;
	char     group[64];              /* as given, for messages */
	int      log_level;              /* enum log_level */
	char     log_file[PATH_MAX];     /* --log-file, "" = stderr */
	bool     keep;                   /* a clean stop keeps each model's latest
	                                    version for the next start (default) */
	bool     fresh;                  /* --fresh: adopt no weights at start */
	char     gpus[256];              /* --gpus: all, none or a list (broker/gpu.h) */
	int      huge_pages;             /* --huge-pages: enum config_huge */
};

enum config_huge {
	CONFIG_HUGE_AUTO = 0,            /* huge pages where the system has them */
	CONFIG_HUGE_ON   = 1,            /* huge pages or a failed start */
	CONFIG_HUGE_OFF  = 2,            /* 4 KiB pages */
};

enum config_result {
	CONFIG_RUN  = 0,                 /* start the broker */
	CONFIG_DONE = 1,                 /* --help or --version was printed */
};

/*
 * Parses argv into cfg (defaults first). Returns CONFIG_RUN, CONFIG_DONE or
 * -EINVAL with a message in err (bad usage: exit 2).
 */
int config_parse(struct config *cfg, int argc, char **argv, char *err, size_t errlen);
/*
 * Fills what depends on the system: run dir, socket path, shm limit.
 * Returns 0 or -errno with a message in err (startup failure: exit 1).
 */
int config_finish(struct config *cfg, char *err, size_t errlen);

/* "64M", "1G", "4096" (K/M/G/T = powers of 1024): 0 or -EINVAL/-ERANGE. */
int config_parse_size(const char *s, uint64_t *out);
/* Instance names: 1..63 of [A-Za-z0-9._-], not starting with '.'. */
bool config_name_valid(const char *name);
/* $XDG_RUNTIME_DIR/wsync, else /tmp/wsync-<uid>. */
int config_default_rundir(char *buf, size_t len);
/* The --help text. */
extern const char config_usage_text[];

#endif
