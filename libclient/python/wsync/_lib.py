"""ctypes declarations for libwsync (mirrors libclient/wsync.h exactly).

Which library is loaded, in order:
  1. $WSYNC_LIBRARY (a path to libwsync.so),
  2. the library a wheel bundles, wsync/_native/libwsync.so.0 (pip install
     of libclient/python builds it from the tree),
  3. build/lib/libwsync.so of the source tree this package sits in
     (<root>/libclient/python/wsync -> <root>/build/lib/libwsync.so),
  4. the library `make install` put beside an installed package: the path
     written into _paths.py at install, else <prefix>/lib/libwsync.so.0 for a
     package in <prefix>/lib/pythonX.Y/dist-packages,
  4. ctypes.util.find_library("wsync"), else "libwsync.so.0" (the loader's
     search path: /usr/local/lib after `make install` and ldconfig, or
     LD_LIBRARY_PATH).

ctypes.CDLL releases the GIL around every foreign call, so a thread blocked
in a wait does not stop other Python threads.
"""
import ctypes
import ctypes.util
import os
import re

NAME_MAX = 128
MAX_DIMS = 8
MAX_VIEWS = 63
ALIGN = 256
FOREVER = -1

_here = os.path.dirname(os.path.abspath(__file__))
_BUNDLED_LIB = os.path.join(_here, "_native", "libwsync.so.0")
_SOURCE_TREE_LIB = os.path.normpath(
    os.path.join(_here, "..", "..", "..", "build", "lib", "libwsync.so"))


class TensorDesc(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * NAME_MAX),
        ("dtype", ctypes.c_uint32),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.c_uint64 * MAX_DIMS),
        ("offset", ctypes.c_uint64),
    ]


class ModelOpts(ctypes.Structure):
    _fields_ = [
        ("slots", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("group_size", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("group_timeout_ms", ctypes.c_uint32),
        ("n_devices", ctypes.c_uint32),
        ("devices", ctypes.POINTER(ctypes.c_char_p)),
        ("device_flags", ctypes.c_uint32),
        ("reserved32", ctypes.c_uint32),
        ("reserved", ctypes.c_uint64 * 2),
    ]


class ModelInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 128),
        ("published", ctypes.c_uint32),
        ("n_tensors", ctypes.c_uint32),
        ("n_slots", ctypes.c_uint32),
        ("bytes", ctypes.c_uint64),
        ("version", ctypes.c_uint64),
        ("step", ctypes.c_uint64),
        ("published_ns", ctypes.c_int64),
        ("publishers", ctypes.c_uint32),
        ("subscribers", ctypes.c_uint32),
        ("reserved", ctypes.c_uint64 * 4),
    ]


class CView(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint64),
        ("step", ctypes.c_uint64),
        ("published_ns", ctypes.c_int64),
        ("base", ctypes.c_void_p),
        ("bytes", ctypes.c_size_t),
        ("n_tensors", ctypes.c_size_t),
        ("tensors", ctypes.POINTER(TensorDesc)),
        ("priv_sub", ctypes.c_void_p),
        ("priv_slot", ctypes.c_uint32),
        ("priv_hazard", ctypes.c_uint32),
    ]


SHARD_WHOLE = 0xffffffff


class Shard(ctypes.Structure):
    _fields_ = [
        ("tensor", ctypes.c_uint32),
        ("dim", ctypes.c_uint32),
        ("start", ctypes.c_uint64),
        ("end", ctypes.c_uint64),
    ]


class Slice(ctypes.Structure):
    _fields_ = [
        ("offset", ctypes.c_uint64),
        ("rows", ctypes.c_uint64),
        ("row_bytes", ctypes.c_uint64),
        ("stride", ctypes.c_uint64),
    ]


class CSlab(ctypes.Structure):
    _fields_ = [
        ("base", ctypes.c_void_p),
        ("bytes", ctypes.c_size_t),
        ("n_tensors", ctypes.c_size_t),
        ("tensors", ctypes.POINTER(TensorDesc)),
        ("priv_pub", ctypes.c_void_p),
        ("priv_version", ctypes.c_uint64),
        ("priv_slot", ctypes.c_uint32),
        ("priv_pad", ctypes.c_uint32),
    ]


