/*
 * test_proto — the wire protocol's message checks (shm/proto.h):
 * wsync_msg_validate accepts a well-formed message of every type and refuses
 * every malformation the broker must not act on; sizes and names of every
 * type; name validity; and random or mutated bytes never crash it (run under
 * ASan by `make check`: every buffer is allocated at its exact length).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm/proto.h"

#define FIRST WSYNC_MSG_HELLO
#define END   WSYNC_MSG_TYPE_END

static const size_t sizes[END] = {
	[WSYNC_MSG_HELLO] = sizeof(struct wsync_msg_hello),
	[WSYNC_MSG_HELLO_OK] = sizeof(struct wsync_msg_hello_ok),
	[WSYNC_MSG_PUB_OPEN] = sizeof(struct wsync_msg_pub_open),
	[WSYNC_MSG_PUB_OPEN_OK] = sizeof(struct wsync_msg_pub_open_ok),
	[WSYNC_MSG_SUB_OPEN] = sizeof(struct wsync_msg_sub_open),
	[WSYNC_MSG_SUB_OPEN_OK] = sizeof(struct wsync_msg_sub_open_ok),
	[WSYNC_MSG_ATTACH] = sizeof(struct wsync_msg_attach),
	[WSYNC_MSG_ATTACH_OK] = sizeof(struct wsync_msg_attach_ok),
	[WSYNC_MSG_BEGIN] = sizeof(struct wsync_msg_begin),
	[WSYNC_MSG_GRANT] = sizeof(struct wsync_msg_grant),
	[WSYNC_MSG_COMMIT] = sizeof(struct wsync_msg_commit),
	[WSYNC_MSG_COMMIT_OK] = sizeof(struct wsync_msg_commit_ok),
	[WSYNC_MSG_ABORT] = sizeof(struct wsync_msg_abort),
	[WSYNC_MSG_ABORT_OK] = sizeof(struct wsync_msg_abort_ok),
	[WSYNC_MSG_NOTIFY] = sizeof(struct wsync_msg_notify),
	[WSYNC_MSG_NOTIFY_OK] = sizeof(struct wsync_msg_notify_ok),
	[WSYNC_MSG_CLOSE] = sizeof(struct wsync_msg_close),
	[WSYNC_MSG_CLOSE_OK] = sizeof(struct wsync_msg_close_ok),
	[WSYNC_MSG_ERROR] = sizeof(struct wsync_msg_error),
	[WSYNC_MSG_DELETE] = sizeof(struct wsync_msg_delete),
	[WSYNC_MSG_DELETE_OK] = sizeof(struct wsync_msg_delete_ok),
	[WSYNC_MSG_WAIT_READERS] = sizeof(struct wsync_msg_wait_readers),
	[WSYNC_MSG_WAIT_READERS_OK] = sizeof(struct wsync_msg_wait_readers_ok),
	[WSYNC_MSG_GPU_ATTACH] = sizeof(struct wsync_msg_gpu_attach),
	[WSYNC_MSG_GPU_ATTACH_OK] = sizeof(struct wsync_msg_gpu_attach_ok),
	[WSYNC_MSG_ACKED] = sizeof(struct wsync_msg_acked),
	[WSYNC_MSG_ACKED_OK] = sizeof(struct wsync_msg_acked_ok),
};

/* A well-formed message of type t: plausible values, reserved fields 0. */
static size_t make_valid(uint32_t t, union wsync_msg_any *m)
{
	memset(m, 0, sizeof *m);
	wsync_msg_init(&m->hdr, t, 7);
	switch (t) {
	case WSYNC_MSG_HELLO:
		m->hello.layout_version = WSYNC_LAYOUT_VERSION;
		m->hello.pid = 1234;
		snprintf(m->hello.name, sizeof m->hello.name, "collector-3");
		break;
	case WSYNC_MSG_HELLO_OK:
		m->hello_ok.session_id = 1;
		m->hello_ok.max_slots = 8;
		m->hello_ok.generation = 1;
		m->hello_ok.ctl_bytes = 1 << 20;
		m->hello_ok.broker_pid = 99;
		break;
	case WSYNC_MSG_PUB_OPEN:
		snprintf(m->pub_open.model, sizeof m->pub_open.model, "policy");
		m->pub_open.n_tensors = 2;
		m->pub_open.slots = 4;
		m->pub_open.bytes = 8192;
		m->pub_open.layout_hash = 0x1234567890abcdefull;
		break;
	case WSYNC_MSG_PUB_OPEN_OK:
		m->pub_open_ok.model_id = 3;
		m->pub_open_ok.n_slots = 4;
		m->pub_open_ok.bytes = 8192;
		m->pub_open_ok.generation = 2;
		break;
	case WSYNC_MSG_SUB_OPEN:
		snprintf(m->sub_open.model, sizeof m->sub_open.model, "team/policy:v2");
		break;
	case WSYNC_MSG_SUB_OPEN_OK:
		m->sub_open_ok.model_id = 3;
		m->sub_open_ok.state = WSYNC_MODEL_READY;
		m->sub_open_ok.n_slots = 4;
		m->sub_open_ok.n_tensors = 2;
		m->sub_open_ok.bytes = 8192;
		m->sub_open_ok.layout_bytes = 4096;
		break;
	case WSYNC_MSG_ATTACH:
		m->attach.m.model_id = 3;
		break;
	case WSYNC_MSG_ATTACH_OK:
		m->attach_ok.model_id = 3;
		m->attach_ok.n_slots = 4;
		m->attach_ok.n_tensors = 2;
		m->attach_ok.bytes = 8192;
		m->attach_ok.layout_bytes = 4096;
		break;
	case WSYNC_MSG_BEGIN:
		m->begin.m.model_id = 3;
		break;
	case WSYNC_MSG_GRANT:
		m->grant.model_id = 3;
		m->grant.slot = 1;
		m->grant.version = 42;
		m->grant.flags = WSYNC_GRANT_HAS_FD;
		break;
	case WSYNC_MSG_COMMIT:
		m->commit.m.model_id = 3;
		m->commit.slot = 1;
		m->commit.version = 42;
		m->commit.step = 1000;
		break;
	case WSYNC_MSG_COMMIT_OK:
		m->commit_ok.model_id = 3;
		m->commit_ok.flags = WSYNC_NEXT_GRANTED | WSYNC_NEXT_HAS_FD;
		m->commit_ok.version = 42;
		m->commit_ok.next_slot = 2;
		m->commit_ok.next_version = 43;
		break;
	case WSYNC_MSG_ABORT:
		m->abort.m.model_id = 3;
		m->abort.slot = 1;
		m->abort.version = 42;
		break;
	case WSYNC_MSG_ABORT_OK:
		m->abort_ok.model_id = 3;
		break;
	case WSYNC_MSG_NOTIFY:
		m->notify.m.model_id = 3;
		break;
	case WSYNC_MSG_NOTIFY_OK:
		m->notify_ok.model_id = 3;
		break;
	case WSYNC_MSG_CLOSE:
		m->close.m.model_id = 3;
		m->close.what = WSYNC_CLOSE_SUB;
		break;
	case WSYNC_MSG_CLOSE_OK:
		m->close_ok.model_id = 3;
		break;
	case WSYNC_MSG_ERROR:
		m->error.err = -EBUSY;
		m->error.req_type = WSYNC_MSG_BEGIN;
		snprintf(m->error.msg, sizeof m->error.msg, "slot 0 pinned by collector-3");
		break;
	case WSYNC_MSG_DELETE:
		snprintf(m->delete_.model, sizeof m->delete_.model, "policy");
		break;
	case WSYNC_MSG_DELETE_OK:
		m->delete_ok.hwm = 12;
		break;
	case WSYNC_MSG_WAIT_READERS:
		m->wait_readers.m.model_id = 3;
		m->wait_readers.version = 5;
		m->wait_readers.n_readers = 2;
		m->wait_readers.timeout_ms = 100;
		break;
	case WSYNC_MSG_WAIT_READERS_OK:
		m->wait_readers_ok.model_id = 3;
		m->wait_readers_ok.n_readers = 2;
		m->wait_readers_ok.version = 5;
		break;
	case WSYNC_MSG_GPU_ATTACH:
		m->gpu_attach.m.model_id = 3;
		m->gpu_attach.device = 1;
		break;
	case WSYNC_MSG_GPU_ATTACH_OK:
		m->gpu_attach_ok.model_id = 3;
		m->gpu_attach_ok.device = 1;
		m->gpu_attach_ok.n_slots = 4;
		m->gpu_attach_ok.dev_bytes = 2 << 20;
		m->gpu_attach_ok.incarnation = 7;
		break;
	case WSYNC_MSG_ACKED:
		m->acked.model_id = 3;
		break;
	case WSYNC_MSG_ACKED_OK:
		m->acked_ok.model_id = 3;
		break;
	}
	return sizes[t];
}

