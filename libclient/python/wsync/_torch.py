"""torch tensors over a View's read-only memory that refuse to be written.

The pages of a view are mapped read-only: a write through a plain tensor
over them kills the process with SIGSEGV, and torch has no read-only
tensors. ReadOnlyTensor is a torch.Tensor subclass whose __torch_function__
raises ReadOnlyError before any in-place operation on it (a method ending in
"_", __setitem__, an out= argument) reaches the memory (a copy_ of the very
same elements onto themselves, which writes nothing, is let through), and
ClosedError for any operation once its view is released. Results that
alias the view's memory (slices, view(), detach(), .data, t()) are
ReadOnlyTensors again; new tensors (t * 2, a module's output) are plain.

Every way out of the tensor to other code stays read-only or refuses:
numpy() and np.asarray() give arrays over the view's read-only buffer (numpy
refuses flags.writeable = True on them); __dlpack__ (torch.from_dlpack,
np.from_dlpack), storage() and as_subclass() to a writable class raise
ReadOnlyError, since DLPack and storages cannot carry read-only-ness and a
plain tensor over the mapping would fault on its first write; pickling and
deepcopy copy. nn.Parameter(t) stays a ReadOnlyTensor.

Cost: one Python-level dispatch per torch operation that takes such a
tensor (a few microseconds, see docs/PYTHON.md). Only imported when torch
is used.
"""
import inspect

import torch

from ._errors import ClosedError

_DISABLED = torch._C.DisableTorchFunction
# The getter of __cuda_array_interface__: a view's CUDA tensor says read-only.
_CAI_GET = getattr(getattr(torch.Tensor, "__cuda_array_interface__", None), "__get__", None)

# In-place methods that do not write the tensor's memory.
_ALLOWED_INPLACE = frozenset(("requires_grad_", "retain_grad"))
_INPLACE_DUNDERS = frozenset("__i%s__" % op for op in (
    "add", "sub", "mul", "truediv", "floordiv", "div", "mod", "pow", "and", "or", "xor",
    "lshift", "rshift", "matmul")) | {"__setitem__"}


class ReadOnlyError(RuntimeError):
    """A write through a tensor over a View's read-only shared memory."""


def _inplace_name(func):
    name = getattr(func, "__name__", "")
    if name in _INPLACE_DUNDERS:
        return name
    if name.endswith("_") and not name.endswith("__") and name not in _ALLOWED_INPLACE:
        return name
    return None


_INPLACE_ARG = {}      # func -> position of its "inplace" parameter, or None


def _inplace_arg(func):
    try:
        return _INPLACE_ARG[func]
    except (KeyError, TypeError):
        pass
    pos = None
    try:
        params = list(inspect.signature(func).parameters)
        if "inplace" in params:
            pos = params.index("inplace")
    except (TypeError, ValueError):
        pass
    try:
        _INPLACE_ARG[func] = pos
    except TypeError:
        pass
    return pos


def _writes_first(func, args, kwargs):
    """The name under which func would write its first argument, or None."""
    name = _inplace_name(func)
    if name is not None:
        return name
    if kwargs.get("inplace") is True:
        return getattr(func, "__name__", "?") + "(inplace=True)"
    pos = _inplace_arg(func)
    if pos is not None and len(args) > pos and args[pos] is True:
        return getattr(func, "__name__", "?") + "(inplace=True)"
    return None


def _conditional_writers():
    """Functions that write a tensor they are given (not the first) when a
    flag says so: batch and instance norms update their running stats in
    training, embeddings renormalise rows in place with max_norm. Called on
    a view's tensor they would write the read-only mapping (SIGSEGV).
    func -> (what, [(position, name) of the tensors written],
    (position, name, default) of the flag)."""
    F = torch.nn.functional
    stats_f = ((1, "running_mean"), (2, "running_var"))
    stats_t = ((3, "running_mean"), (4, "running_var"))
    out = {
        F.batch_norm: ("batch_norm(training=True)", stats_f, (5, "training", False)),
        F.instance_norm: ("instance_norm(use_input_stats=True)", stats_f,
                          (5, "use_input_stats", True)),
        F.embedding: ("embedding(max_norm=...)", ((1, "weight"),), (3, "max_norm", None)),
        F.embedding_bag: ("embedding_bag(max_norm=...)", ((1, "weight"),),
                          (3, "max_norm", None)),
    }
    for name, flag in (("batch_norm", "training"), ("native_batch_norm", "training"),
                       ("instance_norm", "use_input_stats")):
        f = getattr(torch, name, None)
        if f is not None:
            out[f] = ("%s(%s=True)" % (name, flag), stats_t, (5, flag, False))
    return out


