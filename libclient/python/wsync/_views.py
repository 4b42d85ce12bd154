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
  version stays held while one of its tensors lives, as before, and the
  view itself (_wsync_view), for ClosedError after release. The cache goes
  with the cell's retirement (close, or a move to a restarted broker).
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
    keep = view._buf()
    base = view._c.base
    rng = (base, base + view._c.bytes)
    sc = view._slot_cache()
    out = {}
    if sc is None:
        buf = rw(keep)
        for spec in specs:
            w = torch_view(buf, spec).as_subclass(cls)
            w._wsync_view, w._wsync_range, w._wsync_keep = view, rng, keep
            out[spec.name] = w
        return out
    plain, make = sc.plain, sc.tensor
    for spec in specs:
        p = plain.get(spec.name)
        if p is None:
            p = make(spec)
        w = p.as_subclass(cls)
        w._wsync_view, w._wsync_range, w._wsync_keep = view, rng, keep
        out[spec.name] = w
    return out


def plain_tensor(view, spec):
    """A plain torch tensor over tensor spec of view, for copies out of it
    (load_into) that never hand it out: the slot's cached one."""
    sc = view._slot_cache()
    if sc is None:
        return torch_view(rw(view._buf()), spec)
    return sc.tensor(spec)
