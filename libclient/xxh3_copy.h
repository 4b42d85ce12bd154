/*
 * libclient/xxh3_copy.h — XXH3-64 of a buffer computed while the buffer is
 * copied: each 64-byte stripe is loaded once, fed to the hash's
 * accumulators and stored to the destination from the same registers.
 *
 * The result is exactly XXH3_64bits() (seed 0, default secret) of the bytes
 * fed, for any input longer than XXH3's mid-size limit (240 bytes); the
 * caller feeds the (len - 1) / 64 whole stripes that precede the last
 * stripe, in order, then gives the last 64 bytes to xxh3_run_final. Shorter
 * inputs are hashed with libxxhash directly. tests/unit/test_checksum.c
 * checks every variant against libxxhash.
 */
#ifndef WSYNC_XXH3_COPY_H
#define WSYNC_XXH3_COPY_H

#include <stddef.h>
#include <stdint.h>

#define XXH3_RUN_MIN 241        /* shorter inputs: XXH3_64bits itself */
#define XXH3_STRIPE  64

/* What happens to each stripe besides hashing it. */
enum xxh3_store {
	XXH3_HASH_ONLY,         /* dst is not written (but must be a valid
	                           pointer, as for the others) */
	XXH3_STORE,             /* ordinary stores */
	XXH3_STREAM,            /* streaming (non-temporal) stores; dst 64-byte
	                           aligned; the caller fences before publishing */
};

struct xxh3_run {
	uint64_t acc[8];
	uint64_t len;           /* of the whole input */
	uint64_t stripes;       /* whole stripes fed so far */
};

/* Starts the hash of an input of len >= XXH3_RUN_MIN bytes. */
void xxh3_run_init(struct xxh3_run *r, uint64_t len);
/* The number of whole stripes to feed before xxh3_run_final. */
static inline uint64_t xxh3_run_stripes(uint64_t len)
{
	return (len - 1) / XXH3_STRIPE;
}
/* Feeds n whole stripes from src (any alignment) and stores them to dst as
 * store says. The caller never feeds more than xxh3_run_stripes(len). */
void xxh3_run_copy(struct xxh3_run *r, void *dst, const void *src, size_t n,
                   enum xxh3_store store);
/* The hash, given the input's last 64 bytes (bytes len - 64 .. len - 1). */
uint64_t xxh3_run_final(const struct xxh3_run *r, const void *last);

/* XXH3_64bits(p, len) (seed 0) on the vector code below on x86-64: there
 * libxxhash's exported XXH3_64bits is its SSE2 build, a third of the speed
 * of this loop's AVX2 and slower than one core reads memory, which left a
 * hash pass at commit bound by arithmetic rather than by memory. */
uint64_t xxh3_hash(const void *p, size_t len);

/* Which vector code xxh3_run_copy uses: the best the CPU has, unless a test
 * forces one (0 = automatic, 1 = portable C, 2 = SSE2, 3 = AVX2); returns
 * the one in use, or -1 if the CPU lacks the one asked for. */
int xxh3_copy_impl(int force);

#endif /* WSYNC_XXH3_COPY_H */
