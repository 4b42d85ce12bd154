/*
 * tools/ctl/safetensors.h — the safetensors file format, in and out.
 *
 * A file is: an 8-byte little-endian header length N, N bytes of JSON
 *   {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * then the data; offsets are relative to the first byte after the header.
 * The parser accepts a file only if it is exactly that: the header within
 * the file and at most ST_HEADER_MAX bytes, valid JSON with no duplicate
 * names, each entry an object with a dtype wsync has (F64 F32 F16 BF16 I64
 * I32 I16 I8 U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2), a shape of at most WSYNC_MAX_DIMS sizes whose product
 * matches its byte range, ranges that tile the data from 0 to its end in
 * order with no gap or overlap, and string-valued metadata.
 */
#ifndef WSYNC_TOOLS_CTL_SAFETENSORS_H
#define WSYNC_TOOLS_CTL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "shm/layout.h"
#include "wsync.h"

#define ST_HEADER_MAX (100u * 1024 * 1024)

struct st_tensor {
	wsync_tensor_desc desc;          /* name, dtype, ndim, shape (offset unused) */
	uint64_t begin, end;             /* in the data section */
};

struct st_meta {
	char *key, *value;
};

struct st_file {
	size_t n_tensors;                /* in data order */
	struct st_tensor *tensors;
	size_t n_meta;
	struct st_meta *meta;
	const uint8_t *data;             /* points into the parsed buffer */
	uint64_t data_len;
};

/* Parses a whole file held in buf. 0, or -EINVAL (-ENOMEM) with the reason
 * in why; *out is filled only on success (free it with st_free). */
int st_parse(const uint8_t *buf, size_t len, struct st_file *out, char *why, size_t whylen);
void st_free(struct st_file *f);
/* A metadata value, or NULL. */
const char *st_meta_get(const struct st_file *f, const char *key);

/* Builds the header (the 8-byte length, then the JSON padded with spaces to
 * a multiple of 8 bytes) for tensors laid out back to back in the given
 * order, with metadata pairs meta[0..n_meta). 0 or -errno (-EINVAL for a
 * dtype safetensors lacks, or a tensor named __metadata__). *out is malloc'd. */
int st_header_build(const wsync_tensor_desc *t, size_t n, const struct st_meta *meta,
                    size_t n_meta, char **out, size_t *out_len);

/* "F32" for WSYNC_F32, ..., NULL if none; and back (0 if unknown). */
const char *st_dtype_name(uint32_t dtype);
uint32_t st_dtype_from_name(const char *name);

#endif
