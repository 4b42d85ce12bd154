/*
 * libclient/xxh3_copy.c — XXH3-64 fused with a copy (see xxh3_copy.h).
 *
 * Why a copy of our own: hashing a slab after copying it reads it a second
 * time, from memory; hashing each piece right after copying it still runs
 * the hash's loop after the copy's, on a core that waits for memory in
 * between. Here one loop loads a stripe, stores it, and folds it into the
 * accumulators, so the arithmetic runs while the core waits for the next
 * lines anyway.
 *
 * What makes it exactly XXH3_64bits (xxhash 0.8, the "long input" path,
 * seed 0, the 192-byte default secret that xxhash.h provides): eight 64-bit
 * accumulators; stripe i of the input is accumulated with the secret at
 * offset 8 * (i mod 16), and after every 16th stripe the accumulators are
 * scrambled with the secret at offset 128. The stripes fed are the
 * (len - 1) / 64 whole ones before the last; the last 64 bytes of the
 * input (which may overlap the previous stripe) are accumulated with the
 * secret at offset 121, then the accumulators are merged (secret at 11,
 * started from len * PRIME64_1) and avalanched. Scrambling after every 16th
 * stripe fed is the same as after every full 1024-byte block: the stripes
 * fed never complete a 16th past the last full block, since fewer than 16
 * remain after it.
 */
#include "xxh3_copy.h"

#include <stdatomic.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define SECRET_SIZE     XXH_SECRET_DEFAULT_SIZE      /* 192 */
#define STRIPES_PER_ROUND 16
#define SCRAMBLE_AT     (SECRET_SIZE - XXH3_STRIPE)  /* 128 */
#define LAST_AT         (SECRET_SIZE - XXH3_STRIPE - 7)
#define MERGE_AT        11

static_assert(SECRET_SIZE == 192, "XXH3's default secret is 192 bytes");
static_assert((SECRET_SIZE - XXH3_STRIPE) / 8 == STRIPES_PER_ROUND, "16 stripes a round");

enum { IMPL_AUTO, IMPL_C, IMPL_SSE2, IMPL_AVX2 };

static _Atomic int impl_in_use;          /* 0 until chosen */

static inline uint64_t rd64(const void *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}

/* ---- portable C --------------------------------------------------------- */

static inline void acc_c(uint64_t *acc, const uint8_t *in, const uint8_t *sec)
{
	for (int i = 0; i < 8; i++) {
		uint64_t dv = rd64(in + 8 * i), dk = dv ^ rd64(sec + 8 * i);

		acc[i ^ 1] += dv;
		acc[i] += (uint64_t)(uint32_t)dk * (dk >> 32);
	}
}

static inline void scramble_c(uint64_t *acc, const uint8_t *sec)
{
	for (int i = 0; i < 8; i++) {
		uint64_t a = acc[i];

		a ^= a >> 47;
		a ^= rd64(sec + 8 * i);
		acc[i] = a * XXH_PRIME32_1;
	}
}

static void run_c(struct xxh3_run *r, uint8_t *dst, const uint8_t *src, size_t n,
                  enum xxh3_store store)
{
	for (size_t s = 0; s < n; s++, src += XXH3_STRIPE) {
		acc_c(r->acc, src, XXH3_kSecret + 8 * (r->stripes % STRIPES_PER_ROUND));
		if (store != XXH3_HASH_ONLY) {
			memcpy(dst, src, XXH3_STRIPE);
			dst += XXH3_STRIPE;
		}
		if (++r->stripes % STRIPES_PER_ROUND == 0)
			scramble_c(r->acc, XXH3_kSecret + SCRAMBLE_AT);
	}
}

/* ---- x86-64: SSE2 (always there) and AVX2 --------------------------------- */

#if defined(__x86_64__)
/* One stripe into four 128-bit accumulators, stored as store says. */
static inline __attribute__((always_inline))
void stripe_sse2(__m128i *acc, uint8_t *dst, const uint8_t *src, const uint8_t *sec,
                 enum xxh3_store store)
{
	for (int j = 0; j < 4; j++) {
		__m128i d = _mm_loadu_si128((const __m128i *)(src + 16 * j));
		__m128i k = _mm_xor_si128(d, _mm_loadu_si128((const __m128i *)(sec + 16 * j)));
		__m128i prod = _mm_mul_epu32(k, _mm_srli_epi64(k, 32));

		acc[j] = _mm_add_epi64(acc[j], _mm_shuffle_epi32(d, _MM_SHUFFLE(1, 0, 3, 2)));
		acc[j] = _mm_add_epi64(acc[j], prod);
		if (store == XXH3_STREAM)
			_mm_stream_si128((__m128i *)(dst + 16 * j), d);
		else if (store == XXH3_STORE)
			_mm_storeu_si128((__m128i *)(dst + 16 * j), d);
	}
}