/* Validates len bytes of src copied into a buffer of exactly len bytes. */
static int validate_exact(const void *src, size_t len, char *why, size_t whylen)
{
	unsigned char *buf = malloc(len ? len : 1);
	assert_non_null(buf);
	if (len)
		memcpy(buf, src, len);
	int rc = wsync_msg_validate(buf, len, why, whylen);
	free(buf);
	return rc;
}

/* A message that must be refused: negative code and a reason. */
static void expect_refused(const void *msg, size_t len, const char *what)
{
	char why[256] = "";
	int rc = validate_exact(msg, len, why, sizeof why);
	if (rc >= 0)
		fail_msg("accepted %s (validate returned %d)", what, rc);
	if (rc != -EPROTO && rc != -EINVAL)
		fail_msg("%s: validate returned %d, expected -EPROTO or -EINVAL", what, rc);
	if (why[0] == 0)
		fail_msg("%s refused without a reason", what);
	/* why may be NULL */
	assert_true(validate_exact(msg, len, NULL, 0) < 0);
}

static void expect_accepted(const void *msg, size_t len, const char *what)
{
	char why[256] = "";
	int rc = validate_exact(msg, len, why, sizeof why);
	if (rc != 0)
		fail_msg("refused %s: %d (%s)", what, rc, why);
}

