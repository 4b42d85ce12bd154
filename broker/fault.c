/*
 * broker/fault.c — the injection points of fault.h: one counter per kind.
 *
 * Compiled in only with -DWSYNC_FAULT_INJECTION, into the test broker
 * $(BUILD)/tests/wsyncd-fault; the real wsyncd never reads WSYNC_FAULT_*
 * or WSYNC_HELLO_TIMEOUT_MS and its wrappers are the plain calls.
 */
#include "fault.h"

#include <errno.h>
#include <stdlib.h>

#include "log.h"
#include "shm/segment.h"

#ifdef WSYNC_FAULT_INJECTION
static const char *const fault_env[FAULT_KIND_END] = {
	[FAULT_ALLOC] = "WSYNC_FAULT_ALLOC",
	[FAULT_SEG]   = "WSYNC_FAULT_SEG",
	[FAULT_MAP]   = "WSYNC_FAULT_MAP",
	[FAULT_SUBMIT] = "WSYNC_FAULT_SUBMIT",
};
static const char *const fault_what[FAULT_KIND_END] = {
	[FAULT_ALLOC] = "allocation",
	[FAULT_SEG]   = "segment creation",
	[FAULT_MAP]   = "mapping",
	[FAULT_SUBMIT] = "io_uring submit",
};

static struct {
	bool     parsed;
	uint64_t target[FAULT_KIND_END];     /* 0 = never */
	uint64_t count[FAULT_KIND_END];
} F;

static uint64_t env_u64(const char *name)
{
	const char *s = secure_getenv(name);
	char *end;
	unsigned long long v;

	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtoull(s, &end, 10);
	return errno || *end ? 0 : (uint64_t)v;
}

static void fault_parse(void)
{
	for (int k = 0; k < FAULT_KIND_END; k++)
		F.target[k] = env_u64(fault_env[k]);
	F.parsed = true;
}

bool fault_hit(enum fault_kind k, const char *site)
{
	if (!F.parsed)
		fault_parse();
	if (!F.target[k])
		return false;
	if (++F.count[k] != F.target[k])
		return false;
	log_warn("fault injection: failing %s #%llu (%s=%llu) at %s", fault_what[k],
	         (unsigned long long)F.count[k], fault_env[k],
	         (unsigned long long)F.target[k], site);
	return true;
}

int64_t fault_hello_wait_ns(int64_t dflt_ns)
{
	uint64_t ms = env_u64("WSYNC_HELLO_TIMEOUT_MS");

	return ms && ms < 3600 * 1000 ? (int64_t)ms * 1000000 : dflt_ns;
}
#else
bool fault_hit(enum fault_kind k, const char *site)
{
	(void)k;
	(void)site;
	return false;
}

int64_t fault_hello_wait_ns(int64_t dflt_ns)
{
	return dflt_ns;
}
#endif

void *fault_malloc(size_t n)
{
	if (fault_hit(FAULT_ALLOC, "malloc")) {
		errno = ENOMEM;
		return NULL;
	}
	return malloc(n);
}

void *fault_calloc(size_t n, size_t size)
{
	if (fault_hit(FAULT_ALLOC, "calloc")) {
		errno = ENOMEM;
		return NULL;
	}
	return calloc(n, size);
}

void *fault_realloc(void *p, size_t n)
{
	if (fault_hit(FAULT_ALLOC, "realloc")) {
		errno = ENOMEM;
		return NULL;
	}
	return realloc(p, n);
}

void *fault_aligned_alloc(size_t align, size_t n)
{
	if (fault_hit(FAULT_ALLOC, "aligned_alloc")) {
		errno = ENOMEM;
		return NULL;
	}
	return aligned_alloc(align, n);
}

int fault_seg_create_at(int dirfd, const char *name, uint64_t bytes)
{
	if (fault_hit(FAULT_SEG, name))
		return -ENOSPC;
	return wsync_seg_create_at(dirfd, name, bytes);
}

int fault_memfd_create(const char *label, uint64_t bytes)
{
	if (fault_hit(FAULT_SEG, label))
		return -ENOSPC;
	return wsync_memfd_create(label, bytes);
}

int fault_memfd_create_huge(const char *label, uint64_t bytes, enum wsync_slab_pages kind)
{
	if (fault_hit(FAULT_SEG, label))
		return -ENOSPC;
	return wsync_memfd_create_huge(label, bytes, kind);
}

int fault_seg_map(int fd, uint64_t bytes, int writable, int populate, void **out)
{
	if (fault_hit(FAULT_MAP, "mmap"))
		return -ENOMEM;
	return wsync_seg_map(fd, bytes, writable, populate, out);
}
