/*
 * tools/ctl/io.c — wsyncctl dump and load: a model's latest version to a
 * safetensors file and back.
 *
 * load checks the whole file (ctl_safetensors.c) before it opens the model
 * as a publisher, so a refused file publishes nothing and leaves the model
 * as it was. dump writes to a temporary file next to the target and renames
 * it, so a failed dump leaves no half-written file under the name.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"
#include "safetensors.h"

static const char dump_usage[] =
	"usage: wsyncctl dump MODEL -o FILE.safetensors [--version N] [OPTIONS]\n"
	"\n"
	"Writes MODEL's latest version as a safetensors file: tensors in layout\n"
	"order, back to back, and in __metadata__ wsync_model, wsync_version,\n"
	"wsync_step and wsync_published_ns. --version N fails unless N is the\n"
	"latest version. The bytes are the slab's, bit for bit.\n"
	"\n"
	"  -o, --output FILE  the file to write (replaced if it exists)\n"
	"  --version N        insist on version N\n"
	"\n"
	"exit codes: 0 written, 2 usage, 3 no broker, no such model, a dtype\n"
	"safetensors lacks, or a write error.\n\n";

static const char load_usage[] =
	"usage: wsyncctl load FILE.safetensors --model NAME [--step S] [--no-checksum] [OPTIONS]\n"
	"\n"
	"Publishes the tensors of a safetensors file as a new version of NAME (the\n"
	"model is created if absent; if it exists its layout must be the file's, in\n"
	"data order). The file is checked whole first: a malformed file (bad or\n"
	"oversized header, bad JSON, duplicate names, unknown dtypes, shapes that\n"
	"disagree with their sizes, overlapping, out-of-order or truncated data)\n"
	"is refused and nothing is published.\n"
	"\n"
	"  --model NAME   the model to publish\n"
	"  --step S       the step to stamp (default: the file's wsync_step, else 0)\n"
	"  --no-checksum  publish without a checksum (WSYNC_PUB_NO_CHECKSUM); every\n"
	"                 version carries one by default (--checksum, the default,\n"
	"                 is accepted)\n"
	"  --timeout S    wait up to S seconds for the broker and for a free slot\n"
	"                 (default: 2 for the broker, 10 for a slot)\n"
	"\n"
	"exit codes: 0 published (prints the version), 2 usage, 3 no broker, a\n"
	"refused file, a layout clash, another publisher, or another error.\n\n";

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t w = write(fd, p, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

static int dump_view(const char *model, const wsync_view *v, const char *path)
{
	char vbuf[24], sbuf[24], tbuf[24], tmp[4096], *hdr = NULL;
	struct st_meta meta[] = {
		{ "wsync_model", (char *)model },
		{ "wsync_version", vbuf },
		{ "wsync_step", sbuf },
		{ "wsync_published_ns", tbuf },
	};
	size_t hlen;
	int fd, err;

	snprintf(vbuf, sizeof(vbuf), "%" PRIu64, v->version);
	snprintf(sbuf, sizeof(sbuf), "%" PRIu64, v->step);
	snprintf(tbuf, sizeof(tbuf), "%" PRId64, v->published_ns);
	err = st_header_build(v->tensors, v->n_tensors, meta, 4, &hdr, &hlen);
	if (err) {
		return report_fail(EXIT_FAILED, err == -EINVAL ? "unsupported" : "error",
		                   "model '%s': %s", model, err == -EINVAL ?
		                   "a tensor safetensors cannot hold (dtype or name)" :
		                   strerror(-err));
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		err = errno;
		free(hdr);
		return report_fail(EXIT_FAILED, "io", "%s: %s", tmp, strerror(err));
	}
	err = write_all(fd, hdr, hlen);
	for (size_t i = 0; !err && i < v->n_tensors; i++)
		err = write_all(fd, (const char *)v->base + v->tensors[i].offset,
		                wsync_tensor_bytes(&v->tensors[i]));
	if (!err && fsync(fd) < 0)
		err = -errno;
	if (close(fd) < 0 && !err)
		err = -errno;
	if (!err && rename(tmp, path) < 0)
		err = -errno;
	free(hdr);
	if (err) {
		unlink(tmp);
		return report_fail(EXIT_FAILED, "io", "%s: %s", path, strerror(-err));
	}
	return EXIT_DONE;
}

int ctl_cmd_dump(const struct ctl_opts *common, int argc, char **argv)
{
	static const struct option longopts[] = {
		CTL_COMMON_LONGOPTS,
		{ "output",  required_argument, NULL, 'o' },
		{ "version", required_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl_opts o = *common;
	const char *out = NULL, *model;
	bool have_version = false;
	uint64_t version = 0;
	wsync_client *c;
	wsync_sub *s;
	wsync_view v;
	int opt, r;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, CTL_CMD_SHORTOPTS "o:", longopts, NULL)) != -1) {
		if (opt == 'o') {
			out = optarg;
			continue;
		}
		if (opt == 'v') {
			if (!ctl_parse_u64(optarg, &version))
				return report_usage("dump", "--version wants a number, not '%s'", optarg);
			have_version = true;
			continue;
		}
		r = ctl_common_opt(opt, &o, "dump", dump_usage, argv);
		if (r != CTL_GO_ON)
			return r;
	}
	if (optind != argc - 1)
		return report_usage("dump", optind >= argc ? "no MODEL given" : "one MODEL only");
	if (!out)
		return report_usage("dump", "no output file given (-o FILE)");
	model = argv[optind];
	if ((r = ctl_check_model("dump", model)) != CTL_GO_ON)
		return r;
	r = ctl_take_latest(&o, model, have_version, version, &c, &s, &v);
	if (r)
		return r;
	r = dump_view(model, &v, out);
	if (!r && o.json)
		r = report_json(json_pack("{s:s, s:I, s:I, s:s}", "model", model,
		                         "version", (json_int_t)v.version,
		                         "step", (json_int_t)v.step, "file", out));
	else if (!r)
		printf("%s version %" PRIu64 " step %" PRIu64 " written to %s\n", model,
		       v.version, v.step, out);
	wsync_sub_release(s, &v);
	wsync_sub_close(s);
	wsync_close(c);
	return r;
}

/* ---- load ------------------------------------------------------------------ */