/* ---- sizes and names -------------------------------------------------------- */

static void msg_size_of_every_type(void **state)
{
	(void)state;
	for (uint32_t t = FIRST; t < END; t++) {
		if (wsync_msg_size(t) != sizes[t])
			fail_msg("wsync_msg_size(%u) = %zu, sizeof = %zu", t, wsync_msg_size(t), sizes[t]);
		assert_true(sizes[t] >= sizeof(struct wsync_msg_hdr));
		assert_true(sizes[t] <= sizeof(union wsync_msg_any));
	}
	assert_int_equal(wsync_msg_size(0), 0);
	assert_int_equal(wsync_msg_size(END), 0);
	assert_int_equal(wsync_msg_size(0xffff), 0);
	assert_int_equal(wsync_msg_size(UINT32_MAX), 0);
}

static void msg_name_of_every_type(void **state)
{
	(void)state;
	assert_string_equal(wsync_msg_name(WSYNC_MSG_COMMIT), "COMMIT");
	for (uint32_t t = FIRST; t < END; t++) {
		const char *n = wsync_msg_name(t);
		assert_non_null(n);
		if (strcmp(n, "?") == 0 || n[0] == 0)
			fail_msg("type %u has no name", t);
		for (uint32_t u = FIRST; u < t; u++)
			if (strcmp(n, wsync_msg_name(u)) == 0)
				fail_msg("types %u and %u are both called %s", u, t, n);
	}
	assert_string_equal(wsync_msg_name(0), "?");
	assert_string_equal(wsync_msg_name(END), "?");
	assert_string_equal(wsync_msg_name(UINT32_MAX), "?");
}

