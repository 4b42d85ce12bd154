"""Client, Publisher, Slab, Subscriber and View: the Python face of libwsync.

Ownership mirrors the C library: a View keeps its Subscriber alive, a
Subscriber or Publisher its Client, and every array handed out keeps its View
or Slab alive. So the garbage collector never releases or unmaps memory an
array still points at, and nothing else unmaps it either: a C handle is
freed only once no View or Slab taken from it is left (see _handle).
View.release() (and leaving its `with` block) lets the slab be rewritten
once no array of the view is alive (until then the library's view stays
held, so an array never shows a later version). A client that follows a
restarted broker (reconnect=True) moves its publishers and subscribers to
the new connection; views of the old one keep it until they are released
(see _reconnect). See docs/PYTHON.md.
"""
import ctypes
import errno as _errno
import math
import numbers
import operator
import os
import re
import threading
import time
import weakref
from collections import namedtuple
from collections.abc import Mapping
from typing import Any, Dict, List, Optional

import numpy as np

from . import _dtypes, _gpu, _module, _reconnect, _shard, _views
from ._errors import (ClosedError, NotConnectedError, WsyncError, WsyncTimeoutError, check,
                      error_from_rc)
from ._gpu import DeviceSlab, DeviceView
from ._ends import SlabLife, ViewLife
from ._handle import Handle, no_pickle as _no_pickle
from ._lib import (DEV_HOST_MIRROR, FOREVER, NAME_MAX, MAX_DIMS, SHARD_WHOLE, SPREAD_MAX_S,
                   CCopyOpts, CSlab, CView, ModelInfo, ModelOpts, Shard, Slice, TensorDesc, lib)

# Long waits are cut into slices of this length so that Python signal
# handlers (Ctrl-C) run and close() from another thread is noticed. Each
# slice is an ordinary futex wait in the library: a commit wakes it at once.
_SLICE_S = 0.25

ModelStatus = namedtuple("ModelStatus", "name published version step published_ns "
                         "n_tensors n_slots nbytes publishers subscribers")
ModelStatus.__doc__ = """One model of a broker (Client.models()): its name,
whether a publisher ever gave it a layout, the latest version, step and commit
time (ns, CLOCK_REALTIME; 0 if none yet), its tensors, slots, slab size, and
how many sessions publish and subscribe."""

LatestVersion = namedtuple("LatestVersion", "version step published_ns")
LatestVersion.__doc__ = """The newest version of a model (Subscriber.latest())."""

TensorSpec = namedtuple("TensorSpec", "name dtype shape offset nbytes")
TensorSpec.__doc__ = """One tensor of a model's layout: name, dtype ("f32", ...),
shape (a tuple), byte offset in the slab and size in bytes."""


def _enc(s, what):
    if s is None:
        return None
    if isinstance(s, os.PathLike):
        s = os.fspath(s)
    if isinstance(s, str):
        s = s.encode()
    if not isinstance(s, bytes):
        raise TypeError("wsync: %s must be a str, not %s" % (what, type(s).__name__))
    if b"\0" in s:
        raise ValueError("wsync: %s must not contain a NUL character: %r" % (what, s))
    return s


def _is_int(value):
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _uint(value, what, bits=64):
    """value as an int in 0 .. 2**bits - 1, else TypeError/ValueError naming
    what (no silent conversion: no bools, floats, strings or wrap-around)."""
    if not _is_int(value):
        raise TypeError("wsync: %s must be an int, not %s" % (what, type(value).__name__))
    v = operator.index(value)
    if not 0 <= v < 1 << bits:
        raise ValueError("wsync: %s must be in 0 .. 2**%d - 1, not %d" % (what, bits, v))
    return v


def _timeout_s(timeout):
    """A validated timeout in seconds: None for forever (None or math.inf),
    else a float >= 0."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError("wsync: timeout must be None, math.inf or a number of seconds "
                        ">= 0, not %s" % type(timeout).__name__)
    t = float(timeout)
    if math.isnan(t) or t < 0:
        raise ValueError("wsync: timeout must be None, math.inf or a number of seconds "
                         ">= 0, not %r" % (timeout,))
    return None if math.isinf(t) else t


def _copy_opts(threads, spread):
    """wsync_copy_opts for a copy: threads checked as _uint, spread None or
    seconds in 0 .. SPREAD_MAX_S (0 and None: as fast as possible)."""
    threads = _uint(threads, "threads", 32)
    ns = 0
    if spread is not None:
        if isinstance(spread, bool) or not isinstance(spread, numbers.Real):
            raise TypeError("wsync: spread must be None or a number of seconds, not %s"
                            % type(spread).__name__)
        try:
            s = float(spread)
        except OverflowError:                 # an int beyond any float
            s = math.inf
        if not 0 <= s <= SPREAD_MAX_S:        # NaN fails too
            raise ValueError("wsync: spread must be None or 0 .. %d seconds (the time to "
                             "spread the copy over), not %r" % (SPREAD_MAX_S, spread))
        ns = int(s * 1e9)
    return CCopyOpts(threads=threads, spread_ns=ns)


def _timeout_ns(t):
    """Nanoseconds for a timeout already checked by _timeout_s."""
    return FOREVER if t is None else min(int(t * 1e9), 2**63 - 1)


def _sliced(handle, call, timeout, retry_rc):
    """Calls call(timeout_ns) in slices until it returns something other than
    retry_rc (one code or a tuple of them) or the timeout is used up;
    returns the last return code."""
    retry = retry_rc if isinstance(retry_rc, tuple) else (retry_rc,)
    if timeout is not None:
        ns = _timeout_ns(timeout)
        if ns <= int(_SLICE_S * 1e9):
            return call(ns)
        deadline = time.monotonic() + timeout
    else:
        deadline = None
    while True:
        if deadline is None:
            ns = int(_SLICE_S * 1e9)
        else:
            left = deadline - time.monotonic()
            ns = max(0, int(min(left, _SLICE_S) * 1e9))
        rc = call(ns)
        if rc not in retry:
            return rc
        if deadline is not None and time.monotonic() >= deadline:
            return rc
        if handle._closed:
            raise ClosedError("wsync: %s was closed while waiting" % handle._what)


def _left(deadline):
    """Seconds to deadline (a time.monotonic() value; None: forever)."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _deadline(t):
    return None if t is None else time.monotonic() + t


_LIB_WITHIN = re.compile(r"within -?\d+ [nm]s")


def _fail(rc, timeout=None, what=None):
    """The exception for a failed sliced call. For -ETIMEDOUT the library's
    own detail is kept (it says, e.g., that the model was never published
    and to check its name), with its "within N ns", which names the last
    slice of a sliced wait, replaced by the caller's timeout; what is the
    detail only where the library gave none."""
    err = error_from_rc(rc)
    if rc == -_errno.ETIMEDOUT:
        within = "within %s" % _fmt_timeout(timeout)
        if _LIB_WITHIN.search(err.detail):
            err.detail = _LIB_WITHIN.sub(within, err.detail, count=1)
        elif not err.detail and what is not None:
            err.detail = "%s %s" % (what, within)
    return err


def _fmt_timeout(t):
    return "forever" if t is None else "%g s" % t


def _read_layout(ptr, n):
    specs = []
    for i in range(n):
        d = ptr[i]
        code = d.dtype
        shape = tuple(int(x) for x in d.shape[:d.ndim])
        nbytes = _dtypes.ITEMSIZE[code] * math.prod(shape)
        specs.append(TensorSpec(d.name.decode("utf-8", "replace"), _dtypes.NAME[code],
                                shape, int(d.offset), nbytes))
    return specs


def _make_descs(tensors):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("wsync: a model needs at least one tensor")
    arr = (TensorDesc * len(tensors))()
    for i, t in enumerate(tensors):
        try:
            name, dtype, shape = t
        except (TypeError, ValueError):
            raise TypeError("wsync: tensors are (name, dtype, shape) triples, got %r"
                            % (t,)) from None
        bname = _enc(name, "tensor name")
        if len(bname) >= NAME_MAX:
            raise ValueError("wsync: tensor name %r is longer than %d bytes"
                             % (name, NAME_MAX - 1))
        shape = (int(shape),) if isinstance(shape, int) else tuple(int(x) for x in shape)
        if len(shape) > MAX_DIMS:
            raise ValueError("wsync: tensor %r has %d dimensions, at most %d"
                             % (name, len(shape), MAX_DIMS))
        if any(x < 0 for x in shape):
            raise ValueError("wsync: tensor %r has a negative dimension %r" % (name, shape))
        d = arr[i]
        d.name = bname
        d.dtype = _dtypes.code_of(dtype)
        d.ndim = len(shape)
        for k, x in enumerate(shape):
            d.shape[k] = x
    return arr


_raw = _views.raw
_rw = _views.rw
_ro = _views.ro
_np_view = _views.np_view
_torch_view = _views.torch_view
_has_arrays = _views.has_arrays


# ---- client -----------------------------------------------------------------

_DEFAULT = object()      # _recover: the client's reconnect_timeout
_MAX_MOVES = 8           # reconnects one call makes at most


