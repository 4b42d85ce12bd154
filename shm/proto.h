/*
 * shm/proto.h — the session protocol between libwsync and wsyncd.
 *
 * Transport: one AF_UNIX SOCK_SEQPACKET connection per client; one datagram
 * = one message; file descriptors travel as SCM_RIGHTS ancillary data of the
 * message that names them. Every message is a fixed-size struct per type,
 * little-endian, starting with struct wsync_msg_hdr. A message whose length,
 * magic, version or fields do not validate (wsync_msg_validate) is answered
 * with WSYNC_MSG_ERROR; a client that keeps doing it, sends fds where none
 * belong, or stops reading its socket is disconnected.
 *
 * Every client message is a request; the broker answers each (but a one-way
 * ACKED, below) with exactly one reply carrying the same hdr.seq: the *_OK type listed below or
 * WSYNC_MSG_ERROR. The client numbers its requests; replies arrive in
 * request order (one socket, one broker thread).
 *
 *   request         reply            fds client->broker   fds broker->client
 *   HELLO           HELLO_OK         -                    ctl (ro), session page (rw)
 *   PUB_OPEN        PUB_OPEN_OK      layout memfd         model page (rw), slab 0..n-1 (rw)
 *                                                         [the slabs not to another uid
 *                                                         while a slot holds a version]
 *   SUB_OPEN        SUB_OPEN_OK      -                    model page (ro) [+ layout (ro),
 *                                                         slab 0..n-1 (ro) if READY]
 *   ATTACH          ATTACH_OK        -                    layout (ro), slab 0..n-1 (ro)
 *   BEGIN           GRANT            -                    slab (rw) if GRANT_HAS_FD
 *   COMMIT          COMMIT_OK        -                    next slab (rw) if NEXT_HAS_FD
 *   ABORT           ABORT_OK         -                    -
 *   NOTIFY          NOTIFY_OK        eventfd              -
 *   CLOSE           CLOSE_OK         -                    -
 *   DELETE          DELETE_OK        -                    -
 *   WAIT_READERS    WAIT_READERS_OK  -                    -
 *   GPU_ATTACH      GPU_ATTACH_OK    -                    slot 0..n-1 on one GPU
 *                                                         (VMM POSIX fds)
 *   ACKED           ACKED_OK         -                    -
 *                   [none with WSYNC_ACKED_ONEWAY, not even an ERROR]
 *
 * Order rules (else -EPROTO): HELLO first and once; BEGIN/COMMIT/ABORT only
 * by the model's publisher; COMMIT/ABORT only for the slot and version of the
 * current grant; BEGIN while a grant is outstanding returns that same grant.
 *
 * Commit path (one hop to collectors): the publisher holds a grant {slot,
 * version}. It writes the slab, fills page->slots[slot] (version, step,
 * published_ns), stores page->latest = pack(version, slot) (seq_cst),
 * increments page->seq and FUTEX_WAKEs all waiters — collectors run now —
 * and then sends COMMIT. The broker checks that the COMMIT names exactly the
 * granted pair, books it (the ctl entry's latest, which collectors check
 * the page's word against), signals NOTIFY eventfds, and in COMMIT_OK
 * already grants the next slot when one is free (prefetch), so the next
 * BEGIN is local. A COMMIT that does not match the grant is answered -EPROTO
 * and the session loses the publishing role (not the session). A page word
 * that is neither the booked latest nor the grant is repaired, never served
 * (libclient/sub.c).
 *
 * A publisher whose socket closes (exit, crash, kill -9) loses its grant: if
 * it had already stored latest = its grant, the broker books it as committed
 * (and wakes waiters again); otherwise the slot is free again.
 */
#ifndef WSYNC_SHM_PROTO_H
#define WSYNC_SHM_PROTO_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"

#define WSYNC_PROTO_MAGIC     0x31595357u   /* "WSY1" */
#define WSYNC_PROTO_VERSION   3u
#define WSYNC_MSG_MAX_FDS     (3 + WSYNC_MAX_SLOTS)
#define WSYNC_ERRMSG_MAX      480

