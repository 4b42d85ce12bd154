/* broker/main.c — wsyncd: options, signals, start, run, stop. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "broker.h"
#include "config.h"
#include "fault.h"
#include "gpu.h"
#include "gpu_slab.h"
#include "log.h"
#include "loop.h"
#include "shm/layout.h"

/* Each session holds its socket and session page; each model a page, a
 * layout and two fds per slab; NOTIFY eventfds come on top (loop.c budgets
 * them from this limit). The usual soft limit of 1024 would stop accepting
 * long before the session table is full: the soft limit goes to the hard. */
static void raise_fd_limit(void)
{
	const rlim_t want = 2 * WSYNC_MAX_SESSIONS +
	                    WSYNC_MAX_MODELS * (3 + 2 * WSYNC_MAX_SLOTS) + 256;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_cur != rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
		log_warn("open file limit %llu is below the %llu the broker may need",
		         (unsigned long long)rl.rlim_cur, (unsigned long long)want);
}

int main(int argc, char **argv)
{
	struct config cfg;
	struct broker *b;
	char err[512];
	sigset_t set;
	int r;

	r = config_parse(&cfg, argc, argv, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "wsyncd: %s\nTry 'wsyncd --help'.\n", err);
		return 2;
	}
	if (r == CONFIG_DONE)
		return 0;
	log_set_level(cfg.log_level);
	if (cfg.log_file[0] && (r = log_open_file(cfg.log_file)) < 0) {
		fprintf(stderr, "wsyncd: cannot open the log file %s: %s\n", cfg.log_file,
		        strerror(-r));
		return 1;
	}
	if (config_finish(&cfg, err, sizeof(err))) {
		fprintf(stderr, "wsyncd: %s\n", err);
		return 1;
	}
	umask(077);
	raise_fd_limit();
	/* SIGTERM/SIGINT/SIGHUP arrive through the signalfd in the loop. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (gpu_start(cfg.gpus))
		return 1;
	b = fault_calloc(1, sizeof(*b));
	if (!b) {
		fprintf(stderr, "wsyncd: out of memory\n");
		return 1;
	}
	if (broker_start(b, &cfg)) {
		free(b);
		return 1;
	}
	r = loop_run(b->loop);
	broker_stop(b);
	free(b);
	gpu_slabs_shutdown();         /* contexts it retained, before the driver goes */
	gpu_stop();
	return r ? 1 : 0;
}
