/*
 * test_delta — libwsync-delta (tools/relay/): a version encoded against its base
 * decodes to the same bytes on any number of threads, in frames of any
 * size, with SAME, XSPARSE, XZSTD and RAW records all used; the encoder turns its
 * base into the new version and its checksum is wsync_delta_checksum's;
 * and every damaged stream is refused (-EBADMSG), never applied: a byte
 * flipped anywhere (refused, or decoded to the very same bytes when the bit
 * is one zstd ignores), a record dropped (truncated), sent twice, a wrong
 * whole checksum, a frame cut in the middle of a record. Misuse is
 * answered: a frame too small, two operations at once, an encode ended
 * early.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tools/relay/wsync_delta.h"

#define CHUNK (16u << 10)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

struct fixture {
	size_t n;
	uint8_t *base, *cur, *enc_base, *out;
	uint8_t *stream;
	size_t stream_len;
	size_t *frame_ends;       /* where each frame of the encode ended */
	size_t n_frames;
	uint64_t checksum;
	wsync_delta_stats st;
};

/* base: random; cur: base with 2 % of bytes changed in the first half
 * (XSPARSE), unchanged chunks after (SAME), one chunk of fresh random bytes
 * (RAW) and one with every other 16-bit word changed (XZSTD). */
static void make_versions(struct fixture *f, size_t n)
{
	f->n = n;
	f->base = malloc(n + 1);
	f->cur = malloc(n + 1);
	f->enc_base = malloc(n + 1);
	f->out = malloc(n + 1);
	for (size_t i = 0; i < n; i++)
		f->base[i] = (uint8_t)(rnd() >> 56);
	memcpy(f->cur, f->base, n);
	for (size_t i = 0; i < n / 2; i++)
		if (rnd() % 100 < 2)
			f->cur[i] ^= (uint8_t)(1 + rnd() % 255);
	if (n > 4 * CHUNK)
		for (size_t i = 3 * CHUNK; i < 4 * CHUNK; i++)
			f->cur[i] = (uint8_t)(rnd() >> 56);
	if (n > 6 * CHUNK)
		for (size_t i = 5 * CHUNK; i < 6 * CHUNK; i += 4)
			f->cur[i] ^= 1;
	memcpy(f->enc_base, f->base, n);
}

static void encode(wsync_delta *d, struct fixture *f, size_t cap)
{
	uint8_t *frame = malloc(cap);
	int last = 0;

	f->stream = malloc(2 * f->n + 64 * 1024);
	f->frame_ends = calloc(f->n / CHUNK + 2, sizeof(size_t));
	f->stream_len = 0;
	f->n_frames = 0;
	assert_int_equal(wsync_delta_enc_begin(d, f->cur, f->enc_base, f->n, CHUNK, 1), 0);
	while (!last) {
		size_t len;

		assert_int_equal(wsync_delta_enc_read(d, frame, cap, WSYNC_DELTA_FOREVER, &len, &last), 0);
		memcpy(f->stream + f->stream_len, frame, len);
		f->stream_len += len;
		if (len)
			f->frame_ends[f->n_frames++] = f->stream_len;
	}
	assert_int_equal(wsync_delta_enc_end(d, &f->checksum, &f->st), 0);
	free(frame);
}

static int decode(wsync_delta *d, struct fixture *f, const uint8_t *stream, size_t len,
                  uint64_t checksum)
{
	uint64_t ticket;
	int rc;

	memset(f->out, 0xa5, f->n);
	assert_int_equal(wsync_delta_dec_begin(d, f->base, f->out, f->n, CHUNK), 0);
	/* Fed in the encoder's frames, as the relay does. */
	size_t start = 0;

	for (size_t i = 0; i < f->n_frames && start < len; i++) {
		size_t end = f->frame_ends[i] < len ? f->frame_ends[i] : len;

		rc = wsync_delta_dec_feed(d, stream + start, end - start, &ticket);
		assert_true(rc == 0 || rc == -EBADMSG);
		assert_int_equal(wsync_delta_dec_wait(d, ticket, WSYNC_DELTA_FOREVER), 0);
		start = end;
	}
	return wsync_delta_dec_end(d, checksum, WSYNC_DELTA_FOREVER);
}

/* Where the stream's last record starts (headers: data length at 12). */
static size_t last_record(const uint8_t *s, size_t len)
{
	size_t pos = 0, last = 0;

	while (pos < len) {
		uint32_t n = (uint32_t)s[pos + 12] | (uint32_t)s[pos + 13] << 8 |
		             (uint32_t)s[pos + 14] << 16 | (uint32_t)s[pos + 15] << 24;

		last = pos;
		pos += WSYNC_DELTA_REC_BYTES + n;
	}
	return last;
}

