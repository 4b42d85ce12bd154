"""Client, Publisher, Slab, Subscriber and View: the Python face of libwsync.

Ownership mirrors the C library: a View keeps its Subscriber alive, a
Subscriber or Publisher its Client, and every array handed out keeps its View
or Slab alive. So the garbage collector never releases or unmaps memory an
array still points at, and nothing else unmaps it either: closing a handle
frees its C handle only once no View or Slab object of it is left (see
_Handle). View.release() (and leaving its `with` block) lets the slab be
rewritten once no array of the view is alive (until then the library's view
stays held, so an array never shows a later version). See docs/PYTHON.md.
"""
import ctypes
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

from . import _dtypes, _gpu, _module, _shard
from ._errors import ClosedError, WsyncError, check, connect_error_from_rc, error_from_rc
from ._gpu import DeviceSlab, DeviceView
from ._ends import SlabLife, ViewLife
from ._lib import (DEV_HOST_MIRROR, FOREVER, NAME_MAX, MAX_DIMS, SHARD_WHOLE, CSlab, CView,
                   ModelInfo, ModelOpts, Shard, Slice, TensorDesc, lib)

import errno as _errno

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

# Bumped in a forked child: handles of the parent must not be used there (the
# child shares the parent's broker session; touching it would corrupt it).
_fork_gen = [0]