_COND_WRITES = _conditional_writers()


def _writes_other(func, args, kwargs):
    """The name under which func would write a read-only tensor it is given
    as other than its first argument (see _conditional_writers), or None."""
    what, tensors, (pos, name, default) = _COND_WRITES[func]
    flag = args[pos] if len(args) > pos else kwargs.get(name, default)
    if flag is None or flag is False:
        return None
    for pos, name in tensors:
        t = args[pos] if len(args) > pos else kwargs.get(name)
        if isinstance(t, ReadOnlyTensor):
            return what
    return None


_PLAIN = {}    # func -> True when it needs nothing of __torch_function__ but
               # the release check and the alias wrap (see _plain)


def _plain(func):
    """True if func, called without keyword arguments, writes nothing (no
    in-place name, no inplace parameter) and is none of the ways out that
    __torch_function__ treats apart: the release check, the call and the
    wrap of an alias are all it needs (.data, detach(), a view, most maths).
    Decided once per func."""
    try:
        return _PLAIN[func]
    except (KeyError, TypeError):
        pass
    name = getattr(func, "__name__", "")
    plain = (_inplace_name(func) is None and _inplace_arg(func) is None and
             name not in _NO_EXPORT and name not in ("numpy", "__array__") and
             func is not _CAI_GET and func not in _COND_WRITES)
    try:
        _PLAIN[func] = plain
    except TypeError:
        pass
    return plain


# Ways out of the tensor that would hand its memory to code that may write
# it, and cannot say read-only (DLPack before 1.0, storages).
_NO_EXPORT = {
    "__dlpack__": "DLPack cannot mark memory read-only",
    "storage": "a storage of it would be writable",
    "_storage": "a storage of it would be writable",
    "untyped_storage": "a storage of it would be writable",
    "_typed_storage": "a storage of it would be writable",
    "_untyped_storage": "a storage of it would be writable",
}


def _refuse_export(name, why):
    raise ReadOnlyError("wsync: %s() of a tensor of a View: %s, and its memory is the "
                        "broker's read-only mapping (a write would kill the process); "
                        "clone() it for a writable copy, or use .numpy() (read-only, no "
                        "copy)" % (name, why))


def _ro_numpy(t, dtype=None):
    """t's memory as a numpy array over its view's read-only buffer: no copy,
    and numpy refuses to make it writeable (torch's own numpy() of t would
    be a writable array over the read-only mapping)."""
    import numpy as np
    with _DISABLED():
        if t.device.type != "cpu":
            return None
        shape, strides = tuple(t.shape), t.stride()
        size = t.element_size()
        ptr, n = t.data_ptr(), t.numel()
        dt = torch.empty(0, dtype=t.dtype).numpy().dtype   # torch's refusals (bf16) kept
    lo, hi = t._wsync_range
    if n == 0 or not lo <= ptr < hi:
        a = np.empty(shape, dt)
        a.flags.writeable = False
    else:
        # over a read-only array of the whole slab, never over the memoryview
        # itself: numpy would look through it to the writable ctypes array
        # behind and let flags.writeable be set
        slab = np.frombuffer(t._wsync_view._readonly_memory(), np.uint8)
        a = np.ndarray(shape, dt, buffer=slab, offset=ptr - lo,
                       strides=tuple(x * size for x in strides))
    return a if dtype is None else a.astype(dtype, copy=False)