static void msg_init_fills_the_header(void **state)
{
	(void)state;
	for (uint32_t t = FIRST; t < END; t++) {
		/* the header of a whole message (wsync_msg_init may clear the body) */
		union wsync_msg_any m;
		memset(&m, 0xa5, sizeof m);
		wsync_msg_init(&m.hdr, t, 0xdeadbeef);
		assert_int_equal(m.hdr.magic, WSYNC_PROTO_MAGIC);
		assert_int_equal(m.hdr.version, WSYNC_PROTO_VERSION);
		assert_int_equal(m.hdr.type, t);
		assert_int_equal(m.hdr.len, sizes[t]);
		assert_int_equal(m.hdr.seq, 0xdeadbeef);
	}
}

/* ---- accepted ------------------------------------------------------------------ */

static void accepts_a_well_formed_message_of_every_type(void **state)
{
	(void)state;
	union wsync_msg_any m;
	for (uint32_t t = FIRST; t < END; t++) {
		size_t len = make_valid(t, &m);
		char what[64];
		snprintf(what, sizeof what, "a well-formed %s", wsync_msg_name(t));
		expect_accepted(&m, len, what);
	}
}

static void accepts_names_at_the_length_limit(void **state)
{
	(void)state;
	union wsync_msg_any m;
	size_t len = make_valid(WSYNC_MSG_SUB_OPEN, &m);
	memset(m.sub_open.model, 'a', WSYNC_NAME_MAX - 1);
	m.sub_open.model[WSYNC_NAME_MAX - 1] = 0;
	expect_accepted(&m, len, "a model name of WSYNC_NAME_MAX-1 bytes");
	len = make_valid(WSYNC_MSG_HELLO, &m);
	memset(m.hello.name, 'c', WSYNC_INSTANCE_MAX - 1);
	m.hello.name[WSYNC_INSTANCE_MAX - 1] = 0;
	expect_accepted(&m, len, "a client name of WSYNC_INSTANCE_MAX-1 bytes");
}

/* ---- refused ---------------------------------------------------------------------- */

static void refuses_wrong_lengths(void **state)
{
	(void)state;
	union wsync_msg_any m;
	unsigned char big[sizeof m + 64];
	char what[96];
	for (uint32_t t = FIRST; t < END; t++) {
		size_t len = make_valid(t, &m);
		snprintf(what, sizeof what, "%s one byte short", wsync_msg_name(t));
		expect_refused(&m, len - 1, what);
		snprintf(what, sizeof what, "%s with only a header", wsync_msg_name(t));
		if (len > sizeof(struct wsync_msg_hdr))
			expect_refused(&m, sizeof(struct wsync_msg_hdr), what);
		memset(big, 0, sizeof big);
		memcpy(big, &m, len);
		snprintf(what, sizeof what, "%s one byte long", wsync_msg_name(t));
		expect_refused(big, len + 1, what);
		snprintf(what, sizeof what, "%s 8 bytes long", wsync_msg_name(t));
		expect_refused(big, len + 8, what);
	}
	/* shorter than a header */
	make_valid(WSYNC_MSG_BEGIN, &m);
	expect_refused(&m, 0, "0 bytes");
	expect_refused(&m, 1, "1 byte");
	expect_refused(&m, 8, "8 bytes");
	expect_refused(&m, sizeof(struct wsync_msg_hdr) - 1, "a truncated header");
}

static void refuses_hdr_len_mismatch(void **state)
{
	(void)state;
	union wsync_msg_any m;
	char what[96];
	for (uint32_t t = FIRST; t < END; t++) {
		size_t len = make_valid(t, &m);
		m.hdr.len = (uint32_t)len + 8;
		snprintf(what, sizeof what, "%s with hdr.len = size + 8", wsync_msg_name(t));
		expect_refused(&m, len, what);
		m.hdr.len = (uint32_t)len - 8;
		snprintf(what, sizeof what, "%s with hdr.len = size - 8", wsync_msg_name(t));
		expect_refused(&m, len, what);
		m.hdr.len = 0;
		snprintf(what, sizeof what, "%s with hdr.len = 0", wsync_msg_name(t));
		expect_refused(&m, len, what);
		m.hdr.len = UINT32_MAX;
		snprintf(what, sizeof what, "%s with hdr.len = UINT32_MAX", wsync_msg_name(t));
		expect_refused(&m, len, what);
	}
	/* hdr.len and len agree, but not with the type's size */
	size_t len = make_valid(WSYNC_MSG_BEGIN, &m);
	unsigned char big[sizeof m + 16];
	memset(big, 0, sizeof big);
	memcpy(big, &m, len);
	((struct wsync_msg_hdr *)big)->len = (uint32_t)len + 16;
	expect_refused(big, len + 16, "BEGIN with len == hdr.len != its size");
}

