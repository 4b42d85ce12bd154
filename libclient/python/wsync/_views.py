"""Arrays and tensors over the shared memory of views and slabs, made fast.

Lifetimes (docs/PYTHON.md, "Zero copy and lifetimes"):

- raw(owner, ...) is an owner's (View or Slab) memory as a ctypes array,
  made once per owner and kept while any array made from it lives: numpy
  arrays of a view are made over it, so an array alive keeps its view
  alive and its version held.
- A subscription's slab of one slot lies at the same address for the life
  of its C handle (its cell). The plain torch tensors over it are made once
  per slot and tensor and kept in the cell (SlotCache): every view of that
  slot makes its ReadOnlyTensors as aliases of them, which costs one
  as_subclass per tensor instead of building each tensor anew (numpy
  frombuffer, from_numpy, as_subclass). Their memory is owned by a _SlotMem,
  which uses the cell (so the mapping stays while any of them lives); each
  ReadOnlyTensor also holds its view's raw array (_wsync_keep), so the view's
  version stays held while one of its tensors lives, as before, and through
  it the view (ReadOnlyTensor._wsync_view), for ClosedError after release.
  The cache goes with the cell's retirement (close, or a move to a
  restarted broker).
- numpy arrays of a view are ndarrays over one read-only array of its
  whole slab (View._np_whole), one constructor call each.
- load_into copies with the library (copier, below).
"""
import ctypes
import weakref

import numpy as np

from . import _dtypes


def raw(owner, base, nbytes):
    """The owner's (View or Slab) memory as a ctypes array, made once and
    kept while any array made from it lives.

    The ctypes array references its owner, and every numpy array or torch
    tensor made from it keeps the ctypes array alive (numpy through its
    memoryview): an array alive means its owner alive, so the garbage
    collector never releases a view under an array. The owner keeps only a
    weak reference back, so there is no cycle: a view nobody uses is
    released as soon as its last reference goes."""
    r = owner._rawref() if owner._rawref is not None else None
    if r is None:
        r = (ctypes.c_char * nbytes).from_address(base)
        r._wsync_owner = owner
        owner._rawref = weakref.ref(r, _raw_gone_cb(owner))
    return r


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


def has_arrays(owner):
    """True while an array made by raw() for owner is alive."""
    return owner._rawref is not None and owner._rawref() is not None


def rw(r):
    return memoryview(r).cast("B")


def ro(r):
    return memoryview(r).cast("B").toreadonly()


def np_view(buf, spec, np_dtype=None):
    dt = np_dtype if np_dtype is not None else _dtypes.NUMPY[_dtypes.CODE[spec.dtype]]
    count = spec.nbytes // dt.itemsize
    return np.frombuffer(buf, dtype=dt, count=count, offset=spec.offset).reshape(spec.shape)


def torch_view(buf, spec):
    """A torch tensor over tensor spec: the dtype's own where this torch has
    it, uint8 raw bits for an 8-bit float where it has none, a TypeError
    for u16/u32/u64 where it has none (see _dtypes)."""
    import torch
    code = _dtypes.CODE[spec.dtype]
    if code == _dtypes.BF16:
        arr = np_view(buf, spec, np.dtype(np.int16))
        return torch.from_numpy(arr).view(torch.bfloat16)
    if code in _dtypes.NEWER_TORCH:
        if not _dtypes.torch_has(code):
            if code in _dtypes.RAW_BITS:
                return torch.from_numpy(np_view(buf, spec))
            _dtypes.torch_dtype(code, spec.name)        # raises, naming the version
        # torch.from_numpy takes no float8 (nor, before 2.3, an unsigned type
        # but uint8): reinterpret an integer tensor of the same size
        bits = np.dtype("u1") if code in _dtypes.RAW_BITS else \
            np.dtype("i%d" % _dtypes.ITEMSIZE[code])
        return torch.from_numpy(np_view(buf, spec, bits)).view(_dtypes.torch_dtype(code))
    return torch.from_numpy(np_view(buf, spec))


