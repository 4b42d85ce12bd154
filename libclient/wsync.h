/*
 * wsync.h — client API of wsync, a shared-memory weight broker.
 *
 * A trainer (publisher) writes a new version of a model's weights into a slab
 * once and commits it; collectors (subscribers) map the slabs read-only and
 * take the newest version in O(1), with no copy, or wait for a newer one.
 *
 * Conventions, for every function below:
 *  - Return 0 on success or a negative errno value (-ETIMEDOUT, -ENOENT, ...).
 *    Nothing fails silently. wsync_strerror() names a code; wsync_errmsg()
 *    returns a thread-local detail string for the last failure in this thread.
 *  - Timeouts are int64_t nanoseconds: 0 polls once, WSYNC_FOREVER waits
 *    forever (a wait still returns -ENOTCONN when the broker goes away).
 *  - Output structs are filled only on success.
 *
 * Threads: a wsync_client and everything opened through it may be used from
 * several threads. Calls that talk to the broker are serialised by a lock in
 * the client. wsync_sub_acquire()/wsync_sub_release() take no lock and make
 * no system call once a slot is mapped; several threads may hold views of the
 * same subscription at once (up to WSYNC_MAX_VIEWS per client). One wsync_pub
 * must be driven by one thread at a time.
 *
 * Lifetimes: closing a handle releases what it owns. Close views before their
 * subscription, and publishers/subscriptions before their client; a view's
 * memory stays valid until it is released, even if the broker dies.
 *
 * When the broker goes away: after a crash, acquire still returns the last
 * version while no broker runs (nothing can change it); waits and every
 * call that talks to the broker return -ENOTCONN. Once a broker is started
 * again it takes the models over and marks the old generation superseded:
 * from then on acquire, latest and every other call return -ENOTCONN saying
 * so, never the dead broker's version. After a clean shutdown acquire
 * returns -ENOTCONN too. In every case: wsync_close() and connect again (the
 * Python package can do it for you: wsync.connect(..., reconnect=True)); a
 * restarted broker serves the same models at the same or newer versions, and
 * views held from the old generation keep their bytes.
 *
 * Deadlines: a call given a timeout returns by it, also when it needs the
 * broker and the broker does not answer (it gets at least 5 ms for one
 * round trip, so timeout 0 can still make one). Calls without a timeout
 * wait for an answer up to $WSYNC_REPLY_TIMEOUT_MS (30 s by default), then
 * return -ETIMEDOUT. A timeout never makes the client unusable: an answer
 * that comes later is recognised and dropped or kept for the next call.
 *
 * Cut off: a broker that ends a client's session while the client runs
 * (protocol errors, a client that stops reading its socket) stops counting
 * its views. From then on acquire and wait return -ECONNRESET, and views
 * held may be rewritten: wsync_view_check() says whether a view was still
 * protected after you read it. A publisher that stores a `latest` the broker
 * did not grant loses the publishing role only (its calls on that model
 * fail with -EPROTO); the same client's subscriptions go on.
 *
 * Trust: wsync_connect talks only to a broker running as this user or root,
 * or as the user named by $WSYNC_BROKER_UID (a uid or a user name, for a
 * broker of another user that admits you through --group), whose socket
 * lies in a directory no one else can write; anything else is -EPERM.
 *
 * fork(): do not use one client in both parent and child; connect anew in
 * the child.
 */
#ifndef WSYNC_H
#define WSYNC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

#define WSYNC_VERSION_MAJOR 0
#define WSYNC_VERSION_MINOR 2
#define WSYNC_VERSION_PATCH 0

#define WSYNC_NAME_MAX   128     /* tensor and model names, including the NUL */
#define WSYNC_MAX_DIMS   8
#define WSYNC_MAX_VIEWS  63      /* views held at once per client; up to
                                    31 of them kept (idle) by the threads
                                    that acquire through it, one each */
#define WSYNC_ALIGN      256     /* every tensor offset is a multiple of this */
#define WSYNC_FOREVER    ((int64_t)-1)

enum wsync_dtype {
	WSYNC_F32 = 1,
	WSYNC_F16,
	WSYNC_BF16,
	WSYNC_F64,
	WSYNC_I8,
	WSYNC_I16,
	WSYNC_I32,
	WSYNC_I64,
	WSYNC_U8,
	WSYNC_BOOL,
	/* Appended for models trained and served on GPUs: codes are only ever
	 * appended, a code never changes meaning (it is in shared memory). */
	WSYNC_U16,        /* unsigned 16-bit integer */
	WSYNC_U32,        /* unsigned 32-bit integer */
	WSYNC_U64,        /* unsigned 64-bit integer */
	WSYNC_F8_E4M3FN,  /* 8-bit float, 4 exponent and 3 mantissa bits, finite
	                     only (no infinities, NaN is S.1111.111): OCP FP8
	                     E4M3, torch.float8_e4m3fn, safetensors F8_E4M3 */
	WSYNC_F8_E5M2,    /* 8-bit float, 5 exponent and 2 mantissa bits, IEEE-like
	                     (infinities and NaNs): OCP FP8 E5M2,
	                     torch.float8_e5m2, safetensors F8_E5M2 */
};

