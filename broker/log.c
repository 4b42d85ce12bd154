/* broker/log.c — timestamped, levelled log lines, each one write(2). */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const level_names[] = { "error", "warn", "info", "debug" };
static int log_threshold = LOG_LEVEL_INFO;

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
	while (write(STDERR_FILENO, line, at) < 0 && errno == EINTR)
		;
}
