/*
 * tools/ctl/metrics.c — wsyncctl metrics and serve-metrics: the broker's
 * figures in the Prometheus text format (tools/common/metrics.h), once on
 * stdout (for node_exporter's textfile collector) or on every scrape of an
 * HTTP endpoint (libmicrohttpd, one internal thread: scrapes are served one
 * at a time, each from a fresh snapshot of the control segment, which is
 * mapped again when the broker restarts). Neither takes a session.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctl.h"
#include "tools/common/health.h"
#include "tools/common/metrics.h"

static const char metrics_usage[] =
	"usage: wsyncctl metrics [OPTIONS]\n"
	"\n"
	"Prints the broker's figures in the Prometheus text exposition format, read\n"
	"from its control segment (no session): per model version, commits (the\n"
	"rate), slab bytes, slots used and pinned, collectors, worst lag,\n"
	"collectors past their staleness bound; per collector lag in commits and\n"
	"seconds, held view, acquires, waits, timeouts, the max_lag it declared\n"
	"and whether it is past it; the broker's health (wsync_up), heartbeat, sessions, memory and\n"
	"CPU. For node_exporter's textfile collector:\n"
	"  wsyncctl metrics > DIR/wsync.prom.tmp && mv DIR/wsync.prom.tmp DIR/wsync.prom\n"
	"Without a broker it prints wsync_up 0 and exits 0.\n\n";

static const char serve_usage[] =
	"usage: wsyncctl serve-metrics [--listen ADDR:PORT] [OPTIONS]\n"
	"\n"
	"Serves what 'wsyncctl metrics' prints at http://ADDR:PORT/metrics, from a\n"
	"fresh read of the control segment at every scrape, until SIGTERM or SIGINT.\n"
	"Prints the address it listens on first.\n"
	"\n"
	"  --listen ADDR:PORT  IPv4 or [IPv6] address and port (default 127.0.0.1:9464;\n"
	"                      port 0 picks a free one)\n\n";

struct exporter {
	const struct ctl_opts *o;
	struct seg seg;
	char instance[WSYNC_INSTANCE_MAX];
};

/* The exposition of the broker now, malloc'd into *text. */
static int render(struct exporter *x, char **text, size_t *len)
{
	struct snap *s = NULL;
	double cpu = -1;
	uint64_t ticks;
	char why[512];
	FILE *f;
	int err;

	if (x->seg.ctl && !seg_current(&x->seg))
		seg_detach(&x->seg);
	if (!x->seg.ctl)
		seg_attach(x->o->endpoint, &x->seg, why, sizeof(why));
	if (x->seg.ctl) {
		s = malloc(sizeof(*s));
		if (!s)
			return -ENOMEM;
		snap_take(&x->seg, s);
		if (proc_stat(s->broker_pid, NULL, &ticks, NULL))
			cpu = (double)ticks / (double)sysconf(_SC_CLK_TCK);
	}
	f = open_memstream(text, len);
	if (!f) {
		free(s);
		return -errno;
	}
	err = metrics_write(f, s, x->seg.instance[0] ? x->seg.instance : x->instance, cpu);
	if (fclose(f) || err) {
		free(*text);
		free(s);
		return -EIO;
	}
	free(s);
	return 0;
}

static void name_instance(const struct ctl_opts *o, char *buf, size_t len)
{
	const char *e = o->endpoint ? o->endpoint : getenv("WSYNC_ENDPOINT");
	const char *slash;

	if (!e || !*e)
		e = "default";
	slash = strrchr(e, '/');
	snprintf(buf, len, "%.*s", (int)strcspn(slash ? slash + 1 : e, "."), slash ? slash + 1 : e);
}

static int parse(const struct ctl_opts *common, struct ctl_opts *o, int argc, char **argv,
                 const char *cmd, const char *usage, const char **listen)
{
	static const struct option longopts[] = {
		CTL_COMMON_LONGOPTS,
		{ "listen", required_argument, NULL, 'l' },
		{ NULL, 0, NULL, 0 },
	};
	int opt, r;

	*o = *common;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, CTL_CMD_SHORTOPTS, longopts, NULL)) != -1) {
		if (opt == 'l' && listen) {
			*listen = optarg;
			continue;
		}
		if (opt == 'l')
			opt = '?';
		r = ctl_common_opt(opt, o, cmd, usage, argv);
		if (r != CTL_GO_ON)
			return r;
	}
	if (optind < argc)
		return report_usage(cmd, "unexpected argument '%s'", argv[optind]);
	if (o->json)
		return report_usage(cmd, "the metrics are Prometheus text; --json does not apply");
	return CTL_GO_ON;
}

int ctl_cmd_metrics(const struct ctl_opts *common, int argc, char **argv)
{
	struct exporter x = { 0 };
	struct ctl_opts o;
	char *text;
	size_t len;
	int r = parse(common, &o, argc, argv, "metrics", metrics_usage, NULL);

	if (r != CTL_GO_ON)
		return r;
	x.o = &o;
	name_instance(&o, x.instance, sizeof(x.instance));
	r = render(&x, &text, &len);
	seg_detach(&x.seg);
	if (r)
		return report_fail(EXIT_FAILED, "error", "metrics: %s", strerror(-r));
	r = fwrite(text, 1, len, stdout) == len && !fflush(stdout) ? EXIT_DONE : EXIT_FAILED;
	free(text);
	if (r)
		return report_fail(EXIT_FAILED, "io", "writing to stdout failed");
	return r;
}