def _after_fork_in_child():
    _fork_gen[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


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


def _timeout_ns(t):
    """Nanoseconds for a timeout already checked by _timeout_s."""
    return FOREVER if t is None else min(int(t * 1e9), 2**63 - 1)


def _no_pickle(what):
    raise TypeError("wsync: a %s cannot be pickled or sent to another process: "
                    "connect in the child (pass wsync.ModelRef(endpoint, model), "
                    "e.g. from .ref(), and call its connect())" % what)


class _Handle:
    """Calls in flight, closing and the order of frees.

    close() stops new calls and waits for those in flight (a sliced wait
    notices within a slice and raises ClosedError). The C handle is freed
    only when nothing depends on it any more: a client pins it for each
    open publisher or subscriber, a subscriber for each View object alive, a
    publisher for each Slab object with arrays alive.
    So finalizers may run in any order (the garbage collector breaking a
    reference cycle, interpreter exit) and a C handle is never used after
    its parent was freed. Finalizers take only reentrant locks and use
    nothing that interpreter shutdown clears (the library is a class
    attribute); a handle of the parent of a fork() is never touched."""

    _what = "handle"
    _lib = lib
    _gens = _fork_gen

    def _init_handle(self, parent=None):
        self._cond = threading.Condition(threading.RLock())
        self._busy = 0
        self._closed = False      # no new calls
        self._freed = False       # the C handle is gone (or never was)
        self._pins = 0            # dependents whose C resources need ours
        self._parent = parent     # pinned by us while our C handle lives
        self._gen = _fork_gen[0]

    def _enter(self):
        with self._cond:
            if self._closed:
                raise ClosedError("wsync: %s is closed" % self._what)
            if self._gen != self._gens[0]:
                raise ClosedError("wsync: %s belongs to the parent process; connect anew "
                                  "after fork()" % self._what)
            self._busy += 1

    def _leave(self):
        with self._cond:
            self._busy -= 1
            if not self._busy:
                self._cond.notify_all()

    def _mark_closed(self):
        """True if this call closes the handle; waits for calls in flight."""
        with self._cond:
            if self._closed:
                return False
            self._closed = True
            while self._busy:
                self._cond.wait()
            return True

    def _adopted(self, ptr):
        """Our C handle exists now: hold our parent's."""
        self._ptr = ptr
        if self._parent is not None:
            self._parent._pin()

    def _pin(self):
        with self._cond:
            self._pins += 1

    def _unpin(self):
        with self._cond:
            self._pins -= 1
        self._free_if_done()

    def _free_if_done(self):
        """Frees the C handle once closed and nothing depends on it, then
        lets go of the parent's."""
        with self._cond:
            if not self._closed or self._freed or self._pins > 0:
                return
            self._freed = True
            ptr, self._ptr = self._ptr, None
        if ptr is not None and self._gen == self._gens[0]:
            self._c_free(ptr)
        if ptr is not None and self._parent is not None:
            self._parent._unpin()

    def _c_free(self, ptr):
        raise NotImplementedError

    @property
    def closed(self):
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __reduce__(self):
        _no_pickle(self._what)

    def __del__(self):
        # Never waits: a call in flight (impossible for an object nobody
        # references, but daemon threads at exit are odd) leaves it open.
        try:
            if not getattr(self, "_closed", True) and not self._busy:
                self.close()
        except Exception:
            pass


def _sliced(handle, call, timeout, retry_rc):
    """Calls call(timeout_ns) in slices until it returns something other than
    retry_rc or the timeout is used up; returns the last return code."""
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
        if rc != retry_rc:
            return rc
        if deadline is not None and time.monotonic() >= deadline:
            return rc
        if handle._closed:
            raise ClosedError("wsync: %s was closed while waiting" % handle._what)


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


def _raw(owner, base, nbytes):
    """The owner's (View or Slab) memory as a ctypes array, made once and
    kept while any array made from it lives.

    The ctypes array references its owner, and every numpy array or torch
    tensor made from it keeps the ctypes array alive (numpy through its
    memoryview): an array alive means its owner alive, so the garbage
    collector never releases a view under an array. The owner keeps only a
    weak reference back, so there is no cycle: a view nobody uses is
    released as soon as its last reference goes."""
    raw = owner._rawref() if owner._rawref is not None else None
    if raw is None:
        raw = (ctypes.c_char * nbytes).from_address(base)
        raw._wsync_owner = owner
        owner._rawref = weakref.ref(raw, _raw_gone_cb(owner))
    return raw


def _raw_gone_cb(owner):
    """A weakref callback telling owner (if it has _arrays_gone) that its
    last array is gone, without keeping owner alive."""
    if not hasattr(owner, "_arrays_gone"):
        return None
    wo = weakref.ref(owner)

    def gone(_ref):
        o = wo()
        if o is not None:
            try:
                o._arrays_gone()
            except Exception:
                pass
    return gone


def _has_arrays(owner):
    """True while an array made by _raw for owner is alive."""
    return owner._rawref is not None and owner._rawref() is not None


def _rw(raw):
    return memoryview(raw).cast("B")


def _ro(raw):
    return memoryview(raw).cast("B").toreadonly()


def _np_view(buf, spec, np_dtype=None):
    dt = np_dtype if np_dtype is not None else _dtypes.NUMPY[_dtypes.CODE[spec.dtype]]
    count = spec.nbytes // dt.itemsize
    return np.frombuffer(buf, dtype=dt, count=count, offset=spec.offset).reshape(spec.shape)


def _torch_view(buf, spec):
    """A torch tensor over tensor spec: the dtype's own where this torch has
    it, uint8 raw bits for an 8-bit float where it has none, a TypeError
    for u16/u32/u64 where it has none (see _dtypes)."""
    import torch
    code = _dtypes.CODE[spec.dtype]
    if code == _dtypes.BF16:
        arr = _np_view(buf, spec, np.dtype(np.int16))
        return torch.from_numpy(arr).view(torch.bfloat16)
    if code in _dtypes.NEWER_TORCH:
        if not _dtypes.torch_has(code):
            if code in _dtypes.RAW_BITS:
                return torch.from_numpy(_np_view(buf, spec))
            _dtypes.torch_dtype(code, spec.name)        # raises, naming the version
        # torch.from_numpy takes no float8 (nor, before 2.3, an unsigned type
        # but uint8): reinterpret an integer tensor of the same size
        bits = np.dtype("u1") if code in _dtypes.RAW_BITS else \
            np.dtype("i%d" % _dtypes.ITEMSIZE[code])
        return torch.from_numpy(_np_view(buf, spec, bits)).view(_dtypes.torch_dtype(code))
    return torch.from_numpy(_np_view(buf, spec))


_read_only = []          # _torch.read_only, imported on first use (it imports torch)


def _torch_ro_view(view, buf, spec):
    """A ReadOnlyTensor over tensor spec of view (see _torch.py)."""
    if not _read_only:
        from ._torch import read_only
        _read_only.append(read_only)
    base = view._c.base
    return _read_only[0](_torch_view(buf, spec), view, base, base + view._c.bytes)


# ---- client -----------------------------------------------------------------


class Client(_Handle):
    """A connection to a broker. Use as a context manager or call close()."""

    _what = "client"

    def __init__(self, endpoint=None, name=None):
        self._init_handle()
        self._ptr = None
        self._children = weakref.WeakSet()
        bend = _enc(endpoint, "endpoint")
        ptr = ctypes.c_void_p()
        rc = lib.wsync_connect(bend, _enc(name, "client name"), ctypes.byref(ptr))
        if rc < 0:
            self._closed = self._freed = True
            raise connect_error_from_rc(rc)
        self._adopted(ptr.value)
        self.endpoint = endpoint
        self.name = name

    def _c_free(self, ptr):
        self._lib.wsync_close(ptr)

    def ref(self, model: str) -> "ModelRef":
        """A picklable ModelRef(endpoint, model) to connect to this broker
        in another process (a Client itself cannot be pickled)."""
        return ModelRef(self.endpoint if self.endpoint is not None else default_endpoint(),
                        _model_name(model))

    def __repr__(self):
        return "<wsync.Client %s%s>" % (self.endpoint or "(default)",
                                       " closed" if self._closed else "")

    def models(self) -> List[ModelStatus]:
        """The broker's models as a list of ModelStatus, read from its
        control segment (no round trip). Names merely subscribed to are
        listed with published=False."""
        self._enter()
        try:
            n = ctypes.c_size_t()
            check(lib.wsync_models(self._ptr, None, 0, ctypes.byref(n)))
            cap = n.value + 8
            infos = (ModelInfo * cap)()
            check(lib.wsync_models(self._ptr, infos, cap, ctypes.byref(n)))
            return [ModelStatus(i.name.decode("utf-8", "replace"), bool(i.published),
                                i.version, i.step, i.published_ns, i.n_tensors, i.n_slots,
                                i.bytes, i.publishers, i.subscribers)
                    for i in infos[:min(n.value, cap)]]
        finally:
            self._leave()

    def delete(self, model: str) -> None:
        """Deletes a model that has no publisher (BusyError names it
        otherwise; WsyncError(ENOENT) if there is none). Its subscribers get
        RemovedError from then on; views they hold stay valid until released.
        The name can be published again, at versions above the old ones."""
        name = _enc(_model_name(model), "model")
        self._enter()
        try:
            check(lib.wsync_model_delete(self._ptr, name))
        finally:
            self._leave()

    def publisher(self, model: str, tensors: Any, slots: int = 0, guard: bool = False,
                  flags: int = 0, replace: bool = False, checksum: bool = False,
                  unguarded: bool = False, devices: Any = None,
                  host_mirror: bool = False) -> "Publisher":
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
        readers get RemovedError and subscribe again); checksum=True sets
        PUB_CHECKSUM (every version carries an XXH3-64 of its slab;
        View.verify checks it); unguarded=True says PUB_UNGUARDED, the
        default, explicitly; flags, more wsync_model_flags bits, ORed in.

        devices makes a device model (docs/GPU.md): the GPUs every version
        lives on, each a UUID ("GPU-...") or an ordinal / "cuda:N" /
        torch.device meaning that GPU as this process sees it (translated
        to its UUID, which is what other processes see); publish with
        begin_gpu / publish_gpu. host_mirror=True keeps a host copy of
        every version too, for host views (CPU collectors, checkpoints).

        Raises LayoutError (-EEXIST) if the model exists with another
        layout or other devices (and not replace), BusyError if it has
        another publisher, NoDeviceError if the broker cannot put it on
        those GPUs."""
        if not isinstance(checksum, bool) or not isinstance(unguarded, bool):
            raise TypeError("wsync: checksum and unguarded must be True or False")
        if guard and unguarded:
            raise ValueError("wsync: guard=True and unguarded=True contradict each other")
        opts = _model_opts(slots, guard, flags, replace)
        opts.flags |= (_PUB_CHECKSUM if checksum else 0) | (_PUB_UNGUARDED if unguarded else 0)
        descs = _make_descs(tensors)
        uuids = _gpu.device_opts(opts, devices, host_mirror)
        return Publisher(self, model, descs, opts, devices=uuids)

    def publisher_like(self, model: str, state_dict: Any, slots: int = 0, guard: bool = False,
                       flags: int = 0, replace: bool = False, checksum: bool = False,
                       unguarded: bool = False, devices: Any = None,
                       host_mirror: bool = False) -> "Publisher":
        """publisher() with the layout of a dict of numpy arrays or torch
        tensors (CUDA ones too; names, dtypes and shapes, in the dict's
        order), or of an nn.Module's state_dict()."""
        state_dict = _module.state_of(state_dict)
        tensors = [(k, _dtypes.code_of_array(v), tuple(np.shape(v) if not
                    _dtypes.is_torch_tensor(v) else v.shape)) for k, v in state_dict.items()]
        return self.publisher(model, tensors, slots, guard, flags, replace, checksum,
                              unguarded, devices, host_mirror)

    def publisher_shard(self, model: str, tensors: Any, rank: int, world: int,
                        parts: Any = None, timeout_ms: int = 0, slots: int = 0,
                        guard: bool = False, flags: int = 0) -> "Publisher":
        """One rank of a group of world publishers of model (FSDP or
        tensor-parallel trainer ranks, wsync_pub_open_shard; see
        docs/SHARDING.md). tensors: the whole model's layout, as for
        publisher(). parts: what this rank writes, each a tensor name (the
        whole tensor) or (name, dim, start, end) with dim 0 or 1. Every
        rank begins, writes its parts (Slab.write_part / copy_parts) and
        commits with the same step; the version appears, whole, when the
        last rank commits. timeout_ms: how long after a version's first
        commit every rank must have committed it (0: no limit).

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
        opts = _model_opts(slots, guard, flags)
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
        kids = list(self._children)
        for k in kids:
            if isinstance(k, Publisher):
                k.close()
        for k in kids:
            k.close()
        self._free_if_done()


PUB_UNGUARDED = 1 << 0      # enum wsync_model_flags (the default)
PUB_CHECKSUM = 1 << 1
PUB_GUARDED = 1 << 2
PUB_REPLACE = 1 << 3
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

    def connect(self, name=None):
        """A new Client to this broker (close it, or use it in `with`)."""
        return Client(self.endpoint, name)

    def subscriber(self, client):
        """client.subscriber(model)."""
        return client.subscriber(self.model)


def default_endpoint() -> str:
    """The socket path connect(None) would use ($WSYNC_ENDPOINT, else the
    default broker's socket)."""
    buf = ctypes.create_string_buffer(4096)
    check(lib.wsync_default_endpoint(buf, len(buf)))
    return buf.value.decode()


def connect(endpoint: Optional[str] = None, name: Optional[str] = None) -> "Client":
    """Connects to a broker: endpoint is a socket path (contains a '/'), an
    instance name ("default", "lab"), or None for $WSYNC_ENDPOINT, else the
    default broker. name is shown by monitoring tools and in BusyError
    messages. Returns a Client (a context manager)."""
    return Client(endpoint, name)


# ---- publisher --------------------------------------------------------------

_ABORT = object()      # Publisher._finish without a step



class Publisher(_Handle):
    """The only writer of one model. Drive it from one thread at a time
    (calls are serialised by a lock)."""

    _what = "publisher"

    def __init__(self, client, model, descs, opts, parts=None, devices=()):
        self._init_handle(client)
        self._ptr = None
        self.client = client
        self.model = model
        self.slots = opts.slots
        self.flags = opts.flags
        self.devices = devices     # the GPUs (UUIDs) of a device model; () for a host one
        self.host_mirror = bool(opts.device_flags & DEV_HOST_MIRROR)
        self._slab = None
        self._layout = _read_layout(descs, len(descs))   # offsets filled at begin
        self._layout_final = False
        self._drive = threading.RLock()
        self._srcs = None          # the source pointer array of copy_from, reused
        self.parts = None if parts is None else parts[1]   # PartSpec of a group rank
        self.rank = opts.rank if parts is not None else None
        self.world = opts.group_size if parts is not None else None
        ptr = ctypes.c_void_p()
        client._enter()
        try:
            bname = _enc(_model_name(model), "model")
            if parts is None:
                rc = lib.wsync_pub_open(client._ptr, bname, descs, len(descs),
                                        ctypes.byref(opts), ctypes.byref(ptr))
            else:
                rc = lib.wsync_pub_open_shard(client._ptr, bname, descs, len(descs),
                                              ctypes.byref(opts), parts[0], len(parts[1]),
                                              ctypes.byref(ptr))
            if rc < 0:
                self._closed = self._freed = True
                raise error_from_rc(rc)
            self._adopted(ptr.value)
            client._adopt(self)
        finally:
            client._leave()

    def _c_free(self, ptr):
        self._lib.wsync_pub_close(ptr)

    @property
    def guarded(self):
        """True if this publisher was opened with guard=True."""
        return bool(self.flags & PUB_GUARDED)

    def ref(self):
        """A picklable ModelRef to this model (see Client.ref)."""
        return self.client.ref(self.model)

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
        unspecified: write every tensor."""
        return self._begin(timeout, CSlab,
                           lambda ns, cs: lib.wsync_pub_begin(self._ptr, ns, ctypes.byref(cs)),
                           lambda cs: Slab(self, cs), check)

    def _begin(self, timeout, ctype, call, make, checker):
        t = _timeout_s(timeout)
        self._enter()
        try:
            with self._drive:
                if self._slab is not None:
                    raise WsyncError(_errno.EALREADY, "a slab is already begun",
                                     "model '%s': commit or abort the begun slab first"
                                     % self.model)
                cs = ctype()
                checker(_sliced(self, lambda ns: call(ns, cs), t, -_errno.EBUSY))
                if not self._layout_final:
                    self._layout = _read_layout(cs.tensors, cs.n_tensors)
                    self._layout_final = True
                slab = make(cs)
                self._slab = slab
                return slab
        finally:
            self._leave()

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
                threads: int = 0) -> int:
        """Publishes weights (an nn.Module, whose state_dict() is taken, or
        a mapping as for Slab.copy_from) as the next version stamped with
        step: begin(timeout), one copy_from call, commit. Returns the
        version. Nothing is published if anything fails. On a
        publisher_shard rank, weights is the rank's state_dict and only
        its parts are written (Slab.copy_parts; threads is not used)."""
        return self._publish(weights, step, timeout, threads, Slab.commit)

    def publish_async(self, weights: Any, step: int, timeout: Optional[float] = None,
                      threads: int = 0) -> int:
        """publish() that returns as soon as collectors can see the version
        (Slab.commit_async); wait_ack() collects the broker's confirmation
        (or the next publish does)."""
        return self._publish(weights, step, timeout, threads, Slab.commit_async)

    def wait_ack(self, timeout: Optional[float] = None) -> int:
        """The broker's confirmation of the last publish_async (see
        wait_commit); returns its version."""
        return self.wait_commit(timeout)

    def _publish(self, weights, step, timeout, threads, commit):
        step = _uint(step, "step")
        threads = _uint(threads, "threads", 32)
        src = _module.state_of(weights)
        with self.begin(timeout) as slab:
            if self.parts is not None:
                slab.copy_parts(_shard.sources(self, src))   # a publisher_shard rank
            else:
                slab.copy_from(src, threads)
            return commit(slab, step)

    def wait_readers(self, version: int, timeout: Optional[float] = None, n: int = 0) -> int:
        """Waits until n subscribers (0: every current one) have acquired
        version or a newer one; returns how many have. TimeoutError on time,
        naming the subscribers behind; a subscriber that exits stops
        counting. The synchronous mode of weight updates: publish, then
        wait_readers(version)."""
        version = _uint(version, "version")
        n = _uint(n, "n", 32)
        t = _timeout_s(timeout)
        self._enter()
        try:
            have = ctypes.c_uint32()
            ns = FOREVER if t is None else int(t * 1e9)
            rc = lib.wsync_pub_wait_readers(self._ptr, version, n, ns, ctypes.byref(have))
            check(rc)
            return have.value
        finally:
            self._leave()

    def wait_commit(self, timeout: Optional[float] = None) -> int:
        """Waits for the broker's confirmation of the last commit_async();
        returns its version. TimeoutError on time; WsyncError(ENOENT) if no
        commit is outstanding."""
        t = _timeout_s(timeout)
        self._enter()
        try:
            with self._drive:
                v = ctypes.c_uint64()
                rc = _sliced(self, lambda ns: lib.wsync_pub_wait_commit(
                    self._ptr, ns, ctypes.byref(v)), t, -_errno.ETIMEDOUT)
                if rc < 0:
                    raise _fail(rc, t, "model '%s': no commit confirmation" % self.model)
                return v.value
        finally:
            self._leave()

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
        self._enter()
        try:
            with self._drive:
                if slab._done or self._slab is not slab:
                    raise ClosedError("wsync: this slab was already committed or aborted")
                if step is _ABORT:
                    rc = call(self._ptr)
                    v = None
                else:
                    out = ctypes.c_uint64()
                    rc = call(self._ptr, step, ctypes.byref(out))
                    v = out.value
                # Success or failure, the library no longer treats the slab
                # as begun (a failed commit drops it; it is read-only again).
                err = error_from_rc(rc) if rc < 0 else None
                slab._retire()
                self._slab = None
                if err is not None:
                    raise err
                return v
        finally:
            self._leave()

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
                self._lib.wsync_pub_abort(self._ptr)   # now; the mapping stays
            slab._retire()
        self._free_if_done()


class Slab(SlabLife):
    """A writable slab for the next version, from Publisher.begin().

    As a context manager: an exception inside the block aborts the slab;
    leaving the block normally requires that slab.commit(step) (or
    slab.abort()) was called, else the slab is aborted and RuntimeError is
    raised. Nothing is ever committed implicitly."""

    _device = False
    _what = "slab"

    def __init__(self, pub, cs):
        self.publisher = pub
        self._c = cs
        self._done = False
        self._rawref = None
        self._arrays = []          # weakrefs to numpy arrays handed out
        self.nbytes = cs.bytes
        self._by_name = {s.name: s for s in pub._layout}
        self.version = None        # set by commit / commit_async
        self._pinned = True        # holds pub's C handle (mappings) while arrays live
        pub._pin()

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
        arr = _np_view(_rw(self._buf()), spec)
        self._arrays.append(weakref.ref(arr))
        return arr

    def torch(self, name: str) -> Any:
        """A writable torch tensor over tensor name in the slab (zero copy;
        dtypes as View.torch gives them). Valid until commit/abort; writing
        to it after that kills the process with SIGSEGV (torch tensors
        cannot be made read-only)."""
        spec = self._spec(name)
        return _torch_view(_rw(self._buf()), spec)

    def state_dict(self, kind: str = "numpy") -> Dict[str, Any]:
        """{name: writable array} for every tensor, in layout order."""
        get = self.numpy if kind == "numpy" else self.torch if kind == "torch" else None
        if get is None:
            raise ValueError("wsync: kind must be 'numpy' or 'torch'")
        return {s.name: get(s.name) for s in self.publisher._layout}

    def copy_from(self, src: Any, threads: int = 0) -> int:
        """Fills the slab in one call into the library
        (wsync_slab_copy_tensors: one pass over every tensor, split across
        threads; 0 = one per online CPU, small copies stay on this thread).

        src is either a mapping {name: numpy array / torch tensor / scalar}
        holding exactly the model's tensors with their dtypes and shapes
        (bf16 from a torch.bfloat16 tensor or raw uint16/int16 bits; f8 from
        a torch float8 tensor of the same kind or raw uint8 bits), or one
        buffer laid out like the slab (as long as the slab, or up to the end
        of its last tensor). Every source is checked before any byte is
        copied. Returns 1, the number of library calls made."""
        threads = _uint(threads, "threads", 32)
        if self._done:
            raise ClosedError("wsync: slab already committed or aborted")
        if not isinstance(src, Mapping):
            return self._copy_buffer(src, threads)
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
        self._copy_call(lambda: lib.wsync_slab_copy_tensors(ctypes.byref(self._c), srcs,
                                                            threads))
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

    def _copy_buffer(self, src, threads):
        layout = self.publisher._layout
        end = max((s.offset + s.nbytes for s in layout), default=0)
        if _dtypes.is_torch_tensor(src):
            t = src.detach()
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
        self._copy_call(lambda: lib.wsync_slab_copy(ctypes.byref(self._c), 0, ptr, n,
                                                    threads))
        del keep
        return 1

    def _copy_call(self, call):
        pub = self.publisher
        pub._enter()
        try:
            if self._done:
                raise ClosedError("wsync: slab already committed or aborted")
            check(call())
        finally:
            pub._leave()

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


def _source(spec, x):
    """(address, keep-alive object) of a source for tensor spec."""
    code = _dtypes.CODE[spec.dtype]
    if _dtypes.is_torch_tensor(x):
        t = x.detach()
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


class Subscriber(_Handle):
    """A subscription to one model. acquire() and wait() may be called from
    several threads at once."""

    _what = "subscriber"

    def __init__(self, client, model):
        self._init_handle(client)
        self._ptr = None
        self.client = client
        self.model = model
        self._views = weakref.WeakSet()
        self._layout = None
        self._by_name = None
        ptr = ctypes.c_void_p()
        client._enter()
        try:
            rc = lib.wsync_sub_open(client._ptr, _enc(_model_name(model), "model"),
                                    ctypes.byref(ptr))
            if rc < 0:
                self._closed = self._freed = True
                raise error_from_rc(rc)
            self._adopted(ptr.value)
            client._adopt(self)
        finally:
            client._leave()

    def _c_free(self, ptr):
        self._lib.wsync_sub_close(ptr)

    def ref(self):
        """A picklable ModelRef to this model (see Client.ref)."""
        return self.client.ref(self.model)

    def __repr__(self):
        return "<wsync.Subscriber %r%s>" % (self.model, " closed" if self._closed else "")

    def _learn_layout(self, tensors, n):
        if self._layout is None:
            self._layout = _read_layout(tensors, n)
            self._by_name = {s.name: s for s in self._layout}

    def _view(self, cv):
        self._learn_layout(cv.tensors, cv.n_tensors)
        v = View(self, cv)      # pins this subscription until it is gone
        self._views.add(v)
        return v

    def acquire(self) -> "View":
        """The newest version as a View, zero copy, without waiting.
        NoDataError if nothing was published yet, NotConnectedError after
        the broker shut down, WsyncError(EAGAIN) if this client holds 63
        views already."""
        self._enter()
        try:
            cv = CView()
            check(lib.wsync_sub_acquire(self._ptr, ctypes.byref(cv)))
            return self._view(cv)
        finally:
            self._leave()

    def wait(self, after: Any = 0, timeout: Optional[float] = None) -> "View":
        """The newest version if it is newer than after (a version number or
        a View), waiting up to timeout seconds (None: forever) for one.
        TimeoutError on time; NotConnectedError if the broker shuts down or
        dies meanwhile (noticed within 200 ms)."""
        after, t = _after_timeout(after, timeout)
        self._enter()
        try:
            cv = CView()
            rc = _sliced(self, lambda ns: lib.wsync_sub_wait(self._ptr, after, ns,
                                                             ctypes.byref(cv)),
                         t, -_errno.ETIMEDOUT)
            if rc < 0:
                raise _fail(rc, t, "model '%s': no version after v%d" % (self.model, after))
            return self._view(cv)
        finally:
            self._leave()

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
        was deleted."""
        self._enter()
        try:
            v, st, ns = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_int64()
            check(lib.wsync_sub_latest(self._ptr, ctypes.byref(v), ctypes.byref(st),
                                       ctypes.byref(ns)))
            return LatestVersion(v.value, st.value, ns.value)
        finally:
            self._leave()

    def fileno(self) -> int:
        """An eventfd that becomes readable when a version newer than the
        last one acquired through this subscription is committed; acquire()
        and wait() drain it. Owned by the subscription: do not close it."""
        self._enter()
        try:
            return check(lib.wsync_sub_fd(self._ptr))
        finally:
            self._leave()

    @property
    def layout(self):
        """The model's tensors as TensorSpec, once a version was acquired
        (None before)."""
        return None if self._layout is None else list(self._layout)

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
        self._free_if_done()


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

    def __init__(self, sub, cv):
        self.subscriber = sub
        self._c = cv
        self._released = False
        self._c_held = True        # the library's view is not released yet
        self._pinned = True        # holds sub's C handle (mappings) until gone
        self._rawref = None
        sub._pin()
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
        return [s.name for s in self.subscriber._layout]

    @property
    def layout(self):
        return list(self.subscriber._layout)

    @property
    def released(self):
        return self._released

    def _spec(self, name):
        self._check()
        try:
            return self.subscriber._by_name[name]
        except KeyError:
            raise KeyError("wsync: model %r has no tensor %r"
                           % (self.subscriber.model, name)) from None

    def _buf(self):
        return _raw(self, self._c.base, self._c.bytes)

    def numpy(self, name: str) -> np.ndarray:
        """A read-only numpy array over tensor name, zero copy (bf16 as
        uint16 bits, f8_e4m3fn and f8_e5m2 as uint8 bits). Writing raises
        ValueError."""
        spec = self._spec(name)
        return _np_view(_ro(self._buf()), spec)

    def torch(self, name: str) -> Any:
        """A torch tensor over tensor name, zero copy (bf16 as
        torch.bfloat16; f8 as torch.float8_* from torch 2.1, else uint8
        bits; u16/u32/u64 as torch.uint16/32/64 from torch 2.3, else a
        TypeError): a wsync.ReadOnlyTensor, whose in-place operations
        raise ReadOnlyError (the memory is mapped read-only) and whose use
        after release() raises ClosedError. Clone it to modify it."""
        spec = self._spec(name)
        return _torch_ro_view(self, _rw(self._buf()), spec)

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
            buf = _ro(self._buf())
            return {s.name: _np_view(buf, s) for s in self.subscriber._layout}
        buf = _rw(self._buf())
        return {s.name: _torch_ro_view(self, buf, s) for s in self.subscriber._layout}

    def verify(self) -> None:
        """Recomputes this version's slab checksum and compares it with the
        one its publisher stored (a model published with checksum=True).
        Returns None if they match; raises WsyncError with errno EBADMSG on
        a mismatch, NoDataError if the version has no checksum."""
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
        buf = _rw(self._buf())
        return _module.load_into(self, module, strict, lambda s: _torch_view(buf, s), tp,
                                 self._read_part)

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
        i = self.subscriber._layout.index(spec)
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

    def _release(self, keep_pin):
        sub = self.subscriber
        with sub._cond:
            self._released = True
            # The C view stays held while an array of it lives, so that
            # array never shows a later version's bytes.
            release = self._c_held and not keep_pin
            if release:
                self._c_held = False
            unpin = self._pinned and not keep_pin
            if unpin:
                self._pinned = False
        # The pin keeps sub's C handle alive: the release below is safe.
        if release and sub._gen == sub._gens[0] and sub._ptr is not None:
            sub._lib.wsync_sub_release(sub._ptr, self._byref(self._c))
        if unpin:
            sub._unpin()

    def __del__(self):
        try:
            self._release(False)
        except Exception:
            pass
