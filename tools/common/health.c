/*
 * tools/common/health.c — the broker's health from its segment and /proc
 * (see health.h).
 */
#include "health.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FRESH_NS (INT64_C(1500) * 1000000)   /* a tick is due every second */

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

bool proc_stat(uint32_t pid, char *state, uint64_t *cpu_ticks, uint64_t *start_ticks)
{
	char path[64], buf[1024], *p, st;
	unsigned long long ut, stime, start;
	size_t n;
	FILE *f;

	if (!pid)
		return false;
	snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');            /* the command name may hold spaces */
	if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu "
	                 "%*d %*d %*d %*d %*d %*d %llu", &st, &ut, &stime, &start) != 4)
		return false;
	if (state)
		*state = st;
	if (cpu_ticks)
		*cpu_ticks = ut + stime;
	if (start_ticks)
		*start_ticks = start;
	return true;
}

/* Seconds since the epoch when the machine booted, 0 if unknown. */
static long long boot_time(void)
{
	char line[256];
	long long bt = 0;
	FILE *f = fopen("/proc/stat", "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "btime %lld", &bt) == 1)
			break;
	fclose(f);
	return bt;
}

/* Whether pid is still the process that started at started_ns (a pid is
 * reused by a process that started later). */
static bool same_process(uint32_t pid, int64_t started_ns, char *state)
{
	uint64_t start;
	long long bt;
	long hz = sysconf(_SC_CLK_TCK);

	if (!proc_stat(pid, state, NULL, &start))
		return false;
	if (*state == 'Z' || *state == 'X')
		return false;
	bt = boot_time();
	if (bt > 0 && hz > 0 && started_ns > 0 &&
	    (long long)(bt + (long long)(start / (uint64_t)hz)) > started_ns / 1000000000 + 2)
		return false;
	return true;
}

static const char *age_text(char *buf, size_t len, int64_t ns)
{
	if (ns < 0)
		snprintf(buf, len, "of unknown age");
	else if (ns < INT64_C(10) * 1000000000)
		snprintf(buf, len, "%.1f s old", (double)ns / 1e9);
	else
		snprintf(buf, len, "%lld s old", (long long)(ns / 1000000000));
	return buf;
}

static void stalled(struct health *out, uint32_t pid, const char *age)
{
	out->state = HEALTH_STALLED;
	snprintf(out->text, sizeof(out->text), "not responding: heartbeat %s (pid %u %s)",
	         age, pid, out->proc_state == 'T' || out->proc_state == 't' ?
	         "is stopped, e.g. by SIGSTOP: SIGCONT resumes it" :
	         out->proc_state == 'D' ? "is in uninterruptible sleep" :
	         "is there but its loop does not run");
}

void health_judge(const struct seg *s, const char *why, struct health *out)
{
	const struct wsync_ctl_header *h = s->ctl;
	uint32_t state, pid;
	int64_t hb, started;
	char age[48];
	bool alive;

	memset(out, 0, sizeof(*out));
	out->heartbeat_age_ns = -1;
	if (!h) {
		out->state = HEALTH_GONE;
		snprintf(out->text, sizeof(out->text), "%s", why ? why : "no broker");
		return;
	}
	state = atomic_load_explicit(&((struct wsync_ctl_header *)h)->state,
	                             memory_order_relaxed);
	hb = atomic_load_explicit(&((struct wsync_ctl_header *)h)->heartbeat_ns,
	                          memory_order_relaxed);
	pid = h->broker_pid;
	started = h->started_ns;
	out->heartbeat_age_ns = hb > 0 ? clock_ns(CLOCK_REALTIME) - hb : -1;
	if (out->heartbeat_age_ns < -1)
		out->heartbeat_age_ns = 0;               /* a clock step backwards */
	age_text(age, sizeof(age), out->heartbeat_age_ns);
	alive = same_process(pid, started, &out->proc_state);
	if (state == WSYNC_BROKER_STOPPED) {
		out->state = HEALTH_STOPPED;
		snprintf(out->text, sizeof(out->text), "no broker: '%s' shut down (its segments "
		         "were kept for the next start to adopt)", h->name);
	} else if (!alive) {
		out->state = HEALTH_DEAD;
		snprintf(out->text, sizeof(out->text), "no broker: '%s' died (pid %u is gone, "
		         "heartbeat %s); the next wsyncd adopts its models", h->name, pid, age);
	} else if (out->heartbeat_age_ns < 0 || out->heartbeat_age_ns > HEALTH_STALE_NS) {
		stalled(out, pid, age);
	} else if (state == WSYNC_BROKER_STARTING) {
		out->state = HEALTH_STARTING;
		snprintf(out->text, sizeof(out->text), "starting (pid %u, heartbeat %s)", pid, age);
	} else {
		out->state = HEALTH_OK;
		snprintf(out->text, sizeof(out->text), "running (pid %u, heartbeat %s)", pid, age);
	}
}

void health_wait(const struct seg *s, int64_t timeout_ns, struct health *out)
{
	int64_t deadline = clock_ns(CLOCK_MONOTONIC) + (timeout_ns > 0 ? timeout_ns : 0);
	int64_t first_hb;

	health_judge(s, NULL, out);
	if (!s->ctl)
		return;
	first_hb = atomic_load_explicit(&((struct wsync_ctl_header *)s->ctl)->heartbeat_ns,
	                                memory_order_relaxed);
	/* A process stopped by a signal cannot beat until SIGCONT: no use
	 * waiting for it. */
	if ((out->state == HEALTH_OK || out->state == HEALTH_STARTING) &&
	    (out->proc_state == 'T' || out->proc_state == 't') &&
	    out->heartbeat_age_ns > FRESH_NS) {
		char age[48];

		stalled(out, s->ctl->broker_pid, age_text(age, sizeof(age), out->heartbeat_age_ns));
	}
	while ((out->state == HEALTH_STALLED || out->state == HEALTH_STARTING ||
	        (out->state == HEALTH_OK && out->heartbeat_age_ns > FRESH_NS)) &&
	       out->proc_state != 'T' && out->proc_state != 't') {
		int64_t left = deadline - clock_ns(CLOCK_MONOTONIC);
		struct timespec ts = { 0, 50 * 1000000 };
		int64_t hb;

		if (left <= 0)
			break;
		if (left < ts.tv_nsec)
			ts.tv_nsec = (long)left;
		nanosleep(&ts, NULL);
		hb = atomic_load_explicit(&((struct wsync_ctl_header *)s->ctl)->heartbeat_ns,
		                          memory_order_relaxed);
		health_judge(s, NULL, out);
		if (hb != first_hb && out->state != HEALTH_STARTING)
			return;                  /* it beats: judged on the new beat */
	}
	if (out->state == HEALTH_OK && out->heartbeat_age_ns > FRESH_NS) {
		char age[48];

		/* no beat within the timeout: not answering, however young the beat */
		stalled(out, s->ctl->broker_pid, age_text(age, sizeof(age), out->heartbeat_age_ns));
	}
}

const char *health_reason(enum health_state st)
{
	switch (st) {
	case HEALTH_OK:       return "ok";
	case HEALTH_STARTING: return "starting";
	case HEALTH_STALLED:  return "not_responding";
	case HEALTH_STOPPED:  return "stopped";
	case HEALTH_DEAD:     return "dead";
	default:              return "no_broker";
	}
}

int health_exit(enum health_state st)
{
	switch (st) {
	case HEALTH_OK:       return 0;
	case HEALTH_STARTING:
	case HEALTH_STALLED:  return 1;
	default:              return 2;
	}
}