/* ---- serve-metrics ------------------------------------------------------------ */

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version,
                              const char *upload_data, size_t *upload_size, void **state)
{
	static const char index_page[] = "wsync metrics exporter: see /metrics\n";
	struct exporter *x = cls;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	unsigned int code = MHD_HTTP_OK;
	char *text = NULL;
	size_t len = 0;

	(void)version;
	(void)upload_data;
	(void)upload_size;
	(void)state;
	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
		MHD_add_response_header(resp, "Allow", "GET, HEAD");
		ret = MHD_queue_response(conn, MHD_HTTP_METHOD_NOT_ALLOWED, resp);
		MHD_destroy_response(resp);
		return ret;
	}
	if (!strcmp(url, "/metrics")) {
		if (render(x, &text, &len)) {
			code = MHD_HTTP_INTERNAL_SERVER_ERROR;
			resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
		} else {
			resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
			MHD_add_response_header(resp, "Content-Type", METRICS_CONTENT_TYPE);
		}
	} else if (!strcmp(url, "/")) {
		resp = MHD_create_response_from_buffer(sizeof(index_page) - 1, (void *)index_page,
		                                       MHD_RESPMEM_PERSISTENT);
		MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
	} else {
		code = MHD_HTTP_NOT_FOUND;
		resp = MHD_create_response_from_buffer(10, (void *)"not found\n",
		                                       MHD_RESPMEM_PERSISTENT);
	}
	if (!resp) {
		free(text);
		return MHD_NO;
	}
	ret = MHD_queue_response(conn, code, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* "127.0.0.1:9464", "[::1]:9464", ":9464" (all IPv4 addresses). */
static int parse_listen(const char *s, struct sockaddr_storage *ss)
{
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	char host[64];
	const char *colon;
	char *end;
	long port;

	memset(ss, 0, sizeof(*ss));
	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (!close || close[1] != ':' || (size_t)(close - s - 1) >= sizeof(host))
			return -EINVAL;
		snprintf(host, sizeof(host), "%.*s", (int)(close - s - 1), s + 1);
		colon = close + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || (size_t)(colon - s) >= sizeof(host))
			return -EINVAL;
		snprintf(host, sizeof(host), "%.*s", (int)(colon - s), s);
	}
	port = strtol(colon + 1, &end, 10);
	if (!colon[1] || *end || port < 0 || port > 65535)
		return -EINVAL;
	if (s[0] == '[') {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)port);
		return inet_pton(AF_INET6, host, &a6->sin6_addr) == 1 ? 0 : -EINVAL;
	}
	a4->sin_family = AF_INET;
	a4->sin_port = htons((uint16_t)port);
	if (!host[0]) {
		a4->sin_addr.s_addr = htonl(INADDR_ANY);
		return 0;
	}
	return inet_pton(AF_INET, host, &a4->sin_addr) == 1 ? 0 : -EINVAL;
}

int ctl_cmd_serve_metrics(const struct ctl_opts *common, int argc, char **argv)
{
	const char *listen = "127.0.0.1:9464";
	const union MHD_DaemonInfo *info;
	struct exporter x = { 0 };
	struct sockaddr_storage ss;
	struct MHD_Daemon *d;
	struct ctl_opts o;
	sigset_t set;
	int r = parse(common, &o, argc, argv, "serve-metrics", serve_usage, &listen), sig;

	if (r != CTL_GO_ON)
		return r;
	if (parse_listen(listen, &ss))
		return report_usage("serve-metrics", "--listen wants ADDR:PORT (127.0.0.1:9464, "
		                    "[::1]:9464), not '%s'", listen);
	x.o = &o;
	name_instance(&o, x.instance, sizeof(x.instance));
	/* the signals are taken by sigwait below, in every thread */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD |
	                     (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0), 0, NULL, NULL,
	                     answer, &x, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
	                     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)10,
	                     MHD_OPTION_CONNECTION_LIMIT, (unsigned int)16, MHD_OPTION_END);
	if (!d)
		return report_fail(EXIT_FAILED, "io", "serve-metrics: cannot listen on %s "
		                   "(in use, or not an address of this machine)", listen);
	info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	if (ss.ss_family == AF_INET6)
		printf("serving metrics on http://[%.*s]:%u/metrics\n",
		       (int)(strrchr(listen, ']') - listen - 1), listen + 1, info ? info->port : 0);
	else
		printf("serving metrics on http://%.*s:%u/metrics\n", (int)(strrchr(listen, ':') - listen),
		       listen, info ? info->port : 0);
	fflush(stdout);
	sigwait(&set, &sig);
	MHD_stop_daemon(d);
	seg_detach(&x.seg);
	return EXIT_DONE;
}