class Client(Handle):
    """A connection to a broker. Use as a context manager or call close().

    With reconnect=True (the default) it follows a broker that restarts:
    a call that finds the broker gone connects again (within its own
    timeout, or reconnect_timeout for calls without one), and publishers
    and subscribers reopen themselves on the new connection; see
    docs/PYTHON.md, "When the broker restarts"."""

    _what = "client"
    _free_name = "wsync_close"

    def __init__(self, endpoint=None, name=None, timeout=0, reconnect=True,
                 reconnect_timeout=10.0):
        self._init_handle()
        self._children = weakref.WeakSet()
        self._bend = _enc(endpoint, "endpoint")
        self._bname = _enc(name, "client name")
        t = _timeout_s(timeout)
        if not isinstance(reconnect, bool):
            raise TypeError("wsync: reconnect must be True or False, not %s"
                            % type(reconnect).__name__)
        self.endpoint = endpoint
        self.name = name
        self.reconnect = reconnect
        self.reconnect_timeout = _timeout_s(reconnect_timeout)
        self.reconnects = 0               # how often it followed a restart
        self._relock = threading.Lock()   # one thread reconnects at a time
        self._watch_stop = None
        try:
            ptr = _reconnect.first_connect(self._bend, self._bname, t)
        except BaseException:
            self._closed = True
            raise
        self._cell = self._new_cell(ptr, None, lib)

    def ref(self, model: str) -> "ModelRef":
        """A picklable ModelRef(endpoint, model) to connect to this broker
        in another process (a Client itself cannot be pickled)."""
        return ModelRef(self.endpoint if self.endpoint is not None else default_endpoint(),
                        _model_name(model))

    def __repr__(self):
        return "<wsync.Client %s%s>" % (self.endpoint or "(default)",
                                       " closed" if self._closed else "")

    # -- following a restarted broker (see _reconnect) --

    def _reconnect_deadline(self):
        t = self.reconnect_timeout
        return None if t is None else time.monotonic() + t

    def _reconnect(self, seen, deadline):
        """A call on connection seen (a cell of ours) found the broker gone:
        moves this client to a new connection, waiting for a broker until
        deadline (None: forever). True once the client is on a newer
        connection than seen (by this call or another thread's), False if
        no broker answered in time."""
        if self._cell is not seen:
            return True
        left = _left(deadline)
        if not self._relock.acquire(timeout=-1 if left is None else left):
            return self._cell is not seen
        try:
            if self._cell is not seen:
                return True
            if self._closed:
                raise ClosedError("wsync: client is closed")
            ptr = _reconnect.connect_ptr(self._bend, self._bname, deadline,
                                         lambda: self._closed)
            if ptr is None:
                return False
            with self._lock:
                if self._closed:
                    lib.wsync_close(ptr)
                    raise ClosedError("wsync: client is closed")
                new = self._new_cell(ptr, None, lib)
                old, self._cell = self._cell, new
                self.reconnects += 1
            old.retire()
        finally:
            self._relock.release()
        _reconnect.log.warning("wsync: client %r: the broker at %s went away; connected "
                               "to the broker there again (reconnect %d)",
                               self.name or "", _reconnect.endpoint_text(self._bend),
                               self.reconnects)
        for k in list(self._children):
            if isinstance(k, Subscriber) and k._notify is not None:
                try:
                    k._follow_now()
                except Exception as e:      # its next call tries again
                    _reconnect.log.warning("wsync: subscriber %r did not reopen: %s",
                                           k.model, e)
        return True

    def _recover(self, cell, rc, deadline=_DEFAULT, err=None):
        """After rc < 0 from a call of this client on cell: the cell to try
        again on (held by the call instead of cell) once it reconnected,
        if rc is -ENOTCONN and it follows restarts; else raises the error."""
        if err is None:
            err = error_from_rc(rc)
        if rc != -_errno.ENOTCONN or not self.reconnect:
            raise err
        if deadline is _DEFAULT:
            deadline = self._reconnect_deadline()
        if not self._reconnect(cell, deadline):
            raise _reconnect.unreached(err, self, self.reconnect_timeout)
        with self._lock:
            new = self._cell
            new.uses += 1
        cell.unuse()
        return new

    def _watch(self):
        """Starts the watcher thread (once): for fileno() users."""
        with self._lock:
            if self._watch_stop is None and self.reconnect and not self._closed:
                self._watch_stop = _reconnect.start_watcher(self)

    def _watch_once(self):
        cell = self._enter()
        try:
            n = ctypes.c_size_t()
            rc = lib.wsync_models(cell.ptr, None, 0, ctypes.byref(n))
            if rc == -_errno.ENOTCONN:
                self._reconnect(cell, time.monotonic() + _SLICE_S)
        finally:
            self._leave(cell)

    # -- calls --

    def models(self) -> List[ModelStatus]:
        """The broker's models as a list of ModelStatus, read from its
        control segment (no round trip). Names merely subscribed to are
        listed with published=False."""
        cell = self._enter()
        try:
            n = ctypes.c_size_t()
            for _ in range(_MAX_MOVES):
                rc = lib.wsync_models(cell.ptr, None, 0, ctypes.byref(n))
                if rc == 0:
                    cap = n.value + 8
                    infos = (ModelInfo * cap)()
                    rc = lib.wsync_models(cell.ptr, infos, cap, ctypes.byref(n))
                    if rc == 0:
                        break
                cell = self._recover(cell, rc)
            check(rc)
            return [ModelStatus(i.name.decode("utf-8", "replace"), bool(i.published),
                                i.version, i.step, i.published_ns, i.n_tensors, i.n_slots,
                                i.bytes, i.publishers, i.subscribers)
                    for i in infos[:min(n.value, cap)]]
        finally:
            self._leave(cell)

    def delete(self, model: str) -> None:
        """Deletes a model that has no publisher (BusyError names it
        otherwise; WsyncError(ENOENT) if there is none). Its subscribers get
        RemovedError from then on; views they hold stay valid until released.
        The name can be published again, at versions above the old ones."""
        name = _enc(_model_name(model), "model")
        cell = self._enter()
        try:
            for _ in range(_MAX_MOVES):
                rc = lib.wsync_model_delete(cell.ptr, name)
                if rc == 0:
                    return
                cell = self._recover(cell, rc)
            check(rc)
        finally:
            self._leave(cell)

    def publisher(self, model: str, tensors: Any, slots: int = 0, guard: bool = False,
                  flags: int = 0, replace: bool = False, checksum: Optional[bool] = None,
                  unguarded: bool = False, devices: Any = None,
                  host_mirror: bool = False, max_lead: int = 0) -> "Publisher":
        """Declares model's layout and becomes its publisher.

        tensors: a list of (name, dtype, shape); dtype "f32", "f16", "bf16",
        "f64", "i8", "i16", "i32", "i64", "u8", "bool", "u16", "u32", "u64",
        "f8_e4m3fn", "f8_e5m2", a numpy dtype or a torch dtype. Options (wsync_model_opts): slots, the slabs kept for
        the model (0 = the broker's default, 4; else 2 .. the broker's
        --max-slots); guard=True sets PUB_GUARDED (slabs read-only between
        commits, so a stray write after commit faults in the trainer; it
        costs about one more copy of the slab per publish, hence off by
        default); replace=True sets PUB_REPLACE (a model of that name with
        another layout and no publisher is deleted and created again; its
        readers get RemovedError and subscribe again); every version of a
        host model carries a checksum of its slab (hashed while it is
        copied in; View.verify checks it): checksum=False sets
        PUB_NO_CHECKSUM (none), checksum=True sets PUB_CHECKSUM (also for a
        device model with host_mirror); unguarded=True says PUB_UNGUARDED, the
        default, explicitly; flags, more wsync_model_flags bits, ORed in.

        devices makes a device model (docs/GPU.md): the GPUs every version
        lives on, each a UUID ("GPU-...") or an ordinal / "cuda:N" /
        torch.device meaning that GPU as this process sees it (translated
        to its UUID, which is what other processes see); publish with
        begin_gpu / publish_gpu. host_mirror=True keeps a host copy of
        every version too, for host views (CPU collectors, checkpoints).

        max_lead=k (a staleness bound, docs/LIVE.md; 0 = none): begin waits
        while a live collector still acts with a version more than k behind
        the one it would publish (see Publisher.set_max_lead).

        Raises LayoutError (-EEXIST) if the model exists with another
        layout or other devices (and not replace), BusyError if it has
        another publisher, NoDeviceError if the broker cannot put it on
        those GPUs."""
        if checksum is not None and not isinstance(checksum, bool):
            raise TypeError("wsync: checksum must be True, False or None (the default)")
        if not isinstance(unguarded, bool):
            raise TypeError("wsync: unguarded must be True or False")
        if guard and unguarded:
            raise ValueError("wsync: guard=True and unguarded=True contradict each other")
        opts = _model_opts(slots, guard, flags, replace)
        opts.flags |= ({True: _PUB_CHECKSUM, False: PUB_NO_CHECKSUM, None: 0}[checksum] |
                       (_PUB_UNGUARDED if unguarded else 0))
        descs = _make_descs(tensors)
        uuids = _gpu.device_opts(opts, devices, host_mirror)
        max_lead = _uint(max_lead, "max_lead", 31)
        pub = Publisher(self, model, descs, opts, devices=uuids)
        if max_lead:
            try:
                pub.set_max_lead(max_lead)
            except BaseException:
                pub.close()
                raise
        return pub

    def publisher_like(self, model: str, state_dict: Any, slots: int = 0, guard: bool = False,
                       flags: int = 0, replace: bool = False,
                       checksum: Optional[bool] = None,
                       unguarded: bool = False, devices: Any = None,
                       host_mirror: bool = False, max_lead: int = 0) -> "Publisher":
        """publisher() with the layout of a dict of numpy arrays or torch
        tensors (CUDA ones too; names, dtypes and shapes, in the dict's
        order), or of an nn.Module's state_dict()."""
        state_dict = _module.state_of(state_dict)
        tensors = [(k, _dtypes.code_of_array(v), tuple(np.shape(v) if not
                    _dtypes.is_torch_tensor(v) else v.shape)) for k, v in state_dict.items()]
        return self.publisher(model, tensors, slots, guard, flags, replace, checksum,
                              unguarded, devices, host_mirror, max_lead)

    def publisher_shard(self, model: str, tensors: Any, rank: int, world: int,
                        parts: Any = None, timeout_ms: int = 0, slots: int = 0,
                        guard: bool = False, flags: int = 0,
                        checksum: bool = False) -> "Publisher":
        """One rank of a group of world publishers of model (FSDP or
        tensor-parallel trainer ranks, wsync_pub_open_shard; see
        docs/SHARDING.md). tensors: the whole model's layout, as for
        publisher(). parts: what this rank writes, each a tensor name (the
        whole tensor) or (name, dim, start, end) with dim 0 or 1. Every
        rank begins, writes its parts (Slab.write_part / copy_parts) and
        commits with the same step; the version appears, whole, when the
        last rank commits. timeout_ms: how long after a version's first
        commit every rank must have committed it (0: no limit).
        checksum=True (PUB_CHECKSUM): versions carry a checksum, which the
        lowest rank that asked forms after each version appears (it reads
        the other ranks' parts once); a group's default is none.

        tensors may instead be this rank's state_dict (a mapping or a
        module) of ShardedTensors (FSDP's SHARDED_STATE_DICT), DTensors and
        plain tensors: the layout is then the tensors' global shapes and,
        with parts None, the parts are this rank's local shards (a plain or
        replicated tensor is written by rank 0 only; see wsync._shard).
        Publisher.publish(state_dict, step) then writes this rank's parts."""
        world = _uint(world, "world", 32)
        rank = _uint(rank, "rank", 32)
        if not world or rank >= world:
            raise ValueError("wsync: rank must be in 0 .. world - 1 (world %d, rank %d)"
                             % (world, rank))
        if isinstance(tensors, Mapping) or callable(getattr(tensors, "state_dict", None)):
            layout, derived = _shard.plan(_module.state_of(tensors), rank)
            if parts is None and not derived:
                raise ValueError("wsync: rank %d holds no part of any tensor of this "
                                 "state_dict; every rank of a group writes one" % rank)
            tensors, parts = layout, derived if parts is None else parts
        elif parts is None:
            raise TypeError("wsync: publisher_shard needs parts with a layout list (or a "
                            "state_dict instead of the layout)")
        descs = _make_descs(tensors)
        if not isinstance(checksum, bool):
            raise TypeError("wsync: checksum must be True or False, not %s"
                            % type(checksum).__name__)
        opts = _model_opts(slots, guard, flags)
        opts.flags |= _PUB_CHECKSUM if checksum else 0
        opts.group_size, opts.rank = world, rank
        opts.group_timeout_ms = _uint(timeout_ms, "timeout_ms", 32)
        return Publisher(self, model, descs, opts, _parts(descs, parts))

    def subscriber(self, model: str) -> "Subscriber":
        """Subscribes to model, which need not exist yet."""
        return Subscriber(self, model)

    def _adopt(self, child):
        self._children.add(child)

    def close(self):
        """Closes every publisher and subscriber opened on it, then the
        connection: at once, or once the last array taken from a view of
        this client is gone (see Subscriber.close). Idempotent."""
        if not self._mark_closed():
            return
        stop = self._watch_stop
        if stop is not None:
            stop.set()
        kids = list(self._children)
        for k in kids:
            if isinstance(k, Publisher):
                k.close()
        for k in kids:
            k.close()
        self._retire()


