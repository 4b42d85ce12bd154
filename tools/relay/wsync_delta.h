/*
 * tools/relay/wsync_delta.h — libwsync-delta, the codec of wsync-relay.
 *
 * A version of a model travels between nodes either whole or as a delta
 * against a base version both ends hold: the bytes [0, n) are cut into
 * chunks; a chunk equal to the base's is a SAME record; else, when at most
 * a quarter of its 16-bit words changed, a bitmap of the changed words and
 * their XOR with the base's, compressed by zstd (XSPARSE); else the XOR of
 * the whole chunk compressed by zstd (XZSTD); else (when neither makes it
 * smaller) the new bytes as they are (RAW). Every record carries
 * the XXH3-64 of its chunk's new bytes; the whole version's checksum is the
 * XXH3-64 (seed: the chunk count) of those chunk hashes in order, the same
 * function for a full version (wsync_delta_checksum). A destination
 * publishes a version only when that checksum matches the source's.
 *
 * All the work runs on a pool of threads (one per CPU the process may run
 * on, by default) owned by a wsync_delta; the caller drives: the encoder
 * hands out records in chunk order as soon as they are ready, so the
 * sending starts while later chunks are still being encoded, and holds at
 * most a window of 64 encoded chunks (memory does not grow with the
 * model); the decoder takes frames of records as they arrive and decodes
 * them while the next frame is received. One operation at a time per
 * wsync_delta.
 *
 * This is the relay's own library, not part of libwsync: it links libzstd,
 * which trainers and collectors have no use for (docs/MULTINODE.md).
 * Functions return 0 or a negative errno; wsync_delta_errmsg() says more.
 */
#ifndef WSYNC_DELTA_H
#define WSYNC_DELTA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

typedef struct wsync_delta wsync_delta;

/* Bytes of one record's header in a stream (the chunk's data follows). */
#define WSYNC_DELTA_REC_BYTES   24u
#define WSYNC_DELTA_CHUNK_MIN   4096u
#define WSYNC_DELTA_CHUNK_MAX   (16u << 20)
#define WSYNC_DELTA_FOREVER     (-1)

/* Record kinds on the wire. */
enum wsync_delta_kind {
	WSYNC_DELTA_SAME  = 0,   /* the chunk equals the base's; no data */
	WSYNC_DELTA_XZSTD = 1,   /* zstd frame of (new XOR base) */
	WSYNC_DELTA_RAW   = 2,   /* the new bytes, chunk-long */
	WSYNC_DELTA_XSPARSE = 3, /* zstd frame of: a bitmap of the changed 16-bit
	                            words (bit i of byte i/8, LSB first), their
	                            XORs in order, the XOR of an odd last byte */
};

/* What an encode did (wsync_delta_enc_end). */
typedef struct wsync_delta_stats {
	uint64_t chunks;         /* records */
	uint64_t same;           /* SAME records */
	uint64_t xzstd;          /* XZSTD records */
	uint64_t raw;            /* RAW records */
	uint64_t bytes_in;       /* n */
	uint64_t bytes_out;      /* record headers and data */
	uint64_t busy_ns;        /* the workers' CPU time, summed */
	uint64_t xsparse;        /* XSPARSE records */
	uint64_t reserved[2];
} wsync_delta_stats;

/* threads 0: one per CPU this process may run on ($WSYNC_DELTA_THREADS
 * overrides). */
int  wsync_delta_new(unsigned threads, wsync_delta **out);
void wsync_delta_free(wsync_delta *d);
unsigned wsync_delta_threads(const wsync_delta *d);
const char *wsync_delta_errmsg(void);
const char *wsync_delta_version(void);

/* A chunk size for n bytes: enough chunks to keep every thread busy with a
 * window to spare, each between 16 KiB and 256 KiB (a multiple of 4 KiB). */
size_t wsync_delta_chunk_for(size_t n, unsigned threads);
/* The smallest frame capacity wsync_delta_enc_read accepts for chunk: one
 * record of the largest kind. */
size_t wsync_delta_frame_min(size_t chunk);

/* The whole-version checksum of buf[0, n), all threads. With dst, also
 * copies buf into dst (one pass). _start returns at once; _wait gives the
 * checksum. */
int wsync_delta_hash_start(wsync_delta *d, const void *buf, size_t n, size_t chunk, void *dst);
int wsync_delta_hash_wait(wsync_delta *d, int64_t timeout_ns, uint64_t *checksum);
int wsync_delta_checksum(wsync_delta *d, const void *buf, size_t n, size_t chunk,
                         uint64_t *checksum);

/* Encoder. cur: the new version; base: the base version, which becomes a
 * copy of cur as its chunks are encoded (so it is the next base). level:
 * zstd's (0: 1). */
int wsync_delta_enc_begin(wsync_delta *d, const void *cur, void *base, size_t n, size_t chunk,
                          int level);
/* Copies the next records, in chunk order, into out: waits (up to timeout)
 * for the first, then takes as many as are ready and fit. *last is 1 when
 * the final record has been handed out. -ETIMEDOUT with *len 0 when none
 * was ready in time; -ENOSPC when cap < wsync_delta_frame_min(chunk). */
int wsync_delta_enc_read(wsync_delta *d, void *out, size_t cap, int64_t timeout_ns,
                         size_t *len, int *last);
/* Ends the encode (cancels what is left if not every record was read:
 * base is then partly updated); with every record read, gives the whole
 * checksum of cur and the stats (either may be NULL). */
int wsync_delta_enc_end(wsync_delta *d, uint64_t *checksum, wsync_delta_stats *stats);

/* Decoder: rebuilds out[0, n) from base[0, n) and the records fed. */
int wsync_delta_dec_begin(wsync_delta *d, const void *base, void *out, size_t n, size_t chunk);
/* Checks the frame's record headers and queues their decoding; the frame's
 * memory must stay unchanged until wsync_delta_dec_wait(*ticket) returns.
 * A bad record fails the decode (-EBADMSG, here or at the end); every
 * later feed is then refused with the same error, but *ticket stays valid. */
int wsync_delta_dec_feed(wsync_delta *d, const void *frame, size_t len, uint64_t *ticket);
int wsync_delta_dec_wait(wsync_delta *d, uint64_t ticket, int64_t timeout_ns);
/* Waits for every fed record; 0 only if every chunk came exactly once,
 * decoded to its hash, and the whole checksum equals checksum; else
 * -EBADMSG (what failed in wsync_delta_errmsg()). Always ends the decode. */
int wsync_delta_dec_end(wsync_delta *d, uint64_t checksum, int64_t timeout_ns);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