static inline __attribute__((always_inline))
void scramble_sse2(__m128i *acc)
{
	const __m128i prime = _mm_set1_epi32((int)XXH_PRIME32_1);

	for (int j = 0; j < 4; j++) {
		__m128i a = acc[j];

		a = _mm_xor_si128(a, _mm_srli_epi64(a, 47));
		a = _mm_xor_si128(a, _mm_loadu_si128((const __m128i *)
		                                    (XXH3_kSecret + SCRAMBLE_AT + 16 * j)));
		acc[j] = _mm_add_epi64(_mm_mul_epu32(a, prime),
		                       _mm_slli_epi64(_mm_mul_epu32(_mm_srli_epi64(a, 32), prime),
		                                      32));
	}
}

static inline __attribute__((always_inline))
void run_sse2_as(struct xxh3_run *r, uint8_t *dst, const uint8_t *src, size_t n,
                 enum xxh3_store store)
{
	uint64_t done = r->stripes;
	__m128i acc[4];

	for (int j = 0; j < 4; j++)
		acc[j] = _mm_loadu_si128((const __m128i *)&r->acc[2 * j]);
	while (n) {
		size_t at = done % STRIPES_PER_ROUND, m = STRIPES_PER_ROUND - at;
		const uint8_t *sec = XXH3_kSecret + 8 * at;

		if (m > n)
			m = n;
		for (size_t s = 0; s < m; s++, src += XXH3_STRIPE, dst += XXH3_STRIPE, sec += 8)
			stripe_sse2(acc, dst, src, sec, store);
		done += m;
		n -= m;
		if (done % STRIPES_PER_ROUND == 0)
			scramble_sse2(acc);
	}
	for (int j = 0; j < 4; j++)
		_mm_storeu_si128((__m128i *)&r->acc[2 * j], acc[j]);
	r->stripes = done;
}

static void run_sse2(struct xxh3_run *r, uint8_t *dst, const uint8_t *src, size_t n,
                     enum xxh3_store store)
{
	if (store == XXH3_STREAM)
		run_sse2_as(r, dst, src, n, XXH3_STREAM);
	else if (store == XXH3_STORE)
		run_sse2_as(r, dst, src, n, XXH3_STORE);
	else
		run_sse2_as(r, dst, src, n, XXH3_HASH_ONLY);
}

#define AVX2 __attribute__((target("avx2")))

static inline __attribute__((always_inline)) AVX2
void stripe_avx2(__m256i *acc, uint8_t *dst, const uint8_t *src, const uint8_t *sec,
                 enum xxh3_store store)
{
	for (int j = 0; j < 2; j++) {
		__m256i d = _mm256_loadu_si256((const __m256i *)(src + 32 * j));
		__m256i k = _mm256_xor_si256(d, _mm256_loadu_si256((const __m256i *)(sec + 32 * j)));
		__m256i prod = _mm256_mul_epu32(k, _mm256_srli_epi64(k, 32));

		acc[j] = _mm256_add_epi64(acc[j], _mm256_shuffle_epi32(d, _MM_SHUFFLE(1, 0, 3, 2)));
		acc[j] = _mm256_add_epi64(acc[j], prod);
		if (store == XXH3_STREAM)
			_mm256_stream_si256((__m256i *)(dst + 32 * j), d);
		else if (store == XXH3_STORE)
			_mm256_storeu_si256((__m256i *)(dst + 32 * j), d);
	}
}

static inline __attribute__((always_inline)) AVX2
void scramble_avx2(__m256i *acc)
{
	const __m256i prime = _mm256_set1_epi32((int)XXH_PRIME32_1);

	for (int j = 0; j < 2; j++) {
		__m256i a = acc[j];

		a = _mm256_xor_si256(a, _mm256_srli_epi64(a, 47));
		a = _mm256_xor_si256(a, _mm256_loadu_si256((const __m256i *)
		                                           (XXH3_kSecret + SCRAMBLE_AT + 32 * j)));
		acc[j] = _mm256_add_epi64(_mm256_mul_epu32(a, prime),
		                          _mm256_slli_epi64(_mm256_mul_epu32(
		                                  _mm256_srli_epi64(a, 32), prime), 32));
	}
}

static inline __attribute__((always_inline)) AVX2
void run_avx2_as(struct xxh3_run *r, uint8_t *dst, const uint8_t *src, size_t n,
                 enum xxh3_store store)
{
	uint64_t done = r->stripes;
	__m256i acc[2];

