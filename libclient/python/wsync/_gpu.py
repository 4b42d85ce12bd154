"""Device models from Python: GPU names, streams, device slabs and device
views (docs/GPU.md for the design, docs/PYTHON.md "GPUs" for the use).

Device memory is never touched from Python: pointers go to libwsync (and
the CUDA driver it loaded), or to consumers through
``__cuda_array_interface__`` (version 3), which torch, CuPy and Numba import
without a copy. torch CUDA tensors are built that way where torch has CUDA.

Lifetimes follow the C library, with one guarantee added: a device slab or
view object pins its publisher's or subscriber's C handle, whose mappings
hold the device memory, for as long as the object lives, and every array
and torch tensor made from it references it. So a tensor never points at
unmapped memory. Its bytes are guaranteed only until commit/abort (slab)
or release (view): after a release the broker may rewrite the slot, as in
C, so clone what must outlive the view.
"""
import ctypes
import operator
import os
import re
import sys
from collections.abc import Mapping

import errno as _errno

from . import _dtypes, _module
from ._errors import ClosedError, NoCudaError, NoDeviceError, gpu_check, gpu_error_from_rc
from ._ends import SlabLife, ViewLife
from ._lib import DEV_HOST_MIRROR, GPU_UUID_LEN, MAX_DEVICES, CDSlab, CDView, Slice, lib

_UUID = re.compile(r"(?:gpu-)?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})",
                   re.I)
_CUDA = re.compile(r"cuda(?::(\d+))?")
CU_STREAM_LEGACY = 1       # the NULL stream, to the driver and in __cuda_array_interface__


# ---- naming GPUs -----------------------------------------------------------


