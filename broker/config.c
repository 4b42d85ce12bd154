/* broker/config.c — option parsing and system-dependent defaults. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "log.h"
#include "shm/segment.h"

const char config_usage_text[] =
	"Usage: wsyncd [OPTION]...\n"
	"The wsync broker: hands out shared-memory weight slabs to trainers and\n"
	"collectors of this machine. Runs in the foreground; SIGTERM/SIGINT stop it,\n"
	"SIGHUP reopens the log file. Under systemd (Type=notify) it says when it is\n"
	"ready and pings the watchdog.\n"
	"\n"
	"  --name NAME         broker instance name (default: default)\n"
	"  --socket PATH       listening socket (default: <rundir>/<name>.sock, where\n"
	"                      rundir is $XDG_RUNTIME_DIR/wsync or /tmp/wsync-<uid>)\n"
	"  --shm-limit BYTES   slab memory allowed, K/M/G/T suffixes\n"
	"                      (default: half of /dev/shm)\n"
	"  --max-slots N       most slots per model, 2..32 (default: 8)\n"
	"  --group GROUP       also admit members of GROUP (name or gid)\n"
	"  --log-level LEVEL   error, warn, info or debug (default: info)\n"
	"  --log-file PATH     append the log to PATH instead of stderr; SIGHUP\n"
	"                      reopens it (for logrotate)\n"
	"  --no-keep           remove the weights at a clean stop (default: keep each\n"
	"                      model's latest version for the next start; --keep is\n"
	"                      accepted and is the default)\n"
	"  --fresh             start without the weights a previous run left (version\n"
	"                      numbers still go on above them)\n"
	"  --gpus LIST         GPUs for device models: all (default), none, or GPU\n"
	"                      UUIDs / ordinals as this broker sees them, comma-separated\n"
	"  --huge-pages WHEN   slabs on 2 MiB pages: auto (default: reserved hugetlb\n"
	"                      pages, else shmem transparent huge pages, else 4 KiB\n"
	"                      pages), on (the same, but fail without huge pages), off\n"
	"                      (4 KiB pages; slab data then survives a broker restart)\n"
	"  -h, --help          show this text\n"
	"  --version           show the version\n";

static int usage_fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int usage_fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

bool config_name_valid(const char *name)
{
	size_t n = strnlen(name, WSYNC_INSTANCE_MAX);

	if (n == 0 || n == WSYNC_INSTANCE_MAX || name[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)name[i]) && name[i] != '.' &&
		    name[i] != '_' && name[i] != '-')
			return false;
	return true;
}

int config_parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	if (!s || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	switch (toupper((unsigned char)*end)) {
	case '\0':
		break;
	case 'K': shift = 10; end++; break;
	case 'M': shift = 20; end++; break;
	case 'G': shift = 30; end++; break;
	case 'T': shift = 40; end++; break;
	default:
		return -EINVAL;
	}
	if (shift && (*end == 'i' || *end == 'I'))
		end++;
	if (shift && (*end == 'b' || *end == 'B'))
		end++;
	if (*end)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_group(struct config *cfg, const char *arg, char *err, size_t errlen)
{
	struct group gr, *res = NULL;
	char buf[4096], *end;
	unsigned long v;

	if (strlen(arg) >= sizeof(cfg->group))
		return usage_fail(err, errlen, "--group: '%.32s...' is too long", arg);
	snprintf(cfg->group, sizeof(cfg->group), "%s", arg);
	if (isdigit((unsigned char)arg[0])) {
		errno = 0;
		v = strtoul(arg, &end, 10);
		if (*end || errno || v >= (unsigned long)(gid_t)-1)
			return usage_fail(err, errlen, "--group: '%s' is not a gid", arg);
		cfg->gid = (gid_t)v;
	} else {
		if (getgrnam_r(arg, &gr, buf, sizeof(buf), &res) != 0 || !res)
			return usage_fail(err, errlen, "--group: no group named '%s'", arg);
		cfg->gid = res->gr_gid;
	}
	cfg->has_group = true;
	return 0;
}

/* all, none, or UUIDs and ordinals separated by commas; broker/gpu.c
 * matches them against the GPUs found. */