PUB_UNGUARDED = 1 << 0      # enum wsync_model_flags (the default)
PUB_CHECKSUM = 1 << 1
PUB_GUARDED = 1 << 2
PUB_REPLACE = 1 << 3
PUB_NO_CHECKSUM = 1 << 4
_PUB_UNGUARDED, _PUB_CHECKSUM = PUB_UNGUARDED, PUB_CHECKSUM


def _model_opts(slots, guard, flags, replace=False):
    opts = ModelOpts()
    opts.slots = _uint(slots, "slots", 32)
    if not isinstance(guard, bool):
        raise TypeError("wsync: guard must be True or False, not %s" % type(guard).__name__)
    if not isinstance(replace, bool):
        raise TypeError("wsync: replace must be True or False, not %s" % type(replace).__name__)
    opts.flags = (_uint(flags, "flags", 32) | (PUB_GUARDED if guard else 0) |
                  (PUB_REPLACE if replace else 0))
    return opts


PartSpec = namedtuple("PartSpec", "name tensor dim start end shape")
PartSpec.__doc__ = """One part a publisher_shard rank writes: the tensor's
name and index, dim (0, 1, or None for the whole tensor), the index range
[start, end) along dim, and the part's shape."""


def _parts(descs, parts):
    """(ctypes array of wsync_shard, [PartSpec]) for publisher_shard."""
    layout = _read_layout(descs, len(descs))
    index = {s.name: i for i, s in enumerate(layout)}
    parts = list(parts)
    if not parts:
        raise ValueError("wsync: a rank needs at least one part")
    arr = (Shard * len(parts))()
    specs = []
    for i, p in enumerate(parts):
        if isinstance(p, str):
            name, dim, start, end = p, None, 0, 0
        else:
            try:
                name, dim, start, end = p
            except (TypeError, ValueError):
                raise TypeError("wsync: a part is a tensor name or (name, dim, start, end), "
                                "not %r" % (p,)) from None
        if name not in index:
            raise KeyError("wsync: part %r: no such tensor in the layout" % (name,))
        t = index[name]
        shape = layout[t].shape
        if dim is None:
            arr[i].dim = SHARD_WHOLE
        else:
            if dim not in (0, 1) or isinstance(dim, bool) or dim >= len(shape):
                raise ValueError("wsync: part of %r: dim must be 0 or 1 (of %d dims), not %r"
                                 % (name, len(shape), dim))
            start, end = _uint(start, "start"), _uint(end, "end")
            if not start < end <= shape[dim]:
                raise ValueError("wsync: part of %r: [%d, %d) is not inside dim %d of %s"
                                 % (name, start, end, dim, shape))
            arr[i].dim, arr[i].start, arr[i].end = dim, start, end
            shape = shape[:dim] + (end - start,) + shape[dim + 1:]
        arr[i].tensor = t
        specs.append(PartSpec(name, t, dim, start, end, shape))
    return arr, specs


def _model_name(model):
    if not isinstance(model, str):
        raise TypeError("wsync: a model name must be a str, not %s" % type(model).__name__)
    return model


class ModelRef(namedtuple("ModelRef", "endpoint model")):
    """How to reach a model from another process: a broker endpoint (a
    socket path or instance name; None for $WSYNC_ENDPOINT or the default
    broker) and a model name. Picklable, unlike Client and its handles:
    pass it to multiprocessing workers, which call connect() there."""

    __slots__ = ()

    def connect(self, name=None, **kwargs):
        """A new Client to this broker (close it, or use it in `with`);
        kwargs as for wsync.connect (timeout, reconnect, ...)."""
        return Client(self.endpoint, name, **kwargs)

    def subscriber(self, client):
        """client.subscriber(model)."""
        return client.subscriber(self.model)


def default_endpoint() -> str:
    """The socket path connect(None) would use ($WSYNC_ENDPOINT, else the
    default broker's socket)."""
    buf = ctypes.create_string_buffer(4096)
    check(lib.wsync_default_endpoint(buf, len(buf)))
    return buf.value.decode()


def connect(endpoint: Optional[str] = None, name: Optional[str] = None, *,
            timeout: Optional[float] = 0, reconnect: bool = True,
            reconnect_timeout: Optional[float] = 10.0) -> "Client":
    """Connects to a broker: endpoint is a socket path (contains a '/'), an
    instance name ("default", "lab"), or None for $WSYNC_ENDPOINT, else the
    default broker. name is shown by monitoring tools and in BusyError
    messages. Returns a Client (a context manager).

    timeout: how long to wait for a broker that is not up yet (seconds;
    None: forever; 0, the default: NoBrokerError at once). A
    NoBrokerError that is also a TimeoutError when none came in time.

    reconnect: follow a broker that restarts (True, the default): calls
    that find it gone connect again and go on, views taken before stay
    valid until released; with False, every call after a restart raises
    BrokerRestartedError (a NotConnectedError) and the caller connects
    again. reconnect_timeout: how long a call without a timeout of its own
    (acquire, latest, models, publish without timeout, ...) waits for the
    broker to come back (None: forever); waits and begin use their own."""
    return Client(endpoint, name, timeout, reconnect, reconnect_timeout)



# ---- publishers and subscribers: opened on a client's connection ------------


class _Child(Handle):
    """A Publisher or Subscriber: its C handle is opened on its client's
    current connection, and opened again on the next one when the client
    follows a restarted broker (_follow)."""

    def _init_child(self, client):
        self._init_handle(client)
        self.client = client
        self._follow_lock = threading.Lock()
        self.moves = 0            # connections it followed the client to

    def _open_cell(self, open_fn):
        """Our first cell: open_fn(client ptr, out) on the client's
        connection, following a restart (reconnect_timeout)."""
        client = self.client
        ccell = client._enter()
        try:
            for _ in range(_MAX_MOVES):
                ptr = ctypes.c_void_p()
                rc = open_fn(ccell.ptr, ctypes.byref(ptr))
                if rc >= 0:
                    self._cell = self._new_cell(ptr.value, ccell, lib)
                    return
                ccell = client._recover(ccell, rc)
            check(rc)
        finally:
            client._leave(ccell)

    def _call(self):
        """_enter(), moved to the client's current connection first if the
        client followed a restart since our last call."""
        cell = self._enter()
        if cell.parent is not self.client._cell:
            try:
                cell = self._follow(cell)
            except BaseException:
                self._leave(cell)
                raise
        return cell

    def _follow(self, cell):
        """Reopens this handle on the client's current connection unless it
        is there already; cell is the one the calling call holds. Returns
        the cell the call holds now (the old one is released by it)."""
        with self._follow_lock:
            cur = self._cell
            client = self.client
            if cur.parent is not client._cell:
                ccell = client._enter()
                try:
                    new = self._new_cell(self._reopen(ccell), ccell, lib)
                finally:
                    client._leave(ccell)
                try:
                    self._moved(cur, new)
                except BaseException:
                    new.retire()
                    raise
                self._take_cell(new)
                self.moves += 1
            with self._lock:
                new = self._cell
                new.uses += 1
        cell.unuse()
        return new

    def _follow_now(self):
        cell = self._enter()
        try:
            cell = self._follow(cell)
        finally:
            self._leave(cell)

    def _recover(self, cell, rc, deadline=_DEFAULT, t=None, on_timeout=None):
        """After rc < 0 from a call on cell: if it is -ENOTCONN and the
        client follows restarts, reconnects (waiting for a broker until
        deadline, t seconds after the call began: None forever; by default
        the client's reconnect_timeout) and reopens this handle; returns
        the cell to try again on, held by the call instead of cell. Else
        raises the library's error for rc (read at once). If no broker
        answers in time: on_timeout(err) if given, else err saying so."""
        err = error_from_rc(rc)
        client = self.client
        if rc != -_errno.ENOTCONN or not client.reconnect:
            raise err
        if deadline is _DEFAULT:
            deadline, t = client._reconnect_deadline(), client.reconnect_timeout
        seen = cell.parent
        for _ in range(_MAX_MOVES):
            if not client._reconnect(seen, deadline):
                if on_timeout is not None:
                    raise on_timeout(err)
                raise _reconnect.unreached(err, client, t)
            try:
                return self._follow(cell)
            except NotConnectedError as e:     # the new broker went away too
                err, seen = e, client._cell
        raise err

    def _reopen(self, ccell):
        raise NotImplementedError

    def _moved(self, old, new):
        """Hook: what must follow the handle to cell new (before it is used)."""