struct load_args {
	const char *file, *model;
	bool have_step, no_checksum;
	uint64_t step;
	int64_t timeout_ns;
};

/* Maps the file read-only; *len 0 maps nothing. */
static int map_file(const char *path, const uint8_t **buf, size_t *len)
{
	struct stat st;
	void *p;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) < 0) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		return report_fail(EXIT_FAILED, e == ENOENT ? "not_found" : "io", "%s: %s", path,
		                   strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return report_fail(EXIT_FAILED, "io", "%s: not a regular file", path);
	}
	*len = (size_t)st.st_size;
	*buf = NULL;
	if (*len) {
		p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED) {
			int e = errno;

			close(fd);
			return report_fail(EXIT_FAILED, "io", "%s: mmap: %s", path, strerror(e));
		}
		*buf = p;
	}
	close(fd);
	return EXIT_DONE;
}

static int publish_file(const struct ctl_opts *o, const struct load_args *a,
                        const struct st_file *f)
{
	wsync_model_opts mo = { .flags = a->no_checksum ? WSYNC_PUB_NO_CHECKSUM : 0 };
	wsync_tensor_desc *descs = calloc(f->n_tensors, sizeof(*descs));
	const void **srcs = calloc(f->n_tensors, sizeof(*srcs));
	uint64_t version = 0;
	wsync_client *c = NULL;
	wsync_pub *p = NULL;
	wsync_slab slab;
	int err, r = EXIT_FAILED;

	if (!descs || !srcs) {
		report_fail(EXIT_FAILED, "error", "out of memory");
		goto out;
	}
	for (size_t i = 0; i < f->n_tensors; i++) {
		descs[i] = f->tensors[i].desc;
		srcs[i] = f->data + f->tensors[i].begin;
	}
	if (ctl_connect(o, &c))
		goto out;
	err = wsync_pub_open(c, a->model, descs, f->n_tensors, &mo, &p);
	if (err) {
		r = report_wsync_fail(EXIT_FAILED, "publish", err);
		goto out;
	}
	err = wsync_pub_begin(p, a->timeout_ns, &slab);
	if (err) {
		r = report_wsync_fail(EXIT_FAILED, "begin", err);
		goto out;
	}
	err = wsync_slab_copy_tensors(&slab, (const void *const *)srcs, 0);
	if (err) {
		wsync_pub_abort(p);
		r = report_wsync_fail(EXIT_FAILED, "copy", err);
		goto out;
	}
	err = wsync_pub_commit(p, a->step, &version);
	if (err) {
		r = report_wsync_fail(EXIT_FAILED, "commit", err);
		goto out;
	}
	r = EXIT_DONE;
	if (o->json)
		r = report_json(json_pack("{s:s, s:I, s:I, s:I}", "model", a->model,
		                          "version", (json_int_t)version, "step", (json_int_t)a->step,
		                          "tensors", (json_int_t)f->n_tensors));
	else
		printf("%s version %" PRIu64 " step %" PRIu64 " published from %s (%zu tensors)\n",
		       a->model, version, a->step, a->file, f->n_tensors);
out:
	wsync_pub_close(p);
	wsync_close(c);
	free(srcs);
	free(descs);
	return r;
}