def _current_ordinal():
    """What "cuda" without an index means: torch's current device where
    torch has CUDA, else GPU 0."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_device()
    return 0


def _parse_device(device):
    """("uuid", "GPU-...") or ("ordinal", n) for the forms a device may take."""
    if type(device).__module__ == "torch" and type(device).__name__ == "device":
        if device.type != "cuda":
            raise ValueError("wsync: %s is not a CUDA device" % (device,))
        return "ordinal", _current_ordinal() if device.index is None else device.index
    if isinstance(device, bool):
        raise TypeError("wsync: a device is a GPU UUID, an ordinal, 'cuda:N' or a "
                        "torch.device, not a bool")
    try:
        return "ordinal", operator.index(device)
    except TypeError:
        pass
    if not isinstance(device, str):
        raise TypeError("wsync: a device is a GPU UUID, an ordinal, 'cuda:N' or a "
                        "torch.device, not %s" % type(device).__name__)
    s = device.strip()
    m = _CUDA.fullmatch(s)
    if m:
        return "ordinal", _current_ordinal() if m.group(1) is None else int(m.group(1))
    m = _UUID.fullmatch(s)
    if m:
        return "uuid", "GPU-" + m.group(1).lower()
    raise ValueError("wsync: %r is not a GPU: use a UUID ('GPU-xxxxxxxx-...', as "
                     "nvidia-smi -L prints it), an ordinal, 'cuda:N' or a torch.device"
                     % (device,))


def gpu_uuid(device) -> str:
    """The UUID ("GPU-...") of device: a UUID (any case, "GPU-" optional;
    returned in the library's spelling, not checked against this
    process's GPUs), or an ordinal / "cuda:N" / torch.device meaning "GPU N
    as this process sees it" (CUDA_VISIBLE_DEVICES honoured), which the
    CUDA driver translates (wsync_gpu_uuid). NoDeviceError if there is no
    such GPU, NoCudaError without a usable CUDA driver."""
    kind, val = _parse_device(device)
    if kind == "uuid":
        return val
    if not 0 <= val < 1 << 31:
        raise NoDeviceError(_errno.ENODEV, lib.wsync_strerror(-_errno.ENODEV).decode(),
                            "no GPU %d in this process" % val)
    buf = ctypes.create_string_buffer(GPU_UUID_LEN)
    gpu_check(lib.wsync_gpu_uuid(val, buf, len(buf)))
    return buf.value.decode()


def gpu_ordinal(device) -> int:
    """The ordinal under which this process sees device (the reverse of
    gpu_uuid; an ordinal is returned as given). NoDeviceError if this
    process does not see it (CUDA_VISIBLE_DEVICES)."""
    kind, val = _parse_device(device)
    if kind == "ordinal":
        return val
    return gpu_check(lib.wsync_gpu_ordinal(val.encode()))


def device_opts(opts, devices, host_mirror):
    """Fills the device fields of a ModelOpts; returns the UUIDs (a tuple,
    empty for a host model)."""
    if not isinstance(host_mirror, bool):
        raise TypeError("wsync: host_mirror must be True or False, not %s"
                        % type(host_mirror).__name__)
    if devices is None:
        if host_mirror:
            raise ValueError("wsync: host_mirror=True is for a model with devices=[...]")
        return ()
    if isinstance(devices, (str, int)) or type(devices).__module__ == "torch":
        devices = [devices]
    uuids = [gpu_uuid(d) for d in devices]
    if not uuids:
        raise ValueError("wsync: devices=[] names no GPU (leave it out for a host model)")
    if len(uuids) > MAX_DEVICES:
        raise ValueError("wsync: a model lives on at most %d GPUs, not %d"
                         % (MAX_DEVICES, len(uuids)))
    if len(set(uuids)) != len(uuids):
        raise ValueError("wsync: devices names a GPU twice: %s" % ", ".join(uuids))
    arr = (ctypes.c_char_p * len(uuids))(*[u.encode() for u in uuids])
    opts.n_devices = len(uuids)
    opts.devices = arr                  # ctypes keeps arr alive with opts
    opts.device_flags = DEV_HOST_MIRROR if host_mirror else 0
    return tuple(uuids)


# ---- streams and torch -------------------------------------------------------


def _torch_cuda_on():
    """torch, if it is imported and has made its CUDA context, else None."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch


def stream_handle(stream, device=None):
    """The CUstream (an int, or None for the NULL stream) of stream: a
    torch.cuda.Stream (or anything with .cuda_stream, or CuPy's .ptr), an
    int CUstream, or None: torch's current stream on device (None: the
    current device) where torch has made its CUDA context, else the NULL
    (legacy default) stream."""
    if stream is None:
        torch = _torch_cuda_on()
        if torch is None:
            return None
        dev = None if device is None else gpu_ordinal(device)
        return torch.cuda.current_stream(dev).cuda_stream or None
    h = stream
    if not isinstance(stream, int):
        h = getattr(stream, "cuda_stream", None)
        if h is None:
            h = getattr(stream, "ptr", None)
    if isinstance(h, bool) or not isinstance(h, int):
        raise TypeError("wsync: a stream is a torch.cuda.Stream, an int CUstream or None, "
                        "not %s" % type(stream).__name__)
    if not 0 <= h < 1 << 64:
        raise ValueError("wsync: %d is not a CUstream" % h)
    return h or None


_driver = []     # the CUDA driver libwsync loaded, opened again for stream_sync


def stream_sync(h):
    """cuStreamSynchronize(h) (None: the NULL stream), for the waits the
    library leaves to its caller: a device slab aborted after copies into
    it, a view copied out on several streams. Returns the CUresult; a
    stream in error has stopped writing or reading, so callers go on."""
    if not _driver:
        # the same object libwsync dlopened: a second dlopen of a loaded
        # library returns it
        cu = ctypes.CDLL(os.environ.get("WSYNC_LIBCUDA") or "libcuda.so.1")
        cu.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
        cu.cuStreamSynchronize.restype = ctypes.c_int
        _driver.append(cu)
    return _driver[0].cuStreamSynchronize(h)


# wsync_sub_release_gpu's WSYNC_STREAM_NONE: nothing to synchronise
STREAM_NONE = (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1


def _to_sync(h):
    """The handle that makes wsync_sub_release_gpu synchronise stream h
    (None: the NULL stream, named CU_STREAM_LEGACY, the same stream to the
    driver)."""
    return CU_STREAM_LEGACY if h is None else h


def torch_cuda():
    """torch, if it has CUDA here; else NoCudaError saying so."""
    try:
        import torch
    except ImportError:
        raise NoCudaError(_errno.ENOSYS, "torch has no CUDA here",
                          "torch is not installed: use __cuda_array_interface__ "
                          "(cuda_array()) or copy_to_device()") from None
    if not torch.cuda.is_available():
        raise NoCudaError(_errno.ENOSYS, "torch has no CUDA here",
                          "torch %s has no CUDA here (torch.cuda.is_available() is False): "
                          "use __cuda_array_interface__ (cuda_array()) or copy_to_device()"
                          % torch.__version__)
    return torch


class _Interface:
    """A __cuda_array_interface__ dict for a consumer, holding the array
    (and through it the slab or view) for as long as the consumer holds
    this object: torch keeps it referenced by the tensor it builds."""

    def __init__(self, cai, arr):
        self.__cuda_array_interface__ = cai
        self._arr = arr


def _torch_tensor(arr):
    """A torch CUDA tensor over arr's device memory, without a copy."""
    torch = torch_cuda()
    cai = arr.__cuda_array_interface__
    bf16 = _dtypes.CODE[arr.dtype] == _dtypes.BF16
    if bf16:                           # torch reads no bf16 typestr: build int16, view
        cai = dict(cai, typestr="<i2")
    dev = torch.device("cuda", gpu_ordinal(arr._owner.device))
    with torch.cuda.device(dev):
        t = torch.as_tensor(_Interface(cai, arr), device=dev)
    if t.numel() and t.data_ptr() != arr.ptr:
        raise RuntimeError("wsync: torch copied tensor %r instead of using its device "
                           "memory" % arr.name)
    return t.view(torch.bfloat16) if bf16 else t


class DeviceArray:
    """One tensor of a device slab or view: name, dtype ("f32", ...), shape,
    nbytes, ptr (the CUdeviceptr), readonly, and __cuda_array_interface__
    (version 3: typestr as numpy spells the dtype, bf16 as "<u2" bits;
    data (ptr, readonly); strides None, the tensor is C-contiguous; stream
    None when the bytes are complete, else the stream they are written on).
    torch() makes a torch CUDA tensor over it, without a copy."""

    __slots__ = ("name", "dtype", "shape", "nbytes", "ptr", "readonly", "_owner")

    def __init__(self, owner, spec, ptr, readonly):
        self._owner = owner
        self.name, self.dtype, self.shape, self.nbytes = (spec.name, spec.dtype, spec.shape,
                                                          spec.nbytes)
        self.ptr = ptr
        self.readonly = readonly

    def __repr__(self):
        return "<wsync.DeviceArray %r %s %s on %s%s>" % (
            self.name, self.dtype, self.shape, self._owner.device,
            " read-only" if self.readonly else "")

    @property
    def __cuda_array_interface__(self):
        self._owner._check()
        return {"version": 3, "shape": self.shape,
                "typestr": _dtypes.NUMPY[_dtypes.CODE[self.dtype]].str,
                "data": (self.ptr, self.readonly), "strides": None,
                "stream": self._owner._cai_stream()}

    def torch(self):
        """A torch CUDA tensor over this array (NoCudaError if torch has no
        CUDA here)."""
        return self._owner._torch(self)


# ---- sources and destinations ------------------------------------------------


def _cai_of(x, what):
    cai = getattr(x, "__cuda_array_interface__", None)
    if not isinstance(cai, Mapping):
        raise TypeError("wsync: %s must be a CUDA tensor or have __cuda_array_interface__, "
                        "not %s" % (what, type(x).__name__))
    return cai


def _contiguous_strides(shape, itemsize):
    strides, n = [], itemsize
    for d in reversed(shape):
        strides.append(n)
        n *= d
    return tuple(reversed(strides))


def _device_source(spec, x):
    """(CUdeviceptr, keep-alive) of a device source for tensor spec: a torch
    CUDA tensor or an object with __cuda_array_interface__."""
    code = _dtypes.CODE[spec.dtype]
    if _dtypes.is_torch_tensor(x):
        if x.device.type != "cuda":
            raise TypeError("wsync: tensor %r is on %s: a device slab is filled from GPU "
                            "tensors (publish host tensors with a host mirror's "
                            "publisher, or move them to the GPU)" % (spec.name, x.device))
        _dtypes.check_torch(spec, x)
        t = x.detach().contiguous()
        return t.data_ptr(), t
    cai = _cai_of(x, "tensor %r" % spec.name)
    want = _dtypes.NUMPY[code]
    ok = cai.get("typestr") == want.str or (code == _dtypes.BF16 and
                                             cai.get("typestr") in ("<i2", "<u2"))
    if not ok:
        raise TypeError("wsync: tensor %r is %s, the layout says %s (%s)"
                        % (spec.name, cai.get("typestr"), spec.dtype, want.str))
    shape = tuple(int(d) for d in cai.get("shape", ()))
    if shape != spec.shape:
        raise ValueError("wsync: tensor %r has shape %s, the layout says %s"
                         % (spec.name, shape, spec.shape))
    strides = cai.get("strides")
    if strides is not None and spec.nbytes and \
            tuple(strides) != _contiguous_strides(shape, want.itemsize):
        raise ValueError("wsync: tensor %r is not C-contiguous (strides %s)"
                         % (spec.name, tuple(strides)))
    return int(cai["data"][0]), x


def _dst_of(dst):
    """(CUdeviceptr, its size in bytes or None) of a copy destination: an
    int device pointer, a torch CUDA tensor, or __cuda_array_interface__."""
    if isinstance(dst, bool):
        raise TypeError("wsync: a destination is a device pointer, a CUDA tensor or has "
                        "__cuda_array_interface__, not a bool")
    if isinstance(dst, int):
        if not 0 < dst < 1 << 64:
            raise ValueError("wsync: %d is not a device pointer" % dst)
        return dst, None
    if _dtypes.is_torch_tensor(dst):
        if dst.device.type != "cuda" or not dst.is_contiguous():
            raise ValueError("wsync: the destination must be a contiguous CUDA tensor, not "
                             "a %s one on %s" % ("contiguous" if dst.is_contiguous() else
                                                 "strided", dst.device))
        return dst.data_ptr(), dst.numel() * dst.element_size()
    cai = _cai_of(dst, "the destination")
    if cai["data"][1]:
        raise ValueError("wsync: the destination's __cuda_array_interface__ is read-only")
    shape = tuple(int(d) for d in cai.get("shape", ()))
    size = 1
    for d in shape:
        size *= d
    itemsize = int(cai["typestr"][2:])
    strides = cai.get("strides")
    if strides is not None and size and tuple(strides) != _contiguous_strides(shape,
                                                                              itemsize):
        raise ValueError("wsync: the destination is not C-contiguous (strides %s)"
                         % (tuple(strides),))
    return int(cai["data"][0]), size * itemsize


def _torch_devices(src):
    """The CUDA ordinals of the torch tensors in src."""
    return {v.device.index for v in src.values()
            if _dtypes.is_torch_tensor(v) and v.device.type == "cuda"}


def _spec_of(by_name, model, name):
    try:
        return by_name[name]
    except KeyError:
        raise KeyError("wsync: model %r has no tensor %r" % (model, name)) from None


# ---- publisher side ------------------------------------------------------------


class DeviceSlab(SlabLife):
    """A writable device slab for the next version, from
    Publisher.begin_gpu(device): the version's memory on that GPU.

    Fill it with copy_from (CUDA tensors, copied by the driver on a
    stream), or write through cuda_array()/torch() with your own kernels,
    then commit(step, stream): the library copies the version to the
    model's other GPUs (and the host mirror), synchronises the stream, and
    only then makes it visible. As a context manager it behaves like Slab:
    an exception aborts it, leaving the block without commit() or abort()
    aborts it and raises RuntimeError."""

    _device = True
    _what = "device slab"
    _rawref = None

    def __init__(self, pub, cs, device, cell):
        self.publisher = pub
        self._c = cs
        self._cell = cell                 # the C publisher it was begun on
        self._lost = False
        self.device = device              # the GPU's UUID
        self.base = cs.base
        self.nbytes = cs.bytes
        self.version = None
        self._done = False
        self._streams = []                # CUstreams of copy_from's copies, the last last
        self._by_name = {s.name: s for s in pub._layout}
        self._pinned = True
        cell.use()                        # the publisher's mappings outlive this object

    def __repr__(self):
        return "<wsync.DeviceSlab of %r on %s %s>" % (self.publisher.model, self.device,
                                                      "done" if self._done else "begun")

    layout = property(lambda self: list(self.publisher._layout))
    tensors = property(lambda self: [s.name for s in self.publisher._layout])
    active = property(lambda self: not self._done)

    def _check(self):
        if self._done:
            raise ClosedError("wsync: device slab already committed or aborted")

    def _cai_stream(self):
        if not self._streams:
            return None               # nothing of wsync's in flight on it
        return self._streams[-1] or CU_STREAM_LEGACY

    def _spec(self, name):
        self._check()
        return _spec_of(self._by_name, self.publisher.model, name)

    def cuda_array(self, name: str) -> DeviceArray:
        """Tensor name as a writable DeviceArray (__cuda_array_interface__)."""
        spec = self._spec(name)
        return DeviceArray(self, spec, self.base + spec.offset, False)

    def _torch(self, arr):
        return _torch_tensor(arr)

    def torch(self, name: str):
        """Tensor name as a writable torch CUDA tensor over the slab, no copy
        (NoCudaError where torch has no CUDA). Valid until commit/abort."""
        return _torch_tensor(self.cuda_array(name))

    def state_dict(self, kind: str = "torch"):
        """{name: torch CUDA tensor} ("torch") or {name: DeviceArray}
        ("cuda_array") of every tensor, in layout order."""
        get = {"torch": self.torch, "cuda_array": self.cuda_array}.get(kind)
        if get is None:
            raise ValueError("wsync: kind must be 'torch' or 'cuda_array'")
        return {s.name: get(s.name) for s in self.publisher._layout}

    def copy_from(self, src, stream=None) -> None:
        """Copies every tensor from src, {name: torch CUDA tensor or object
        with __cuda_array_interface__} holding exactly the model's tensors
        (dtypes and shapes checked first), into the slab: one
        wsync_dslab_copy_from_device, asynchronous on stream (see
        stream_handle; commit() synchronises it)."""
        self._check()
        pub = self.publisher
        layout = pub._layout
        pub._check_names(src)
        srcs = (ctypes.c_uint64 * len(layout))()
        keep = []
        for i, spec in enumerate(layout):
            ptr, obj = _device_source(spec, src[spec.name])
            keep.append(obj)
            srcs[i] = ptr if spec.nbytes else 0
        h = stream_handle(stream, self.device)
        cell = pub._enter()
        try:
            self._check()
            gpu_check(lib.wsync_dslab_copy_from_device(ctypes.byref(self._c), srcs,
                                                       len(layout), h))
        finally:
            pub._leave(cell)
        if h in self._streams:
            self._streams.remove(h)
        self._streams.append(h)
        del keep

    def commit(self, step: int, stream=None) -> int:
        """Publishes the slab as the newest version stamped with step:
        copies it to the model's other GPUs and the host mirror on stream,
        synchronises the stream, commits. stream: the one the slab was
        written on; by default the stream of the last copy_from, else as
        stream_handle(None). Other streams of copy_from's copies are
        synchronised first. Returns the version."""
        if stream is None and self._streams:
            h = self._streams[-1]
        else:
            h = stream_handle(stream, self.device)
        for other in self._streams:       # commit synchronises h; the rest here
            if other != h:
                stream_sync(other)
        self.version = self.publisher._finish(
            self, lambda p, st, out: lib.wsync_pub_commit_gpu(p, h, st, out), step)
        return self.version

    def abort(self) -> None:
        """Drops the slab, once copy_from's copies into it are done; the
        latest version is unchanged. Synchronise the streams of your own
        writes into it first."""
        self._sync_copies()
        self.publisher._finish(self, lib.wsync_pub_abort)

    def _sync_copies(self):
        # the slot goes back and may be unmapped: no copy may still write it
        for h in self._streams:
            stream_sync(h)
        self._streams = []

    def _retire(self):
        self._done = True

    def __reduce__(self):
        raise TypeError("wsync: a device slab cannot be pickled or sent to another process")


def begin_gpu(pub, device, timeout):
    """Publisher.begin_gpu."""
    uuid = gpu_uuid(device)
    b = uuid.encode()
    return pub._begin(timeout, CDSlab,
                      lambda ptr, ns, cs: lib.wsync_pub_begin_gpu(ptr, b, ns, ctypes.byref(cs)),
                      lambda cs, cell: DeviceSlab(pub, cs, uuid, cell), gpu_check, False)


def publish_gpu(pub, weights, step, device, stream, timeout):
    """Publisher.publish_gpu."""
    src = _module.state_of(weights)
    if device is None:
        ords = _torch_devices(src)
        if len(ords) > 1:
            raise ValueError("wsync: the tensors are on GPUs %s: say device= (the one "
                             "copied from)" % sorted(ords))
        device = ords.pop() if ords else pub.devices[0] if pub.devices else None
        if device is None:
            raise ValueError("wsync: model %r is a host model: use publish()" % pub.model)
    with pub.begin_gpu(device, timeout) as slab:
        slab.copy_from(src, stream)
        return slab.commit(step)


# ---- subscriber side -----------------------------------------------------------


class DeviceView(ViewLife):
    """One version of a model on one GPU, held: read-only device memory,
    zero copy, pinned until release(). From Subscriber.acquire_gpu /
    wait_gpu. Attributes: version, step, published_ns, device (the GPU's
    UUID), base (its CUdeviceptr), nbytes, tensors, layout.

    cuda_array(name) / state_dict("cuda_array") give DeviceArrays whose
    __cuda_array_interface__ says data=(ptr, True): the memory is mapped
    read-only on the GPU. torch(name) / state_dict() give torch CUDA
    tensors (ReadOnlyTensor) where torch has CUDA; copy_to_device and
    load_into copy out. release(stream) synchronises the stream that read
    the view, then gives the slot back; the memory stays mapped while this
    object or a tensor of it lives, but after the release it may hold a
    later version."""

    _rawref = None

    def __init__(self, sub, cv, device, cell):
        self.subscriber = sub
        self._c = cv
        self._cell = cell                # the C subscription it was taken from
        self._layout, self._by_name = cell.layout, cell.by_name
        self.device = device
        self.version, self.step, self.published_ns = cv.version, cv.step, cv.published_ns
        self.base, self.nbytes = cv.base, cv.bytes
        self._released = False
        self._copy_streams = []          # streams of copy_to_device, for release()
        self._pinned = True
        cell.use()                       # the subscription's mappings outlive this object

    def __repr__(self):
        return "<wsync.DeviceView %r v%d step %d on %s%s>" % (
            self.subscriber.model, self.version, self.step, self.device,
            " released" if self._released else "")

    tensors = property(lambda self: [s.name for s in self._layout])
    layout = property(lambda self: list(self._layout))
    released = property(lambda self: self._released)

    def _check(self):
        if self._released:
            raise ClosedError("wsync: device view v%d was released" % self.version)
        if self.subscriber._closed:
            raise ClosedError("wsync: the subscriber of device view v%d is closed"
                              % self.version)

    def _cai_stream(self):
        return None                      # commit synchronised before it was visible

    def _spec(self, name):
        self._check()
        return _spec_of(self._by_name, self.subscriber.model, name)

    def cuda_array(self, name: str) -> DeviceArray:
        """Tensor name as a read-only DeviceArray (__cuda_array_interface__)."""
        spec = self._spec(name)
        return DeviceArray(self, spec, self.base + spec.offset, True)

    def _torch(self, arr):
        from ._torch import read_only
        return read_only(_torch_tensor(arr), self, self.base, self.base + self.nbytes)

    def torch(self, name: str):
        """Tensor name as a torch CUDA tensor over the view, no copy: a
        ReadOnlyTensor (in-place operations raise ReadOnlyError; use after
        release raises ClosedError). NoCudaError where torch has no CUDA."""
        return self._torch(self.cuda_array(name))

    def state_dict(self, kind: str = "torch"):
        """{name: torch CUDA tensor} ("torch") or {name: DeviceArray}
        ("cuda_array") of every tensor, in layout order, zero copy."""
        get = {"torch": self.torch, "cuda_array": self.cuda_array}.get(kind)
        if get is None:
            raise ValueError("wsync: kind must be 'torch' or 'cuda_array'")
        if kind == "torch":
            torch_cuda()
        return {s.name: get(s.name) for s in self._layout}

    def copy_to_device(self, dst, offset: int = 0, nbytes=None, stream=None) -> None:
        """Copies nbytes at offset of this version into dst (a device pointer,
        a contiguous CUDA tensor or a writable __cuda_array_interface__), on
        stream, asynchronously (wsync_dview_copy_to_device). nbytes: by
        default the rest of the view, or dst's size if smaller. release()
        waits for the copy: it synchronises the streams of this view's
        copies."""
        h = copy_out(self, lib.wsync_dview_copy_to_device, dst, offset, nbytes,
                     stream_handle(stream, self.device))
        if h not in self._copy_streams:
            self._copy_streams.append(h)

    def read_part(self, name: str, part: int, parts: int, dim: int, dst, stream=None) -> int:
        """Copies part `part` of `parts` equal parts of tensor name along dim
        (0: row-parallel, 1: column-parallel, as tensor-parallel inference
        splits it) into dst (a device pointer, a contiguous CUDA tensor or a
        writable __cuda_array_interface__), contiguous, on stream,
        asynchronously (wsync_dview_slice_read); release() waits for it like
        for copy_to_device. Returns the bytes copied. ValueError if parts
        does not divide the dim or dst is too small."""
        from ._core import _uint
        spec = self._spec(name)
        i = self._layout.index(spec)
        sl = Slice()
        rc = lib.wsync_tensor_part(ctypes.byref(self._c.tensors[i]), _uint(dim, "dim", 32),
                                   _uint(part, "part", 32), _uint(parts, "parts", 32),
                                   ctypes.byref(sl))
        if rc:
            raise ValueError("wsync: part %s of %s of %r along dim %s: %s"
                             % (part, parts, name, dim, lib.wsync_errmsg().decode()))
        n = sl.rows * sl.row_bytes
        ptr, size = _dst_of(dst)
        if size is not None and n > size:
            raise ValueError("wsync: the part is %d bytes, the destination holds %d"
                             % (n, size))
        h = stream_handle(stream, self.device)
        sub = self.subscriber
        cell = sub._enter()
        try:
            self._check()
            gpu_check(lib.wsync_dview_slice_read(ctypes.byref(self._c), ctypes.byref(sl),
                                                 ptr, h))
        finally:
            sub._leave(cell)
        if h not in self._copy_streams:
            self._copy_streams.append(h)
        return n

    def load_into(self, module, strict: bool = True):
        """Copies this version into module's parameters and buffers in place
        (torch CUDA tensors; names, shapes and dtypes checked first, as
        View.load_into), device to device, and waits for the copies.
        NoCudaError where torch has no CUDA."""
        self._check()
        if not isinstance(strict, bool):
            raise TypeError("wsync: strict must be True or False, not %s"
                            % type(strict).__name__)
        torch = torch_cuda()
        ordinal = gpu_ordinal(self.device)

        def plain(spec):
            return _torch_tensor(DeviceArray(self, spec, self.base + spec.offset, True))
        res = _module.load_into(self, module, strict, plain)
        devs = {ordinal} | {t.device.index for t in _module.targets_of(module).values()
                            if isinstance(t, torch.Tensor) and t.device.type == "cuda"}
        for d in devs:
            torch.cuda.synchronize(d)
        return res

    def release(self, stream=None) -> None:
        """Synchronises stream (the one your kernels read the view on) and
        the streams of this view's copy_to_device calls (without either:
        torch's current stream where torch uses CUDA), then gives the slot
        back: the broker may rewrite it from then on. Idempotent."""
        if self._released:
            return
        streams = list(self._copy_streams)
        if stream is not None:
            streams.insert(0, stream_handle(stream, self.device))
        elif not streams and _torch_cuda_on() is not None:
            streams.append(stream_handle(None, self.device))
        self._release(streams)

    def _on_close(self):
        """Subscriber.close: released, after its copies."""
        self._release(self._copy_streams)

    def _release(self, streams):
        """Synchronises streams (handles, None = the NULL stream), the
        first through wsync_sub_release_gpu, and releases."""
        cell = self._cell
        with cell.lock:
            held, self._released = not self._released, True
        if held and cell.gen == cell.gens[0] and cell.ptr is not None:
            for h in streams[1:]:
                stream_sync(h)
            self._lib_release(cell.ptr, ctypes.byref(self._c),
                              _to_sync(streams[0]) if streams else STREAM_NONE)

    _lib_release = lib.wsync_sub_release_gpu

    def __reduce__(self):
        raise TypeError("wsync: a device view cannot be pickled or sent to another process "
                        "(pass a ModelRef and acquire it there)")

    def __del__(self):
        try:
            self._release(self._copy_streams)
        except Exception:
            pass
        try:
            cell = self._cell
            with cell.lock:
                unpin, self._pinned = self._pinned, False
            if unpin:
                cell.unuse()
        except Exception:
            pass


def _copy_args(view, dst, offset, nbytes):
    """(dst pointer, dst size, offset, nbytes) of a copy out of view."""
    from ._core import _uint
    ptr, size = _dst_of(dst)
    off = _uint(offset, "offset")
    if off > view.nbytes:
        raise ValueError("wsync: offset %d is past the view's %d bytes" % (off, view.nbytes))
    if nbytes is None:
        n = view.nbytes - off if size is None else min(size, view.nbytes - off)
    else:
        n = _uint(nbytes, "nbytes")
    if size is not None and n > size:
        raise ValueError("wsync: %d bytes do not fit the destination's %d" % (n, size))
    return ptr, size, off, n


def acquire_gpu(sub, device, wait, after, timeout):
    """Subscriber.acquire_gpu (wait=False) and wait_gpu."""
    from ._core import _fail, _sliced
    uuid = gpu_uuid(device)
    b = uuid.encode()
    cell = sub._call()
    try:
        cv = CDView()
        if not wait:
            gpu_check(lib.wsync_sub_acquire_gpu(cell.ptr, b, ctypes.byref(cv)))
        else:
            rc = _sliced(sub, lambda ns: lib.wsync_sub_wait_gpu(cell.ptr, b, after, ns,
                                                                ctypes.byref(cv)),
                         timeout, -_errno.ETIMEDOUT)
            if rc == -_errno.ETIMEDOUT:
                raise _fail(rc, timeout, "model '%s': no version after v%d" % (sub.model,
                                                                               after))
            if rc < 0:
                raise gpu_error_from_rc(rc)
        if cell.layout is None:
            sub._learn_layout(cell, cv.tensors, cv.n_tensors)
        v = DeviceView(sub, cv, uuid, cell)
        sub._views.add(v)                # Subscriber.close releases it
        return v
    finally:
        sub._leave(cell)


def copy_out(view, call, dst, offset, nbytes, h):
    """View.copy_to_device (call = wsync_view_copy_to_device) and
    DeviceView.copy_to_device (wsync_dview_copy_to_device) on stream
    handle h; returns h."""
    ptr, size, off, n = _copy_args(view, dst, offset, nbytes)
    sub = view.subscriber
    cell = sub._enter()
    try:
        view._check()
        gpu_check(call(ctypes.byref(view._c), off, ptr, n, h))
    finally:
        sub._leave(cell)
    return h
