/* broker/state.c — the versions file. */
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "fault.h"
#include "log.h"
#include "model.h"
#include "shm/clock.h"
#include "shm/proto.h"

#define STATE_MAX_LINES (STATE_MAX_FLOORS + STATE_FOLD_BUCKETS)

struct hwm_floor {
	uint64_t hwm;
	uint64_t hash;                   /* seeded: the table's */
	struct hwm_floor *hnext;         /* in its hash bucket */
	struct hwm_floor *prev, *next;   /* every floor, oldest first */
	struct floor_owner *owner;       /* whose budget it counts in, or NULL */
	struct hwm_floor *uprev, *unext; /* its owner's, oldest first */
	char     name[];
};

struct floor_owner {
	uid_t    uid;
	uint32_t n;
	struct hwm_floor *first, *last;
};

/* FNV-1a over the name, then mixed with seed. */
static uint64_t name_hash(const char *name, uint64_t seed)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325) ^ seed;

	for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
		h ^= *c;
		h *= UINT64_C(0x100000001b3);
	}
	h ^= h >> 29;
	h *= UINT64_C(0xbf58476d1ce4e5b9);
	return h ^ (h >> 32);
}

/* The shared floor a name folds into: unseeded, the same in every run (the
 * versions file keeps the buckets). */
static uint32_t fold_bucket(const char *name)
{
	return (uint32_t)(name_hash(name, 0) % STATE_FOLD_BUCKETS);
}

static struct hwm_floor *floor_find(const struct hwm_floors *f, const char *name)
{
	uint64_t h;

	if (!f || !f->n_tab)
		return NULL;
	h = name_hash(name, f->seed);
	for (struct hwm_floor *e = f->tab[h & (f->n_tab - 1)]; e; e = e->hnext)
		if (e->hash == h && !strcmp(e->name, name))
			return e;
	return NULL;
}

uint64_t state_floor(const struct hwm_floors *f, const char *name)
{
	const struct hwm_floor *e = floor_find(f, name);
	uint64_t own = e ? e->hwm : 0, fold = f ? f->fold[fold_bucket(name)] : 0;

	return own > fold ? own : fold;
}

/* Doubles the hash table (or makes it): 0 or -ENOMEM. */
static int table_grow(struct hwm_floors *f)
{
	size_t n = f->n_tab ? 2 * f->n_tab : 64;
	struct hwm_floor **tab = fault_calloc(n, sizeof(*tab));

	if (!tab)
		return -ENOMEM;
	for (size_t i = 0; i < f->n_tab; i++) {
		while (f->tab[i]) {
			struct hwm_floor *e = f->tab[i];

			f->tab[i] = e->hnext;
			e->hnext = tab[e->hash & (n - 1)];
			tab[e->hash & (n - 1)] = e;
		}
	}
	free(f->tab);
	f->tab = tab;
	f->n_tab = n;
	return 0;
}

static struct floor_owner *owner_get(struct hwm_floors *f, uid_t uid)
{
	for (uint32_t i = 0; i < f->n_owners; i++)
		if (f->owners[i]->uid == uid)
			return f->owners[i];
	return NULL;
}

/* A new owner of uid in the table: NULL when out of memory. */
static struct floor_owner *owner_add(struct hwm_floors *f, uid_t uid)
{
	struct floor_owner *o;

	if (f->n_owners == f->owners_cap) {
		uint32_t cap = f->owners_cap ? 2 * f->owners_cap : 4;
		struct floor_owner **v = fault_realloc(f->owners, cap * sizeof(*v));

		if (!v)
			return NULL;
		f->owners = v;
		f->owners_cap = cap;
	}
	o = fault_calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	o->uid = uid;
	f->owners[f->n_owners++] = o;
	return o;
}

static void owner_drop(struct hwm_floors *f, struct floor_owner *o)
{
	for (uint32_t i = 0; i < f->n_owners; i++) {
		if (f->owners[i] == o) {
			f->owners[i] = f->owners[--f->n_owners];
			break;
		}
	}
	free(o);
	if (!f->n_owners) {
		free(f->owners);
		f->owners = NULL;
		f->owners_cap = 0;
	}
}

/* Removes e from every list, its bucket's floor raised to its own, and
 * frees it. */