class CCopyOpts(ctypes.Structure):
    _fields_ = [
        ("threads", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("spread_ns", ctypes.c_int64),
        ("reserved", ctypes.c_uint64 * 2),
    ]


SPREAD_MAX_S = 3600              # WSYNC_SPREAD_MAX_NS


class CDSlab(ctypes.Structure):
    """wsync_dslab: a begun device slab (base is a CUdeviceptr)."""
    _fields_ = [
        ("base", ctypes.c_uint64),
        ("bytes", ctypes.c_size_t),
        ("n_tensors", ctypes.c_size_t),
        ("tensors", ctypes.POINTER(TensorDesc)),
        ("priv_slab", CSlab),
        ("priv_device", ctypes.c_uint32),
        ("priv_pad", ctypes.c_uint32),
    ]


class CDView(ctypes.Structure):
    """wsync_dview: a held device view (base is a read-only CUdeviceptr)."""
    _fields_ = [
        ("version", ctypes.c_uint64),
        ("step", ctypes.c_uint64),
        ("published_ns", ctypes.c_int64),
        ("base", ctypes.c_uint64),
        ("bytes", ctypes.c_size_t),
        ("n_tensors", ctypes.c_size_t),
        ("tensors", ctypes.POINTER(TensorDesc)),
        ("priv_view", CView),
        ("priv_device", ctypes.c_uint32),
        ("priv_pad", ctypes.c_uint32),
    ]


GPU_UUID_LEN = 41       # WSYNC_GPU_UUID_LEN
MAX_DEVICES = 8         # WSYNC_MAX_DEVICES
DEV_HOST_MIRROR = 1     # enum wsync_dev_flags

# The sizes of the C structs on LP64 Linux; a mismatch means this file and
# wsync.h disagree, and every call would read garbage.
_SIZES = {TensorDesc: 208, ModelOpts: 56, CView: 72, CSlab: 56, ModelInfo: 216, Shard: 24,
          Slice: 32, CDSlab: 96, CDView: 136}
for _t, _n in _SIZES.items():
    if ctypes.sizeof(_t) != _n:
        raise ImportError("wsync: ctypes struct %s is %d bytes, wsync.h says %d"
                          % (_t.__name__, ctypes.sizeof(_t), _n))

_vp = ctypes.c_void_p
_i32 = ctypes.c_int
_i64 = ctypes.c_int64
_u64 = ctypes.c_uint64
_u32 = ctypes.c_uint32
_sz = ctypes.c_size_t
_cp = ctypes.c_char_p
_P = ctypes.POINTER

_PROTOS = {
    "wsync_strerror": (_cp, [_i32]),
    "wsync_errmsg": (_cp, []),
    "wsync_version_string": (_cp, []),
    "wsync_connect": (_i32, [_cp, _cp, _P(_vp)]),
    "wsync_connect_wait": (_i32, [_cp, _cp, _i64, _P(_vp)]),
    "wsync_close": (None, [_vp]),
    "wsync_default_endpoint": (_i32, [ctypes.c_char_p, _sz]),
    "wsync_pub_open": (_i32, [_vp, _cp, _P(TensorDesc), _sz, _P(ModelOpts), _P(_vp)]),
    "wsync_pub_begin": (_i32, [_vp, _i64, _P(CSlab)]),
    "wsync_pub_open_shard": (_i32, [_vp, _cp, _P(TensorDesc), _sz, _P(ModelOpts), _P(Shard),
                                    _sz, _P(_vp)]),
    "wsync_slab_part": (_i32, [_P(CSlab), _sz, _P(Slice)]),
    "wsync_tensor_part": (_i32, [_P(TensorDesc), _u32, _u32, _u32, _P(Slice)]),
    "wsync_slice_read": (None, [_vp, _vp, _P(Slice)]),
    "wsync_slice_write": (None, [_vp, _vp, _P(Slice)]),
    "wsync_pub_commit": (_i32, [_vp, _u64, _P(_u64)]),
    "wsync_pub_commit_async": (_i32, [_vp, _u64, _P(_u64)]),
    "wsync_pub_wait_commit": (_i32, [_vp, _i64, _P(_u64)]),
    "wsync_pub_abort": (_i32, [_vp]),
    "wsync_pub_close": (None, [_vp]),
    "wsync_sub_open": (_i32, [_vp, _cp, _P(_vp)]),
    "wsync_sub_acquire": (_i32, [_vp, _P(CView)]),
    "wsync_sub_wait": (_i32, [_vp, _u64, _i64, _P(CView)]),
    "wsync_sub_release": (None, [_vp, _P(CView)]),
    "wsync_sub_fd": (_i32, [_vp]),
    "wsync_sub_set_ack": (_i32, [_vp, _i32]),
    "wsync_sub_ack": (_i32, [_vp, _u64]),
    "wsync_sub_close": (None, [_vp]),
    "wsync_view_verify": (_i32, [_P(CView)]),
    "wsync_view_tensor": (_i32, [_P(CView), _cp, _P(_vp), _P(_P(TensorDesc))]),
    "wsync_slab_tensor": (_i32, [_P(CSlab), _cp, _P(_vp), _P(_P(TensorDesc))]),
    "wsync_slab_copy": (_i32, [_P(CSlab), _u64, _vp, _sz, ctypes.c_uint]),
    "wsync_slab_copy_tensors": (_i32, [_P(CSlab), _P(_vp), ctypes.c_uint]),
    "wsync_copy": (_i32, [_vp, _vp, _sz, ctypes.c_uint]),
    "wsync_slab_copy_with": (_i32, [_P(CSlab), _u64, _vp, _sz, _P(CCopyOpts)]),
    "wsync_slab_copy_tensors_with": (_i32, [_P(CSlab), _P(_vp), _P(CCopyOpts)]),
    "wsync_dtype_size": (_sz, [_u32]),
    "wsync_dtype_name": (_cp, [_u32]),
    "wsync_tensor_bytes": (_u64, [_P(TensorDesc)]),
    "wsync_models": (_i32, [_vp, _P(ModelInfo), _sz, _P(_sz)]),
    "wsync_model_delete": (_i32, [_vp, _cp]),
    "wsync_sub_latest": (_i32, [_vp, _P(_u64), _P(_u64), _P(_i64)]),
    "wsync_pub_wait_readers": (_i32, [_vp, _u64, _u32, _i64, _P(_u32)]),
    "wsync_pub_set_max_lead": (_i32, [_vp, _u32]),
    "wsync_sub_set_max_lag": (_i32, [_vp, _i64, _i64]),
    "wsync_sub_declare_max_lag": (_i32, [_vp, _u32, _i64]),
    # GPUs (docs/GPU.md); streams are CUstream values as void *
    "wsync_gpu_uuid": (_i32, [_i32, ctypes.c_char_p, _sz]),
    "wsync_gpu_ordinal": (_i32, [_cp]),
    "wsync_pub_begin_gpu": (_i32, [_vp, _cp, _i64, _P(CDSlab)]),
    "wsync_dslab_tensor": (_i32, [_P(CDSlab), _cp, _P(_u64), _P(_P(TensorDesc))]),
    "wsync_dslab_copy_from_device": (_i32, [_P(CDSlab), _P(_u64), _sz, _vp]),
    "wsync_pub_commit_gpu": (_i32, [_vp, _vp, _u64, _P(_u64)]),
    "wsync_sub_acquire_gpu": (_i32, [_vp, _cp, _P(CDView)]),
    "wsync_sub_wait_gpu": (_i32, [_vp, _cp, _u64, _i64, _P(CDView)]),
    "wsync_dview_tensor": (_i32, [_P(CDView), _cp, _P(_u64), _P(_P(TensorDesc))]),
    "wsync_sub_release_gpu": (None, [_vp, _P(CDView), _vp]),
    "wsync_view_copy_to_device": (_i32, [_P(CView), _u64, _u64, _sz, _vp]),
    "wsync_dview_copy_to_device": (_i32, [_P(CDView), _u64, _u64, _sz, _vp]),
    "wsync_dview_slice_read": (_i32, [_P(CDView), _P(Slice), _u64, _vp]),
}


def _candidates():
    env = os.environ.get("WSYNC_LIBRARY")
    if env:
        return [env], True
    out = []
    if os.path.exists(_BUNDLED_LIB):
        out.append(_BUNDLED_LIB)
    if os.path.exists(_SOURCE_TREE_LIB):
        out.append(_SOURCE_TREE_LIB)
    installed = _installed_lib()
    if installed:
        out.append(installed)
    found = ctypes.util.find_library("wsync")
    if found:
        out.append(found)
    out.append("libwsync.so.0")
    return out, False


def _installed_lib():
    """The libwsync that `make install` installed next to this package:
    the path it wrote into _paths.py, else <prefix>/lib/libwsync.so.0 for
    a package in <prefix>/lib/pythonX.Y/{site,dist}-packages/wsync."""
    try:
        from . import _paths
        if os.path.exists(_paths.LIBRARY):
            return _paths.LIBRARY
    except ImportError:
        pass
    lib_dir = os.path.normpath(os.path.join(_here, "..", "..", ".."))
    cand = os.path.join(lib_dir, "libwsync.so.0")
    return cand if os.path.exists(cand) else None


class LibraryNotFoundError(ImportError):
    """libwsync could not be loaded; the message says what was tried and
    how to get the library."""


def _missing_dependency(err):
    """The shared object a found libwsync could not load, if that was it."""
    m = re.search(r"(lib[\w+.-]+\.so[.\d]*): cannot open shared object file", str(err))
    return m.group(1) if m else None


_DEB_OF = {"libxxhash.so.0": "libxxhash0"}


def _explain(names, errors, from_env):
    lines = ["wsync: cannot load libwsync, the C library this package binds."]
    for name, err in errors:
        dep = _missing_dependency(err)
        if dep and dep not in os.path.basename(name):
            lines.append("  %s was found but needs %s, which is not installed%s"
                         % (name, dep, " (Debian: apt-get install %s)" % _DEB_OF[dep]
                            if dep in _DEB_OF else ""))
        else:
            lines.append("  tried %s: %s" % (name, err))
    if from_env:
        lines.append("WSYNC_LIBRARY is set: point it at libwsync.so, or unset it.")
    else:
        lines.append("Install the package with its library: `pip install <wsync tree>/"
                     "libclient/python` (builds and bundles libwsync), or `make install` "
                     "in the wsync tree, or set WSYNC_LIBRARY to the path of libwsync.so.")
    return "\n".join(lines)


def _load():
    names, from_env = _candidates()
    errors = []
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError as e:
            if os.sep not in name and "cannot open shared object file" in str(e):
                e = "not on the loader's search path (ldconfig, LD_LIBRARY_PATH)"
            errors.append((name, e))
            if from_env:
                break
            continue
        missing = [fn for fn in _PROTOS if not hasattr(lib, fn)]
        if missing:
            errors.append((name, "lacks %s: it is an older libwsync than this package "
                                 "(%d functions missing); rebuild or reinstall it"
                           % (missing[0], len(missing))))
            continue
        for fn, (res, args) in _PROTOS.items():
            f = getattr(lib, fn)
            f.restype = res
            f.argtypes = args
        lib._wsync_path = name
        return lib
    raise LibraryNotFoundError(_explain(names, errors, from_env))


lib = _load()

_ver = lib.wsync_version_string().decode()
if not _ver.startswith("0."):
    raise LibraryNotFoundError("wsync: %s is libwsync %s; this binding speaks 0.x"
                               % (lib._wsync_path, _ver))
