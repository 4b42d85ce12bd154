/*
 * broker/slots.c — which slot a publisher may write next.
 *
 * Invariant (no torn reads): a slot is granted only if the books say it is
 * neither LATEST nor GRANTED and no live session's hazard pins it. The books
 * are the broker's own memory; the pins come from session pages that clients
 * write at any time, so every pin is read once (seq_cst, pairing with the
 * reader's pin store and re-load of `latest` through seq_cst or through
 * pin_barrier, see slots.h) and
 * range-checked before it selects a bit. Nothing read from a client page is
 * ever used as an index.
 */
#include "slots.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/membarrier.h>

/* The barrier reaches only processes registered for it (every client
 * registers at connect, libclient/client.c); it costs the broker a few
 * microseconds of IPIs per grant, once per commit. Without SYS_membarrier
 * the broker never advertises it. */
int pin_barrier(void)
{
#ifdef SYS_membarrier
	/* the kernel may fail it for want of memory: a few tries, then the
	 * grant fails rather than scan unordered pins */
	for (int tries = 0; tries < 4; tries++)
		if (syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0)
			return 0;
	return -errno;
#else
	return -ENOSYS;
#endif
}

bool pin_barrier_works(void)
{
#ifdef SYS_membarrier
	long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);

	return cmds > 0 && (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) && pin_barrier() == 0;
#else
	return false;
#endif
}

uint32_t hazard_scan(uint32_t model_id, uint32_t n_slots,
                     struct wsync_session_page *const *pages, size_t n)
{
	uint32_t pinned = 0;

	if (n_slots > WSYNC_MAX_SLOTS)
		n_slots = WSYNC_MAX_SLOTS;
	for (size_t i = 0; i < n; i++) {
		struct wsync_session_page *p = pages[i];

		if (!p)
			continue;
		for (uint32_t h = 0; h < WSYNC_MAX_VIEWS; h++) {
			uint64_t pin = atomic_load(&p->hazards[h].pin);
			uint32_t slot;

			if (!pin || wsync_pin_model(pin) != model_id)
				continue;
			slot = wsync_pin_slot(pin);
			if (slot < n_slots)
				pinned |= 1u << slot;
		}
	}
	return pinned;
}

int slot_pick(const struct slot_books *b, uint32_t pinned)
{
	uint32_t n = b->n_slots > WSYNC_MAX_SLOTS ? WSYNC_MAX_SLOTS : b->n_slots;
	int best = -1;

	for (uint32_t i = 0; i < n; i++)
		if (b->state[i] == WSYNC_SLOT_FREE && !(pinned & (1u << i)))
			return (int)i;
	for (uint32_t i = 0; i < n; i++) {
		if (b->state[i] != WSYNC_SLOT_OLD || (pinned & (1u << i)))
			continue;
		if (best < 0 || b->version[i] < b->version[best])
			best = (int)i;
	}
	return best >= 0 ? best : -EBUSY;
}

static void append(char *buf, size_t len, size_t *at, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t len, size_t *at, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*at >= len)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf + *at, len - *at, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	*at = (size_t)n >= len - *at ? len : *at + (size_t)n;
}

void slot_describe_busy(const struct slot_books *b, uint32_t pinned,
                        const char *const *holders, char *buf, size_t len)
{
	uint32_t n = b->n_slots > WSYNC_MAX_SLOTS ? WSYNC_MAX_SLOTS : b->n_slots;
	size_t at = 0;

	if (!len)
		return;
	buf[0] = '\0';
	for (uint32_t i = 0; i < n; i++) {
		unsigned long long v = (unsigned long long)b->version[i];
		const char *sep = i ? "; " : "";
		bool pin = pinned & (1u << i);
		const char *who = holders ? holders[i] : NULL;

		switch (b->state[i]) {
		case WSYNC_SLOT_LATEST:
			append(buf, len, &at, "%sslot %u latest v%llu", sep, i, v);
			break;
		case WSYNC_SLOT_GRANTED:
			append(buf, len, &at, "%sslot %u granted v%llu", sep, i, v);
			break;
		case WSYNC_SLOT_OLD:
			append(buf, len, &at, "%sslot %u v%llu", sep, i, v);
			break;
		default:
			append(buf, len, &at, "%sslot %u empty", sep, i);
			break;
		}
		if (pin && b->state[i] != WSYNC_SLOT_LATEST && b->state[i] != WSYNC_SLOT_GRANTED) {
			if (who && who[0])
				append(buf, len, &at, " pinned by %s", who);
			else
				append(buf, len, &at, " pinned");
		} else if (!pin && (b->state[i] == WSYNC_SLOT_OLD || b->state[i] == WSYNC_SLOT_FREE)) {
			append(buf, len, &at, " free");
		}
	}
	if (at >= len && len > 4)
		memcpy(buf + len - 4, "...", 4);
}