enum wsync_msg_type {
	WSYNC_MSG_HELLO = 1,
	WSYNC_MSG_HELLO_OK,
	WSYNC_MSG_PUB_OPEN,
	WSYNC_MSG_PUB_OPEN_OK,
	WSYNC_MSG_SUB_OPEN,
	WSYNC_MSG_SUB_OPEN_OK,
	WSYNC_MSG_ATTACH,
	WSYNC_MSG_ATTACH_OK,
	WSYNC_MSG_BEGIN,
	WSYNC_MSG_GRANT,
	WSYNC_MSG_COMMIT,
	WSYNC_MSG_COMMIT_OK,
	WSYNC_MSG_ABORT,
	WSYNC_MSG_ABORT_OK,
	WSYNC_MSG_NOTIFY,
	WSYNC_MSG_NOTIFY_OK,
	WSYNC_MSG_CLOSE,
	WSYNC_MSG_CLOSE_OK,
	WSYNC_MSG_ERROR,
	WSYNC_MSG_DELETE,
	WSYNC_MSG_DELETE_OK,
	WSYNC_MSG_WAIT_READERS,
	WSYNC_MSG_WAIT_READERS_OK,
	WSYNC_MSG_GPU_ATTACH,
	WSYNC_MSG_GPU_ATTACH_OK,
	WSYNC_MSG_ACKED,
	WSYNC_MSG_ACKED_OK,
	WSYNC_MSG_TYPE_END,
};

struct wsync_msg_hdr {
	uint32_t magic;          /* WSYNC_PROTO_MAGIC */
	uint16_t type;           /* enum wsync_msg_type */
	uint16_t version;        /* WSYNC_PROTO_VERSION */
	uint32_t len;            /* whole message, == wsync_msg_size(type) */
	uint32_t seq;            /* request number; a reply repeats it */
};
static_assert(sizeof(struct wsync_msg_hdr) == 16, "header size");

/* client -> broker */
struct wsync_msg_hello {
	struct wsync_msg_hdr hdr;
	uint32_t layout_version;         /* WSYNC_LAYOUT_VERSION of the client */
	uint32_t pid;                    /* informational; the broker uses SO_PEERCRED */
	char     name[WSYNC_INSTANCE_MAX];
};
/* broker -> client; fds: ctl (ro), session page (rw) */
struct wsync_msg_hello_ok {
	struct wsync_msg_hdr hdr;
	uint32_t session_id;
	uint32_t max_slots;
	uint64_t generation;
	uint64_t ctl_bytes;
	uint32_t broker_pid;
	uint32_t session_index;          /* this session's entry in the ctl session
	                                    table: its id there says the session lives */
};

struct wsync_model_ref {                 /* names a model in a request */
	uint32_t model_id;
	uint32_t reserved;
};

/* client -> broker; fd: a memfd holding n_tensors wsync_tensor_desc with the
 * offsets that wsync_layout_compute() gives (the broker recomputes them). */
struct wsync_msg_pub_open {
	struct wsync_msg_hdr hdr;
	char     model[WSYNC_NAME_MAX];
	uint32_t n_tensors;
	uint32_t slots;                  /* 0 = default */
	uint64_t bytes;                  /* slab size the client computed */
	uint64_t layout_hash;            /* wsync_layout_hash() of the descriptors */
	uint32_t flags;                  /* enum wsync_open_flags */
	uint16_t group_size;             /* ranks publishing the model together; 0/1 = one */
	uint16_t rank;                   /* this publisher's rank in the group */
	uint32_t n_parts;                /* wsync_shard entries after the descriptors
	                                    in the memfd (group_size > 1) */
	uint32_t group_timeout_ms;       /* a version must be committed by every rank
	                                    this long after the first COMMIT; 0 = no limit */
	/* A device model: its GPUs by UUID (n_devices 0 = a host model) and
	 * enum wsync_dev_flags. Part of the model's identity, like the layout. */
	uint32_t n_devices;
	uint32_t dev_flags;
	uint8_t  devices[WSYNC_MODEL_GPUS][16];
};
#define WSYNC_MAX_RANKS 32
enum wsync_open_flags {
	/* a model of that name with another layout and no publisher is deleted
	 * (its readers get -EIDRM) and created again with this layout */
	WSYNC_OPEN_REPLACE = 1u << 0,
	/* a rank of a group that keeps checksums: the broker may ask it to
	 * hash a complete version (WSYNC_COMMIT_HASH) */
	WSYNC_OPEN_CHECKSUM = 1u << 1,
};
/* broker -> client; fds: model page (rw), slab 0..n_slots-1 (rw). A
 * publisher of another uid than the broker's and root gets the page only
 * while any slot holds a version: each slab then comes with the grant of
 * its slot (WSYNC_GRANT_HAS_FD), free when granted. */
