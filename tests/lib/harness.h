/*
 * tests/lib/harness.h — what every integration test needs: a real wsyncd of
 * its own, client code in child processes, handshakes between processes,
 * verifiable slab contents, and assertions that say file:line.
 *
 * Each broker gets a unique instance name (t<pid>-<n>) and a fresh directory
 * that is XDG_RUNTIME_DIR for the broker and for the test's clients, so its
 * lock file, versions file and socket live there and nothing is shared with
 * another test or a real broker. Brokers and children are killed, and the
 * instance's /dev/shm directories and run directory removed, when the test exits,
 * fails, times out (SIGTERM from the runner) or its parent dies.
 *
 * A test is a program: exit 0 pass, 77 skip, 1 fail.
 */
#ifndef WSYNC_TESTS_HARNESS_H
#define WSYNC_TESTS_HARNESS_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "wsync.h"

#define HARNESS_SKIP       77
#define HARNESS_MS         ((int64_t)1000000)     /* ns in a millisecond */
#define HARNESS_S          ((int64_t)1000000000)  /* ns in a second */
/* How long any handshake or child may take before the test calls it hung.
 * Generous: a loaded 2-core machine under ASan is slow. */
#define HARNESS_WAIT_MS    15000

/* ---- assertions: print file:line and what failed, then exit 1 ---------- */

void harness_fail(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4), noreturn));
void harness_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define TEST_ASSERT(cond) do { \
	if (!(cond)) \
		harness_fail(__FILE__, __LINE__, "assertion failed: %s", #cond); \
} while (0)

#define TEST_ASSERT_MSG(cond, ...) do { \
	if (!(cond)) \
		harness_fail(__FILE__, __LINE__, __VA_ARGS__); \
} while (0)

/* expr is a wsync call returning 0 or -errno; it must return exactly want. */
#define TEST_RC(expr, want) do { \
	int rc_ = (expr), want_ = (want); \
	if (rc_ != want_) \
		harness_fail(__FILE__, __LINE__, "%s returned %d (%s), expected %d (%s); errmsg: \"%s\"", \
		             #expr, rc_, wsync_strerror(rc_), want_, wsync_strerror(want_), \
		             wsync_errmsg()); \
} while (0)

#define TEST_OK(expr) TEST_RC(expr, 0)

#define TEST_EQ_U64(a, b) do { \
	uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b); \
	if (a_ != b_) \
		harness_fail(__FILE__, __LINE__, "%s == %s failed: %llu != %llu", #a, #b, \
		             (unsigned long long)a_, (unsigned long long)b_); \
} while (0)

#define TEST_GT_U64(a, b) do { \
	uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b); \
	if (!(a_ > b_)) \
		harness_fail(__FILE__, __LINE__, "%s > %s failed: %llu <= %llu", #a, #b, \
		             (unsigned long long)a_, (unsigned long long)b_); \
} while (0)

#define TEST_CONTAINS(hay, needle) do { \
	const char *h_ = (hay), *n_ = (needle); \
	if (h_ == NULL || strstr(h_, n_) == NULL) \
		harness_fail(__FILE__, __LINE__, "\"%s\" does not contain \"%s\"", \
		             h_ ? h_ : "(null)", n_); \
} while (0)

/* ---- a broker of the test's own -------------------------------------------- */

#define HARNESS_MAX_ARGS 16

struct broker {
	pid_t pid;                       /* 0 when not running */
	int   reg;                       /* index in the harness's cleanup registry */
	char  name[64];                  /* instance name, t<pid>-<n> */
	char  dir[128];                  /* mkdtemp; XDG_RUNTIME_DIR */
	char  sock[208];                 /* <dir>/<name>.sock */
	char  log[192];                  /* <dir>/wsyncd.log: the broker's stderr */
	char  args[HARNESS_MAX_ARGS][128];/* extra arguments, kept for restart */
	int   n_args;
	int   default_socket;            /* no --socket: the broker's default place */
	int   last_status;               /* waitpid status of the last exit */
};

/* A pseudo-argument for harness_broker_start: pass neither --keep nor
 * --no-keep (the harness passes --no-keep unless a test says one), so the
 * broker's default decides what a clean stop keeps. */
#define HARNESS_KEEP_DEFAULT "--harness-keep-default"

/* A pseudo-argument for harness_broker_start: pass no --socket, so the
 * broker listens at its default place, <XDG_RUNTIME_DIR>/wsync/<name>.sock. */
#define HARNESS_DEFAULT_SOCKET "--harness-default-socket"

/* A pseudo-argument for harness_broker_start: admit another uid, as the
 * tests that run a process as nobody need: passes --group nogroup and makes
 * the test's directory (where the socket is) 0755. */
#define HARNESS_OTHER_USERS "--harness-other-users"

/* Path of the wsyncd binary: $WSYNC_WSYNCD, else $BUILD/bin/wsyncd (BUILD
 * default build) from the current directory, else next to this test binary. */
