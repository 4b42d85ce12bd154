/*
 * broker/guard.c — the SIGBUS handler for watched mappings.
 *
 * The table is written only by the broker thread, outside the handler, and
 * read by the handler, which runs on that same thread (SIGBUS from a memory
 * access is synchronous): an entry is complete before the mapping it names
 * is ever touched, and removed only after the broker stopped using it. The
 * handler does two system calls (mmap, and at worst sigaction + raise) and
 * writes sig_atomic_t flags, nothing else.
 */
#include "guard.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm/layout.h"

#define GUARD_MAX (WSYNC_MAX_MODELS + 8)

static struct {
	uintptr_t start, end;            /* 0 = unused */
	volatile sig_atomic_t hit;
} watched[GUARD_MAX];
static volatile sig_atomic_t guard_hits;

static void guard_handler(int sig, siginfo_t *si, void *uctx)
{
	uintptr_t a = (uintptr_t)si->si_addr;

	(void)uctx;
	for (size_t i = 0; i < GUARD_MAX; i++) {
		uintptr_t page = a & ~(uintptr_t)(WSYNC_PAGE - 1);

		if (!watched[i].start || a < watched[i].start || a >= watched[i].end)
			continue;
		/* The access resumes against zeroes; the loop repairs the page. */
		if (mmap((void *)page, WSYNC_PAGE, PROT_READ | PROT_WRITE,
		         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
			break;
		watched[i].hit = 1;
		guard_hits = 1;
		return;
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

int guard_init(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = guard_handler;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	return sigaction(SIGBUS, &sa, NULL) < 0 ? -errno : 0;
}

bool guard_watch(void *addr, size_t len)
{
	for (size_t i = 0; i < GUARD_MAX; i++) {
		if (watched[i].start)
			continue;
		watched[i].hit = 0;
		watched[i].end = (uintptr_t)addr + len;
		watched[i].start = (uintptr_t)addr;
		return true;
	}
	return false;
}

void guard_unwatch(void *addr)
{
	for (size_t i = 0; i < GUARD_MAX; i++)
		if (watched[i].start == (uintptr_t)addr)
			watched[i].start = watched[i].end = 0;
}

bool guard_pending(void)
{
	return guard_hits != 0;
}

bool guard_take(void *addr)
{
	bool hit = false;

	guard_hits = 0;
	for (size_t i = 0; i < GUARD_MAX; i++) {
		if (watched[i].start == (uintptr_t)addr && watched[i].hit) {
			watched[i].hit = 0;
			hit = true;
		}
		if (watched[i].hit)
			guard_hits = 1;
	}
	return hit;
}