static int load_file(const struct ctl_opts *o, struct load_args *a)
{
	const uint8_t *buf;
	struct st_file f;
	const char *step;
	char why[512];
	size_t len = 0;
	int r = map_file(a->file, &buf, &len);

	if (r)
		return r;
	if (st_parse(buf, len, &f, why, sizeof(why))) {
		r = report_fail(EXIT_FAILED, "refused_file", "%s: refused, nothing published: %s",
		                a->file, why);
		goto out_unmap;
	}
	step = st_meta_get(&f, "wsync_step");
	if (!a->have_step && step && !ctl_parse_u64(step, &a->step))
		a->step = 0;
	r = publish_file(o, a, &f);
	st_free(&f);
out_unmap:
	if (len)
		munmap((void *)buf, len);
	return r;
}

int ctl_cmd_load(const struct ctl_opts *common, int argc, char **argv)
{
	static const struct option longopts[] = {
		CTL_COMMON_LONGOPTS,
		{ "model",    required_argument, NULL, 'm' },
		{ "step",     required_argument, NULL, 's' },
		{ "checksum", no_argument,       NULL, 'c' },
		{ "no-checksum", no_argument,    NULL, 'C' },
		{ NULL, 0, NULL, 0 },
	};
	struct load_args a = { .timeout_ns = 10 * INT64_C(1000000000) };
	struct ctl_opts o = *common;
	int opt, r;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, CTL_CMD_SHORTOPTS, longopts, NULL)) != -1) {
		switch (opt) {
		case 'm':
			a.model = optarg;
			continue;
		case 's':
			if (!ctl_parse_u64(optarg, &a.step))
				return report_usage("load", "--step wants a number, not '%s'", optarg);
			a.have_step = true;
			continue;
		case 'c':                        /* the default, kept for old scripts */
			a.no_checksum = false;
			continue;
		case 'C':
			a.no_checksum = true;
			continue;
		}
		r = ctl_common_opt(opt, &o, "load", load_usage, argv);
		if (r != CTL_GO_ON)
			return r;
	}
	if (optind != argc - 1)
		return report_usage("load", optind >= argc ? "no FILE given" : "one FILE only");
	if (o.timeout_ns >= 0)
		a.timeout_ns = o.timeout_ns;         /* the slot wait, the broker's too */
	if (!a.model)
		return report_usage("load", "no model given (--model NAME)");
	if ((r = ctl_check_model("load", a.model)) != CTL_GO_ON)
		return r;
	a.file = argv[optind];
	return load_file(&o, &a);
}