def np_arrays(owner, specs):
    """{name: read-only numpy array} of specs over owner's (a View's) raw
    memory: each an ndarray over one read-only array of the whole slab
    (frombuffer), which numpy never lets be made writeable (an ndarray
    over the memoryview itself would be: numpy looks through it to the
    writable ctypes array); one constructor call per tensor."""
    whole = owner._np_whole() if hasattr(owner, "_np_whole") else None
    if whole is None:
        whole = np.frombuffer(ro(owner._buf()), np.uint8)
    nd, dts, codes = np.ndarray, _dtypes.NUMPY, _dtypes.CODE
    return {s.name: nd(s.shape, dts[codes[s.dtype]], whole, s.offset) for s in specs}


# ---- per slot: plain tensors shared by the views of a slot --------------------------


class _SlotMem:
    """Owns a slot's mapping for the arrays over it: uses the cell (its C
    subscription) until the last of them is gone."""

    __slots__ = ("cell", "__weakref__")

    def __init__(self, cell):
        cell.use()
        self.cell = cell

    def __del__(self):
        try:
            self.cell.unuse()
        except Exception:
            pass


class SlotCache:
    """The plain tensors over one slot of a subscription (see the module's
    docstring). Kept in cell.slots[slot] until the cell retires."""

    __slots__ = ("base", "nbytes", "buf", "plain")

    def __init__(self, cell, base, nbytes):
        r = (ctypes.c_char * nbytes).from_address(base)
        r._wsync_owner = _SlotMem(cell)
        self.base = base
        self.nbytes = nbytes
        self.buf = rw(r)
        self.plain = {}

    def tensor(self, spec):
        t = self.plain.get(spec.name)
        if t is None:
            t = self.plain[spec.name] = torch_view(self.buf, spec)
        return t


def slot_cache(cell, slot, base, nbytes):
    """The SlotCache of slot of the subscription cell (made on first use);
    None once the cell retired (the caller then builds tensors on its own)."""
    slots = cell.slots
    if slots is not None:
        sc = slots.get(slot)
        if sc is not None and sc.base == base and sc.nbytes == nbytes:
            return sc
    with cell.lock:               # against retire(), which drops the cache
        if cell.retired:
            return None
        if cell.slots is None:
            cell.slots = {}
        sc = cell.slots[slot] = SlotCache(cell, base, nbytes)
    return sc


_RO = []          # ReadOnlyTensor, imported on first use (it imports torch)


def _ro_class():
    if not _RO:
        from ._torch import ReadOnlyTensor
        _RO.append(ReadOnlyTensor)
    return _RO[0]


def ro_tensors(view, specs):
    """{name: ReadOnlyTensor} of specs of view: aliases of its slot's plain
    tensors (one as_subclass each), each holding the view (ClosedError
    after release) and its raw array (the version stays held while the
    tensor lives)."""
    cls = _ro_class()
    keep = view._buf()            # names the view; its _range is the slab's
    sc = view._slot_cache()
    out = {}
    if sc is None:
        buf = rw(keep)
        for spec in specs:
            w = torch_view(buf, spec).as_subclass(cls)
            w._wsync_keep = keep
            out[spec.name] = w
        return out
    plain, make, alias = sc.plain, sc.tensor, _as_subclass()
    for spec in specs:
        name = spec.name
        p = plain.get(name)
        if p is None:
            p = make(spec)
        w = alias(p, cls)
        w._wsync_keep = keep
        out[name] = w
    return out


def ro_tensor_list(view, specs):
    """ro_tensors(view, specs) as a list, in the order of specs."""
    cls = _ro_class()
    keep = view._buf()
    sc = view._slot_cache()
    if sc is None:
        buf = rw(keep)
        out = [torch_view(buf, spec).as_subclass(cls) for spec in specs]
    else:
        plain, make, alias = sc.plain, sc.tensor, _as_subclass()
        out = []
        for spec in specs:
            p = plain.get(spec.name)
            out.append(alias(p if p is not None else make(spec), cls))
    for w in out:
        w._wsync_keep = keep
    return out