typedef struct wsync_client wsync_client;
typedef struct wsync_pub wsync_pub;
typedef struct wsync_sub wsync_sub;

typedef struct wsync_tensor_desc {
	char     name[WSYNC_NAME_MAX];   /* NUL-terminated, unique in a model */
	uint32_t dtype;                  /* enum wsync_dtype */
	uint32_t ndim;                   /* 0 (a scalar) .. WSYNC_MAX_DIMS */
	uint64_t shape[WSYNC_MAX_DIMS];  /* entries past ndim must be 0 */
	uint64_t offset;                 /* byte offset in the slab; set by the
	                                    library, ignored on input */
} wsync_tensor_desc;

enum wsync_model_flags {
	/* No write guard even where it is the default: slabs on 2 MiB hugetlb
	 * pages (wsyncd --huge-pages), where it costs about 0.1 ms per 256 MiB
	 * published. On 4 KiB pages unguarded is the default anyway. */
	WSYNC_PUB_UNGUARDED = 1u << 0,
	/* Every version carries a checksum of its slab (XXH3-64 of each MiB,
	 * combined; docs/ARCHITECTURE.md, "Checksums"); collectors check a
	 * view with wsync_view_verify(). The default for host models, so this
	 * flag only asks for it on a device model with WSYNC_DEV_HOST_MIRROR
	 * (its mirror is hashed after the commit) and for the ranks of a
	 * group (wsync_pub_open_shard: one rank hashes each complete version
	 * after it appears, reading the others' parts). wsync_slab_copy_tensors and
	 * wsync_slab_copy hash what they copy as they copy it; what is
	 * written otherwise is hashed after the commit, while the version is
	 * already visible (one read pass over it, on a thread of the
	 * publisher's, which the next begin, commit or close waits for). */
	WSYNC_PUB_CHECKSUM = 1u << 1,
	/* Write guard: this publisher's slabs are mprotect()ed read-only at
	 * commit and writable again at begin, so a stray write after commit
	 * faults in the trainer instead of reaching collectors. It costs two
	 * page-table walks over the slab and a write fault per page per publish:
	 * on 4 KiB pages about as much as copying the slab, which is why it is
	 * opt-in there; on hugetlb slabs it is on by default (see above). */
	WSYNC_PUB_GUARDED = 1u << 2,
	/* If the model exists with another layout and has no publisher, it is
	 * deleted (its readers get -EIDRM and subscribe again; views they hold
	 * stay intact) and created with this layout. Versions go on above the
	 * old model's. Without it such an open fails with -EEXIST. */
	WSYNC_PUB_REPLACE = 1u << 3,
	/* No checksums: versions carry none, and wsync_view_verify() says
	 * -ENODATA. */
	WSYNC_PUB_NO_CHECKSUM = 1u << 4,
};

typedef struct wsync_model_opts {
	uint32_t slots;     /* slabs kept for this model: 0 = default (4),
	                       2 .. the broker's --max-slots */
	uint32_t flags;     /* enum wsync_model_flags, 0 = none */
	/* Sharded publishers (wsync_pub_open_shard): the number of ranks
	 * publishing the model together (0 or 1: one publisher), this one's
	 * rank, and how long after a version's first commit every rank must
	 * have committed it (0 = no limit). */
	uint32_t group_size, rank;
	uint32_t group_timeout_ms;
	/* Device models (docs/GPU.md): the GPUs the model lives on, by UUID
	 * ("GPU-...", wsync_gpu_uuid() names "cuda:N of this process"), at
	 * most WSYNC_MAX_DEVICES; 0 = a host model. Every version is on every
	 * one of them. device_flags: enum wsync_dev_flags. */
	uint32_t n_devices;
	const char *const *devices;
	uint32_t device_flags;
	uint32_t reserved32;
	uint64_t reserved[2];
} wsync_model_opts;

#define WSYNC_MAX_DEVICES 8              /* GPUs of one device model */

enum wsync_dev_flags {
	/* Keep a host copy of every version too (the model's host slabs): host
	 * views (wsync_sub_acquire) work, for CPU collectors and checkpoints,
	 * at the cost of one device-to-host copy per publish. Without it a
	 * device model has no host bytes and host views fail with -ENODEV. */
	WSYNC_DEV_HOST_MIRROR = 1u << 0,
};