def _first_ro(args):
    for a in args:
        if isinstance(a, ReadOnlyTensor):
            return a
        if isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, ReadOnlyTensor):
                    return b
    return None


def _same_memory(dst, src):
    """True if src is a tensor over exactly dst's elements (the same
    addresses, dtype, shape and strides): a copy_ of it into dst writes
    nothing new. What code that applies a module's own weights back to it
    does (TorchRL's collectors, after a zero-copy swap)."""
    if not isinstance(src, torch.Tensor) or not isinstance(dst, torch.Tensor):
        return False
    with _DISABLED():
        return (src.data_ptr() == dst.data_ptr() and src.device == dst.device and
                src.dtype == dst.dtype and src.shape == dst.shape and
                src.stride() == dst.stride())


class ReadOnlyTensor(torch.Tensor):
    """A torch.Tensor over a wsync View's memory: reads work as on any
    tensor; writes raise ReadOnlyError; any use after the view's release
    raises ClosedError. clone() it to get a writable copy."""

    # A host view's tensor holds the view's raw memory (_wsync_keep), which
    # keeps the view's version held while the tensor lives and names the
    # view (one attribute to set per tensor made); a device view's holds the
    # view and its address range themselves.
    _wsync_keep = None
    _wsync_v = None
    _wsync_r = (0, 0)
    _wsync_of = None     # .data of this tensor: exactly its elements

    @property
    def _wsync_view(self):
        keep = self._wsync_keep
        return self._wsync_v if keep is None else keep._wsync_owner

    @property
    def _wsync_range(self):
        keep = self._wsync_keep
        return self._wsync_r if keep is None else keep._wsync_owner._range

    # .data and copy_ are what code applying a module's own weights back to
    # it calls for every tensor (TorchRL's collectors, after each swap):
    # served here, at the cost of a Python call, instead of through
    # __torch_function__ (a third of a small model's update in a worker).
    @property
    def data(self):
        """torch's .data (the same memory, outside autograd), read-only."""
        view = self._wsync_view
        if view is not None and view._released:
            _closed(view)
        with _DISABLED():
            r = _DATA_GET(self)
        # the same memory as self's: an alias of the same view, no range check
        w = _AS_SUBCLASS(r, ReadOnlyTensor)
        w._wsync_keep = self._wsync_keep
        if w._wsync_keep is None:       # a device view's
            w._wsync_v, w._wsync_r = self._wsync_v, self._wsync_r
        # exactly self's elements, as long as both live (a read-only tensor's
        # shape, strides and offset never change: those are in-place ops)
        root = self._wsync_of
        w._wsync_of = self if root is None else root
        return w

    @data.setter
    def data(self, value):
        with _DISABLED():
            _DATA_SET(self, value)

    def copy_(self, src, non_blocking=False):
        """Refused (ReadOnlyError), except a copy of the very elements this
        tensor holds (its own memory) onto themselves, which writes nothing."""
        view = self._wsync_view
        if view is not None and view._released:
            _closed(view)
        if src is self or _root(self) is _root(src) or _same_memory(self, src):
            return self
        raise ReadOnlyError("wsync: copy_() on a tensor of a View: its memory is the "
                            "broker's read-only mapping; clone() it to modify it")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        ro = _first_ro(args)
        if ro is None:
            ro = _first_ro(kwargs.values())
        if ro is not None:
            view = ro._wsync_view
            if view is not None and view._released:
                _closed(view)
        if ro is not None and not kwargs and _plain(func):
            with _DISABLED():
                return _wrap_result(func(*args), ro)
        name = _writes_first(func, args, kwargs) if ro is not None else None
        if name == "copy_" and args and _same_memory(args[0], args[1] if len(args) > 1
                                                     else kwargs.get("src")):
            return args[0]        # copies the bytes it holds onto themselves: nothing
        if name is not None and args and isinstance(args[0], ReadOnlyTensor):
            raise ReadOnlyError("wsync: %s() on a tensor of a View: its memory is the "
                                "broker's read-only mapping; clone() it to modify it" % name)
        if ro is not None and func in _COND_WRITES:
            name = _writes_other(func, args, kwargs)
            if name is not None:
                raise ReadOnlyError("wsync: %s would write a tensor of a View (running "
                                    "stats or renormalised rows): its memory is the "
                                    "broker's read-only mapping; clone() it, or leave it "
                                    "out of the model" % name)
        if ro is not None and args and args[0] is ro:
            fname = getattr(func, "__name__", "")
            if fname in _NO_EXPORT:
                _refuse_export(fname, _NO_EXPORT[fname])
            if fname in ("numpy", "__array__"):
                a = _ro_numpy(ro, kwargs.get("dtype", args[1] if len(args) > 1 else None)
                              if fname == "__array__" else None)
                if a is not None:
                    return a
            if func is _CAI_GET:
                with _DISABLED():
                    cai = dict(func(*args, **kwargs))
                cai["data"] = (cai["data"][0], True)
                return cai
        out = kwargs.get("out")
        if out is not None and _first_ro((out,)) is not None:
            raise ReadOnlyError("wsync: out= a tensor of a View: its memory is the "
                                "broker's read-only mapping")
        with _DISABLED():
            r = func(*args, **kwargs)
        if ro is None:
            return r
        if getattr(func, "__name__", "") == "numpy" and hasattr(r, "flags"):
            r.flags.writeable = False
        return _wrap_result(r, ro)

    def as_subclass(self, cls):
        """A ReadOnlyTensor as another ReadOnlyTensor class; as a plain or
        other tensor class it would be writable, so that raises ReadOnlyError
        (clone() first)."""
        if isinstance(cls, type) and issubclass(cls, ReadOnlyTensor):
            w = torch.Tensor.as_subclass(self, cls)
            w._wsync_keep, w._wsync_v, w._wsync_r = self._wsync_keep, self._wsync_v, self._wsync_r
            return w
        _refuse_export("as_subclass", "a %s over it would be writable"
                       % getattr(cls, "__name__", cls))

    def __reduce_ex__(self, proto):
        # Pickling (a Queue, torch.save, deepcopy) copies the values into a
        # plain tensor: the shared mapping cannot travel.
        with _DISABLED():
            plain = torch.Tensor.as_subclass(torch.Tensor.clone(self), torch.Tensor)
        return plain.__reduce_ex__(proto)

    def __deepcopy__(self, memo):
        with _DISABLED():
            return torch.Tensor.as_subclass(torch.Tensor.clone(self), torch.Tensor)


