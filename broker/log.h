/*
 * broker/log.h — one line per event on stderr (or --log-file):
 *   2026-11-22T01:02:03.123Z wsyncd[1234] info: session 3 'collector-1' ...
 */
#ifndef WSYNC_BROKER_LOG_H
#define WSYNC_BROKER_LOG_H

#include <stdbool.h>

enum log_level {
	LOG_LEVEL_ERROR = 0,
	LOG_LEVEL_WARN  = 1,
	LOG_LEVEL_INFO  = 2,
	LOG_LEVEL_DEBUG = 3,
};

/* "error", "warn", "info", "debug" -> level, or -1. */
int  log_level_parse(const char *s);
const char *log_level_name(int level);
void log_set_level(int level);
/* Sends the log to path (appended, created 0640) instead of stderr: 0 or
 * -errno. */
int  log_open_file(const char *path);
/* Opens the log file again (after logrotate moved it): 0 or -errno; the
 * old one stays in use on failure. Nothing without a log file. */
int  log_reopen(void);
bool log_enabled(int level);
void log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_write(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...)  log_write(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...)  log_write(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) do { if (log_enabled(LOG_LEVEL_DEBUG)) \
                                log_write(LOG_LEVEL_DEBUG, __VA_ARGS__); } while (0)

#endif
