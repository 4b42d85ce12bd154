/*
 * fuzz_delta — libwsync-delta's decoder on streams taken from the input:
 * nothing in a delta is trusted, so no input may crash it, write outside
 * the output, leak, or hang; and an input it accepts must have rebuilt
 * exactly the bytes whose checksum the input named.
 *
 * Input: the first 8 bytes are the whole-version checksum to expect, the
 * next byte chooses where the stream is cut into frames, the rest is the
 * stream. The base is a fixed pattern of 5 chunks of 16 KiB and a short
 * one; the seed (corpus/fuzz_delta) is a real delta of a changed copy.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/relay/wsync_delta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHUNK (16u << 10)
#define N (5 * CHUNK + 1000)

static wsync_delta *codec;
static uint8_t base[N], out[N];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t checksum = 0, ticket;

	if (!codec) {
		if (wsync_delta_new(2, &codec))
			abort();
		for (size_t i = 0; i < N; i++)
			base[i] = (uint8_t)(i * 7 + (i >> 9));
	}
	if (size < 9)
		return 0;
	for (int i = 0; i < 8; i++)
		checksum |= (uint64_t)data[i] << (8 * i);
	size_t cut = data[8];
	const uint8_t *s = data + 9;
	size_t len = size - 9, first = len ? cut * len / 256 : 0;

	if (wsync_delta_dec_begin(codec, base, out, N, CHUNK))
		abort();
	wsync_delta_dec_feed(codec, s, first, &ticket);
	wsync_delta_dec_feed(codec, s + first, len - first, &ticket);
	if (wsync_delta_dec_wait(codec, ticket, WSYNC_DELTA_FOREVER))
		abort();
	if (wsync_delta_dec_end(codec, checksum, WSYNC_DELTA_FOREVER) == 0) {
		uint64_t again;

		if (wsync_delta_checksum(codec, out, N, CHUNK, &again) || again != checksum)
			abort();   /* accepted, but not what the checksum says */
	}
	return 0;
}
