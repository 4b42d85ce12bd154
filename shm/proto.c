/*
 * shm/proto.c — sizes, names and static validation of protocol messages.
 *
 * Validation here is everything that can be judged from one message alone;
 * whether the sender may send it now is the broker's (or client's) business.
 */
#include "proto.h"

#include "errmsg.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const struct {
	const char *name;
	uint32_t size;
} msg_types[WSYNC_MSG_TYPE_END] = {
	[WSYNC_MSG_HELLO]       = { "HELLO", sizeof(struct wsync_msg_hello) },
	[WSYNC_MSG_HELLO_OK]    = { "HELLO_OK", sizeof(struct wsync_msg_hello_ok) },
	[WSYNC_MSG_PUB_OPEN]    = { "PUB_OPEN", sizeof(struct wsync_msg_pub_open) },
	[WSYNC_MSG_PUB_OPEN_OK] = { "PUB_OPEN_OK", sizeof(struct wsync_msg_pub_open_ok) },
	[WSYNC_MSG_SUB_OPEN]    = { "SUB_OPEN", sizeof(struct wsync_msg_sub_open) },
	[WSYNC_MSG_SUB_OPEN_OK] = { "SUB_OPEN_OK", sizeof(struct wsync_msg_sub_open_ok) },
	[WSYNC_MSG_ATTACH]      = { "ATTACH", sizeof(struct wsync_msg_attach) },
	[WSYNC_MSG_ATTACH_OK]   = { "ATTACH_OK", sizeof(struct wsync_msg_attach_ok) },
	[WSYNC_MSG_BEGIN]       = { "BEGIN", sizeof(struct wsync_msg_begin) },
	[WSYNC_MSG_GRANT]       = { "GRANT", sizeof(struct wsync_msg_grant) },
	[WSYNC_MSG_COMMIT]      = { "COMMIT", sizeof(struct wsync_msg_commit) },
	[WSYNC_MSG_COMMIT_OK]   = { "COMMIT_OK", sizeof(struct wsync_msg_commit_ok) },
	[WSYNC_MSG_ABORT]       = { "ABORT", sizeof(struct wsync_msg_abort) },
	[WSYNC_MSG_ABORT_OK]    = { "ABORT_OK", sizeof(struct wsync_msg_abort_ok) },
	[WSYNC_MSG_NOTIFY]      = { "NOTIFY", sizeof(struct wsync_msg_notify) },
	[WSYNC_MSG_NOTIFY_OK]   = { "NOTIFY_OK", sizeof(struct wsync_msg_notify_ok) },
	[WSYNC_MSG_CLOSE]       = { "CLOSE", sizeof(struct wsync_msg_close) },
	[WSYNC_MSG_CLOSE_OK]    = { "CLOSE_OK", sizeof(struct wsync_msg_close_ok) },
	[WSYNC_MSG_ERROR]       = { "ERROR", sizeof(struct wsync_msg_error) },
	[WSYNC_MSG_DELETE]      = { "DELETE", sizeof(struct wsync_msg_delete) },
	[WSYNC_MSG_DELETE_OK]   = { "DELETE_OK", sizeof(struct wsync_msg_delete_ok) },
	[WSYNC_MSG_WAIT_READERS]    = { "WAIT_READERS", sizeof(struct wsync_msg_wait_readers) },
	[WSYNC_MSG_WAIT_READERS_OK] = { "WAIT_READERS_OK",
	                                sizeof(struct wsync_msg_wait_readers_ok) },
	[WSYNC_MSG_GPU_ATTACH]      = { "GPU_ATTACH", sizeof(struct wsync_msg_gpu_attach) },
	[WSYNC_MSG_GPU_ATTACH_OK]   = { "GPU_ATTACH_OK", sizeof(struct wsync_msg_gpu_attach_ok) },
	[WSYNC_MSG_ACKED]           = { "ACKED", sizeof(struct wsync_msg_acked) },
	[WSYNC_MSG_ACKED_OK]        = { "ACKED_OK", sizeof(struct wsync_msg_acked_ok) },
};

size_t wsync_msg_size(uint32_t type)
{
	return type < WSYNC_MSG_TYPE_END ? msg_types[type].size : 0;
}

const char *wsync_msg_name(uint32_t type)
{
	return wsync_msg_size(type) ? msg_types[type].name : "?";
}