# ---- publisher --------------------------------------------------------------

_ABORT = object()      # Publisher._finish without a step


class Publisher(_Child):
    """The only writer of one model. Drive it from one thread at a time
    (calls are serialised by a lock)."""

    _what = "publisher"
    _free_name = "wsync_pub_close"

    def __init__(self, client, model, descs, opts, parts=None, devices=()):
        self._init_child(client)
        self.model = model
        self.slots = opts.slots
        self.flags = opts.flags
        self.devices = devices     # the GPUs (UUIDs) of a device model; () for a host one
        self.host_mirror = bool(opts.device_flags & DEV_HOST_MIRROR)
        self._slab = None
        self.max_lead = 0          # set_max_lead; applied again after a restart
        self._layout = _read_layout(descs, len(descs))   # offsets filled at begin
        self._layout_final = False
        self._drive = threading.RLock()
        self._srcs = None          # the source pointer array of copy_from, reused
        self._async_cell = None    # the connection of the last commit_async
        self.parts = None if parts is None else parts[1]   # PartSpec of a group rank
        self.rank = opts.rank if parts is not None else None
        self.world = opts.group_size if parts is not None else None
        # what opening it again after a broker restart takes
        self._bname = _enc(_model_name(model), "model")
        self._descs, self._opts = descs, opts
        self._cparts = None if parts is None else parts[0]
        try:
            self._open_cell(self._open)
        except BaseException:
            self._closed = True
            raise
        client._adopt(self)

    def _open(self, cptr, out):
        if self._cparts is None:
            return lib.wsync_pub_open(cptr, self._bname, self._descs, len(self._descs),
                                      ctypes.byref(self._opts), out)
        return lib.wsync_pub_open_shard(cptr, self._bname, self._descs, len(self._descs),
                                        ctypes.byref(self._opts), self._cparts,
                                        len(self.parts), out)

    def _reopen(self, ccell):
        if self.devices:
            raise NotConnectedError(_errno.ENOTCONN, "not connected",
                                    "model '%s' lives on GPUs: a device model's publisher "
                                    "is not opened again on a restarted broker; close it "
                                    "and open a new one" % self.model)
        ptr = ctypes.c_void_p()
        rc = self._open(ccell.ptr, ctypes.byref(ptr))
        if rc < 0:
            raise error_from_rc(rc)
        return ptr.value

    def _moved(self, old, new):
        slab = self._slab
        if slab is not None and slab._cell is old:
            # begun on the connection that is gone: its commit fails, once
            slab._lost = True
            self._slab = None
        if self.max_lead:
            check(lib.wsync_pub_set_max_lead(new.ptr, self.max_lead))

    def set_max_lead(self, max_lead: int) -> None:
        """A staleness bound (docs/LIVE.md; wsync_pub_set_max_lead): from
        now on begin (and publish) first waits, within its timeout, while a
        live collector still acts with a version more than max_lead behind
        the one it would publish; then TimeoutError naming the collectors
        behind. Collectors that died, closed their subscription or never
        acquired a version do not count. 0 turns it off."""
        max_lead = _uint(max_lead, "max_lead", 31)
        cell = self._call()
        try:
            with self._drive:
                check(lib.wsync_pub_set_max_lead(cell.ptr, max_lead))
                self.max_lead = max_lead
        finally:
            self._leave(cell)

    def ref(self):
        """A picklable ModelRef to this model (see Client.ref)."""
        return self.client.ref(self.model)

    @property
    def guarded(self):
        """True if this publisher was opened with guard=True."""
        return bool(self.flags & PUB_GUARDED)

    def __repr__(self):
        return "<wsync.Publisher %r%s>" % (self.model, " closed" if self._closed else "")

    @property
    def layout(self):
        """The tensors as TensorSpec (offsets known after the first begin)."""
        return list(self._layout)

    def begin(self, timeout: Optional[float] = None) -> "Slab":
        """Grants a writable Slab for the next version. Waits up to timeout
        seconds (None: forever) while readers hold every slot, then raises
        BusyError naming the holders. The slab's previous contents are
        unspecified: write every tensor. On a client that follows
        restarts, a broker that went away is waited for within timeout."""
        return self._begin(timeout, CSlab,
                           lambda ptr, ns, cs: lib.wsync_pub_begin(ptr, ns, ctypes.byref(cs)),
                           lambda cs, cell: Slab(self, cs, cell), check, True)

    def _begin(self, timeout, ctype, call, make, checker, follow):
        t = _timeout_s(timeout)
        deadline = _deadline(t)
        cell = self._call()
        try:
            with self._drive:
                cs = ctype()
                for _ in range(_MAX_MOVES):
                    if self._slab is not None:
                        raise WsyncError(_errno.EALREADY, "a slab is already begun",
                                         "model '%s': commit or abort the begun slab first"
                                         % self.model)
                    c = cell
                    # a max_lead wait's slices end in ETIMEDOUT
                    rc = _sliced(self, lambda ns: call(c.ptr, ns, cs),
                                 None if t is None else _left(deadline),
                                 (-_errno.EBUSY, -_errno.ETIMEDOUT) if self.max_lead
                                 else -_errno.EBUSY)
                    if rc != -_errno.ENOTCONN or not follow:
                        break
                    cell = self._recover(cell, rc, deadline, t)
                checker(rc)
                if not self._layout_final:
                    self._layout = _read_layout(cs.tensors, cs.n_tensors)
                    self._layout_final = True
                slab = make(cs, cell)
                self._slab = slab
                return slab
        finally:
            self._leave(cell)

    def begin_gpu(self, device: Any, timeout: Optional[float] = None) -> DeviceSlab:
        """Grants a DeviceSlab for the next version: its memory on device
        (one of the model's GPUs: a UUID, an ordinal, "cuda:N" or a
        torch.device, as this process sees it), writable. This thread needs
        a CUDA context current on it (torch makes one on first use). Waits
        like begin(). NoDeviceError if the model is not on that GPU."""
        return _gpu.begin_gpu(self, device, timeout)

    def commit_gpu(self, step: int, stream: Any = None) -> int:
        """Commits the begun DeviceSlab (DeviceSlab.commit(step, stream)):
        fans the version out to the model's other GPUs, synchronises the
        stream, then makes it visible. Returns the version."""
        slab = self._slab
        if not isinstance(slab, DeviceSlab):
            raise WsyncError(_errno.ENOENT, "no device slab is begun",
                             "model '%s': begin_gpu() first" % self.model)
        return slab.commit(step, stream)

    def publish_gpu(self, weights: Any, step: int, device: Any = None, stream: Any = None,
                    timeout: Optional[float] = None) -> int:
        """Publishes weights (an nn.Module on a GPU, or a mapping of torch
        CUDA tensors or __cuda_array_interface__ objects) as the next
        version stamped with step: begin_gpu(device), the driver copies
        every tensor into the slab on stream, commit. device: by default
        the GPU the torch tensors are on, else the model's first. stream: by
        default torch's current stream (where torch uses CUDA), else the
        NULL stream. Returns the version; nothing is published if anything
        fails."""
        return _gpu.publish_gpu(self, weights, _uint(step, "step"), device, stream, timeout)

    def publish(self, weights: Any, step: int, timeout: Optional[float] = None,
                threads: int = 0, spread: Optional[float] = None) -> int:
        """Publishes weights (an nn.Module, whose state_dict() is taken, or
        a mapping as for Slab.copy_from) as the next version stamped with
        step: begin(timeout), one copy_from call, commit. Returns the
        version. Nothing is published if anything fails. On a
        publisher_shard rank, weights is the rank's state_dict and only
        its parts are written (Slab.copy_parts; threads and spread are not
        used).

        spread (seconds): copy at a pace instead of in a burst, for a
        trainer whose cores also run collectors (docs/LIVE.md): one thread
        (unless threads says more) copies a MiB at a time and sleeps between
        blocks so that the copy takes about spread seconds, the same CPU
        time as a burst a block at a time; the version becomes visible at
        the end, spread later than a burst would make it. None or 0: as
        fast as possible. See Slab.copy_from."""
        return self._publish(weights, step, timeout, threads, Slab.commit, spread)

    def publish_async(self, weights: Any, step: int, timeout: Optional[float] = None,
                      threads: int = 0, spread: Optional[float] = None) -> int:
        """publish() that returns as soon as collectors can see the version
        (Slab.commit_async); wait_ack() collects the broker's confirmation
        (or the next publish does)."""
        return self._publish(weights, step, timeout, threads, Slab.commit_async, spread)

    def wait_ack(self, timeout: Optional[float] = None) -> int:
        """The broker's confirmation of the last publish_async (see
        wait_commit); returns its version."""
        return self.wait_commit(timeout)

    def _publish(self, weights, step, timeout, threads, commit, spread=None):
        step = _uint(step, "step")
        _copy_opts(threads, spread)         # checked before the begin
        src = _module.state_of(weights)
        for attempt in range(3):
            begun = False
            try:
                with self.begin(timeout) as slab:
                    begun = True
                    if self.parts is not None:
                        slab.copy_parts(_shard.sources(self, src))   # a publisher_shard rank
                    else:
                        slab.copy_from(src, threads, spread)
                    return commit(slab, step)
            except NotConnectedError:
                # the broker went away between begin and commit: the next
                # begin follows it (the weights are still the caller's). A
                # begin that failed so waited its timeout for a broker already
                if not begun or not self.client.reconnect or self._closed or attempt == 2:
                    raise


    def wait_readers(self, version: int, timeout: Optional[float] = None, n: int = 0) -> int:
        """Waits until n subscribers (0: every current one) have acquired
        version or a newer one; returns how many have. TimeoutError on time,
        naming the subscribers behind; a subscriber that exits stops
        counting. The synchronous mode of weight updates: publish, then
        wait_readers(version). Subscribers that acknowledge explicitly
        (Subscriber.set_ack) count once they ack()."""
        version = _uint(version, "version")
        n = _uint(n, "n", 32)
        t = _timeout_s(timeout)
        deadline = _deadline(t)
        cell = self._call()
        try:
            have = ctypes.c_uint32()
            for _ in range(_MAX_MOVES):
                ns = FOREVER if t is None else int(_left(deadline) * 1e9)
                rc = lib.wsync_pub_wait_readers(cell.ptr, version, n, ns, ctypes.byref(have))
                if rc >= 0:
                    break
                cell = self._recover(cell, rc, deadline, t)
            check(rc)
            return have.value
        finally:
            self._leave(cell)

    def wait_commit(self, timeout: Optional[float] = None) -> int:
        """Waits for the broker's confirmation of the last commit_async();
        returns its version. TimeoutError on time; WsyncError(ENOENT) if no
        commit is outstanding; NotConnectedError if the broker went away
        before it confirmed (a restarted broker has the version if it was
        visible when the broker died)."""
        t = _timeout_s(timeout)
        cell = self._enter()
        try:
            with self._drive:
                if self._async_cell is not None and self._async_cell is not cell:
                    self._async_cell = None
                    raise NotConnectedError(_errno.ENOTCONN, "not connected",
                                            "model '%s': the broker went away before it "
                                            "confirmed the last commit_async" % self.model)
                v = ctypes.c_uint64()
                rc = _sliced(self, lambda ns: lib.wsync_pub_wait_commit(
                    cell.ptr, ns, ctypes.byref(v)), t, -_errno.ETIMEDOUT)
                if rc < 0:
                    raise _fail(rc, t, "model '%s': no commit confirmation" % self.model)
                self._async_cell = None
                return v.value
        finally:
            self._leave(cell)

    def _check_names(self, src):
        """KeyError unless mapping src holds exactly the model's tensors."""
        layout = self._layout
        if not isinstance(src, Mapping):
            raise TypeError("wsync: copy_from needs a mapping of tensors, not %s"
                            % type(src).__name__)
        if len(src) != len(layout) or any(s.name not in src for s in layout):
            names = {s.name for s in layout}
            extra = [k for k in src if k not in names]
            missing = [s.name for s in layout if s.name not in src]
            raise KeyError("wsync: copy_from needs exactly the tensors of model %r%s%s"
                           % (self.model,
                              "; missing: %s" % ", ".join(missing) if missing else "",
                              "; unknown: %s" % ", ".join(map(str, extra)) if extra else ""))

    def _finish(self, slab, call, step=_ABORT):
        if step is not _ABORT:
            step = _uint(step, "step")
        cell = self._call()           # moves with the client: the slab may be lost
        try:
            with self._drive:
                if slab._lost:
                    # begun on a connection to a broker that went away
                    slab._lost = False
                    slab._retire()
                    if step is _ABORT:
                        return None
                    raise NotConnectedError(
                        _errno.ENOTCONN, "not connected",
                        "model '%s': the broker went away while this slab was begun; the "
                        "publisher is on a new connection now: begin again (this slab "
                        "was not published)" % self.model)
                if slab._done or self._slab is not slab:
                    raise ClosedError("wsync: this slab was already committed or aborted")
                ptr = slab._cell.ptr
                if step is _ABORT:
                    rc = call(ptr)
                    v = None
                else:
                    out = ctypes.c_uint64()
                    rc = call(ptr, step, ctypes.byref(out))
                    v = out.value
                # Success or failure, the library no longer treats the slab
                # as begun (a failed commit drops it; it is read-only again).
                err = error_from_rc(rc) if rc < 0 else None
                slab._retire()
                self._slab = None
                if err is not None:
                    raise err
                if call is lib.wsync_pub_commit_async:
                    self._async_cell = slab._cell
                return v
        finally:
            self._leave(cell)

    def close(self):
        """Aborts a begun slab, if any, and stops publishing: no more
        begin(). The library's publisher is closed (its slabs unmapped, the
        model free for another publisher) at once, or once the last array
        taken from one of its slabs is gone. Idempotent."""
        if not self._mark_closed():
            return
        slab, self._slab = self._slab, None
        if slab is not None:
            if slab._device and self._gen == self._gens[0]:
                slab._sync_copies()
            if (_has_arrays(slab) or slab._device) and self._gen == self._gens[0]:
                lib_abort = self._lib_abort
                lib_abort(slab._cell.ptr)   # now; the mapping stays
            slab._retire()
        self._retire()

    _lib_abort = lib.wsync_pub_abort