struct wsync_msg_pub_open_ok {
	struct wsync_msg_hdr hdr;
	uint32_t model_id;
	uint32_t n_slots;
	uint64_t bytes;
	uint64_t generation;
	uint64_t incarnation;            /* the ctl entry's, see layout.h */
};

struct wsync_msg_sub_open {
	struct wsync_msg_hdr hdr;
	char     model[WSYNC_NAME_MAX];
};
/* broker -> client; fds: model page (ro), then if state == READY the layout
 * (ro) and n_slots slabs (ro), as in ATTACH_OK */
struct wsync_msg_sub_open_ok {
	struct wsync_msg_hdr hdr;
	uint32_t model_id;
	uint32_t state;                  /* enum wsync_model_state */
	uint32_t n_slots;
	uint32_t n_tensors;
	uint64_t bytes;
	uint64_t layout_bytes;           /* size of the layout segment */
	uint64_t incarnation;            /* the ctl entry's, see layout.h */
	uint64_t base_incarnation;       /* the ctl entry's base (layout.h) */
};

/* client -> broker: send me the layout and slabs of a model I subscribed to */
struct wsync_msg_attach {
	struct wsync_msg_hdr hdr;
	struct wsync_model_ref m;
};
/* broker -> client; fds: model page (ro), layout (ro), slab 0..n_slots-1
 * (ro). An incarnation other than the subscription's, for the same name and
 * layout, is the same model in new memory (a publisher of another uid took
 * it over): the subscriber maps it all anew and goes on. */
struct wsync_msg_attach_ok {
	struct wsync_msg_hdr hdr;
	uint32_t model_id;
	uint32_t n_slots;
	uint32_t n_tensors;
	uint32_t reserved;
	uint64_t bytes;
	uint64_t layout_bytes;
	uint64_t incarnation;            /* the ctl entry's, see layout.h */
};

struct wsync_msg_begin {
	struct wsync_msg_hdr hdr;
	struct wsync_model_ref m;
};
enum wsync_grant_flags {
	WSYNC_GRANT_HAS_FD = 1u << 0,    /* the slab's rw fd is attached: map it
	                                    (again), any earlier mapping of this
	                                    slot is stale */
};
/* broker -> client; fd: slab (rw) if WSYNC_GRANT_HAS_FD. A busy model is
 * answered with WSYNC_MSG_ERROR -EBUSY saying who pins which slot. */
struct wsync_msg_grant {
	struct wsync_msg_hdr hdr;
	uint32_t model_id;
	uint32_t slot;
	uint64_t version;                /* the version this slab will carry */
	uint32_t flags;
	uint32_t reserved;
};

struct wsync_msg_commit {
	struct wsync_msg_hdr hdr;
	struct wsync_model_ref m;
	uint32_t slot;
	uint32_t reserved;
	uint64_t version;
	uint64_t step;
};
enum wsync_commit_ok_flags {
	WSYNC_NEXT_GRANTED = 1u << 0,    /* next_slot/next_version are a grant */
	WSYNC_NEXT_HAS_FD  = 1u << 1,    /* and its rw fd is attached */
	/* to the one rank of a group that forms the version's checksum: the
	 * version is visible with its slot's sum_pending word set to this
	 * rank's session id (shm/layout.h, libclient/checksum.c) */
	WSYNC_COMMIT_HASH  = 1u << 2,
};
struct wsync_msg_commit_ok {
	struct wsync_msg_hdr hdr;
	uint32_t model_id;
	uint32_t flags;                  /* enum wsync_commit_ok_flags */
	uint64_t version;                /* the version committed */
	uint32_t next_slot;
	uint32_t reserved;
	uint64_t next_version;
};

