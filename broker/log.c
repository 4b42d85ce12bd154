/* broker/log.c — timestamped, levelled log lines, each one write(2). */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const level_names[] = { "error", "warn", "info", "debug" };
static int log_threshold = LOG_LEVEL_INFO;
static int log_fd = STDERR_FILENO;
static char log_path[PATH_MAX];

/* A new file is 0600 at start and at every SIGHUP alike: the start opens it
 * before the broker sets its umask (077), a reopen after, so any wider mode
 * asked for here would differ between the two. A file that exists (made by
 * logrotate's create) keeps its mode. */
static int log_file_open(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0600);

	return fd < 0 ? -errno : fd;
}

int log_open_file(const char *path)
{
	int fd = log_file_open(path);

	if (fd < 0)
		return fd;
	snprintf(log_path, sizeof(log_path), "%s", path);
	if (log_fd != STDERR_FILENO)
		close(log_fd);
	log_fd = fd;
	return 0;
}

int log_reopen(void)
{
	int fd;

	if (!log_path[0])
		return 0;
	fd = log_file_open(log_path);
	if (fd < 0)
		return fd;
	close(log_fd);
	log_fd = fd;
	return 0;
}

int log_level_parse(const char *s)
{
	for (int i = 0; i < (int)(sizeof(level_names) / sizeof(level_names[0])); i++)
		if (!strcmp(s, level_names[i]))
			return i;
	if (!strcmp(s, "warning"))
		return LOG_LEVEL_WARN;
	return -1;
}

const char *log_level_name(int level)
{
	if (level < LOG_LEVEL_ERROR || level > LOG_LEVEL_DEBUG)
		return "?";
	return level_names[level];
}

void log_set_level(int level)
{
	if (level >= LOG_LEVEL_ERROR && level <= LOG_LEVEL_DEBUG)
		log_threshold = level;
}

bool log_enabled(int level)
{
	return level <= log_threshold;
}

void log_write(int level, const char *fmt, ...)
{
	char line[1024];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	size_t at;
	int n;

	if (!log_enabled(level))
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	at = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
	n = snprintf(line + at, sizeof(line) - at, ".%03ldZ wsyncd[%ld] %s: ",
	             ts.tv_nsec / 1000000, (long)getpid(), log_level_name(level));
	at += n > 0 ? (size_t)n : 0;
	va_start(ap, fmt);
	n = vsnprintf(line + at, sizeof(line) - at, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	at += (size_t)n;
	if (at > sizeof(line) - 2)
		at = sizeof(line) - 2;
	line[at++] = '\n';
	/* One write per line keeps lines whole when stderr is shared. */
	while (write(log_fd, line, at) < 0 && errno == EINTR)
		;
}