static void free_fixture(struct fixture *f)
{
	free(f->base);
	free(f->cur);
	free(f->enc_base);
	free(f->out);
	free(f->stream);
	free(f->frame_ends);
}

static void roundtrip_on(unsigned threads, size_t n, size_t cap)
{
	wsync_delta *d;
	struct fixture f;
	uint64_t sum;

	assert_int_equal(wsync_delta_new(threads, &d), 0);
	make_versions(&f, n);
	encode(d, &f, cap);
	assert_memory_equal(f.enc_base, f.cur, n);            /* the next base */
	assert_int_equal(wsync_delta_checksum(d, f.cur, n, CHUNK, &sum), 0);
	assert_true(sum == f.checksum);
	assert_int_equal(decode(d, &f, f.stream, f.stream_len, f.checksum), 0);
	assert_memory_equal(f.out, f.cur, n);
	assert_int_equal(f.st.chunks, (n + CHUNK - 1) / CHUNK);
	assert_int_equal(f.st.same + f.st.xzstd + f.st.xsparse + f.st.raw, f.st.chunks);
	assert_int_equal(f.st.bytes_out, f.stream_len);
	if (n > 4 * CHUNK) {
		assert_true(f.st.same > 0 && f.st.xzstd > 0 && f.st.raw > 0 && f.st.xsparse > 0);
		assert_true(f.stream_len < n / 2);
	}
	free_fixture(&f);
	wsync_delta_free(d);
}

static void test_roundtrip(void **state)
{
	(void)state;
	roundtrip_on(1, 40 * CHUNK, wsync_delta_frame_min(CHUNK));
	roundtrip_on(3, 40 * CHUNK + 777, 1u << 20);
	roundtrip_on(8, 40 * CHUNK + 1, 3 * CHUNK);
	roundtrip_on(2, 5000, wsync_delta_frame_min(CHUNK));     /* one short chunk */
	roundtrip_on(2, 0, wsync_delta_frame_min(CHUNK));        /* nothing at all */
}

static void test_damaged_streams_refused(void **state)
{
	wsync_delta *d;
	struct fixture f;
	uint8_t *bad;

	(void)state;
	assert_int_equal(wsync_delta_new(2, &d), 0);
	make_versions(&f, 20 * CHUNK + 100);
	encode(d, &f, 2 * CHUNK);
	bad = malloc(f.stream_len);
	/* One byte flipped, at 200 places spread over the stream. */
	size_t refused = 0;

	for (size_t k = 0; k < 200; k++) {
		size_t at = (size_t)(rnd() % f.stream_len);

		memcpy(bad, f.stream, f.stream_len);
		unsigned bit = (unsigned)(rnd() % 8);

		bad[at] ^= (uint8_t)(1u << bit);
		int rc = decode(d, &f, bad, f.stream_len, f.checksum);

		/* Refused, or a flip that changes nothing decoded (a bit zstd
		 * ignores): never a different version. */
		if (rc == 0 && memcmp(f.out, f.cur, f.n) != 0)
			fail_msg("a flip of bit %u at byte %zu of %zu gave another version", bit, at,
			         f.stream_len);
		assert_true(rc == 0 || rc == -EBADMSG);
		refused += rc == -EBADMSG;
	}
	assert_true(refused >= 190);
	/* Truncated: the last byte, or the whole last record, missing. */
	assert_int_equal(decode(d, &f, f.stream, f.stream_len - 1, f.checksum), -EBADMSG);
	assert_non_null(strstr(wsync_delta_errmsg(), "cut short"));
	assert_int_equal(decode(d, &f, f.stream, last_record(f.stream, f.stream_len), f.checksum),
	                 -EBADMSG);
	assert_non_null(strstr(wsync_delta_errmsg(), "truncated"));
	/* A whole checksum that is not the source's. */
	assert_int_equal(decode(d, &f, f.stream, f.stream_len, f.checksum ^ 1), -EBADMSG);
	assert_non_null(strstr(wsync_delta_errmsg(), "whole-version checksum"));
	/* A chunk sent twice (the first frame again). */
	{
		uint64_t ticket;

		assert_int_equal(wsync_delta_dec_begin(d, f.base, f.out, f.n, CHUNK), 0);
		assert_int_equal(wsync_delta_dec_feed(d, f.stream, f.frame_ends[0], &ticket), 0);
		assert_int_equal(wsync_delta_dec_feed(d, f.stream, f.frame_ends[0], &ticket),
		                 -EBADMSG);
		assert_non_null(strstr(wsync_delta_errmsg(), "twice"));
		/* Sticky: the rest is refused too, the end fails. */
		assert_int_equal(wsync_delta_dec_feed(d, f.stream + f.frame_ends[0],
		                                      f.stream_len - f.frame_ends[0], &ticket),
		                 -EBADMSG);
		assert_int_equal(wsync_delta_dec_wait(d, ticket, WSYNC_DELTA_FOREVER), 0);
		assert_int_equal(wsync_delta_dec_end(d, f.checksum, WSYNC_DELTA_FOREVER), -EBADMSG);
	}
	/* After all that, the good stream still decodes. */
	assert_int_equal(decode(d, &f, f.stream, f.stream_len, f.checksum), 0);
	assert_memory_equal(f.out, f.cur, f.n);
	free(bad);
	free_fixture(&f);
	wsync_delta_free(d);
}