struct wsync_msg_abort {
	struct wsync_msg_hdr hdr;
	struct wsync_model_ref m;
	uint32_t slot;
	uint32_t reserved;
	uint64_t version;
};
struct wsync_msg_abort_ok {
	struct wsync_msg_hdr hdr;
	uint32_t model_id;
	uint32_t reserved;
};

/* client -> broker; fd: an eventfd the broker writes 1 to at every commit */
struct wsync_msg_notify {
	struct wsync_msg_hdr hdr;
	struct wsync_model_ref m;
};
struct wsync_msg_notify_ok {
	struct wsync_msg_hdr hdr;
	uint32_t model_id;
	uint32_t reserved;
};

/* close this session's publisher or subscription of a model */
enum wsync_close_what { WSYNC_CLOSE_PUB = 1, WSYNC_CLOSE_SUB = 2 };
struct wsync_msg_close {
	struct wsync_msg_hdr hdr;
	struct wsync_model_ref m;
	uint32_t what;                   /* enum wsync_close_what */
	uint32_t reserved;
};
struct wsync_msg_close_ok {
	struct wsync_msg_hdr hdr;
	uint32_t model_id;
	uint32_t reserved;
};

/* delete a model that has no publisher: its readers get -EIDRM, its
 * version numbers stay the floor of the name */
struct wsync_msg_delete {
	struct wsync_msg_hdr hdr;
	char     model[WSYNC_NAME_MAX];
};
struct wsync_msg_delete_ok {
	struct wsync_msg_hdr hdr;
	uint64_t hwm;                    /* the name's version floor */
};

/* publisher -> broker: answer once n_readers subscribers (0 = all current
 * ones) acquired a version >= version, or ERROR -ETIMEDOUT naming the
 * laggards after timeout_ms (UINT32_MAX = no limit).
 * n_readers with WSYNC_READERS_LEAD set: a publisher's max_lead wait
 * (libclient/pub_lead.c): every current subscriber that acquired a version
 * at all, the low bits the bound (for monitors), counted in the model's
 * lead_* stats. */
#define WSYNC_READERS_LEAD      0x80000000u
#define WSYNC_READERS_LEAD_MASK 0x7fffffffu
struct wsync_msg_wait_readers {
	struct wsync_msg_hdr hdr;
	struct wsync_model_ref m;
	uint64_t version;
	uint32_t n_readers;
	uint32_t timeout_ms;
};
struct wsync_msg_wait_readers_ok {
	struct wsync_msg_hdr hdr;
	uint32_t model_id;
	uint32_t n_readers;              /* how many had it */
	uint64_t version;
};

/* subscriber -> broker: this session acknowledged a version of the model
 * (wsync_sub_ack) while a WAIT_READERS on it pended (the ctl entry's
 * reader_waits): look at the model's waits now rather than at the next
 * poll. Carries nothing the broker trusts: it reads the session pages.
 * With WSYNC_ACKED_ONEWAY it is answered by nothing at all, not even an
 * ERROR (a refusal is counted in the ctl's bad_messages and logged): the
 * collector that acks does not wait for the broker once more per version.
 * Without it (flags 0, the form of earlier clients) ACKED_OK or ERROR. */
#define WSYNC_ACKED_ONEWAY 0x1u
struct wsync_msg_acked {
	struct wsync_msg_hdr hdr;
	uint32_t model_id;
	uint32_t flags;                  /* WSYNC_ACKED_* */
};
struct wsync_msg_acked_ok {
	struct wsync_msg_hdr hdr;
	uint32_t model_id;
	uint32_t reserved;
};

/* publisher or subscriber -> broker: send me the slots of my model on its
 * GPU number `device` (an index in the model's list, ctl entry dev_uuid) */