class Slab(SlabLife):
    """A writable slab for the next version, from Publisher.begin().

    As a context manager: an exception inside the block aborts the slab;
    leaving the block normally requires that slab.commit(step) (or
    slab.abort()) was called, else the slab is aborted and RuntimeError is
    raised. Nothing is ever committed implicitly."""

    _device = False
    _what = "slab"

    def __init__(self, pub, cs, cell):
        self.publisher = pub
        self._c = cs
        self._cell = cell          # the publisher's connection it was begun on
        self._lost = False         # that connection is gone (Publisher._moved)
        self._done = False
        self._rawref = None
        self._arrays = []          # weakrefs to numpy arrays handed out
        self.nbytes = cs.bytes
        self._by_name = {s.name: s for s in pub._layout}
        self.version = None        # set by commit / commit_async
        self._pinned = True        # uses the C publisher (mappings) while arrays live
        cell.use()

    def __repr__(self):
        return "<wsync.Slab of %r %s>" % (self.publisher.model,
                                         "done" if self._done else "begun")

    @property
    def layout(self):
        return list(self.publisher._layout)

    @property
    def tensors(self):
        return [s.name for s in self.publisher._layout]

    @property
    def active(self):
        return not self._done

    def _spec(self, name):
        if self._done:
            raise ClosedError("wsync: slab already committed or aborted")
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError("wsync: model %r has no tensor %r" % (self.publisher.model, name)) \
                from None

    def _buf(self):
        return _raw(self, self._c.base, self._c.bytes)

    def numpy(self, name: str) -> np.ndarray:
        """A writable numpy array over tensor name in the slab (zero copy;
        bf16 as uint16 bits, f8_e4m3fn and f8_e5m2 as uint8 bits). Valid
        until commit/abort: then this array (not views derived from it) is
        made read-only, and writing through anything derived from it kills
        the process with SIGSEGV."""
        spec = self._spec(name)
        self._written(name)
        arr = _np_view(_rw(self._buf()), spec)
        self._arrays.append(weakref.ref(arr))
        return arr

    def torch(self, name: str) -> Any:
        """A writable torch tensor over tensor name in the slab (zero copy;
        dtypes as View.torch gives them). Valid until commit/abort; writing
        to it after that kills the process with SIGSEGV (torch tensors
        cannot be made read-only)."""
        spec = self._spec(name)
        self._written(name)
        return _torch_view(_rw(self._buf()), spec)

    def _written(self, name):
        """Tells the library this tensor is written through a pointer
        (wsync_slab_tensor): its bytes are hashed at commit, also after a
        copy_from that hashed them as it copied."""
        check(lib.wsync_slab_tensor(ctypes.byref(self._c), name.encode(), None, None))

    def state_dict(self, kind: str = "numpy") -> Dict[str, Any]:
        """{name: writable array} for every tensor, in layout order."""
        get = self.numpy if kind == "numpy" else self.torch if kind == "torch" else None
        if get is None:
            raise ValueError("wsync: kind must be 'numpy' or 'torch'")
        return {s.name: get(s.name) for s in self.publisher._layout}

    def copy_from(self, src: Any, threads: int = 0, spread: Optional[float] = None) -> int:
        """Fills the slab in one call into the library
        (wsync_slab_copy_tensors: one pass over every tensor, split across
        threads; 0 = one per online CPU, small copies stay on this thread).
        spread: seconds to pace the copy over (wsync_copy_opts.spread_ns:
        one thread unless threads says more, a MiB block at a time, sleeping
        between blocks; never slower than an unpaced copy on those threads);
        None or 0: as fast as possible. ValueError for a negative, NaN or
        infinite spread or one above an hour.

        src is either a mapping {name: numpy array / torch tensor / scalar}
        holding exactly the model's tensors with their dtypes and shapes
        (bf16 from a torch.bfloat16 tensor or raw uint16/int16 bits; f8 from
        a torch float8 tensor of the same kind or raw uint8 bits), or one
        buffer laid out like the slab (as long as the slab, or up to the end
        of its last tensor). Every source is checked before any byte is
        copied. Returns 1, the number of library calls made."""
        opts = _copy_opts(threads, spread)
        if self._done:
            raise ClosedError("wsync: slab already committed or aborted")
        if not isinstance(src, Mapping):
            return self._copy_buffer(src, opts)
        layout = self.publisher._layout
        self.publisher._check_names(src)
        pub = self.publisher
        srcs = pub._srcs
        if srcs is None:
            srcs = pub._srcs = (ctypes.c_void_p * len(layout))()
        keep = []
        for i, spec in enumerate(layout):
            ptr, obj = _source(spec, src[spec.name])
            keep.append(obj)
            srcs[i] = ptr if spec.nbytes else None
        self._copy_call(lambda: lib.wsync_slab_copy_tensors_with(ctypes.byref(self._c), srcs,
                                                                 ctypes.byref(opts)))
        del keep
        return 1

    def write_part(self, i: int, src: Any) -> None:
        """Copies src, this rank's contiguous shard (a numpy array or torch
        tensor of the part's shape and the tensor's dtype), into part i of
        its declaration (publisher.parts[i]) in the slab
        (wsync_slab_part + wsync_slice_write)."""
        pub = self.publisher
        if pub.parts is None:
            raise ValueError("wsync: write_part is for a publisher_shard rank")
        i = operator.index(i)
        if not 0 <= i < len(pub.parts):
            raise IndexError("wsync: part %d of %d" % (i, len(pub.parts)))
        part = pub.parts[i]
        spec = pub._layout[part.tensor]
        ptr, keep = _source(spec._replace(shape=part.shape), src)
        sl = Slice()

        def call():
            rc = lib.wsync_slab_part(ctypes.byref(self._c), i, ctypes.byref(sl))
            if rc == 0 and sl.rows * sl.row_bytes:
                lib.wsync_slice_write(self._c.base, ptr, ctypes.byref(sl))
            return rc
        self._copy_call(call)
        del keep

    def copy_parts(self, srcs: Any) -> None:
        """write_part(i, srcs[i]) for every part of this rank, all checked
        first."""
        pub = self.publisher
        if pub.parts is None:
            raise ValueError("wsync: copy_parts is for a publisher_shard rank")
        srcs = list(srcs)
        if len(srcs) != len(pub.parts):
            raise ValueError("wsync: %d sources for %d parts" % (len(srcs), len(pub.parts)))
        for part, src in zip(pub.parts, srcs):
            _source(pub._layout[part.tensor]._replace(shape=part.shape), src)
        for i, src in enumerate(srcs):
            self.write_part(i, src)

    def _copy_buffer(self, src, opts):
        layout = self.publisher._layout
        end = max((s.offset + s.nbytes for s in layout), default=0)
        if _dtypes.is_torch_tensor(src):
            t = src.detach()
            if t.device.type == "meta":
                raise _module.NoStorageError("wsync: copy_from: the buffer is on the meta "
                                             "device: it has no values to publish")
            if t.device.type != "cpu":
                t = t.cpu()
            t = t.contiguous()
            ptr, n, keep = t.data_ptr(), t.numel() * t.element_size(), t
        else:
            mv = memoryview(src)
            if not mv.c_contiguous:
                raise ValueError("wsync: copy_from needs a contiguous buffer")
            arr = np.frombuffer(mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv,
                                dtype=np.uint8)
            ptr, n, keep = arr.__array_interface__["data"][0], arr.nbytes, arr
        if not end <= n <= self.nbytes:
            raise ValueError("wsync: a buffer for copy_from must hold %d to %d bytes "
                             "(the slab's layout), not %d" % (end, self.nbytes, n))
        self._copy_call(lambda: lib.wsync_slab_copy_with(ctypes.byref(self._c), 0, ptr, n,
                                                         ctypes.byref(opts)))
        del keep
        return 1

    def _copy_call(self, call):
        pub = self.publisher
        cell = pub._enter()
        try:
            if self._done:
                raise ClosedError("wsync: slab already committed or aborted")
            check(call())
        finally:
            pub._leave(cell)

    def commit(self, step: int) -> int:
        """Publishes this slab as the newest version, stamped with step (an
        int >= 0); returns the version once the broker has checked it."""
        self.version = self.publisher._finish(self, lib.wsync_pub_commit, step)
        return self.version

    def commit_async(self, step: int) -> int:
        """Like commit() but returns as soon as collectors can see the
        version; collect the broker's confirmation with
        Publisher.wait_commit() (or it is collected by the next begin)."""
        self.version = self.publisher._finish(self, lib.wsync_pub_commit_async, step)
        return self.version

    def abort(self) -> None:
        """Drops the slab; the latest version is unchanged."""
        self.publisher._finish(self, lib.wsync_pub_abort)

    def _retire(self):
        self._done = True
        for r in self._arrays:
            a = r()
            if a is not None:
                try:
                    a.flags.writeable = False
                except ValueError:
                    pass
        self._arrays = []
        if not _has_arrays(self):
            self._unpin()

    def __reduce__(self):
        _no_pickle("slab")