/* ---- parts of tensors (tensor-parallel slices, sharded publishers) -------- */

#define WSYNC_SHARD_WHOLE 0xffffffffu    /* a wsync_shard's dim: the whole tensor */

/* A part of one tensor: indices [start, end) along dim (0 or 1), or the
 * whole tensor (dim WSYNC_SHARD_WHOLE, start and end ignored). */
typedef struct wsync_shard {
	uint32_t tensor;                 /* index in the layout */
	uint32_t dim;
	uint64_t start, end;
} wsync_shard;

/* Where a part lives in a slab: rows runs of row_bytes bytes, the first at
 * offset (from the slab's base), each stride bytes after the previous one.
 * A part along dim 0, or a whole tensor, is one run. */
typedef struct wsync_slice {
	uint64_t offset;
	uint64_t rows;
	uint64_t row_bytes;
	uint64_t stride;
} wsync_slice;

typedef struct wsync_view {              /* filled by acquire/wait, read-only */
	uint64_t version, step;
	int64_t  published_ns;           /* CLOCK_REALTIME of the commit */
	const void *base;
	size_t   bytes, n_tensors;
	const wsync_tensor_desc *tensors;/* n_tensors entries, in layout order */
	/* private */
	wsync_sub *priv_sub;
	uint32_t  priv_slot, priv_hazard;
} wsync_view;

typedef struct wsync_slab {              /* filled by begin, writable until
                                            commit/abort */
	void    *base;
	size_t   bytes, n_tensors;
	const wsync_tensor_desc *tensors;
	/* private */
	wsync_pub *priv_pub;
	uint64_t  priv_version;
	uint32_t  priv_slot, priv_pad;
} wsync_slab;

/* ---- errors ---------------------------------------------------------- */

/* A static, human-readable name for a return code (0 or -errno). */
const char *wsync_strerror(int err);
/* Detail of the last failure in the calling thread ("" if none). The string
 * stays valid until the next wsync call in this thread. */
const char *wsync_errmsg(void);
/* "0.2.0" */
const char *wsync_version_string(void);

/* ---- connection ------------------------------------------------------ */

/* Connects to a broker. endpoint: a socket path (contains a '/'), a broker
 * instance name ("default", "lab"), or NULL for $WSYNC_ENDPOINT or else the
 * default broker. client_name (may be NULL) is shown by monitoring tools.
 * Errors: -ECONNREFUSED/-ENOENT no broker there, -EPERM refused by the broker's
 * uid/group check or a socket served by an untrusted user (see Trust above),
 * -EPROTO protocol or layout version mismatch, -ENOMEM. */
int  wsync_connect(const char *endpoint, const char *client_name,
                   wsync_client **out);
/* wsync_connect, waiting up to timeout_ns (WSYNC_FOREVER: no limit) for a
 * broker that is not up yet (-ENOENT, -ECONNREFUSED: tried again with a
 * growing pause, up to 100 ms): for collectors started before, or while,
 * their broker (re)starts. -ETIMEDOUT naming the socket when none came;
 * other errors at once. */
int  wsync_connect_wait(const char *endpoint, const char *client_name, int64_t timeout_ns,
                        wsync_client **out);
/* Closes the connection and every pub/sub still open on it. NULL is a no-op. */
void wsync_close(wsync_client *c);
/* Fills buf with the socket path that wsync_connect(NULL, ...) would use.
 * -ENAMETOOLONG if it does not fit. */
int  wsync_default_endpoint(char *buf, size_t len);

/* ---- publisher --------------------------------------------------------- */

/* Declares a model's tensor layout and becomes its publisher. The model is
 * created if absent; if it exists its layout must be the same (names, dtypes,
 * shapes, order), else -EEXIST with the difference in wsync_errmsg().
 * One publisher per model at a time: -EBUSY names the current one.
 * -EINVAL for bad names/dtypes/shapes, -ENOSPC over the broker's shm limit. */
int  wsync_pub_open(wsync_client *c, const char *model,
                    const wsync_tensor_desc *tensors, size_t n_tensors,
                    const wsync_model_opts *opts, wsync_pub **out);
/*
 * One rank of a group of opts->group_size publishers of a model (FSDP or
 * tensor-parallel trainer ranks, each holding a shard): parts[] say which
 * parts of the layout this rank writes (whole tensors, or index ranges along
 * dim 0 or 1). The broker refuses (-EINVAL, naming the tensor and ranks)
 * parts that overlap another rank's, and once every rank opened, bytes no
 * rank writes. Every rank begins (all get the same slab), writes its parts
 * (wsync_slab_part gives where) and commits with the same step; the version
 * becomes visible, whole, when the last rank commits, and each rank's
 * wsync_pub_commit returns then. If a rank aborts, dies, gives another step
 * or misses the group deadline, the version is dropped (never visible, its
 * slot free) and the other ranks' commits fail with -ECONNABORTED (or
 * -EINVAL for steps) saying why; begin answers -EAGAIN-retried until every
 * rank is open again. Collectors see ordinary whole tensors.
 */
