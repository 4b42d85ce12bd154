/* broker/state.c — the versions file. */
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault.h"
#include "log.h"
#include "model.h"
#include "shm/proto.h"

#define STATE_MAX_LINES 65536

static struct hwm_floor *floor_find(const struct hwm_floors *f, const char *name)
{
	for (size_t i = 0; f && i < f->n; i++)
		if (!strcmp(f->v[i].name, name))
			return &f->v[i];
	return NULL;
}

uint64_t state_floor(const struct hwm_floors *f, const char *name)
{
	const struct hwm_floor *e = floor_find(f, name);

	return e ? e->hwm : 0;
}

int state_floor_raise(struct hwm_floors *f, const char *name, uint64_t hwm)
{
	struct hwm_floor *e = floor_find(f, name);

	if (e) {
		if (hwm > e->hwm)
			e->hwm = hwm;
		return 0;
	}
	if (f->n == f->cap) {
		size_t cap = f->cap ? 2 * f->cap : 16;
		struct hwm_floor *v = fault_realloc(f->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		f->v = v;
		f->cap = cap;
	}
	e = &f->v[f->n++];
	e->hwm = hwm;
	snprintf(e->name, sizeof(e->name), "%s", name);
	return 0;
}

/* "<hwm> <name>\n": 0 and the parts, or -EINVAL. */
static int line_parse(char *line, uint64_t *hwm, char **name)
{
	char *end, *sp;
	size_t n = strlen(line);

	if (n && line[n - 1] == '\n')
		line[--n] = '\0';
	if (line[0] < '0' || line[0] > '9')
		return -EINVAL;
	errno = 0;
	*hwm = strtoull(line, &end, 10);
	if (errno || *end != ' ' || *hwm > MODEL_VERSION_MAX)
		return -EINVAL;
	sp = end + 1;
	if (!wsync_name_valid(sp, WSYNC_NAME_MAX))
		return -EINVAL;
	*name = sp;
	return 0;
}

int state_load(const char *path, struct hwm_floors **out)
{
	struct hwm_floors *f = fault_calloc(1, sizeof(*f));
	char line[WSYNC_NAME_MAX + 64];
	unsigned lineno = 0;
	FILE *fp;
	int err = 0;

	if (!f)
		return -ENOMEM;
	*out = f;
	fp = fopen(path, "re");
	if (!fp) {
		if (errno == ENOENT)
			return 0;
		err = -errno;
		log_warn("cannot read %s: %s; versions restart above what the control "
		         "segment knows", path, strerror(errno));
		return err;
	}
	while (fgets(line, sizeof(line), fp)) {
		uint64_t hwm;
		char *name;

		lineno++;
		if (!strchr(line, '\n') && !feof(fp)) {
			int c;

			while ((c = fgetc(fp)) != EOF && c != '\n')
				;
			log_warn("%s:%u: line too long, ignored", path, lineno);
			continue;
		}
		if (line_parse(line, &hwm, &name)) {
			log_warn("%s:%u: not '<version> <model>', ignored", path, lineno);
			continue;
		}
		if (f->n >= STATE_MAX_LINES) {
			log_warn("%s: more than %d models, the rest ignored", path, STATE_MAX_LINES);
			break;
		}
		err = state_floor_raise(f, name, hwm);
		if (err)
			break;
	}
	fclose(fp);
	return err;
}

int state_save(const char *path, const struct broker *b)
{
	char tmp[PATH_MAX + 8];
	FILE *fp;
	int fd, err = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	fp = fdopen(fd, "w");
	if (!fp) {
		err = -errno;
		close(fd);
		goto out_unlink;
	}
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		const struct model *m = b->models[i];

		if (m) {
			uint64_t hwm = m->hwm, floor = state_floor(b->floors, m->name);

			fprintf(fp, "%" PRIu64 " %s\n", hwm > floor ? hwm : floor, m->name);
		}
	}
	for (size_t i = 0; b->floors && i < b->floors->n; i++) {
		const struct hwm_floor *e = &b->floors->v[i];
		bool present = false;

		for (uint32_t k = 0; k < WSYNC_MAX_MODELS && !present; k++)
			present = b->models[k] && !strcmp(b->models[k]->name, e->name);
		if (!present)
			fprintf(fp, "%" PRIu64 " %s\n", e->hwm, e->name);
	}
	if (fflush(fp) != 0 || fsync(fileno(fp)) != 0)
		err = -errno;
	if (fclose(fp) != 0 && !err)
		err = -errno;
	if (err)
		goto out_unlink;
	if (rename(tmp, path) < 0) {
		err = -errno;
		goto out_unlink;
	}
	return 0;

out_unlink:
	unlink(tmp);
	return err;
}

void state_free(struct hwm_floors *f)
{
	if (!f)
		return;
	free(f->v);
	free(f);
}