const char *harness_wsyncd_path(void);
/* The fake CUDA driver of this build ($BUILD/tests/fakecuda/libcuda.so.1,
 * BUILD defaulting to "build") as an absolute path, for WSYNC_LIBCUDA;
 * fails the test when it is not there. */
void harness_fakecuda_path(char *out, size_t len);
/* For tests that set WSYNC_FAULT_* or WSYNC_HELLO_TIMEOUT_MS: makes every
 * later broker of this test the one with fault injection compiled in
 * ($WSYNC_WSYNCD_FAULT, else <BUILD>/tests/wsyncd-fault) by setting
 * WSYNC_WSYNCD. 0, or -1 after printing why (the test should skip). */
int harness_use_fault_wsyncd(void);

/*
 * Starts a broker with --name and --socket of its own plus the extra
 * arguments (a NULL-terminated list of strings), and waits up to 5 s until a
 * client can connect. Returns 0, or -1 after printing why (the broker's log
 * included). Sets XDG_RUNTIME_DIR and WSYNC_ENDPOINT for this process and its
 * children.
 */
int  harness_broker_start(struct broker *b, ...) __attribute__((sentinel));
/* Like harness_broker_start but does not start it: name, directory,
 * environment and cleanup only (harness_broker_restart starts it). For tests
 * that run wsyncd themselves (harness_run). */
int  harness_broker_prepare(struct broker *b, ...) __attribute__((sentinel));
/* SIGTERM and wait (10 s at most). 0 if it exited with status 0, else -1. */
int  harness_broker_stop(struct broker *b);
/* SIGKILL and reap. The socket file and the segments stay behind. */
void harness_broker_kill(struct broker *b);
/* Starts the same instance again (name, socket, directory, arguments). */
int  harness_broker_restart(struct broker *b);
/* Stops the broker (harness_broker_stop) and requires exit status 0 and no
 * segment of the instance left in /dev/shm; fails the test otherwise. */
void harness_broker_finish_at(struct broker *b, const char *file, int line);
#define harness_broker_finish(b) harness_broker_finish_at((b), __FILE__, __LINE__)
/* Number of /dev/shm/wsync.<uid>.<name>.* entries, and of the entries in
 * those that are (private) directories; prints them if print. */
int  harness_shm_leftovers(const struct broker *b, int print);
/* Kills b's broker if it runs and removes its segments and its directory
 * now, not at exit: for a broker started in a forked child, which leaves
 * with _exit (the cleanup at exit belongs to the test's own process). */
void harness_broker_forget(struct broker *b);
/* "/dev/shm/<the instance's current private directory>/<seg>" (seg "" for
 * the directory itself), from the state file in its run directory:
 * 0, or -1 if there is none. */
int  harness_seg_path(const struct broker *b, const char *seg, char *buf, size_t len);
/* Prints the last lines of the broker's log to stderr. */
void harness_broker_dump_log(const struct broker *b, int lines);
/* wsync_connect to the broker's socket. */
int  harness_connect(const struct broker *b, const char *client_name, wsync_client **out);
/* Number of open file descriptors of the broker process, or -1. */
int  harness_broker_fd_count(const struct broker *b);
/* The broker's resident memory in KiB (VmRSS), or -1. */
long harness_broker_rss_kb(const struct broker *b);
/* CPU time the broker used so far (user + system), in clock ticks, or -1. */
long harness_broker_cpu_ticks(const struct broker *b);
/* Polls the broker's fd count until it is at most want, up to timeout_ms;
 * returns the last count (the caller asserts). */
int  harness_broker_fd_settle(const struct broker *b, int want, int timeout_ms);
/* A raw SOCK_SEQPACKET connection to the broker's socket: fd, or -errno. */
int  harness_raw_connect(const struct broker *b);
/* sendmsg of len bytes with nfds fds as SCM_RIGHTS (MSG_NOSIGNAL): 0 or
 * -errno (the broker may have closed the connection already). */
int  harness_raw_send(int fd, const void *buf, size_t len, const int *fds, int nfds);

/* ---- child processes ---------------------------------------------------------- */

typedef int (*harness_child_fn)(void *arg);

/*
 * Runs fn(arg) in a child process, whose exit code is fn's return value. The
 * child must open its own connection (a wsync_client is never shared across
 * fork). The child dies with the test (PR_SET_PDEATHSIG) and is killed by
 * the cleanup.
 */
pid_t harness_fork(harness_child_fn fn, void *arg);
/* Reaps pid, waiting up to timeout_ms (then SIGKILL). Returns the raw wait
 * status, or -1 if it had to be killed. */
int   harness_wait_status(pid_t pid, int timeout_ms);
/* Reaps pid and requires exit code 0; fails the test otherwise. */
void  harness_expect_exit0(pid_t pid, const char *what);
/* Polls /proc until pid is asleep (state S), up to timeout_ms. Used only to
 * make a test exercise a sleeping path more often; never asserted. */
void  harness_wait_sleeping(pid_t pid, int timeout_ms);
/* Describes a wait status: "exit 1", "signal 9 (Killed)". */
const char *harness_status_str(int status);