void wsync_msg_init(struct wsync_msg_hdr *h, uint32_t type, uint32_t seq)
{
	memset(h, 0, wsync_msg_size(type) ? wsync_msg_size(type) : sizeof(*h));
	h->magic = WSYNC_PROTO_MAGIC;
	h->type = (uint16_t)type;
	h->version = WSYNC_PROTO_VERSION;
	h->len = (uint32_t)wsync_msg_size(type);
	h->seq = seq;
}

int wsync_name_valid(const char *name, size_t max)
{
	size_t n = strnlen(name, max);

	if (n == 0 || n == max || name[0] == '.' || name[0] == '/')
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
		      c == ':' || c == '/'))
			return 0;
	}
	return 1;
}

int wsync_tensor_name_valid(const char *name)
{
	size_t n = strnlen(name, WSYNC_NAME_MAX);

	if (n == 0 || n == WSYNC_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (name[i] < 0x20 || name[i] > 0x7e)
			return 0;
	return 1;
}

#define bad wsync_why

#define CHECK(cond, ...) do { if (!(cond)) return bad(why, whylen, -EINVAL, __VA_ARGS__); } while (0)

static int model_ref_ok(const struct wsync_model_ref *m, char *why, size_t whylen)
{
	CHECK(m->model_id < WSYNC_MAX_MODELS, "model id %u out of range", m->model_id);
	CHECK(m->reserved == 0, "reserved field not zero");
	return 0;
}

static int body_validate(const union wsync_msg_any *m, char *why, size_t whylen)
{
	switch (m->hdr.type) {
	case WSYNC_MSG_HELLO:
		CHECK(wsync_name_valid(m->hello.name, sizeof(m->hello.name)),
		      "client name invalid");
		return 0;
	case WSYNC_MSG_HELLO_OK:
		CHECK(m->hello_ok.session_index < WSYNC_MAX_SESSIONS, "session index out of range");
		CHECK(m->hello_ok.max_slots >= WSYNC_MIN_SLOTS &&
		      m->hello_ok.max_slots <= WSYNC_MAX_SLOTS, "max_slots out of range");
		return 0;
	case WSYNC_MSG_PUB_OPEN:
		CHECK(wsync_name_valid(m->pub_open.model, sizeof(m->pub_open.model)),
		      "model name invalid (1..%d of [A-Za-z0-9._:/-], not starting with '.' or '/')",
		      WSYNC_NAME_MAX - 1);
		CHECK(m->pub_open.n_tensors >= 1 && m->pub_open.n_tensors <= WSYNC_MAX_TENSORS,
		      "n_tensors %u out of range 1..%d", m->pub_open.n_tensors, WSYNC_MAX_TENSORS);
		CHECK(m->pub_open.slots <= WSYNC_MAX_SLOTS, "slots %u over %d",
		      m->pub_open.slots, WSYNC_MAX_SLOTS);
		CHECK(m->pub_open.bytes > 0, "bytes is zero");
		CHECK((m->pub_open.flags & ~(uint32_t)(WSYNC_OPEN_REPLACE | WSYNC_OPEN_CHECKSUM)) == 0,
		      "unknown flags");
		CHECK(m->pub_open.group_size <= WSYNC_MAX_RANKS, "group of %u ranks, at most %d",
		      m->pub_open.group_size, WSYNC_MAX_RANKS);
		CHECK(m->pub_open.group_size > 1 ? m->pub_open.rank < m->pub_open.group_size &&
		      m->pub_open.n_parts >= 1 && m->pub_open.n_parts <= WSYNC_MAX_TENSORS :
		      m->pub_open.rank == 0 && m->pub_open.n_parts == 0 &&
		      m->pub_open.group_timeout_ms == 0,
		      "rank %u of %u with %u parts", m->pub_open.rank, m->pub_open.group_size,
		      m->pub_open.n_parts);
		CHECK(m->pub_open.n_devices <= WSYNC_MODEL_GPUS, "%u devices, at most %d",
		      m->pub_open.n_devices, WSYNC_MODEL_GPUS);
		CHECK((m->pub_open.dev_flags & ~(uint32_t)WSYNC_DEV_HOST_MIRROR) == 0 &&
		      (m->pub_open.n_devices || !m->pub_open.dev_flags), "unknown device flags");
		for (uint32_t i = m->pub_open.n_devices; i < WSYNC_MODEL_GPUS; i++)
			for (int k = 0; k < 16; k++)
				CHECK(m->pub_open.devices[i][k] == 0, "device %u past n_devices set", i);
		return 0;
	case WSYNC_MSG_PUB_OPEN_OK:
		CHECK(m->pub_open_ok.model_id < WSYNC_MAX_MODELS, "model id out of range");
		CHECK(m->pub_open_ok.n_slots >= WSYNC_MIN_SLOTS &&
		      m->pub_open_ok.n_slots <= WSYNC_MAX_SLOTS, "n_slots out of range");
		return 0;
	case WSYNC_MSG_SUB_OPEN:
		CHECK(wsync_name_valid(m->sub_open.model, sizeof(m->sub_open.model)),
		      "model name invalid (1..%d of [A-Za-z0-9._:/-], not starting with '.' or '/')",
		      WSYNC_NAME_MAX - 1);
		return 0;
	case WSYNC_MSG_SUB_OPEN_OK:
		CHECK(m->sub_open_ok.model_id < WSYNC_MAX_MODELS, "model id out of range");
		CHECK(m->sub_open_ok.state <= WSYNC_MODEL_READY, "model state out of range");
		CHECK(m->sub_open_ok.n_slots <= WSYNC_MAX_SLOTS, "n_slots out of range");
		CHECK(m->sub_open_ok.n_tensors <= WSYNC_MAX_TENSORS, "n_tensors out of range");
		return 0;
	case WSYNC_MSG_ATTACH:
		return model_ref_ok(&m->attach.m, why, whylen);
	case WSYNC_MSG_ATTACH_OK:
		CHECK(m->attach_ok.reserved == 0, "reserved field not zero");
		CHECK(m->attach_ok.model_id < WSYNC_MAX_MODELS, "model id out of range");
		CHECK(m->attach_ok.n_slots >= WSYNC_MIN_SLOTS &&
		      m->attach_ok.n_slots <= WSYNC_MAX_SLOTS, "n_slots out of range");
		CHECK(m->attach_ok.n_tensors >= 1 &&
		      m->attach_ok.n_tensors <= WSYNC_MAX_TENSORS, "n_tensors out of range");
		return 0;
	case WSYNC_MSG_BEGIN:
		return model_ref_ok(&m->begin.m, why, whylen);
	case WSYNC_MSG_GRANT:
		CHECK(m->grant.reserved == 0, "reserved field not zero");
		CHECK(m->grant.model_id < WSYNC_MAX_MODELS, "model id out of range");
		CHECK(m->grant.slot < WSYNC_MAX_SLOTS, "slot out of range");
		CHECK(m->grant.version > 0, "version is zero");
		CHECK((m->grant.flags & ~(uint32_t)WSYNC_GRANT_HAS_FD) == 0, "unknown flags");
		return 0;
	case WSYNC_MSG_COMMIT:
		CHECK(m->commit.slot < WSYNC_MAX_SLOTS, "slot %u out of range", m->commit.slot);
		CHECK(m->commit.version > 0, "version is zero");
		CHECK(m->commit.reserved == 0, "reserved field not zero");
		return model_ref_ok(&m->commit.m, why, whylen);
	case WSYNC_MSG_COMMIT_OK:
		CHECK(m->commit_ok.reserved == 0, "reserved field not zero");
		CHECK(m->commit_ok.model_id < WSYNC_MAX_MODELS, "model id out of range");
		CHECK((m->commit_ok.flags & ~(uint32_t)(WSYNC_NEXT_GRANTED | WSYNC_NEXT_HAS_FD |
		                                        WSYNC_COMMIT_HASH)) == 0,
		      "unknown flags");
		CHECK(!(m->commit_ok.flags & WSYNC_NEXT_GRANTED) ||
		      m->commit_ok.next_slot < WSYNC_MAX_SLOTS, "next slot out of range");
		return 0;
	case WSYNC_MSG_ABORT:
		CHECK(m->abort.slot < WSYNC_MAX_SLOTS, "slot %u out of range", m->abort.slot);
		CHECK(m->abort.reserved == 0, "reserved field not zero");
		return model_ref_ok(&m->abort.m, why, whylen);
	case WSYNC_MSG_NOTIFY:
		return model_ref_ok(&m->notify.m, why, whylen);
	case WSYNC_MSG_CLOSE:
		CHECK(m->close.what == WSYNC_CLOSE_PUB || m->close.what == WSYNC_CLOSE_SUB,
		      "close of %u: neither publisher nor subscription", m->close.what);
		CHECK(m->close.reserved == 0, "reserved field not zero");
		return model_ref_ok(&m->close.m, why, whylen);
	case WSYNC_MSG_ABORT_OK:
	case WSYNC_MSG_NOTIFY_OK:
	case WSYNC_MSG_CLOSE_OK:
		/* the three share one shape */
		CHECK(m->abort_ok.model_id < WSYNC_MAX_MODELS, "model id out of range");
		CHECK(m->abort_ok.reserved == 0, "reserved field not zero");
		return 0;
	case WSYNC_MSG_DELETE:
		CHECK(wsync_name_valid(m->delete_.model, sizeof(m->delete_.model)),
		      "model name invalid (1..%d of [A-Za-z0-9._:/-], not starting with '.' or '/')",
		      WSYNC_NAME_MAX - 1);
		return 0;
	case WSYNC_MSG_DELETE_OK:
		return 0;
	case WSYNC_MSG_WAIT_READERS:
		CHECK(m->wait_readers.version > 0, "version is zero");
		return model_ref_ok(&m->wait_readers.m, why, whylen);
	case WSYNC_MSG_GPU_ATTACH:
		CHECK(m->gpu_attach.reserved == 0, "reserved field not zero");
		CHECK(m->gpu_attach.device < WSYNC_MODEL_GPUS, "device %u out of range",
		      m->gpu_attach.device);
		return model_ref_ok(&m->gpu_attach.m, why, whylen);
	case WSYNC_MSG_GPU_ATTACH_OK:
		CHECK(m->gpu_attach_ok.reserved == 0, "reserved field not zero");
		CHECK(m->gpu_attach_ok.model_id < WSYNC_MAX_MODELS, "model id out of range");
		CHECK(m->gpu_attach_ok.device < WSYNC_MODEL_GPUS, "device out of range");
		CHECK(m->gpu_attach_ok.n_slots >= WSYNC_MIN_SLOTS &&
		      m->gpu_attach_ok.n_slots <= WSYNC_MAX_SLOTS, "n_slots out of range");
		CHECK(m->gpu_attach_ok.dev_bytes > 0, "dev_bytes is zero");
		return 0;
	case WSYNC_MSG_WAIT_READERS_OK:
		CHECK(m->wait_readers_ok.model_id < WSYNC_MAX_MODELS, "model id out of range");
		return 0;
	case WSYNC_MSG_ACKED:
		CHECK(m->acked.model_id < WSYNC_MAX_MODELS, "model id %u out of range",
		      m->acked.model_id);
		CHECK((m->acked.flags & ~WSYNC_ACKED_ONEWAY) == 0, "unknown flags");
		return 0;
	case WSYNC_MSG_ACKED_OK:
		CHECK(m->acked_ok.reserved == 0, "reserved field not zero");
		CHECK(m->acked_ok.model_id < WSYNC_MAX_MODELS, "model id out of range");
		return 0;
	case WSYNC_MSG_ERROR:
		CHECK(m->error.err < 0, "error code %d not negative", m->error.err);
		CHECK(m->error.reserved == 0 && m->error.reserved2[0] == 0 &&
		      m->error.reserved2[1] == 0, "reserved field not zero");
		CHECK(memchr(m->error.msg, '\0', sizeof(m->error.msg)) != NULL,
		      "error text unterminated");
		return 0;
	}
	return bad(why, whylen, -EPROTO, "unknown message type %u", m->hdr.type);
}

int wsync_msg_validate(const void *buf, size_t len, char *why, size_t whylen)
{
	union wsync_msg_any m;
	size_t want;

	if (len < sizeof(struct wsync_msg_hdr))
		return bad(why, whylen, -EPROTO, "message of %zu bytes is shorter than a header", len);
	memcpy(&m.hdr, buf, sizeof(m.hdr));
	if (m.hdr.magic != WSYNC_PROTO_MAGIC)
		return bad(why, whylen, -EPROTO, "bad magic 0x%08x", m.hdr.magic);
	if (m.hdr.version != WSYNC_PROTO_VERSION)
		return bad(why, whylen, -EPROTO, "protocol version %u, expected %u",
		           m.hdr.version, WSYNC_PROTO_VERSION);
	want = wsync_msg_size(m.hdr.type);
	if (!want)
		return bad(why, whylen, -EPROTO, "unknown message type %u", m.hdr.type);
	if (len != want || m.hdr.len != want)
		return bad(why, whylen, -EPROTO, "%s of %zu bytes (header says %u), expected %zu",
		           wsync_msg_name(m.hdr.type), len, m.hdr.len, want);
	memcpy(&m, buf, want);
	return body_validate(&m, why, whylen);
}