static void test_misuse_answered(void **state)
{
	wsync_delta *d;
	uint8_t a[8 * CHUNK], b[8 * CHUNK], frame[CHUNK];
	size_t len;
	int last;
	uint64_t sum;

	(void)state;
	memset(a, 1, sizeof a);
	memset(b, 2, sizeof b);
	assert_int_equal(wsync_delta_new(2, &d), 0);
	assert_int_equal(wsync_delta_enc_begin(d, a, b, sizeof a, 1000, 1), -EINVAL);
	assert_int_equal(wsync_delta_enc_begin(d, a, b, sizeof a, CHUNK, 99), -EINVAL);
	assert_int_equal(wsync_delta_enc_begin(d, a, b, sizeof a, CHUNK, 1), 0);
	assert_int_equal(wsync_delta_enc_read(d, frame, sizeof frame, 0, &len, &last), -ENOSPC);
	assert_int_equal(wsync_delta_checksum(d, a, sizeof a, CHUNK, &sum), -EBUSY);
	assert_int_equal(wsync_delta_dec_begin(d, a, b, sizeof a, CHUNK), -EBUSY);
	/* Ended before every record was read: refused, the codec free again. */
	assert_int_equal(wsync_delta_enc_end(d, &sum, NULL), -ECANCELED);
	assert_int_equal(wsync_delta_checksum(d, a, sizeof a, CHUNK, &sum), 0);
	assert_int_equal(wsync_delta_enc_end(d, &sum, NULL), -EINVAL);
	assert_int_equal(wsync_delta_dec_end(d, 0, 0), -EINVAL);
	wsync_delta_free(d);
	/* Freed in the middle of an operation: no leak, no hang. */
	assert_int_equal(wsync_delta_new(3, &d), 0);
	assert_int_equal(wsync_delta_enc_begin(d, a, b, sizeof a, 4096, 1), 0);
	wsync_delta_free(d);
}

static void test_hash_copies(void **state)
{
	wsync_delta *d;
	size_t n = 10 * CHUNK + 3;
	uint8_t *src = malloc(n), *dst = calloc(1, n);
	uint64_t a, b;

	(void)state;
	for (size_t i = 0; i < n; i++)
		src[i] = (uint8_t)rnd();
	assert_int_equal(wsync_delta_new(0, &d), 0);
	assert_true(wsync_delta_threads(d) >= 1);
	assert_int_equal(wsync_delta_hash_start(d, src, n, CHUNK, dst), 0);
	assert_int_equal(wsync_delta_hash_wait(d, WSYNC_DELTA_FOREVER, &a), 0);
	assert_memory_equal(src, dst, n);
	assert_int_equal(wsync_delta_checksum(d, dst, n, CHUNK, &b), 0);
	assert_true(a == b);
	dst[n - 1] ^= 1;
	assert_int_equal(wsync_delta_checksum(d, dst, n, CHUNK, &b), 0);
	assert_true(a != b);
	/* The checksum depends on the chunk size (both ends use the header's). */
	assert_int_equal(wsync_delta_checksum(d, src, n, 2 * CHUNK, &b), 0);
	assert_true(a != b);
	assert_int_equal(wsync_delta_chunk_for(1u << 30, 2), 256u << 10);
	assert_int_equal(wsync_delta_chunk_for(1000, 2), 16u << 10);
	wsync_delta_free(d);
	free(src);
	free(dst);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_damaged_streams_refused),
		cmocka_unit_test(test_misuse_answered),
		cmocka_unit_test(test_hash_copies),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