static void refuses_bad_magic_and_version(void **state)
{
	(void)state;
	union wsync_msg_any m;
	char what[96];
	for (uint32_t t = FIRST; t < END; t++) {
		size_t len = make_valid(t, &m);
		m.hdr.magic = WSYNC_PROTO_MAGIC ^ 1;
		snprintf(what, sizeof what, "%s with a bad magic", wsync_msg_name(t));
		expect_refused(&m, len, what);
		make_valid(t, &m);
		m.hdr.magic = 0;
		expect_refused(&m, len, what);
		make_valid(t, &m);
		m.hdr.version = WSYNC_PROTO_VERSION + 1;
		snprintf(what, sizeof what, "%s of version %u", wsync_msg_name(t), m.hdr.version);
		expect_refused(&m, len, what);
		m.hdr.version = 0;
		expect_refused(&m, len, what);
	}
}

static void refuses_unknown_types(void **state)
{
	(void)state;
	const uint32_t bad[] = { 0, END, END + 1, 0x7fff, 0xffff };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		unsigned char buf[sizeof(union wsync_msg_any)];
		memset(buf, 0, sizeof buf);
		struct wsync_msg_hdr *h = (struct wsync_msg_hdr *)buf;
		h->magic = WSYNC_PROTO_MAGIC;
		h->version = WSYNC_PROTO_VERSION;
		h->type = (uint16_t)bad[i];
		char what[64];
		snprintf(what, sizeof what, "type %u", bad[i]);
		for (size_t len = sizeof *h; len <= sizeof buf; len += 8) {
			h->len = (uint32_t)len;
			expect_refused(buf, len, what);
		}
	}
}

static void refuses_unterminated_names(void **state)
{
	(void)state;
	union wsync_msg_any m;
	size_t len = make_valid(WSYNC_MSG_PUB_OPEN, &m);
	memset(m.pub_open.model, 'a', sizeof m.pub_open.model);
	expect_refused(&m, len, "PUB_OPEN with an unterminated model name");
	len = make_valid(WSYNC_MSG_SUB_OPEN, &m);
	memset(m.sub_open.model, 'a', sizeof m.sub_open.model);
	expect_refused(&m, len, "SUB_OPEN with an unterminated model name");
	len = make_valid(WSYNC_MSG_HELLO, &m);
	memset(m.hello.name, 'c', sizeof m.hello.name);
	expect_refused(&m, len, "HELLO with an unterminated client name");
	len = make_valid(WSYNC_MSG_ERROR, &m);
	memset(m.error.msg, 'e', sizeof m.error.msg);
	expect_refused(&m, len, "ERROR with an unterminated message");
}

static void refuses_invalid_model_names(void **state)
{
	(void)state;
	const char *bad[] = {
		"", ".hidden", "/abs", "a b", "tab\t", "nl\n", "semi;colon", "q\"uote",
		"caf\xc3\xa9", "star*", "back\\slash", "del\x7f",
	};
	union wsync_msg_any m;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char what[96];
		size_t len = make_valid(WSYNC_MSG_SUB_OPEN, &m);
		snprintf(m.sub_open.model, sizeof m.sub_open.model, "%s", bad[i]);
		snprintf(what, sizeof what, "SUB_OPEN of model \"%s\"", bad[i]);
		expect_refused(&m, len, what);
		len = make_valid(WSYNC_MSG_PUB_OPEN, &m);
		snprintf(m.pub_open.model, sizeof m.pub_open.model, "%s", bad[i]);
		snprintf(what, sizeof what, "PUB_OPEN of model \"%s\"", bad[i]);
		expect_refused(&m, len, what);
	}
	/* client names follow the same rule */
	size_t len = make_valid(WSYNC_MSG_HELLO, &m);
	snprintf(m.hello.name, sizeof m.hello.name, "my client");
	expect_refused(&m, len, "HELLO from client \"my client\"");
}

