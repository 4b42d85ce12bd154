/*
 * tools/demo/demo.h — what the files of wsync-demo share.
 *
 *   main.c            main, and the driver: starts a private wsyncd, the
 *                     trainer and the collectors, stops them in order
 *   child.c           the driver's child processes: spawn, output, results
 *   summary.c         the driver's summary and verdict
 *   trainer.c         the trainer role
 *   collector.c       the collector role
 *   result.c          the result line each role prints at exit
 *   model.c           the synthetic model: its layout and its byte pattern
 *   util.c            messages, clocks, option values, stop signals
 *
 * The pattern: byte b of a slab holds byte (b % 8) of the little-endian word
 * step * GOLDEN ^ (b / 8), b counted from the start of the slab. A collector
 * checks a view against view.step alone, so a torn slab, a stale slab, a step
 * that does not match its bytes or a tensor at the wrong offset all show up
 * as a mismatch.
 *
 * The driver runs the other roles as child processes (this same binary). Each
 * child writes to its stdout, a pipe the driver reads: progress lines, which
 * the driver echoes, and one "result ..." line at exit, which it parses for
 * the summary. Children run in their own process groups (Ctrl-C reaches only
 * the driver, which stops them in order) and get SIGTERM if the driver dies.
 *
 * Only the public API (wsync.h) is used.
 */
#ifndef WSYNC_TOOLS_DEMO_H
#define WSYNC_TOOLS_DEMO_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>

#include "wsync.h"

#define MODEL_NAME       "policy"
#define NS_PER_S         1000000000ll
#define NS_PER_MS        1000000ll
#define MAX_COLLECTORS   64
#define DEMO_TIMEOUT_S   2.0    /* default --timeout: connect and round trips */

/* ---- util.c ---- */

extern char g_role[32];                 /* message prefix: "trainer: ", ... */
extern volatile sig_atomic_t g_stop;    /* trainer, collector: SIGTERM seen */

void    say_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "wsync-demo: <role><what>: <wsync_strerror(err)>: <wsync_errmsg()>" */
void    say_wsync_error(const char *what, int err);
/* "wsync-demo: <role><what>: <strerror(errno)>" */
void    say_sys_error(const char *what);
/* For getopt_long's '?' (with opterr = 0): names the option; returns 1. */
int     say_bad_option(char **argv);
/* Names an unexpected argument (if any) and points to --help; returns 2,
 * the exit status of a usage error. */
int     say_usage_error(const char *unexpected, const char *command);
int64_t now_ns(clockid_t clock);
void    sleep_until(int64_t mono_ns);
double  mib_of(uint64_t bytes);
/* A decimal in lo..hi for option --opt; -EINVAL (and a message) if not. */
int     parse_count(const char *opt, const char *s, uint64_t lo, uint64_t hi,
                    uint64_t *out);
/* Seconds in 0..3600 for option --opt; -EINVAL (and a message) if not. */
int     parse_seconds(const char *opt, const char *s, double *out);
/* Bounds the library's connect and every round trip without a timeout of
 * its own by s seconds ($WSYNC_REPLY_TIMEOUT_MS, read at connect); s < 0:
 * DEMO_TIMEOUT_S unless the environment already says. */
void    bound_round_trips(double s);
/* say_wsync_error for a failed connect, saying plainly when the broker
 * took no answer within the timeout (stopped, e.g. by SIGSTOP). */
void    say_connect_error(const char *endpoint, int err);
/* SIGTERM and SIGINT set g_stop and interrupt sleeps. */
void    catch_stop_signals(void);

/* ---- model.c ---- */

/* Fills `bytes` bytes at p, which lies at byte `offset` (a multiple of 8) of
 * the slab, with the pattern of `step`. */
void     pattern_fill(void *p, uint64_t offset, uint64_t bytes, uint64_t step);
/* The expected byte at index `at` of a region placed like pattern_fill's. */
uint8_t  pattern_byte(uint64_t offset, uint64_t at, uint64_t step);
/* Index of the first byte of such a region that does not hold the pattern
 * of `step`, or `bytes` if every byte does. */
