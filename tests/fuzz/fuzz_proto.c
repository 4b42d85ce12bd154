/*
 * fuzz_proto — the message decoder, wsync_msg_validate, on arbitrary bytes.
 *
 * Each input is checked twice: as a raw datagram (exactly its size, in a
 * buffer of exactly that size, so ASan sees any read past the datagram),
 * and with a repaired header (magic, version, a type chosen by the first
 * byte, len = that type's size) so the field checks of every type are
 * reached. A message that passes must be internally consistent: its length
 * is its type's size and its names are NUL-terminated and valid.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shm/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_valid(const union wsync_msg_any *m, size_t len)
{
	if (m->hdr.len != len || wsync_msg_size(m->hdr.type) != len)
		abort();
	switch (m->hdr.type) {
	case WSYNC_MSG_HELLO:
		if (!wsync_name_valid(m->hello.name, sizeof(m->hello.name)))
			abort();
		break;
	case WSYNC_MSG_PUB_OPEN:
		if (!memchr(m->pub_open.model, 0, sizeof(m->pub_open.model)) ||
		    m->pub_open.n_tensors == 0 || m->pub_open.slots > WSYNC_MAX_SLOTS)
			abort();
		break;
	case WSYNC_MSG_SUB_OPEN:
		if (!memchr(m->sub_open.model, 0, sizeof(m->sub_open.model)))
			abort();
		break;
	case WSYNC_MSG_BEGIN:
		if (m->begin.m.model_id >= WSYNC_MAX_MODELS)
			abort();
		break;
	case WSYNC_MSG_COMMIT:
		if (m->commit.m.model_id >= WSYNC_MAX_MODELS || m->commit.slot >= WSYNC_MAX_SLOTS)
			abort();
		break;
	case WSYNC_MSG_ABORT:
		if (m->abort.m.model_id >= WSYNC_MAX_MODELS || m->abort.slot >= WSYNC_MAX_SLOTS)
			abort();
		break;
	default:
		break;
	}
}

static void one(const uint8_t *data, size_t size)
{
	char why[WSYNC_ERRMSG_MAX];
	void *buf = malloc(size ? size : 1);

	if (!buf)
		return;
	memcpy(buf, data, size);
	if (wsync_msg_validate(buf, size, why, sizeof(why)) == 0) {
		union wsync_msg_any m;

		if (size > sizeof(m))
			abort();
		memcpy(&m, buf, size);
		check_valid(&m, size);
	} else if (!memchr(why, 0, sizeof(why))) {
		abort();
	}
	(void)wsync_msg_validate(buf, size, NULL, 0);
	(void)wsync_msg_validate(buf, size, why, 1);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	one(data, size);

	if (size >= 1) {
		uint32_t type = data[0] % (WSYNC_MSG_TYPE_END + 1);
		size_t len = wsync_msg_size(type);
		union wsync_msg_any m;

		(void)wsync_msg_name(type);
		if (len) {
			memset(&m, 0, sizeof(m));
			memcpy(&m, data + 1, size - 1 < len ? size - 1 : len);
			wsync_msg_init(&m.hdr, type, (uint32_t)size);
			if (size >= 3 && data[1] == 0xff)   /* a length that disagrees */
				m.hdr.len = data[2];
			one((const uint8_t *)&m, len);
		}
	}
	return 0;
}