int  wsync_pub_open_shard(wsync_client *c, const char *model,
                          const wsync_tensor_desc *tensors, size_t n_tensors,
                          const wsync_model_opts *opts, const wsync_shard *parts,
                          size_t n_parts, wsync_pub **out);
/* Where part i of this publisher's declaration lives in a begun slab. */
int  wsync_slab_part(const wsync_slab *s, size_t i, wsync_slice *out);
/* Grants a writable slab for the next version. Waits up to timeout_ns while
 * every slot is held by readers, then -EBUSY (wsync_errmsg() says who holds
 * what). The slab's previous contents are unspecified. -EALREADY if a slab is
 * already begun and not committed or aborted. */
int  wsync_pub_begin(wsync_pub *p, int64_t timeout_ns, wsync_slab *out);
/* Publishes the begun slab as the newest version, stamped with step and the
 * current time; wakes every waiting collector. Returns once the broker has
 * checked the commit. version_out may be NULL. */
int  wsync_pub_commit(wsync_pub *p, uint64_t step, uint64_t *version_out);
/* Like commit, but returns as soon as the version is visible to collectors
 * (version_out is set then); the broker's confirmation is collected by
 * wsync_pub_wait_commit() or implicitly by the next begin/commit/close. */
int  wsync_pub_commit_async(wsync_pub *p, uint64_t step, uint64_t *version_out);
/* Waits for the broker's confirmation of the last async commit. Returns its
 * version in version_out (may be NULL), -ETIMEDOUT on time, -ENOENT if no
 * commit is outstanding. */
int  wsync_pub_wait_commit(wsync_pub *p, int64_t timeout_ns,
                           uint64_t *version_out);
/* A staleness bound (docs/LIVE.md): from now on wsync_pub_begin (and
 * begin_gpu) first waits, within its timeout, while a live collector still
 * acts with a version more than max_lead behind the one it would publish
 * (acquired less than latest + 1 - max_lead; version numbers). Collectors
 * that closed their subscription, died, or never acquired a version do not
 * count. On time, -ETIMEDOUT naming the collectors behind. The broker
 * counts the waits (wsyncctl show). 0 (the default) turns it off; -EINVAL
 * above 2^31 - 1. */
int  wsync_pub_set_max_lead(wsync_pub *p, uint32_t max_lead);
/* Drops the begun slab; the latest version is unchanged. -EINVAL if no slab
 * is begun. The version number granted to it is not reused. */
int  wsync_pub_abort(wsync_pub *p);
/* Aborts a begun slab, if any, and stops publishing. NULL is a no-op. */
void wsync_pub_close(wsync_pub *p);

/* ---- subscriber -------------------------------------------------------- */

/* Subscribes to a model, which need not exist yet. -EINVAL bad name,
 * -ENOSPC broker's model table full, -ENOBUFS this client already
 * subscribes to a quarter of the table's worth of models nobody publishes. */
int  wsync_sub_open(wsync_client *c, const char *model, wsync_sub **out);
/* The newest version, zero copy: view->base points into a read-only mapping
 * that does not change until wsync_sub_release(). -ENODATA if nothing was
 * published yet, -EAGAIN if WSYNC_MAX_VIEWS views are held, -ENOTCONN if the
 * broker has shut down. */
int  wsync_sub_acquire(wsync_sub *s, wsync_view *out);
/* A staleness bound for wsync_sub_acquire (docs/LIVE.md): a newest version
 * committed more than max_age_ns ago is not taken; acquire waits for a newer
 * one up to timeout_ns (WSYNC_FOREVER: no limit), then fails with -ETIMEDOUT
 * naming the trainer's last commit. 0 turns it off (the default). -EINVAL
 * for a negative max_age or timeout. */
int  wsync_sub_set_max_lag(wsync_sub *s, int64_t max_age_ns, int64_t timeout_ns);
/* Declares a staleness bound for monitors only (wsync-top, wsyncctl show
 * it against the lag; docs/LIVE.md): versions behind the newest (a caller
 * that enforces it itself, such as a policy that keeps a view across
 * calls: an acquire always takes the newest version) and age in ns (as
 * wsync_sub_set_max_lag, which declares its own). 0 = none; changes no
 * acquire. Per client and model: other subscriptions of this client to
 * the model share it, the last declared counts. -EINVAL for a negative
 * age. */