_PLAIN_TORCH = []       # (torch.Tensor, nn.Parameter, {dtype name: torch dtype}) once torch is in


def _plain_torch():
    import sys
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dts = {_dtypes.NAME[c]: _dtypes.torch_dtype(c) for c in _dtypes.NAME if _dtypes.torch_has(c)}
    _PLAIN_TORCH.append(((torch.Tensor, torch.nn.Parameter), dts))
    return _PLAIN_TORCH[0]


def _source(spec, x):
    """(address, keep-alive object) of a source for tensor spec."""
    plain = _PLAIN_TORCH[0] if _PLAIN_TORCH else _plain_torch()
    if plain is not None and type(x) in plain[0]:
        # the common case, cheaply: a contiguous CPU tensor of the layout's
        # own dtype and shape is its own source (anything else below)
        if (x.dtype is plain[1].get(spec.dtype) and x.is_cpu and x.is_contiguous() and
                tuple(x.shape) == spec.shape):
            return x.data_ptr(), x
    code = _dtypes.CODE[spec.dtype]
    if _dtypes.is_torch_tensor(x):
        t = x.detach()
        if t.device.type == "meta":
            raise _module.NoStorageError(
                "wsync: tensor %r is on the meta device: it has no values to publish "
                "(publish the trainer's module, not a meta copy of it)" % (spec.name,))
        if t.device.type != "cpu":
            t = t.cpu()
        _dtypes.check_torch(spec, t)
        t = t.contiguous()
        return t.data_ptr(), t
    want = _dtypes.NUMPY[code]
    if isinstance(x, np.ndarray):
        a = x
        ok = a.dtype == want or (code == _dtypes.BF16 and a.dtype in (np.int16, np.uint16))
        if not ok:
            raise TypeError("wsync: tensor %r is %s, the layout says %s"
                            % (spec.name, a.dtype, spec.dtype))
    else:
        if code in _dtypes.RAW_BITS and np.asarray(x).dtype.kind not in "iu":
            # numpy cannot round a float to these: it would truncate to bits
            raise TypeError("wsync: tensor %r is %s, which numpy lacks: pass its raw "
                            "bits as a numpy %s array" % (spec.name, spec.dtype, want))
        a = np.asarray(x, dtype=want)
    if a.shape != spec.shape:
        raise ValueError("wsync: tensor %r has shape %s, the layout says %s"
                         % (spec.name, a.shape, spec.shape))
    a = np.ascontiguousarray(a)
    return a.__array_interface__["data"][0], a



# ---- subscriber -------------------------------------------------------------