uint64_t pattern_find_mismatch(const void *p, uint64_t offset, uint64_t bytes,
                               uint64_t step);
/* The synthetic policy: n tensors totalling about `mib` MiB, a bf16
 * embedding, then f32 weight matrices each followed by an f32 bias. */
void     model_describe(wsync_tensor_desc *t, size_t n, uint64_t mib);
void     model_print(const char *model, const wsync_tensor_desc *t, size_t n,
                     uint64_t hz);
/* Whether a layout is one model_describe makes (any size and tensor
 * count): the demo's roles refuse other models, whose bytes do not hold the
 * pattern. False with the first difference in why. */
bool     model_is_demo(const wsync_tensor_desc *t, size_t n, char *why, size_t len);
/* A model name the library takes; false (and a message) if not. */
bool     model_name_ok(const char *name);

/* ---- the roles: argv[0] is the role's name ---- */

int trainer_main(int argc, char **argv);
int collector_main(int argc, char **argv);

/* ---- result.c: the line a role prints at exit for the driver ---- */

struct trainer_result {
	uint64_t commits;               /* versions published */
	uint64_t last_version, last_step;
	uint64_t busy;                  /* begins that found no free slot in time */
	uint64_t bytes, tensors;        /* one version */
	int64_t  elapsed_ns;            /* from the first begin to the stop */
};

struct collector_result {
	unsigned id;
	uint64_t views;                 /* versions seen */
	uint64_t failures;              /* views with a byte off the pattern */
	uint64_t max_skip;              /* most versions skipped between two views */
	int64_t  lag_sum_ns, lag_max_ns;/* commit to holding the view, over the
	                                   views after the first */
	uint64_t first_version, last_version;
	int      broker_gone;           /* the wait ended with -ENOTCONN */
};

void result_print_trainer(const struct trainer_result *r);
void result_print_collector(const struct collector_result *r);
/* 0, or -EINVAL if the line is not such a result. */
int  result_parse_trainer(const char *line, struct trainer_result *r);
int  result_parse_collector(const char *line, struct collector_result *r);

/* ---- the driver ---- */

struct driver_opts {
	const char *wsyncd, *model;
	const char *timeout;            /* --timeout, passed to the roles; NULL none */
	uint64_t seconds, collectors, mib, hz, tensors;
};

enum child_kind { CHILD_BROKER, CHILD_TRAINER, CHILD_COLLECTOR };

struct child {
	enum child_kind kind;
	char   label[24];
	pid_t  pid;             /* 0 if it never started */
	bool   running;         /* started and not reaped yet */
	bool   stopping;        /* sent SIGTERM: its exit is expected */
	int    status;          /* wait status, once reaped */
	int    out_fd;          /* read end of its stdout; -1 if none or at EOF */
	char   line[512];
	size_t line_len;
	bool   has_result;
	union {
		struct trainer_result trainer;
		struct collector_result collector;
	} res;
};

struct demo {
	struct driver_opts o;
	char self[PATH_MAX];
	char wsyncd[PATH_MAX];
	char dir[96];           /* short: the socket path must fit sun_path */
	char socket[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char log[128];
	char name[32];          /* broker instance, demo-<pid> */
	int  sigfd;
	int  interrupts;        /* SIGINT/SIGTERM received */
	bool unexpected_exit;   /* a child ended before it was told to */
	bool broker_ready;
	int64_t started_ns, stopped_ns;
	struct child broker, trainer;
	struct child *collectors;
};

/* child.c */

/* Starts argv with stdout and stderr to log_path, or, if log_path is NULL,
 * stdout to a pipe the driver reads and stderr shared with the driver.
 * Returns 0 or -errno (also for a failed exec). */
int  child_spawn(struct child *ch, char *const argv[], const char *log_path);
/* Reads what the child wrote (poll said it is readable), handling each
 * complete line; closes out_fd at EOF. */
void child_read_output(struct child *ch);
void child_describe_status(const struct child *ch, char *buf, size_t len);
bool child_exited_cleanly(const struct child *ch);

/* summary.c */

void     summary_print(const struct demo *d);
/* Prints what went wrong; returns the number of problems. */
unsigned summary_judge(const struct demo *d);

#endif