int  wsync_sub_declare_max_lag(wsync_sub *s, uint32_t versions, int64_t max_age_ns);
/* The newest version if it is newer than after_version, waiting up to
 * timeout_ns for one. -ETIMEDOUT on time; -ENOTCONN if the broker shuts down
 * or dies meanwhile (noticed within 200 ms); -EAGAIN at once if
 * WSYNC_MAX_VIEWS views are held (a wait holds the record of the view it
 * will return). Pass 0 to wait for any version. */
int  wsync_sub_wait(wsync_sub *s, uint64_t after_version, int64_t timeout_ns,
                    wsync_view *out);
/* Makes wsync_sub_wait spin (watching the model's futex word, no system
 * call) for up to spin_ns before it sleeps, once per call: for a collector
 * with a core of its own, a commit then reaches it within a cache-line
 * transfer instead of a wake-up. 0 (the default) sleeps at once. A spinning
 * waiter burns its CPU: on a machine with fewer cores than busy processes it
 * delays everyone, the publisher included. -EINVAL outside 0..1 s. */
int  wsync_sub_set_spin(wsync_sub *s, int64_t spin_ns);
/*
 * Acknowledging versions explicitly, for a publisher that waits until its
 * readers have *applied* a version (wsync_pub_wait_readers), not merely
 * taken it. The broker counts, per session and model, the newest version
 * the session acquired; by default every acquire raises that count.
 *
 * wsync_sub_set_ack(s, 1): acquires through s no longer raise it; the
 * count moves only by wsync_sub_ack. 0 turns that off again (the next
 * acquire raises it as usual). The count is the session's: other
 * subscriptions of the same client to the same model still raise it when
 * they acquire, so acknowledge through a client whose only subscription to
 * the model is s. -EINVAL if s is NULL.
 *
 * wsync_sub_ack(s, version): raises the session's count to version, for a
 * version this subscription acquired (1 .. the newest it acquired); a
 * lower count than one already there is left as it is. -EINVAL for 0 or a
 * version newer than any it acquired, -EIDRM if the model was deleted or
 * replaced since s opened it. No system call while no publisher waits
 * for the model's readers; while one does, one round trip to the broker,
 * which answers that wait at once (without it, the broker's next look, up
 * to 0.5 ms later for a young wait) — skipped, leaving it to that look,
 * when another thread is in a call on the same client.
 */
int  wsync_sub_set_ack(wsync_sub *s, int explicit_ack);
int  wsync_sub_ack(wsync_sub *s, uint64_t version);
/* Lets the broker reuse the view's slab. The view is cleared. */
void wsync_sub_release(wsync_sub *s, wsync_view *v);
/* 0 while the bytes of a held view are protected; -ECONNRESET once the
 * broker has cut this client off, after which the slab may be rewritten.
 * Call it after reading a view to know that what you read was one
 * version, whole (like a seqlock's check). Costs two loads. */
int  wsync_view_check(const wsync_view *v);
/* A file descriptor that becomes readable when a version newer than the last
 * one acquired through this subscription is committed (an eventfd; acquire and
 * wait drain it). Owned by the subscription; do not close it. Negative errno
 * on failure. */
int  wsync_sub_fd(wsync_sub *s);
/* Releases nothing held: release views first. NULL is a no-op. */
void wsync_sub_close(wsync_sub *s);

/* The newest version of the model without pinning anything (no system
 * call, no view): its number, step and commit time (any pointer may be
 * NULL), all of this model's even if it is deleted and its id reused
 * meanwhile (tests/integ/deleted_model_race). -ENODATA if nothing was
 * published yet (or its latest was withdrawn, docs/INVARIANTS.md section
 * 11), -EIDRM if the model was deleted, -ENOTCONN if the broker shut down,
 * -EAGAIN while the client holds WSYNC_MAX_VIEWS views (the read takes a
 * hazard record for a moment). */
int  wsync_sub_latest(wsync_sub *s, uint64_t *version, uint64_t *step,
                      int64_t *published_ns);

/* ---- models: list, delete, readers' acknowledgement --------------------- */

typedef struct wsync_model_info {
	char     name[WSYNC_NAME_MAX];
	uint32_t published;              /* 1 once a publisher gave it a layout */
	uint32_t n_tensors, n_slots;
	uint64_t bytes;                  /* one slab */
	uint64_t version, step;          /* latest (0 if none yet) */
	int64_t  published_ns;           /* CLOCK_REALTIME of the latest commit */
	uint32_t publishers, subscribers;/* sessions */
	uint64_t reserved[4];
} wsync_model_info;