static int parse_gpus(struct config *cfg, const char *arg, char *err, size_t errlen)
{
	size_t n = strlen(arg);

	if (n == 0 || n >= sizeof(cfg->gpus))
		return usage_fail(err, errlen, "--gpus: give all, none, or a list of 1..%zu bytes",
		                  sizeof(cfg->gpus) - 1);
	for (size_t i = 0; i < n; i++) {
		if (arg[i] == ',' ? i == 0 || i == n - 1 || arg[i + 1] == ','
		                  : !isalnum((unsigned char)arg[i]) && arg[i] != '-')
			return usage_fail(err, errlen, "--gpus: '%s' is not all, none, or a "
			                  "comma-separated list of GPU UUIDs (GPU-xxxxxxxx-...) "
			                  "and ordinals", arg);
	}
	snprintf(cfg->gpus, sizeof(cfg->gpus), "%s", arg);
	return 0;
}

static void config_defaults(struct config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->name, sizeof(cfg->name), "%s", CONFIG_DEFAULT_NAME);
	cfg->max_slots = CONFIG_DEFAULT_MAX_SLOTS;
	cfg->log_level = LOG_LEVEL_INFO;
	cfg->keep = true;
	snprintf(cfg->gpus, sizeof(cfg->gpus), "all");
}

enum { OPT_NAME = 256, OPT_SOCKET, OPT_SHM_LIMIT, OPT_MAX_SLOTS, OPT_GROUP,
       OPT_LOG_LEVEL, OPT_KEEP, OPT_HELP, OPT_VERSION, OPT_GPUS, OPT_HUGE_PAGES,
       OPT_LOG_FILE, OPT_NO_KEEP, OPT_FRESH };