struct wsync_msg_gpu_attach {
	struct wsync_msg_hdr hdr;
	struct wsync_model_ref m;
	uint32_t device;
	uint32_t reserved;
};
/* broker -> client; fds: n_slots exported VMM allocations (POSIX fds), slot
 * order, each dev_bytes long */
struct wsync_msg_gpu_attach_ok {
	struct wsync_msg_hdr hdr;
	uint32_t model_id;
	uint32_t device;
	uint32_t n_slots;
	uint32_t reserved;
	uint64_t dev_bytes;
	uint64_t incarnation;
};

struct wsync_msg_error {
	struct wsync_msg_hdr hdr;
	int32_t  err;                    /* negative errno */
	uint16_t req_type;               /* type of the request refused */
	uint16_t reserved;
	uint32_t reserved2[2];
	char     msg[WSYNC_ERRMSG_MAX];  /* NUL-terminated detail */
};

union wsync_msg_any {
	struct wsync_msg_hdr hdr;
	struct wsync_msg_hello hello;
	struct wsync_msg_hello_ok hello_ok;
	struct wsync_msg_pub_open pub_open;
	struct wsync_msg_pub_open_ok pub_open_ok;
	struct wsync_msg_sub_open sub_open;
	struct wsync_msg_sub_open_ok sub_open_ok;
	struct wsync_msg_attach attach;
	struct wsync_msg_attach_ok attach_ok;
	struct wsync_msg_begin begin;
	struct wsync_msg_grant grant;
	struct wsync_msg_commit commit;
	struct wsync_msg_commit_ok commit_ok;
	struct wsync_msg_abort abort;
	struct wsync_msg_abort_ok abort_ok;
	struct wsync_msg_notify notify;
	struct wsync_msg_notify_ok notify_ok;
	struct wsync_msg_close close;
	struct wsync_msg_close_ok close_ok;
	struct wsync_msg_error error;
	struct wsync_msg_delete delete_;
	struct wsync_msg_delete_ok delete_ok;
	struct wsync_msg_wait_readers wait_readers;
	struct wsync_msg_wait_readers_ok wait_readers_ok;
	struct wsync_msg_gpu_attach gpu_attach;
	struct wsync_msg_gpu_attach_ok gpu_attach_ok;
	struct wsync_msg_acked acked;
	struct wsync_msg_acked_ok acked_ok;
};

static_assert(sizeof(struct wsync_msg_hello) == 88, "hello size");
static_assert(sizeof(struct wsync_msg_pub_open) == 320, "pub_open size");
static_assert(sizeof(struct wsync_msg_commit) == 48, "commit size");
static_assert(sizeof(struct wsync_msg_error) == 512, "error size");
static_assert(sizeof(union wsync_msg_any) == 512, "largest message");

/* Exact size of a message of this type, 0 for an unknown type. */
size_t wsync_msg_size(uint32_t type);
/* A short name ("COMMIT"), "?" for an unknown type. */
const char *wsync_msg_name(uint32_t type);
/* Zeroes a whole message of this type and fills its header: h must point
 * at the start of a message of at least wsync_msg_size(type) bytes (a
 * union wsync_msg_any is always large enough). */
void wsync_msg_init(struct wsync_msg_hdr *h, uint32_t type, uint32_t seq);
/*
 * Checks a received message of len bytes: magic, version, a known type,
 * len == hdr.len == wsync_msg_size(type), NUL-terminated names that are valid
 * (wsync_name_valid), reserved fields zero, small integers in range. Does not
 * check state (who may send what when). Returns 0 or -EPROTO / -EINVAL and
 * writes a reason into why (size whylen) when why != NULL.
 */
int wsync_msg_validate(const void *buf, size_t len, char *why, size_t whylen);
/* Model and client names: 1..max-1 bytes of [A-Za-z0-9._:/-], NUL inside
 * max, not starting with '.' or '/'. Tensor names allow any printable ASCII. */
int wsync_name_valid(const char *name, size_t max);
int wsync_tensor_name_valid(const char *name);

#endif /* WSYNC_SHM_PROTO_H */