/* The broker's models, read from its control segment (no round trip):
 * fills up to cap entries of out and sets *n to how many there are (which
 * may be more than cap). out may be NULL when cap is 0. Models merely
 * subscribed to (published == 0) are listed too. */
int  wsync_models(wsync_client *c, wsync_model_info *out, size_t cap, size_t *n);
/* Deletes a model that has no publisher (-EBUSY names it otherwise,
 * -ENOENT if there is no such model, -EPERM unless the caller's uid is the
 * model's owner, the uid that first published it, or the broker's uid or
 * root: tests/integ/model_owners). Publishing is not owner-only: an
 * admitted uid may open an existing model with the same layout and publish
 * new versions (docs/RELIABILITY.md says why). Its subscribers' calls return -EIDRM
 * from then on (waits wake); views they hold stay intact until released.
 * The name can be published again, at versions above the old ones. */
int  wsync_model_delete(wsync_client *c, const char *model);
/* Waits until n_readers subscribers of the model (0 = every current one)
 * have acquired a version >= version, up to timeout_ns: 0 and the number of
 * subscribers that have it in *have (may be NULL); -ETIMEDOUT naming the
 * ones behind; -EIDRM if the model was deleted. A subscriber that exits
 * stops counting. With no subscriber and n_readers 0 it returns at once.
 * A subscriber counts only versions of this model, acquired after it
 * subscribed to it, also when the model id was another deleted model's
 * before (tests/integ/readers_reused_id). */
int  wsync_pub_wait_readers(wsync_pub *p, uint64_t version, uint32_t n_readers,
                            int64_t timeout_ns, uint32_t *have);

/* ---- tensors ------------------------------------------------------------ */

/* Finds a tensor by name in a view or slab (O(1) average). -ENOENT if absent.
 * data/desc may be NULL. */
int  wsync_view_tensor(const wsync_view *v, const char *name,
                       const void **data, const wsync_tensor_desc **desc);
int  wsync_slab_tensor(const wsync_slab *s, const char *name,
                       void **data, const wsync_tensor_desc **desc);

/* Copies len bytes from src into a begun slab at byte offset, split across
 * `threads` threads (0 = as many as pay on this machine, measured by the
 * process's first large copy; copies under 4 MiB per thread stay on the
 * calling thread). Returns when the copy is complete. -EINVAL if the slab
 * is not begun or the range runs past it. Filling a large slab this way
 * approaches the machine's memory bandwidth rather than one core's. With
 * checksums (the default) the copy hashes the MiB blocks it fills whole as
 * it writes them: write nothing more into those bytes before the commit
 * except through another copy, or through a pointer wsync_slab_tensor()
 * hands out after it (which has its tensor hashed again at commit). */
int  wsync_slab_copy(const wsync_slab *s, uint64_t offset, const void *src,
                     size_t len, unsigned threads);
/* Copies every tensor of a begun slab from srcs[i] (exactly
 * wsync_tensor_bytes(&s->tensors[i]) bytes each; srcs[i] == NULL leaves
 * tensor i as it is, to be written some other way before the commit), in
 * one pass split across `threads` threads (0 = as many as pay, as above)
 * in blocks of 1 MiB, each copied with ordinary or streaming stores,
 * whichever the process's first large copy measured faster, and hashed in
 * the same pass when the model keeps checksums (see wsync_slab_copy). The
 * fastest way to publish weights that sit in the trainer's own buffers.
 * -EINVAL if the slab is not begun or srcs is NULL, -ENOMEM. */
int  wsync_slab_copy_tensors(const wsync_slab *s, const void *const *srcs,
                             unsigned threads);
/* wsync_slab_copy for any two buffers that do not overlap. */
int  wsync_copy(void *dst, const void *src, size_t len, unsigned threads);

#define WSYNC_SPREAD_MAX_NS ((int64_t)3600 * 1000000000)   /* an hour */

/* How a copy runs; all zero (or a NULL pointer) is what the calls above do. */
typedef struct wsync_copy_opts {
	uint32_t threads;    /* as their `threads`; 0 = as many as pay, or 1 if paced */
	uint32_t flags;      /* 0: none defined yet */
	/* > 0: a paced copy, for a trainer that shares its cores with
	 * collectors (docs/LIVE.md): instead of taking every core for a burst,
	 * it copies one MiB block at a time and sleeps between blocks, so that
	 * block k of n ends no earlier than (k + 1) / n * spread_ns after the
	 * start; the copy takes about spread_ns of wall time and the same CPU
	 * time as a burst, a block's worth at a time. A copy that falls behind
	 * (too few threads for the spread, a busy machine) does not sleep: it
	 * is never slower than an unpaced one would be on the same threads.
	 * Blocks are hashed as they are copied, as unpaced. 0 = as fast as
	 * possible; at most WSYNC_SPREAD_MAX_NS. */
	int64_t  spread_ns;
	uint64_t reserved[2];  /* 0 */
} wsync_copy_opts;