/* ---- handshakes: one-way pipes carrying u64 values ------------------------------ */

struct chan { int rd, wr; };

void     chan_open(struct chan *c);
void     chan_close(struct chan *c);
void     chan_send(struct chan *c, uint64_t v);
/* Waits for one value. Fails the test after HARNESS_WAIT_MS, or at once if
 * peer (> 0) exits first (it is not reaped). */
uint64_t chan_recv(struct chan *c, pid_t peer);

/* ---- verifiable contents ---------------------------------------------------------- */

/* Word i of a slab written at step: step * 0x9E3779B97F4A7C15 ^ i. */
static inline uint64_t harness_word(uint64_t step, size_t i)
{
	return step * 0x9E3779B97F4A7C15ull ^ (uint64_t)i;
}
/* Fills bytes (a multiple of 8) of base with the pattern of step. */
void harness_fill(void *base, size_t bytes, uint64_t step);
/* 0 if every word matches the pattern of step, else -1 and a message. */
int  harness_verify(const void *base, size_t bytes, uint64_t step);
/* The view's whole slab against the pattern of view->step. */
int  harness_verify_view(const wsync_view *v);

/* Sharded contents (publisher groups), for layouts of 4-byte elements in
 * tensors of 1 or 2 dims: element e of tensor t carries this word. */
static inline uint32_t harness_elem_word(uint64_t step, uint32_t t, uint64_t e)
{
	return (uint32_t)(step * 0x9E3779B1u) ^ (t << 24) ^ (uint32_t)e;
}
/* Fills a rank's parts (as it declared them) of a begun slab with the
 * pattern of step. Returns 0 or wsync_slab_part's error. */
int  harness_fill_parts(const wsync_slab *slab, const wsync_shard *parts, size_t n,
                        uint64_t step);
/* 0 if every element of every tensor of v carries v->step, else -1 and a
 * log line naming the first that does not. */
int  harness_verify_tensors(const wsync_view *v);

/* ---- models --------------------------------------------------------------------- */

/* Fills d (zeroed first) with a tensor. shape has ndim entries. */
void   harness_desc(wsync_tensor_desc *d, const char *name, uint32_t dtype,
                    uint32_t ndim, const uint64_t *shape);
/* The two-tensor model most tests use: "policy.weight" f32 [64,129] and
 * "policy.bias" f32 [129]. Returns 2. */
size_t harness_model_2t(wsync_tensor_desc d[2]);
/* Opens a publisher of model with the two-tensor layout and slots slots
 * (0 = default). */
int    harness_pub_open_2t(wsync_client *c, const char *model, uint32_t slots, wsync_pub **out);
/* begin (waiting up to begin_timeout_ns), fill with the pattern of step,
 * commit. Returns the first failing call's result; *version set on success. */
int    harness_publish(wsync_pub *p, uint64_t step, int64_t begin_timeout_ns,
                       uint64_t *version);

/* Publishes step through p (harness_publish) and acquires it through s:
 * the same version and step, every word right; fails the test otherwise.
 * Returns the version. */
uint64_t harness_publish_verify(wsync_pub *p, wsync_sub *s, uint64_t step);

/* A client of its own opens model as publisher (two-tensor layout, retrying
 * -EBUSY for 5 s while an earlier publisher is reaped) and subscriber,
 * publishes step and reads it back verified; fails the test otherwise. */
void   harness_publish_and_read(const struct broker *b, const char *model, uint64_t step);

/* ---- odds and ends ------------------------------------------------------------------ */

/* For tests that play another user: needs root and the user 'nobody' and
 * group 'nogroup'. 0 with their ids, or HARNESS_SKIP after printing why
 * (what names what the test would do as that user). */
int     harness_other_user(const char *what, uid_t *uid, gid_t *gid);
/* Runs fn once when the test ends (exit, failed assertion, alarm or a
 * signal), after its brokers and children were killed: for undoing a change
 * to the system (tests/integ/huge_pages.c). Only async-signal-safe calls in
 * fn. One hook; a second call replaces the first. */
void    harness_at_cleanup(void (*fn)(void));
int64_t harness_mono_ns(void);
int64_t harness_real_ns(void);
void    harness_sleep_ms(int ms);
/*
 * Finds the mapping of this process that contains addr in /proc/self/maps:
 * perms gets "r--s"-style permissions, path the mapped file ("" if none).
 * Returns 0, or -1 if addr is not mapped.
 */
int     harness_mapping_of(const void *addr, char perms[5], char *path, size_t pathlen);
/* The first len - 1 bytes of the file at path, NUL-terminated, into buf
 * ("" if it cannot be read); returns buf. */
const char *harness_read_file(const char *path, char *buf, size_t len);
/* Runs argv (argv[0] a path) with stdout and stderr captured into out
 * (NUL-terminated, truncated), waiting up to timeout_ms. Returns the wait
 * status, or -1 if it had to be killed. */
int     harness_run(char *const argv[], char *out, size_t outlen, int timeout_ms);

#endif /* WSYNC_TESTS_HARNESS_H */