	for (int j = 0; j < 2; j++)
		acc[j] = _mm256_loadu_si256((const __m256i *)&r->acc[4 * j]);
	while (n) {
		size_t at = done % STRIPES_PER_ROUND, m = STRIPES_PER_ROUND - at;
		const uint8_t *sec = XXH3_kSecret + 8 * at;

		if (m > n)
			m = n;
		for (size_t s = 0; s < m; s++, src += XXH3_STRIPE, dst += XXH3_STRIPE, sec += 8)
			stripe_avx2(acc, dst, src, sec, store);
		done += m;
		n -= m;
		if (done % STRIPES_PER_ROUND == 0)
			scramble_avx2(acc);
	}
	for (int j = 0; j < 2; j++)
		_mm256_storeu_si256((__m256i *)&r->acc[4 * j], acc[j]);
	r->stripes = done;
}

AVX2 static void run_avx2(struct xxh3_run *r, uint8_t *dst, const uint8_t *src, size_t n,
                          enum xxh3_store store)
{
	if (store == XXH3_STREAM)
		run_avx2_as(r, dst, src, n, XXH3_STREAM);
	else if (store == XXH3_STORE)
		run_avx2_as(r, dst, src, n, XXH3_STORE);
	else
		run_avx2_as(r, dst, src, n, XXH3_HASH_ONLY);
}

#endif

int xxh3_copy_impl(int force)
{
	int best = IMPL_C;

#if defined(__x86_64__)
	best = __builtin_cpu_supports("avx2") ? IMPL_AVX2 : IMPL_SSE2;
	if (force == IMPL_AVX2 && best != IMPL_AVX2)
		return -1;
#else
	if (force > IMPL_C)
		return -1;
#endif
	atomic_store_explicit(&impl_in_use, force ? force : best, memory_order_relaxed);
	return force ? force : best;
}

void xxh3_run_init(struct xxh3_run *r, uint64_t len)
{
	static const uint64_t init[8] = {
		XXH_PRIME32_3, XXH_PRIME64_1, XXH_PRIME64_2, XXH_PRIME64_3,
		XXH_PRIME64_4, XXH_PRIME32_2, XXH_PRIME64_5, XXH_PRIME32_1,
	};

	memcpy(r->acc, init, sizeof(init));
	r->len = len;
	r->stripes = 0;
}

void xxh3_run_copy(struct xxh3_run *r, void *dst, const void *src, size_t n,
                   enum xxh3_store store)
{
	int impl = atomic_load_explicit(&impl_in_use, memory_order_relaxed);

	if (!impl)
		impl = xxh3_copy_impl(IMPL_AUTO);
	switch (impl) {
#if defined(__x86_64__)
	case IMPL_AVX2:
		run_avx2(r, dst, src, n, store);
		return;
	case IMPL_SSE2:
		run_sse2(r, dst, src, n, store);
		return;
#endif
	default:
		run_c(r, dst, src, n, store);
		return;
	}
}

uint64_t xxh3_hash(const void *p, size_t len)
{
#if defined(__x86_64__)
	struct xxh3_run r;

	if (len < XXH3_RUN_MIN)
		return XXH3_64bits(p, len);
	xxh3_run_init(&r, len);
	/* hash only: dst is never written */
	xxh3_run_copy(&r, (void *)(uintptr_t)p, p, (size_t)xxh3_run_stripes(len), XXH3_HASH_ONLY);
	return xxh3_run_final(&r, (const uint8_t *)p + len - XXH3_STRIPE);
#else
	/* no vector code here: libxxhash's own (NEON on arm64) is faster */
	return XXH3_64bits(p, len);
#endif
}

static uint64_t mul128_fold64(uint64_t a, uint64_t b)
{
	unsigned __int128 p = (unsigned __int128)a * b;

	return (uint64_t)p ^ (uint64_t)(p >> 64);
}

uint64_t xxh3_run_final(const struct xxh3_run *r, const void *last)
{
	const uint8_t *sec = XXH3_kSecret + MERGE_AT;
	uint64_t acc[8], h = r->len * XXH_PRIME64_1;

	memcpy(acc, r->acc, sizeof(acc));
	acc_c(acc, last, XXH3_kSecret + LAST_AT);
	for (int i = 0; i < 4; i++)
		h += mul128_fold64(acc[2 * i] ^ rd64(sec + 16 * i),
		                   acc[2 * i + 1] ^ rd64(sec + 16 * i + 8));
	h ^= h >> 37;
	h *= 0x165667919E3779F9ULL;
	h ^= h >> 32;
	return h;
}