/* wsync_slab_copy, wsync_slab_copy_tensors and wsync_copy with options
 * (NULL = defaults). -EINVAL, with a message, for a negative or larger
 * than WSYNC_SPREAD_MAX_NS spread_ns and for flags or reserved fields not
 * 0, besides the errors of the call without options. */
int  wsync_slab_copy_with(const wsync_slab *s, uint64_t offset, const void *src,
                          size_t len, const wsync_copy_opts *opts);
int  wsync_slab_copy_tensors_with(const wsync_slab *s, const void *const *srcs,
                                  const wsync_copy_opts *opts);
int  wsync_copy_with(void *dst, const void *src, size_t len, const wsync_copy_opts *opts);

/* The slice of part `part` of tensor d. -EINVAL (with a message) for a dim
 * the tensor does not have or a range outside it. */
int  wsync_shard_slice(const wsync_tensor_desc *d, const wsync_shard *part,
                       wsync_slice *out);
/* The slice of part k of K equal parts of tensor d along dim (as
 * tensor-parallel inference splits: row-parallel dim 0, column-parallel
 * dim 1). -EINVAL unless 0 <= k < K and K divides the dim's size. */
int  wsync_tensor_part(const wsync_tensor_desc *d, uint32_t dim, uint32_t k, uint32_t K,
                       wsync_slice *out);
/* Copies a slice out of a view's bytes (base = view->base) into dst,
 * contiguous (rows * row_bytes bytes). */
void wsync_slice_read(void *dst, const void *base, const wsync_slice *s);
/* Copies contiguous src into a slice of a begun slab (base = slab->base). */
void wsync_slice_write(void *base, const void *src, const wsync_slice *s);
/* Recomputes the checksum of a view's slab (on as many threads as pay) and
 * compares it with the one its publisher stored: 0 if they match, -EBADMSG
 * if not (wsync_errmsg() gives both; the mismatch is counted for monitors:
 * wsyncctl models, metrics), -ENODATA if the version was published without
 * a checksum (WSYNC_PUB_NO_CHECKSUM, a device model, a group whose ranks
 * did not ask with WSYNC_PUB_CHECKSUM) or its
 * publisher died before it stored it, -EINVAL if v is not a live view. A
 * checksum its publisher still forms after the commit is waited for, 10 s
 * at most (-ETIMEDOUT). */
int  wsync_view_verify(const wsync_view *v);

/* Bytes of one element of dtype, 0 if unknown. */
size_t      wsync_dtype_size(uint32_t dtype);
/* "f32", "bf16", ... or "?" */
const char *wsync_dtype_name(uint32_t dtype);
/* Bytes of a tensor's data (product of its shape times the element size). */
uint64_t    wsync_tensor_bytes(const wsync_tensor_desc *d);

/* ---- GPUs (docs/GPU.md) ----
 * wsync names GPUs by UUID ("GPU-8e1f0c4a-..."), the same in every process;
 * an ordinal means different GPUs under different CUDA_VISIBLE_DEVICES. */
#define WSYNC_GPU_UUID_LEN 41   /* "GPU-" + 36 characters + NUL */
/* The UUID of GPU `ordinal` as this process sees it (what cuda:<ordinal>
 * means to its CUDA runtime, CUDA_VISIBLE_DEVICES honoured), into buf of at
 * least WSYNC_GPU_UUID_LEN bytes. -ENODEV if there is no such GPU, -ENOENT
 * without a CUDA driver (libcuda.so.1, or $WSYNC_LIBCUDA), -ENOTSUP for a
 * driver older than CUDA 11.4, -ENOSYS if libwsync was built without the
 * CUDA Toolkit headers, -EINVAL for a short buffer. */
int  wsync_gpu_uuid(int ordinal, char *buf, size_t len);
/* The ordinal under which this process sees the GPU named by uuid (a full
 * UUID, "GPU-" optional, any case): >= 0, or -ENODEV if it does not see it,
 * and the errors of wsync_gpu_uuid. */
int  wsync_gpu_ordinal(const char *uuid);