class Subscriber(_Child):
    """A subscription to one model. acquire() and wait() may be called from
    several threads at once."""

    _what = "subscriber"
    _free_name = "wsync_sub_close"

    def __init__(self, client, model):
        self._init_child(client)
        self.model = model
        self._bname = _enc(_model_name(model), "model")
        self._views = weakref.WeakSet()
        self._layout_seen = None   # the layout of the last view's connection
        self._explicit_ack = False
        self._max_lag = None       # set_max_lag's (max_age_ns, timeout_ns), kept for a reopen
        self._declared = None      # declare_max_lag's (versions, max_age_ns), the same
        self._acquired = 0         # the newest version a view of it had
        self._notify = None        # fileno() of a client that follows restarts
        try:
            self._open_cell(lambda cptr, out: lib.wsync_sub_open(cptr, self._bname, out))
        except BaseException:
            self._closed = True
            raise
        client._adopt(self)

    def _reopen(self, ccell):
        ptr = ctypes.c_void_p()
        rc = lib.wsync_sub_open(ccell.ptr, self._bname, ctypes.byref(ptr))
        if rc < 0:
            raise error_from_rc(rc)
        return ptr.value

    def _moved(self, old, new):
        if self._explicit_ack:
            check(lib.wsync_sub_set_ack(new.ptr, 1))
        if self._max_lag is not None:
            check(lib.wsync_sub_set_max_lag(new.ptr, *self._max_lag))
        if self._declared is not None:
            check(lib.wsync_sub_declare_max_lag(new.ptr, *self._declared))
        if self._notify is not None:
            # readable at once if the new broker has a version: look again
            self._notify.point(check(lib.wsync_sub_fd(new.ptr)))

    def ref(self):
        """A picklable ModelRef to this model (see Client.ref)."""
        return self.client.ref(self.model)

    def __repr__(self):
        return "<wsync.Subscriber %r%s>" % (self.model, " closed" if self._closed else "")

    def _learn_layout(self, cell, tensors, n):
        """cell's layout, read from a view of it the first time."""
        layout = _read_layout(tensors, n)
        if layout == self._layout_seen:
            layout = self._layout_seen
        with self._lock:
            if cell.layout is None:
                cell.by_name = {s.name: s for s in layout}
                cell.layout = layout
            self._layout_seen = cell.layout

    def _view(self, cv, cell):
        if cell.layout is None:
            self._learn_layout(cell, cv.tensors, cv.n_tensors)
        v = View(self, cv, cell)      # uses cell (the C subscription) until it is gone
        self._views.add(v)
        if cv.version > self._acquired:
            self._acquired = cv.version
        return v

    def acquire(self) -> "View":
        """The newest version as a View, zero copy, without waiting.
        NoDataError if nothing was published yet, WsyncError(EAGAIN) if this
        client holds 63 views already. After the broker shut down or
        restarted: NotConnectedError (BrokerRestartedError), unless the
        client follows restarts (reconnect=True), which then connects again
        (waiting up to its reconnect_timeout) and returns the new broker's
        newest version."""
        cell = self._call()
        try:
            cv = CView()
            rc = lib.wsync_sub_acquire(cell.ptr, ctypes.byref(cv))
            if rc < 0:
                for _ in range(_MAX_MOVES):
                    cell = self._recover(cell, rc)
                    rc = lib.wsync_sub_acquire(cell.ptr, ctypes.byref(cv))
                    if rc >= 0:
                        break
                check(rc)
            return self._view(cv, cell)
        finally:
            self._leave(cell)

    def wait(self, after: Any = 0, timeout: Optional[float] = None) -> "View":
        """The newest version if it is newer than after (a version number or
        a View), waiting up to timeout seconds (None: forever) for one.
        TimeoutError on time. If the broker shuts down or dies meanwhile
        (noticed within 200 ms): NotConnectedError, unless the client
        follows restarts (reconnect=True), which then waits, within the
        same timeout, for a broker to come back and for a version newer
        than after from it (TimeoutError if none came)."""
        # the plain case (an int, no timeout or a finite float one) taken
        # as it is: a worker waits once per update (docs/BENCHMARKS.md)
        if not (type(after) is int and 0 <= after < _U64 and
                (timeout is None or (type(timeout) is float and 0.0 <= timeout < _INF))):
            after, timeout = _after_timeout(after, timeout)
        t = timeout
        deadline = _deadline(t)
        cell = self._call()
        try:
            cv = CView()
            for _ in range(_MAX_MOVES):
                c = cell
                rc = _sliced(self, lambda ns: lib.wsync_sub_wait(c.ptr, after, ns,
                                                                 ctypes.byref(cv)),
                             None if t is None else _left(deadline), -_errno.ETIMEDOUT)
                if rc >= 0:
                    return self._view(cv, cell)
                if rc != -_errno.ENOTCONN or not self.client.reconnect:
                    raise _fail(rc, t, "model '%s': no version after v%d" % (self.model,
                                                                             after))
                cell = self._recover(cell, rc, deadline, t,
                                     lambda e: self._no_broker_in(e, after, t))
            raise _fail(rc, t)
        finally:
            self._leave(cell)

    def _no_broker_in(self, err, after, t):
        """A wait's TimeoutError when the broker went away and none came
        back within its timeout."""
        return WsyncTimeoutError(_errno.ETIMEDOUT, "timed out",
                                 "model '%s': no version after v%d within %s: the broker "
                                 "went away (%s) and no broker answered at %s since"
                                 % (self.model, after, _fmt_timeout(t), err.detail,
                                    _reconnect.endpoint_text(self.client._bend)))

    def acquire_gpu(self, device: Any) -> DeviceView:
        """The newest version on device (a UUID, an ordinal, "cuda:N" or a
        torch.device, as this process sees it) as a DeviceView: read-only
        device memory, zero copy, without waiting. This thread needs a CUDA
        context current on that GPU (torch makes one on first use).
        NoDeviceError if the model is not on that GPU (acquire() a host
        view of a host-mirrored model and View.copy_to_device instead),
        NoDataError if nothing was published yet, NoCudaError without a
        usable CUDA driver."""
        return _gpu.acquire_gpu(self, device, False, 0, None)

    def wait_gpu(self, device: Any, after: Any = 0,
                 timeout: Optional[float] = None) -> DeviceView:
        """wait() for device views: the newest version on device if it is
        newer than after (a version, a View or a DeviceView), waiting up to
        timeout seconds (None: forever)."""
        after, t = _after_timeout(after, timeout)
        return _gpu.acquire_gpu(self, device, True, after, t)

    def latest(self) -> LatestVersion:
        """The newest version as LatestVersion(version, step, published_ns)
        without taking a view (nothing is pinned, no system call).
        NoDataError if nothing was published yet, RemovedError if the model
        was deleted; after a restart as acquire()."""
        return self._latest(_DEFAULT)

    def _latest(self, deadline):
        """latest(), waiting for a broker that went away until deadline (a
        time.monotonic() value, one already past: one try; _DEFAULT: the
        client's reconnect_timeout)."""
        cell = self._call()
        try:
            v, st, ns = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_int64()
            for _ in range(_MAX_MOVES):
                rc = lib.wsync_sub_latest(cell.ptr, ctypes.byref(v), ctypes.byref(st),
                                          ctypes.byref(ns))
                if rc >= 0:
                    break
                if deadline is _DEFAULT:
                    cell = self._recover(cell, rc)
                else:
                    cell = self._recover(cell, rc, deadline, _left(deadline))
            check(rc)
            return LatestVersion(v.value, st.value, ns.value)
        finally:
            self._leave(cell)

    def fileno(self) -> int:
        """A descriptor that becomes readable when a version newer than the
        last one acquired through this subscription is committed; acquire()
        and wait() drain it. Owned by the subscription: do not close it.
        The subscription's eventfd; on a client that follows restarts, an
        epoll descriptor watching it, which stays the same when the
        subscription is opened again on a restarted broker (and is readable
        right after that if the new broker has a version)."""
        cell = self._call()
        try:
            if not self.client.reconnect:
                return check(lib.wsync_sub_fd(cell.ptr))
            with self._follow_lock:     # not moved meanwhile
                if self._notify is None:
                    efd = check(lib.wsync_sub_fd(self._cell.ptr))
                    n = _reconnect.Notify()
                    n.point(efd)
                    self._notify = n
            self.client._watch()
            return self._notify.fileno()
        finally:
            self._leave(cell)

    def set_max_lag(self, seconds: Optional[float], timeout: Optional[float] = None) -> None:
        """A staleness bound on acquire() (wsync_sub_set_max_lag,
        docs/LIVE.md): a newest version committed more than seconds ago is
        not taken; acquire() waits up to timeout seconds (None: forever) for
        a newer one, then raises TimeoutError naming the trainer's last
        commit. seconds=None (or 0) turns it off. LivePolicy has its own
        max_lag, which also bounds versions."""
        if seconds is not None and (isinstance(seconds, bool) or
                                    not isinstance(seconds, numbers.Real)):
            raise TypeError("wsync: max_lag seconds must be None or a number of seconds > 0, "
                            "not %s" % type(seconds).__name__)
        if seconds is None or seconds == 0:
            bound = (0, 0)
        else:
            s = float(seconds)
            if not 0 < s < 2 ** 63 / 1e9:          # NaN fails too
                raise ValueError("wsync: max_lag seconds must be None or a finite number "
                                 "of seconds > 0, not %r" % (seconds,))
            bound = (_timeout_ns(s), _timeout_ns(_timeout_s(timeout)))
        cell = self._call()
        try:
            check(lib.wsync_sub_set_max_lag(cell.ptr, *bound))
            self._max_lag = None if bound == (0, 0) else bound
        finally:
            self._leave(cell)

    def declare_max_lag(self, versions: Optional[int] = None,
                        seconds: Optional[float] = None) -> None:
        """Declares a staleness bound for monitors only
        (wsync_sub_declare_max_lag, docs/LIVE.md): wsync-top and wsyncctl
        show it beside this collector's lag and flag it when its lag passes
        versions or its version is older than seconds. Enforces nothing
        (LivePolicy declares its max_lag this way and enforces it itself;
        set_max_lag enforces seconds on acquire() and declares it too).
        None (or 0) for either: no bound of that kind. Shared by this
        client's subscriptions to the model; the last declared counts."""
        if versions is None:
            versions = 0
        if isinstance(versions, bool) or not isinstance(versions, int) or \
                not 0 <= versions < 2 ** 32:
            raise ValueError("wsync: max_lag versions must be an int in [0, 2**32) or "
                             "None, not %r" % (versions,))
        if seconds is None:
            ns = 0
        elif isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or \
                not 0 <= float(seconds) < 2 ** 63 / 1e9:
            raise ValueError("wsync: max_lag seconds must be a finite number >= 0 or None, "
                             "not %r" % (seconds,))
        else:
            ns = int(float(seconds) * 1e9)
        bound = (versions, ns)
        cell = self._call()
        try:
            check(lib.wsync_sub_declare_max_lag(cell.ptr, *bound))
            self._declared = None if bound == (0, 0) else bound
        finally:
            self._leave(cell)

    def set_ack(self, explicit: bool = True) -> None:
        """explicit=True: acquiring a version no longer counts for a
        publisher's wait_readers; ack(version) does (wsync_sub_set_ack).
        For "applied" rather than "taken": acquire, apply (load_into),
        then ack. The count is per client and model: other subscriptions of
        this client to the model still count when they acquire, so use a
        client whose only subscription to it is this one."""
        if not isinstance(explicit, bool):
            raise TypeError("wsync: explicit must be True or False, not %s"
                            % type(explicit).__name__)
        cell = self._call()
        try:
            self._explicit_ack = explicit
            check(lib.wsync_sub_set_ack(cell.ptr, 1 if explicit else 0))
        finally:
            self._leave(cell)

    def ack(self, version: Any) -> None:
        """Tells a publisher's wait_readers that this client has the version
        (an int or a View) applied: one it acquired through this
        subscription (WsyncError EINVAL for 0 or a newer one; RemovedError
        after the model was deleted). With set_ack(True). After the client
        followed a restarted broker, a version taken from the old one is
        acknowledged on the new one when the new one has it (its newest
        is that version or newer)."""
        if isinstance(version, (View, DeviceView)):
            version = version.version
        version = _uint(version, "version")
        cell = self._call()
        try:
            rc = lib.wsync_sub_ack(cell.ptr, version)
            if rc == -_errno.EINVAL and 0 < version <= self._acquired:
                # taken on a connection that is gone: take the new broker's
                # newest (not counted), which is that version or newer
                cv = CView()
                if lib.wsync_sub_acquire(cell.ptr, ctypes.byref(cv)) == 0:
                    lib.wsync_sub_release(cell.ptr, ctypes.byref(cv))
                rc = lib.wsync_sub_ack(cell.ptr, version)
            check(rc)
        finally:
            self._leave(cell)

    @property
    def layout(self):
        """The model's tensors as TensorSpec, once a version was acquired
        (None before)."""
        return None if self._layout_seen is None else list(self._layout_seen)

    def close(self):
        """Ends the subscription: no more acquire() or wait(). Views whose
        arrays are all gone are released now; a view with an array still
        alive keeps its version held and mapped (the array stays valid and
        unchanged) until its last array goes, then the library's
        subscription is closed. Idempotent."""
        if not self._mark_closed():
            return
        for v in list(self._views):
            if isinstance(v, DeviceView):
                v._on_close()
            elif not _has_arrays(v):
                v.release()
        if self._notify is not None:
            self._notify.close()
        self._retire()


