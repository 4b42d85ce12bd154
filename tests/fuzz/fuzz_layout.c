/*
 * fuzz_layout — tensor-descriptor validation and canonical placement:
 * wsync_layout_compute, wsync_layout_hash, wsync_layout_diff and the name
 * index, on descriptors taken from the input.
 *
 * The first byte chooses how: bit 0 repairs each descriptor halfway (a
 * terminated printable name, a dtype and ndim in range, small shapes) so the
 * success path is reached often; otherwise the bytes are used as they are.
 * A layout that is accepted must be canonical: offsets aligned to
 * WSYNC_ALIGN, in order, not overlapping, inside a page-multiple slab;
 * computing it again gives the same bytes and hash; every name is found at
 * its own index.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shm/layout.h"
#include "shm/tensor_layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_N 48

static void repair(wsync_tensor_desc *d, size_t i)
{
	size_t nl = (uint8_t)d->name[0] % 24 + 1;

	for (size_t k = 0; k < nl; k++)
		d->name[k] = (char)(0x21 + (uint8_t)d->name[k] % 94);
	if (i % 2 == 0)    /* sometimes a unique suffix, sometimes clashes */
		d->name[0] = (char)('A' + i % 26);
	d->name[nl] = 0;
	d->dtype = d->dtype % (WSYNC_F8_E5M2 + 2);   /* every dtype, 0 and one past */
	d->ndim = d->ndim % 10;
	for (uint32_t k = 0; k < WSYNC_MAX_DIMS; k++) {
		if (k >= d->ndim)
			d->shape[k] = (d->shape[k] & 0x100) ? d->shape[k] : 0;
		else if (!(d->shape[k] & (1ull << 63)))
			d->shape[k] %= 300;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	wsync_tensor_desc *in, *out, *again;
	struct wsync_name_index ix;
	uint64_t bytes = 0, bytes2 = 0, end = 0;
	char why[256];
	size_t n;
	int mode;

	if (size < 1)
		return 0;
	mode = data[0];
	data++, size--;
	n = size / sizeof(wsync_tensor_desc);
	if (n > MAX_N)
		n = MAX_N;
	in = calloc(n + 1, sizeof(*in));
	out = calloc(n + 1, sizeof(*out));
	again = calloc(n + 1, sizeof(*again));
	if (!in || !out || !again)
		goto out;
	memcpy(in, data, n * sizeof(*in));
	if (mode & 1)
		for (size_t i = 0; i < n; i++)
			repair(&in[i], i);

	if (wsync_layout_compute(in, n, out, &bytes, why, sizeof(why)) != 0) {
		if (!memchr(why, 0, sizeof(why)))
			abort();
		goto out;
	}
	if (n == 0 || bytes == 0 || bytes % WSYNC_PAGE)
		abort();
	for (size_t i = 0; i < n; i++) {
		uint64_t sz = wsync_tensor_bytes(&out[i]);

		if (out[i].offset % WSYNC_ALIGN || out[i].offset < end ||
		    out[i].offset + sz > bytes)
			abort();
		end = out[i].offset + sz;
		if (strcmp(out[i].name, in[i].name) || out[i].dtype != in[i].dtype ||
		    out[i].ndim != in[i].ndim || memcmp(out[i].shape, in[i].shape, sizeof(in[i].shape)))
			abort();
	}
	/* canonical: a second pass over the output is the identity */
	if (wsync_layout_compute(out, n, again, &bytes2, why, sizeof(why)) != 0 ||
	    bytes2 != bytes || memcmp(again, out, n * sizeof(*out)) ||
	    wsync_layout_hash(again, n) != wsync_layout_hash(out, n))
		abort();
	if (wsync_layout_diff(out, n, again, n, why, sizeof(why)) != 0)
		abort();
	if (n > 1 && wsync_layout_diff(out, n, out, n - 1, why, sizeof(why)) == 0)
		abort();
	if (wsync_name_index_build(&ix, out, n) == 0) {
		for (size_t i = 0; i < n; i++)
			if (wsync_name_index_find(&ix, out, out[i].name) != (long)i)
				abort();
		(void)wsync_name_index_find(&ix, out, "no such tensor \x7f");
		wsync_name_index_free(&ix);
	}
out:
	free(in);
	free(out);
	free(again);
	return 0;
}