/*
 * Device slabs. A model opened with opts->devices keeps every version on
 * each of those GPUs, in memory the broker allocates (CUDA VMM) and shares
 * with the processes that use it; tensors sit at the same offsets as in a
 * host slab. The caller's thread must have a CUDA context current (the one
 * torch or the CUDA runtime made) on the GPU it names; streams are CUstream
 * values passed as void * (NULL = the legacy default stream).
 *
 * Publisher: wsync_pub_begin_gpu grants the next version's slot and gives
 * its device pointer on one of the model's GPUs; fill it with kernels or
 * copies on your stream (wsync_dslab_copy_from_device copies tensors).
 * wsync_pub_commit_gpu copies the version to the model's other GPUs (peer
 * to peer where the GPUs allow it, else through pinned host memory) and
 * to the host mirror, synchronises the stream, and only then commits: no
 * collector sees a version whose bytes are still being copied anywhere.
 * The publisher must see every GPU of the model (CUDA_VISIBLE_DEVICES).
 * wsync_pub_abort drops a begun device slab like a host one.
 *
 * Collector: wsync_sub_acquire_gpu / wsync_sub_wait_gpu pin the newest
 * version exactly as their host forms do and give its read-only device
 * pointer on the named GPU, zero copy (-ENODEV if the model is not on that
 * GPU: copy a host view instead). Kernels read it in place. Release with
 * the stream(s) that read it: wsync_sub_release_gpu synchronises the
 * stream before giving the slot back, because the broker may rewrite the
 * slot as soon as it is released.
 *
 * The first call on a GPU maps the model's slots there (a broker round
 * trip, within the call's timeout where it has one, and one map per slot);
 * later ones make no system call on the host path. Without a CUDA driver these return -ENOENT; built without the CUDA
 * headers, -ENOSYS.
 */
typedef struct wsync_dslab {             /* filled by wsync_pub_begin_gpu */
	uint64_t base;                   /* CUdeviceptr on the named GPU, writable */
	size_t   bytes, n_tensors;
	const wsync_tensor_desc *tensors;
	/* private */
	wsync_slab priv_slab;
	uint32_t   priv_device, priv_pad;
} wsync_dslab;

typedef struct wsync_dview {             /* filled by acquire/wait_gpu, read-only */
	uint64_t version, step;
	int64_t  published_ns;
	uint64_t base;                   /* CUdeviceptr on the named GPU, read-only */
	size_t   bytes, n_tensors;
	const wsync_tensor_desc *tensors;
	/* private */
	wsync_view priv_view;
	uint32_t   priv_device, priv_pad;
} wsync_dview;

int  wsync_pub_begin_gpu(wsync_pub *p, const char *uuid, int64_t timeout_ns,
                         wsync_dslab *out);
/* The device pointer of a tensor of a begun device slab. */
int  wsync_dslab_tensor(const wsync_dslab *s, const char *name, uint64_t *dptr,
                        const wsync_tensor_desc **desc);
/* Copies n tensors from device buffers (src[i] is the tensor in layout
 * order, NULL = leave it) into the slab, asynchronously on stream. */
int  wsync_dslab_copy_from_device(wsync_dslab *s, const uint64_t *src, size_t n,
                                  void *stream);
int  wsync_pub_commit_gpu(wsync_pub *p, void *stream, uint64_t step,
                          uint64_t *version_out);

int  wsync_sub_acquire_gpu(wsync_sub *s, const char *uuid, wsync_dview *out);
int  wsync_sub_wait_gpu(wsync_sub *s, const char *uuid, uint64_t after_version,
                        int64_t timeout_ns, wsync_dview *out);
int  wsync_dview_tensor(const wsync_dview *v, const char *name, uint64_t *dptr,
                        const wsync_tensor_desc **desc);
/* No stream read the view (no kernel or copy of yours touched it): for
 * wsync_sub_release_gpu, which then synchronises nothing. */
#define WSYNC_STREAM_NONE ((void *)(intptr_t)-1)
/* Synchronises stream (NULL: the legacy default stream, as everywhere
 * here; WSYNC_STREAM_NONE: none), then releases the view. */
void wsync_sub_release_gpu(wsync_sub *s, wsync_dview *v, void *stream);
/* Copies len bytes at offset off of a view into the caller's device buffer
 * dst on stream. From a host view it returns once the copy has read them
 * (the view may be released right after); from a device view it returns at
 * once, and wsync_sub_release_gpu with the same stream waits for it. */
int  wsync_view_copy_to_device(const wsync_view *v, uint64_t off, uint64_t dst,
                               size_t len, void *stream);
int  wsync_dview_copy_to_device(const wsync_dview *v, uint64_t off, uint64_t dst,
                                size_t len, void *stream);
/* wsync_slice_read for a device view: copies a slice of it (from
 * wsync_tensor_part, the tensor-parallel part a collector reads, or
 * wsync_shard_slice) into dst contiguous (rows * row_bytes bytes),
 * asynchronously on stream like wsync_dview_copy_to_device. -EINVAL for a
 * slice outside the view. */
int  wsync_dview_slice_read(const wsync_dview *v, const wsync_slice *s, uint64_t dst,
                            void *stream);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_H */