def _root(t):
    """The read-only tensor whose .data t is (t itself if none)."""
    root = getattr(t, "_wsync_of", None)
    return t if root is None else root


def _closed(view):
    raise ClosedError("wsync: a tensor of view v%d used after the view was released "
                      "(clone() what must outlive the view)" % view.version)


_DATA_GET = torch.Tensor.data.__get__
_DATA_SET = torch.Tensor.data.__set__
_AS_SUBCLASS = torch.Tensor.as_subclass


def _wrap_result(r, ro):
    """func's result r: the tensors among it that alias ro's view read-only."""
    if isinstance(r, torch.Tensor):
        return _wrap_alias(r, ro)
    if isinstance(r, tuple) and r and isinstance(r[0], torch.Tensor):
        return tuple(_wrap_alias(x, ro) if isinstance(x, torch.Tensor) else x for x in r)
    return r


def _wrap_alias(r, ro):
    lo, hi = ro._wsync_range
    if type(r) is torch.Tensor and r.numel() and lo <= r.data_ptr() < hi:
        w = r.as_subclass(ReadOnlyTensor)
        w._wsync_keep, w._wsync_v, w._wsync_r = ro._wsync_keep, ro._wsync_v, ro._wsync_r
        return w
    return r


def read_only(t, view, lo, hi):
    """t (a plain tensor over view's memory lo .. hi) as a ReadOnlyTensor."""
    w = t.as_subclass(ReadOnlyTensor)
    w._wsync_v = view
    w._wsync_r = (lo, hi)
    return w
