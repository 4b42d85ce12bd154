/* tools/bench/util.c — clocks, statistics, memory and messages for wsync-bench. */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

/* ---- clocks, sleeping, randomness ------------------------------------- */

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

int64_t mono_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

int64_t thread_cpu_ns(void)
{
	return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

void sleep_ns(int64_t ns)
{
	struct timespec ts = { .tv_sec = ns / NS_PER_S, .tv_nsec = ns % NS_PER_S };

	while (ns > 0 && nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static uint64_t rand_state;
static pid_t rand_pid;

uint64_t rand_u64(void)
{
	if (rand_pid != getpid()) {        /* reseed in each child */
		rand_pid = getpid();
		rand_state = (uint64_t)mono_ns() * 0x9E3779B97F4A7C15ull ^ (uint64_t)rand_pid;
		if (!rand_state)
			rand_state = 1;
	}
	rand_state ^= rand_state << 13;
	rand_state ^= rand_state >> 7;
	rand_state ^= rand_state << 17;
	return rand_state;
}

int64_t rand_range(int64_t lo, int64_t hi)
{
	if (hi <= lo)
		return lo;
	return lo + (int64_t)(rand_u64() % (uint64_t)(hi - lo + 1));
}

/* ---- statistics ------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double stat_median(double *v, size_t n)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double stat_pct(double *v, size_t n, double p)
{
	size_t rank;

	if (!n)
		return 0;
	qsort(v, n, sizeof *v, cmp_double);
	rank = (size_t)(p * (double)n + 0.999999);
	if (rank < 1)
		rank = 1;
	return v[(rank > n ? n : rank) - 1];
}

double stat_max(const double *v, size_t n)
{
	double m = n ? v[0] : 0;

	for (size_t i = 1; i < n; i++)
		if (v[i] > m)
			m = v[i];
	return m;
}

/* ---- memory -------------------------------------------------------------- */

void *shared_alloc(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
	               -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

void shared_free(void *p, size_t bytes)
{
	if (p)
		munmap(p, bytes);
}

void *warm_alloc(size_t bytes)
{
	unsigned char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
	                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	/* Not zero pages: a pattern, so reads come from real memory. */
	for (size_t i = 0; i < bytes; i += 64)
		p[i] = (unsigned char)(i >> 6);
	return p;
}

void warm_free(void *p, size_t bytes)
{
	if (p)
		munmap(p, bytes);
}

/* ---- what else ran meanwhile ---------------------------------------------- */

static int64_t tv_ns(const struct timeval *tv)
{
	return (int64_t)tv->tv_sec * NS_PER_S + (int64_t)tv->tv_usec * NS_PER_US;
}

int cpu_mark_take(struct cpu_mark *m)
{
	unsigned long long user, nice, sys, idle, iowait, irq, softirq, steal;
	int64_t tick = NS_PER_S / sysconf(_SC_CLK_TCK);
	struct rusage self, kids;
	FILE *f = fopen("/proc/stat", "r");
	int n;

	m->wall_ns = mono_ns();
	if (!f)
		return -1;
	n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys,
	           &idle, &iowait, &irq, &softirq, &steal);
	fclose(f);
	if (n != 8 || getrusage(RUSAGE_SELF, &self) || getrusage(RUSAGE_CHILDREN, &kids))
		return -1;
	m->busy_ns = (int64_t)(user + nice + sys + irq + softirq) * tick;
	m->steal_ns = (int64_t)steal * tick;
	m->ours_ns = tv_ns(&self.ru_utime) + tv_ns(&self.ru_stime) +
	             tv_ns(&kids.ru_utime) + tv_ns(&kids.ru_stime);
	return 0;
}

void cpu_marks_compare(struct bench *b, const struct cpu_mark *a, const struct cpu_mark *z)
{
	double capacity = (double)(z->wall_ns - a->wall_ns) *
	                  (double)sysconf(_SC_NPROCESSORS_ONLN);
	double others = (double)((z->busy_ns - a->busy_ns) - (z->ours_ns - a->ours_ns));

	if (capacity <= 0) {
		b->others_pct = b->steal_pct = -1;
		return;
	}
	b->others_pct = 100.0 * (others > 0 ? others : 0) / capacity;
	b->steal_pct = 100.0 * (double)(z->steal_ns - a->steal_ns) / capacity;
}

/* ---- messages --------------------------------------------------------------- */

void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("wsync-bench: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

void say_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("wsync-bench: error: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

void wsync_error_text(char *buf, size_t len, const char *what, int err)
{
	const char *detail = wsync_errmsg();

	if (detail && detail[0])
		snprintf(buf, len, "%s: %s: %s", what, wsync_strerror(err), detail);
	else
		snprintf(buf, len, "%s: %s", what, wsync_strerror(err));
}

ssize_t file_tail(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	off_t size;
	ssize_t n;

	if (len == 0)
		return -1;
	buf[0] = '\0';
	if (fd < 0)
		return -1;
	size = lseek(fd, 0, SEEK_END);
	lseek(fd, size > (off_t)len - 1 ? size - (off_t)len + 1 : 0, SEEK_SET);
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return n;
}