/* Every reserved field, one at a time, set to 1. */
static void refuses_nonzero_reserved_fields(void **state)
{
	(void)state;
	union wsync_msg_any m;
	struct { uint32_t type; size_t off; size_t size; const char *what; } fields[] = {
#define F(T, memb, fld) { T, offsetof(union wsync_msg_any, memb.fld), \
	                  sizeof(((union wsync_msg_any *)0)->memb.fld), #memb "." #fld }
		F(WSYNC_MSG_ATTACH, attach, m.reserved),
		F(WSYNC_MSG_ATTACH_OK, attach_ok, reserved),
		F(WSYNC_MSG_BEGIN, begin, m.reserved),
		F(WSYNC_MSG_GRANT, grant, reserved),
		F(WSYNC_MSG_COMMIT, commit, m.reserved),
		F(WSYNC_MSG_COMMIT, commit, reserved),
		F(WSYNC_MSG_COMMIT_OK, commit_ok, reserved),
		F(WSYNC_MSG_ABORT, abort, m.reserved),
		F(WSYNC_MSG_ABORT, abort, reserved),
		F(WSYNC_MSG_ABORT_OK, abort_ok, reserved),
		F(WSYNC_MSG_NOTIFY, notify, m.reserved),
		F(WSYNC_MSG_NOTIFY_OK, notify_ok, reserved),
		F(WSYNC_MSG_CLOSE, close, m.reserved),
		F(WSYNC_MSG_CLOSE, close, reserved),
		F(WSYNC_MSG_CLOSE_OK, close_ok, reserved),
		F(WSYNC_MSG_GPU_ATTACH, gpu_attach, m.reserved),
		F(WSYNC_MSG_GPU_ATTACH, gpu_attach, reserved),
		F(WSYNC_MSG_GPU_ATTACH_OK, gpu_attach_ok, reserved),
		F(WSYNC_MSG_ACKED_OK, acked_ok, reserved),
		F(WSYNC_MSG_ERROR, error, reserved),
		F(WSYNC_MSG_ERROR, error, reserved2[0]),
		F(WSYNC_MSG_ERROR, error, reserved2[1]),
#undef F
	};
	char accepted[1024] = "";
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
		size_t len = make_valid(fields[i].type, &m);
		unsigned char *p = (unsigned char *)&m + fields[i].off;
		p[0] = 1;                            /* little-endian: the value 1 */
		int ok1 = validate_exact(&m, len, NULL, 0) == 0;
		make_valid(fields[i].type, &m);
		p[fields[i].size - 1] = 0x80;        /* only the top bit */
		int ok2 = validate_exact(&m, len, NULL, 0) == 0;
		if (ok1 || ok2)
			snprintf(accepted + strlen(accepted), sizeof accepted - strlen(accepted),
			         " %s", fields[i].what);
	}
	if (accepted[0])
		fail_msg("accepted nonzero reserved fields:%s", accepted);
}