def _as_subclass():
    import torch
    return torch.Tensor.as_subclass


def plain_tensor(view, spec):
    """A plain torch tensor over tensor spec of view, for copies out of it
    (load_into) that never hand it out: the slot's cached one."""
    sc = view._slot_cache()
    if sc is None:
        return torch_view(rw(view._buf()), spec)
    return sc.tensor(spec)


# ---- copying a view out: load_into at the threaded copy's speed ---------------------

_COPY_PARALLEL_MIN = 8 << 20    # below this, one thread (a thread hand-off costs more)
_COPY_PER_THREAD_MIN = 4 << 20  # as the library's own threaded copy
_COPY_ALIGN = 4096              # where segments are cut between threads


class _Copier:
    """Copies lists of (dst, src, nbytes) with the library's copy
    (wsync_copy: memcpy or streaming stores, whichever the process measured
    faster), split by bytes across the calling thread and helper threads,
    as many as the CPUs this process may run on (at most 8). The helpers
    are daemon threads made on first use (again in a forked child) that
    wait on a queue; a ctypes call releases the GIL, so they copy at once."""

    def __init__(self):
        self._lock = None
        self._pid = None
        self._helpers = []
        self._done = None

    def _start(self, n):
        import os
        import queue
        import threading
        if self._pid != os.getpid():
            self._lock = threading.Lock()
            self._helpers = []
            self._done = queue.SimpleQueue()
            self._pid = os.getpid()
        while len(self._helpers) < n:
            q = queue.SimpleQueue()
            t = threading.Thread(target=self._helper, args=(q, self._done), daemon=True,
                                 name="wsync-copy-%d" % len(self._helpers))
            t.start()
            self._helpers.append(q)

    @staticmethod
    def _helper(q, done):
        from ._lib import lib
        copy = lib.wsync_copy
        while True:
            part = q.get()
            err = 0
            for d, s, n in part:
                rc = copy(d, s, n, 1)
                if rc < 0:
                    err = rc
            done.put(err)

    def copy(self, segs, threads=0):
        """Copies every (dst, src, nbytes) of segs; raises on a failure."""
        from ._errors import check
        from ._lib import lib
        total = sum(n for _, _, n in segs)
        k = threads or _cpus()
        k = max(1, min(k, 8, total // _COPY_PER_THREAD_MIN))
        if k == 1 or total < _COPY_PARALLEL_MIN:
            for d, s, n in segs:
                check(lib.wsync_copy(d, s, n, 1))
            return
        parts = _split(segs, total, k)
        import os
        if self._pid != os.getpid() or self._lock is None:
            self._start(0)
        with self._lock:            # one split copy at a time uses the helpers
            self._start(k - 1)
            for q, part in zip(self._helpers, parts[1:]):
                q.put(part)
            err = 0
            for d, s, n in parts[0]:
                rc = lib.wsync_copy(d, s, n, 1)
                if rc < 0:
                    err = rc
            for _ in parts[1:]:
                rc = self._done.get()
                if rc < 0:
                    err = rc
        check(err)


def _cpus():
    import os
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _split(segs, total, k):
    """segs cut into k lists of about total / k bytes each (cuts on
    _COPY_ALIGN boundaries of a segment)."""
    share = -(-total // k)
    parts, cur, room = [], [], share
    for d, s, n in segs:
        off = 0
        while n - off > 0:
            take = n - off
            if take > room and len(parts) < k - 1:
                take = max(_COPY_ALIGN, room // _COPY_ALIGN * _COPY_ALIGN)
                take = min(take, n - off)
            cur.append((d + off, s + off, take))
            off += take
            room -= take
            if room <= 0 and len(parts) < k - 1:
                parts.append(cur)
                cur, room = [], share
    parts.append(cur)
    return [p for p in parts if p]


copier = _Copier()