static void floor_fold(struct hwm_floors *f, struct hwm_floor *e)
{
	uint32_t k = fold_bucket(e->name);
	struct hwm_floor **pp = &f->tab[e->hash & (f->n_tab - 1)];
	struct floor_owner *o = e->owner;

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	if (e->prev)
		e->prev->next = e->next;
	else
		f->first = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		f->last = e->prev;
	if (o) {
		if (e->uprev)
			e->uprev->unext = e->unext;
		else
			o->first = e->unext;
		if (e->unext)
			e->unext->uprev = e->uprev;
		else
			o->last = e->uprev;
		if (!--o->n)
			owner_drop(f, o);
	}
	if (e->hwm > f->fold[k])
		f->fold[k] = e->hwm;
	f->n--;
	f->folded++;
	free(e);
}

int state_floor_raise(struct hwm_floors *f, const char *name, uint64_t hwm, uid_t owner,
                      bool budgeted)
{
	struct hwm_floor *e = floor_find(f, name);
	struct floor_owner *o = NULL;
	size_t len;

	if (e) {
		if (hwm > e->hwm)
			e->hwm = hwm;
		return 0;
	}
	if (hwm <= f->fold[fold_bucket(name)])
		return 0;                    /* its bucket's floor holds it already */
	if (f->n >= f->n_tab && table_grow(f))
		return -ENOMEM;
	if (budgeted && !(o = owner_get(f, owner)) && !(o = owner_add(f, owner)))
		return -ENOMEM;
	len = strnlen(name, WSYNC_NAME_MAX - 1);
	e = fault_malloc(sizeof(*e) + len + 1);
	if (!e) {
		if (o && !o->n)
			owner_drop(f, o);
		return -ENOMEM;
	}
	memcpy(e->name, name, len);
	e->name[len] = '\0';
	e->hwm = hwm;
	e->hash = name_hash(e->name, f->seed);
	e->hnext = f->tab[e->hash & (f->n_tab - 1)];
	f->tab[e->hash & (f->n_tab - 1)] = e;
	e->next = NULL;
	e->prev = f->last;
	if (f->last)
		f->last->next = e;
	else
		f->first = e;
	f->last = e;
	e->owner = o;
	e->unext = NULL;
	e->uprev = NULL;
	if (o) {
		e->uprev = o->last;
		if (o->last)
			o->last->unext = e;
		else
			o->first = e;
		o->last = e;
		o->n++;
	}
	f->n++;
	/* the budgets: the owner's oldest, then the oldest of all */
	if (o && o->n > STATE_UID_FLOORS)
		floor_fold(f, o->first);
	if (f->n > STATE_MAX_FLOORS)
		floor_fold(f, f->first);
	return 0;
}

bool state_trim_due(struct hwm_floors *f)
{
	bool due = f && f->folded;

	if (due)
		f->folded = 0;
	return due;
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

/* "<hwm> *<bucket>\n", a folded floor: true if line was one (taken). */
static bool fold_parse(const char *line, struct hwm_floors *f)
{
	unsigned long long hwm, k;
	char star, end;

	if (sscanf(line, "%llu %c%llu%c", &hwm, &star, &k, &end) != 4 || star != '*' ||
	    end != '\n' || k >= STATE_FOLD_BUCKETS || hwm > MODEL_VERSION_MAX)
		return false;
	if (hwm > f->fold[k])
		f->fold[k] = hwm;
	return true;
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
	if (getrandom(&f->seed, sizeof(f->seed), GRND_NONBLOCK) != sizeof(f->seed))
		f->seed = (uint64_t)wsync_mono_ns() ^ ((uint64_t)getpid() << 32);
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
		if (fold_parse(line, f)) {
			continue;
		} else if (line_parse(line, &hwm, &name)) {
			log_warn("%s:%u: not '<version> <model>', ignored", path, lineno);
			continue;
		}
		if (lineno > STATE_MAX_LINES) {
			log_warn("%s: more than %d lines, the rest ignored", path, STATE_MAX_LINES);
			break;
		}
		err = state_floor_raise(f, name, hwm, (uid_t)WSYNC_OWNER_NONE, false);
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
	for (const struct hwm_floor *e = b->floors ? b->floors->first : NULL; e; e = e->next) {
		bool present = false;

		for (uint32_t k = 0; k < WSYNC_MAX_MODELS && !present; k++)
			present = b->models[k] && !strcmp(b->models[k]->name, e->name);
		if (!present)
			fprintf(fp, "%" PRIu64 " %s\n", e->hwm, e->name);
	}
	for (uint32_t k = 0; b->floors && k < STATE_FOLD_BUCKETS; k++)
		if (b->floors->fold[k])
			fprintf(fp, "%" PRIu64 " *%u\n", b->floors->fold[k], k);
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
	while (f->first) {
		struct hwm_floor *e = f->first;

		f->first = e->next;
		free(e);
	}
	free(f->tab);
	while (f->n_owners)
		owner_drop(f, f->owners[0]);
	free(f);
}