static void refuses_out_of_range_integers(void **state)
{
	(void)state;
	union wsync_msg_any m;
	size_t len;

	len = make_valid(WSYNC_MSG_COMMIT, &m);
	m.commit.slot = WSYNC_MAX_SLOTS;
	expect_refused(&m, len, "COMMIT of slot WSYNC_MAX_SLOTS");
	len = make_valid(WSYNC_MSG_ABORT, &m);
	m.abort.slot = UINT32_MAX;
	expect_refused(&m, len, "ABORT of slot UINT32_MAX");
	len = make_valid(WSYNC_MSG_BEGIN, &m);
	m.begin.m.model_id = WSYNC_MAX_MODELS;
	expect_refused(&m, len, "BEGIN of model WSYNC_MAX_MODELS");
	len = make_valid(WSYNC_MSG_ATTACH, &m);
	m.attach.m.model_id = UINT32_MAX;
	expect_refused(&m, len, "ATTACH of model UINT32_MAX");
	len = make_valid(WSYNC_MSG_ACKED, &m);
	m.acked.model_id = WSYNC_MAX_MODELS;
	expect_refused(&m, len, "ACKED of model WSYNC_MAX_MODELS");
	/* its flags: ONEWAY alone, or none; any other bit is refused */
	len = make_valid(WSYNC_MSG_ACKED, &m);
	m.acked.flags = WSYNC_ACKED_ONEWAY;
	assert_int_equal(validate_exact(&m, len, NULL, 0), 0);
	m.acked.flags = WSYNC_ACKED_ONEWAY << 1;
	expect_refused(&m, len, "ACKED with an unknown flag");
	m.acked.flags = 0x80000000u | WSYNC_ACKED_ONEWAY;
	expect_refused(&m, len, "ACKED with the top flag bit");
	len = make_valid(WSYNC_MSG_GPU_ATTACH, &m);
	m.gpu_attach.device = WSYNC_MODEL_GPUS;
	expect_refused(&m, len, "GPU_ATTACH of device WSYNC_MODEL_GPUS");
	len = make_valid(WSYNC_MSG_PUB_OPEN, &m);
	m.pub_open.n_devices = WSYNC_MODEL_GPUS + 1;
	expect_refused(&m, len, "PUB_OPEN with more devices than WSYNC_MODEL_GPUS");
	len = make_valid(WSYNC_MSG_PUB_OPEN, &m);
	m.pub_open.dev_flags = WSYNC_DEV_HOST_MIRROR;
	expect_refused(&m, len, "PUB_OPEN with device flags and no device");
	len = make_valid(WSYNC_MSG_PUB_OPEN, &m);
	m.pub_open.n_devices = 1;
	m.pub_open.devices[1][0] = 1;
	expect_refused(&m, len, "PUB_OPEN with a UUID past n_devices");
	len = make_valid(WSYNC_MSG_CLOSE, &m);
	m.close.what = 0;
	expect_refused(&m, len, "CLOSE of what 0");
	m.close.what = 3;
	expect_refused(&m, len, "CLOSE of what 3");
	len = make_valid(WSYNC_MSG_PUB_OPEN, &m);
	m.pub_open.slots = WSYNC_MAX_SLOTS + 1;
	expect_refused(&m, len, "PUB_OPEN of WSYNC_MAX_SLOTS + 1 slots");
	len = make_valid(WSYNC_MSG_PUB_OPEN, &m);
	m.pub_open.n_tensors = 0;
	expect_refused(&m, len, "PUB_OPEN of 0 tensors");
	m.pub_open.n_tensors = WSYNC_MAX_TENSORS + 1;
	expect_refused(&m, len, "PUB_OPEN of WSYNC_MAX_TENSORS + 1 tensors");
}

/* ---- robustness ----------------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng(void)
{
	uint64_t x = rng_state;   /* xorshift64* */
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng_state = x;
	return x * 0x2545F4914F6CDD1Dull;
}

static void check_accepted_is_sane(const unsigned char *buf, size_t len)
{
	const struct wsync_msg_hdr *h = (const struct wsync_msg_hdr *)buf;
	if (len < sizeof *h || h->magic != WSYNC_PROTO_MAGIC || h->version != WSYNC_PROTO_VERSION ||
	    h->type < FIRST || h->type >= END || h->len != len || len != sizes[h->type])
		fail_msg("accepted a message with a bad header (len %zu, type %u, hdr.len %u)",
		         len, len >= sizeof *h ? h->type : 0, len >= sizeof *h ? h->len : 0);
}