_U64 = 1 << 64
_INF = math.inf


def _after_timeout(after, timeout):
    if isinstance(after, (View, DeviceView)):
        after = after.version
    return _uint(after, "after (a version number or a View)"), _timeout_s(timeout)


class View(ViewLife):
    """One version of a model, held: its bytes do not change until release().

    Attributes: version, step, published_ns (CLOCK_REALTIME ns of the
    commit), nbytes, tensors (names in layout order), layout (TensorSpec).

    Lifetime: numpy()/torch() return zero-copy arrays over the broker's
    read-only mapping (torch: ReadOnlyTensor, whose writes raise). After
    release() (or the end of its `with` block) torch tensors of the view
    raise ClosedError; numpy arrays still alive keep reading this version,
    which stays held (its slab pinned) until the last of them is gone.
    Closing the subscriber or client does not release a view with live
    arrays, and the memory stays mapped while the view object lives. The
    garbage collector never releases a view while one of its arrays is
    alive."""

    def __init__(self, sub, cv, cell):
        self.subscriber = sub
        self._c = cv
        self._cell = cell          # the C subscription it was taken from
        self._layout = cell.layout
        self._by_name = cell.by_name
        self._released = False
        self._c_held = True        # the library's view is not released yet
        self._pinned = True        # uses the C subscription (mappings) until gone
        self._rawref = None
        self._np_ref = None
        self._range = (cv.base, cv.base + cv.bytes)   # the slab's addresses
        cell.use()
        self.version = cv.version
        self.step = cv.step
        self.published_ns = cv.published_ns
        self.nbytes = cv.bytes

    def __repr__(self):
        return "<wsync.View %r v%d step %d%s>" % (self.subscriber.model, self.version,
                                                 self.step,
                                                 " released" if self._released else "")

    @property
    def tensors(self):
        return [s.name for s in self._layout]

    @property
    def layout(self):
        return list(self._layout)

    @property
    def released(self):
        return self._released

    def _spec(self, name):
        self._check()
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError("wsync: model %r has no tensor %r"
                           % (self.subscriber.model, name)) from None

    def _buf(self):
        return _raw(self, self._c.base, self._c.bytes)

    def _slot_cache(self):
        c = self._c
        return _views.slot_cache(self._cell, c.priv_slot, c.base, c.bytes)

    def numpy(self, name: str) -> np.ndarray:
        """A read-only numpy array over tensor name, zero copy (bf16 as
        uint16 bits, f8_e4m3fn and f8_e5m2 as uint8 bits). Writing raises
        ValueError."""
        spec = self._spec(name)
        return _views.np_arrays(self, (spec,))[name]

    def _np_whole(self):
        """The slab as one read-only uint8 array (numpy()'s arrays are over
        it), made once and kept while one of them lives."""
        w = self._np_ref() if self._np_ref is not None else None
        if w is None:
            w = np.frombuffer(_ro(self._buf()), np.uint8)
            self._np_ref = weakref.ref(w)
        return w

    def torch(self, name: str) -> Any:
        """A torch tensor over tensor name, zero copy (bf16 as
        torch.bfloat16; f8 as torch.float8_* from torch 2.1, else uint8
        bits; u16/u32/u64 as torch.uint16/32/64 from torch 2.3, else a
        TypeError): a wsync.ReadOnlyTensor, whose in-place operations
        raise ReadOnlyError (the memory is mapped read-only) and whose use
        after release() raises ClosedError. Clone it to modify it."""
        spec = self._spec(name)
        return _views.ro_tensors(self, (spec,))[name]

    def _check(self):
        if self._released:
            raise ClosedError("wsync: view v%d was released" % self.version)
        if self.subscriber._closed:
            raise ClosedError("wsync: the subscriber of view v%d is closed" % self.version)

    def _readonly_memory(self):
        """The whole slab as a read-only memoryview (what _torch makes numpy
        arrays of a ReadOnlyTensor over)."""
        return _ro(self._buf())

    def buffer(self) -> memoryview:
        """The whole slab of this version as a read-only memoryview (nbytes
        long, tensors at layout[i].offset); same lifetime as numpy()."""
        self._check()
        return _ro(self._buf())

    def state_dict(self, kind: str = "numpy") -> Dict[str, Any]:
        """{name: array} of every tensor in layout order; kind "numpy" or
        "torch". Zero copy, same lifetime as numpy()/torch()."""
        if kind not in ("numpy", "torch"):
            raise ValueError("wsync: kind must be 'numpy' or 'torch'")
        self._check()
        if kind == "numpy":
            return _views.np_arrays(self, self._layout)
        return _views.ro_tensors(self, self._layout)

    def verify(self) -> None:
        """Recomputes this version's slab checksum and compares it with the
        one its publisher stored (every version of a host model carries
        one, unless it was published with checksum=False).
        A checksum its publisher still forms (a version written without
        the copy helpers is hashed after it became visible) is waited for,
        10 s at most. Returns None if they match; raises WsyncError with
        errno EBADMSG on a mismatch, NoDataError if the version has no
        checksum or its publisher died before storing it,
        WsyncTimeoutError if it is still not stored after 10 s."""
        self._check()
        check(lib.wsync_view_verify(ctypes.byref(self._c)))

    def load_into(self, module: Any, strict: bool = True, tp_rank: Optional[int] = None,
                  tp_size: Optional[int] = None) -> "_module.LoadResult":
        """Copies this version into module's parameters and buffers in
        place (no new tensors: optimizers, hooks and tied weights keep
        working), like module.load_state_dict(view) but with one copy_ per
        tensor straight from the shared memory.

        module is an nn.Module (its state_dict(keep_vars=True): parameters
        and persistent buffers such as BatchNorm's running stats and
        num_batches_tracked) or a mapping of torch tensors. Names, shapes
        and dtypes are checked first; any mismatch raises MismatchError
        listing every one, and nothing is copied. strict=False, as in
        load_state_dict, tolerates names missing on either side (shape and
        dtype mismatches still raise). Returns LoadResult(missing_keys,
        unexpected_keys).

        Tensor parallel: with tp_rank=k and tp_size=K, a module tensor whose
        shape is the view's with dim 0 (row-parallel) or dim 1
        (column-parallel) divided by K gets part k of K of that tensor
        along that dim (wsync_tensor_part + wsync_slice_read); tensors of
        the view's shape are loaded whole."""
        self._check()
        if not isinstance(strict, bool):
            raise TypeError("wsync: strict must be True or False, not %s"
                            % type(strict).__name__)
        tp = None
        if tp_rank is not None or tp_size is not None:
            if tp_rank is None or tp_size is None:
                raise TypeError("wsync: tp_rank and tp_size go together")
            tp_size = _uint(tp_size, "tp_size", 32)
            tp_rank = _uint(tp_rank, "tp_rank", 32)
            if not tp_rank < tp_size:
                raise ValueError("wsync: tp_rank must be in 0 .. tp_size - 1, not %d"
                                 % tp_rank)
            tp = (tp_rank, tp_size)
        base = self._c.base
        return _module.load_into(self, module, strict,
                                 lambda s: _views.plain_tensor(self, s), tp, self._read_part,
                                 lambda s: base + s.offset, _views.copier.copy)

    def copy_to_device(self, dst: Any, offset: int = 0, nbytes: Optional[int] = None,
                       stream: Any = None) -> None:
        """Copies nbytes at offset of this version (by default the rest of
        it, or dst's size if smaller) into device memory dst (a device
        pointer, a contiguous CUDA tensor or a writable
        __cuda_array_interface__) on stream (wsync_view_copy_to_device);
        returns once the copy has read the bytes, so the view may be
        released right after. NoCudaError without a usable CUDA driver."""
        _gpu.copy_out(self, lib.wsync_view_copy_to_device, dst, offset, nbytes,
                      _gpu.stream_handle(stream))

    def _read_part(self, spec, dim, k, K, dst):
        import torch
        i = self._layout.index(spec)
        sl = Slice()
        check(lib.wsync_tensor_part(ctypes.byref(self._c.tensors[i]), dim, k, K,
                                    ctypes.byref(sl)))
        tmp = dst
        if not (dst.device.type == "cpu" and dst.is_contiguous()):
            tmp = torch.empty(dst.shape, dtype=dst.dtype)
        if sl.rows * sl.row_bytes != tmp.numel() * tmp.element_size():
            raise ValueError("wsync: part %d of %d of %r is %d bytes, %r holds %d"
                             % (k, K, spec.name, sl.rows * sl.row_bytes, spec.name,
                                tmp.numel() * tmp.element_size()))
        lib.wsync_slice_read(tmp.data_ptr(), self._c.base, ctypes.byref(sl))
        if tmp is not dst:
            dst.copy_(tmp)

    def release(self) -> None:
        """Ends the use of this view: no new arrays, and its torch tensors
        raise ClosedError. The broker may reuse the version's slab as soon
        as no array taken from the view is alive: with none, at once; else
        when the last one goes (until then the version stays held, so an
        array never shows a later version's bytes). Idempotent."""
        self._release(_has_arrays(self))

    def _arrays_gone(self):
        if self._released:
            self._release(False)

    _byref = ctypes.byref

    def __reduce__(self):
        _no_pickle("view (copy its arrays, or pass a ModelRef)")

    _lib_release = lib.wsync_sub_release

    def _release(self, keep_pin):
        cell = self._cell
        with cell.lock:
            self._released = True
            # The C view stays held while an array of it lives, so that
            # array never shows a later version's bytes.
            release = self._c_held and not keep_pin
            if release:
                self._c_held = False
            unpin = self._pinned and not keep_pin
            if unpin:
                self._pinned = False
        # Our use keeps the C subscription alive: the release below is safe.
        if release and cell.gen == cell.gens[0] and cell.ptr is not None:
            self._lib_release(cell.ptr, self._byref(self._c))
        if unpin:
            cell.unuse()

    def __del__(self):
        try:
            self._release(False)
        except Exception:
            pass