int config_parse(struct config *cfg, int argc, char **argv, char *err, size_t errlen)
{
	static const struct option opts[] = {
		{ "name",      required_argument, NULL, OPT_NAME },
		{ "socket",    required_argument, NULL, OPT_SOCKET },
		{ "shm-limit", required_argument, NULL, OPT_SHM_LIMIT },
		{ "max-slots", required_argument, NULL, OPT_MAX_SLOTS },
		{ "group",     required_argument, NULL, OPT_GROUP },
		{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
		{ "keep",      no_argument,       NULL, OPT_KEEP },
		{ "no-keep",   no_argument,       NULL, OPT_NO_KEEP },
		{ "fresh",     no_argument,       NULL, OPT_FRESH },
		{ "log-file",  required_argument, NULL, OPT_LOG_FILE },
		{ "gpus",      required_argument, NULL, OPT_GPUS },
		{ "huge-pages", required_argument, NULL, OPT_HUGE_PAGES },
		{ "help",      no_argument,       NULL, OPT_HELP },
		{ "version",   no_argument,       NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	unsigned long v;
	char *end;
	int c, err2;

	config_defaults(cfg);
	optind = 0;          /* a full re-initialisation, for repeated calls */
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_NAME:
			if (!config_name_valid(optarg))
				return usage_fail(err, errlen, "--name: '%s' is not a valid "
				                  "instance name (1..%d of [A-Za-z0-9._-], not "
				                  "starting with '.')", optarg,
				                  WSYNC_INSTANCE_MAX - 1);
			snprintf(cfg->name, sizeof(cfg->name), "%s", optarg);
			break;
		case OPT_SOCKET:
			if (!optarg[0] || strlen(optarg) >= sizeof(cfg->socket_path))
				return usage_fail(err, errlen, "--socket: the path must have "
				                  "1..%zu bytes", sizeof(cfg->socket_path) - 1);
			snprintf(cfg->socket_path, sizeof(cfg->socket_path), "%s", optarg);
			break;
		case OPT_SHM_LIMIT:
			err2 = config_parse_size(optarg, &cfg->shm_limit);
			if (err2 || cfg->shm_limit == 0)
				return usage_fail(err, errlen, "--shm-limit: '%s' is not a size "
				                  "in bytes (K, M, G, T suffixes allowed)", optarg);
			break;
		case OPT_MAX_SLOTS:
			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (!isdigit((unsigned char)optarg[0]) || *end || errno ||
			    v < WSYNC_MIN_SLOTS || v > WSYNC_MAX_SLOTS)
				return usage_fail(err, errlen, "--max-slots: '%s' is not in %d..%d",
				                  optarg, WSYNC_MIN_SLOTS, WSYNC_MAX_SLOTS);
			cfg->max_slots = (uint32_t)v;
			break;
		case OPT_GROUP:
			err2 = parse_group(cfg, optarg, err, errlen);
			if (err2)
				return err2;
			break;
		case OPT_LOG_LEVEL:
			cfg->log_level = log_level_parse(optarg);
			if (cfg->log_level < 0)
				return usage_fail(err, errlen, "--log-level: '%s' is not one of "
				                  "error, warn, info, debug", optarg);
			break;
		case OPT_KEEP:
			cfg->keep = true;
			break;
		case OPT_NO_KEEP:
			cfg->keep = false;
			break;
		case OPT_FRESH:
			cfg->fresh = true;
			break;
		case OPT_LOG_FILE:
			if (optarg[0] != '/' || strlen(optarg) >= sizeof(cfg->log_file))
				return usage_fail(err, errlen, "--log-file: give an absolute path of "
				                  "1..%zu bytes", sizeof(cfg->log_file) - 1);
			snprintf(cfg->log_file, sizeof(cfg->log_file), "%s", optarg);
			break;
		case OPT_GPUS:
			err2 = parse_gpus(cfg, optarg, err, errlen);
			if (err2)
				return err2;
			break;
		case OPT_HUGE_PAGES:
			if (!strcmp(optarg, "auto"))
				cfg->huge_pages = CONFIG_HUGE_AUTO;
			else if (!strcmp(optarg, "on"))
				cfg->huge_pages = CONFIG_HUGE_ON;
			else if (!strcmp(optarg, "off"))
				cfg->huge_pages = CONFIG_HUGE_OFF;
			else
				return usage_fail(err, errlen, "--huge-pages: '%s' is not one of "
				                  "auto, on, off", optarg);
			break;
		case OPT_HELP:
		case 'h':
			fputs(config_usage_text, stdout);
			return CONFIG_DONE;
		case OPT_VERSION:
			printf("wsyncd %d.%d.%d\n", WSYNC_VERSION_MAJOR, WSYNC_VERSION_MINOR,
			       WSYNC_VERSION_PATCH);
			return CONFIG_DONE;
		case ':':
			return usage_fail(err, errlen, "option '%s' needs an argument",
			                  argv[optind - 1]);
		default:
			if (optopt > 0 && optopt < 256 && argv[optind - 1][1] != '-')
				return usage_fail(err, errlen, "unknown option '-%c'", optopt);
			return usage_fail(err, errlen, "unknown option '%.*s'",
			                  (int)strcspn(argv[optind - 1], "="), argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_fail(err, errlen, "unexpected argument '%s'", argv[optind]);
	return CONFIG_RUN;
}

int config_default_rundir(char *buf, size_t len)
{
	const char *xdg = secure_getenv("XDG_RUNTIME_DIR");
	int n;

	if (xdg && xdg[0] == '/')
		n = snprintf(buf, len, "%s/wsync", xdg);
	else
		n = snprintf(buf, len, "/tmp/wsync-%u", (unsigned)getuid());
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return 0;
}

int config_finish(struct config *cfg, char *err, size_t errlen)
{
	struct statvfs sv;
	int n;

	if (config_default_rundir(cfg->rundir, sizeof(cfg->rundir))) {
		snprintf(err, errlen, "the run directory path is too long");
		return -ENAMETOOLONG;
	}
	if (!cfg->socket_path[0]) {
		/* --group: in <name>.group/, the one directory the group may enter */
		n = snprintf(cfg->socket_path, sizeof(cfg->socket_path),
		             cfg->has_group ? "%s/%s.group/%s.sock" : "%s/%s.sock",
		             cfg->rundir, cfg->name, cfg->name);
		if (n < 0 || (size_t)n >= sizeof(cfg->socket_path)) {
			snprintf(err, errlen, "socket path '%s/%s.sock' is longer than %zu "
			         "bytes; use --socket", cfg->rundir, cfg->name,
			         sizeof(cfg->socket_path) - 1);
			return -ENAMETOOLONG;
		}
	}
	if (!cfg->shm_limit) {
		if (statvfs(WSYNC_SHM_DIR, &sv) < 0) {
			n = errno;
			snprintf(err, errlen, "cannot stat %s: %s (pass --shm-limit)",
			         WSYNC_SHM_DIR, strerror(n));
			return -n;
		}
		cfg->shm_limit = (uint64_t)sv.f_blocks * sv.f_frsize / 2;
		if (!cfg->shm_limit) {
			snprintf(err, errlen, "%s has no space (pass --shm-limit)", WSYNC_SHM_DIR);
			return -ENOSPC;
		}
	}
	return 0;
}