static void random_bytes_never_crash(void **state)
{
	(void)state;
	rng_state = 0x9E3779B97F4A7C15ull;
	char why[128];
	for (int i = 0; i < 100000; i++) {
		size_t len = (size_t)(rng() % (sizeof(union wsync_msg_any) + 64));
		unsigned char *buf = malloc(len ? len : 1);
		assert_non_null(buf);
		for (size_t k = 0; k < len; k++)
			buf[k] = (unsigned char)rng();
		if (len >= sizeof(struct wsync_msg_hdr) && (i & 1)) {
			/* often a plausible header, so the body checks run */
			struct wsync_msg_hdr *h = (struct wsync_msg_hdr *)buf;
			h->magic = WSYNC_PROTO_MAGIC;
			h->version = WSYNC_PROTO_VERSION;
			h->type = (uint16_t)(rng() % (END + 2));
			h->len = (uint32_t)len;
		}
		if (wsync_msg_validate(buf, len, why, sizeof why) == 0)
			check_accepted_is_sane(buf, len);
		free(buf);
	}
}

static void mutated_valid_messages_never_crash(void **state)
{
	(void)state;
	rng_state = 0xC0FFEE1234567ull;
	union wsync_msg_any m;
	char why[128];
	for (int i = 0; i < 100000; i++) {
		uint32_t t = FIRST + (uint32_t)(rng() % (END - FIRST));
		size_t len = make_valid(t, &m);
		int flips = 1 + (int)(rng() % 4);
		for (int k = 0; k < flips; k++)
			((unsigned char *)&m)[rng() % len] ^= (unsigned char)(1u << (rng() % 8));
		unsigned char *buf = malloc(len);
		assert_non_null(buf);
		memcpy(buf, &m, len);
		if (wsync_msg_validate(buf, len, why, sizeof why) == 0)
			check_accepted_is_sane(buf, len);
		free(buf);
	}
}

/* ---- names ------------------------------------------------------------------------------ */

static void name_valid_follows_the_rule(void **state)
{
	(void)state;
	const char *good[] = { "a", "policy", "A-Z_0.9:x/y", "team/policy:v2", "x.", "0" };
	const char *bad[] = { "", ".a", "/a", "a b", "a\n", "caf\xc3\xa9", "a*", "a@b" };
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
		if (!wsync_name_valid(good[i], WSYNC_NAME_MAX))
			fail_msg("\"%s\" should be a valid name", good[i]);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (wsync_name_valid(bad[i], WSYNC_NAME_MAX))
			fail_msg("\"%s\" should not be a valid name", bad[i]);

	/* max - 1 bytes fit, max bytes do not (no NUL inside max) */
	char *n = malloc(WSYNC_NAME_MAX + 1);
	assert_non_null(n);
	memset(n, 'n', WSYNC_NAME_MAX);
	n[WSYNC_NAME_MAX] = 0;
	assert_false(wsync_name_valid(n, WSYNC_NAME_MAX));
	n[WSYNC_NAME_MAX - 1] = 0;
	assert_true(wsync_name_valid(n, WSYNC_NAME_MAX));
	assert_false(wsync_name_valid(n, 16));
	free(n);

	assert_true(wsync_tensor_name_valid("layer 1.weight[0]"));
	assert_false(wsync_tensor_name_valid("ctl\x01"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(msg_size_of_every_type),
		cmocka_unit_test(msg_name_of_every_type),
		cmocka_unit_test(msg_init_fills_the_header),
		cmocka_unit_test(accepts_a_well_formed_message_of_every_type),
		cmocka_unit_test(accepts_names_at_the_length_limit),
		cmocka_unit_test(refuses_wrong_lengths),
		cmocka_unit_test(refuses_hdr_len_mismatch),
		cmocka_unit_test(refuses_bad_magic_and_version),
		cmocka_unit_test(refuses_unknown_types),
		cmocka_unit_test(refuses_unterminated_names),
		cmocka_unit_test(refuses_invalid_model_names),
		cmocka_unit_test(refuses_nonzero_reserved_fields),
		cmocka_unit_test(refuses_out_of_range_integers),
		cmocka_unit_test(random_bytes_never_crash),
		cmocka_unit_test(mutated_valid_messages_never_crash),
		cmocka_unit_test(name_valid_follows_the_rule),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
