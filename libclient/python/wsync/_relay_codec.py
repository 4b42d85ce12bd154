"""ctypes binding of libwsync-delta (tools/relay/wsync_delta.h), the relay's codec.

The library is found, in order, at $WSYNC_DELTA_LIBRARY, beside the loaded
libwsync (build/lib/ of a source tree, <prefix>/lib after `make install`),
at the path `make install` wrote into _paths.py, else by the loader's
search path. Every call that waits releases the GIL (ctypes does), so
the codec's threads, gloo's and Python's run at once.
"""
import ctypes
import ctypes.util
import errno
import os

FOREVER = -1
REC_BYTES = 24


class CodecError(OSError):
    """A codec call failed: errno and the library's detail message."""


class Stats(ctypes.Structure):
    _fields_ = [("chunks", ctypes.c_uint64), ("same", ctypes.c_uint64),
                ("xzstd", ctypes.c_uint64), ("raw", ctypes.c_uint64),
                ("bytes_in", ctypes.c_uint64), ("bytes_out", ctypes.c_uint64),
                ("busy_ns", ctypes.c_uint64), ("xsparse", ctypes.c_uint64),
                ("reserved", ctypes.c_uint64 * 2)]

    def as_dict(self):
        return {k: int(getattr(self, k)) for k, _ in self._fields_ if k != "reserved"}


_vp, _sz, _u64, _i64, _i32, _u32 = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64,
                                    ctypes.c_int64, ctypes.c_int, ctypes.c_uint)
_P = ctypes.POINTER
_PROTOS = {
    "wsync_delta_new": (_i32, [_u32, _P(_vp)]),
    "wsync_delta_free": (None, [_vp]),
    "wsync_delta_threads": (_u32, [_vp]),
    "wsync_delta_errmsg": (ctypes.c_char_p, []),
    "wsync_delta_version": (ctypes.c_char_p, []),
    "wsync_delta_chunk_for": (_sz, [_sz, _u32]),
    "wsync_delta_frame_min": (_sz, [_sz]),
    "wsync_delta_hash_start": (_i32, [_vp, _vp, _sz, _sz, _vp]),
    "wsync_delta_hash_wait": (_i32, [_vp, _i64, _P(_u64)]),
    "wsync_delta_checksum": (_i32, [_vp, _vp, _sz, _sz, _P(_u64)]),
    "wsync_delta_enc_begin": (_i32, [_vp, _vp, _vp, _sz, _sz, _i32]),
    "wsync_delta_enc_read": (_i32, [_vp, _vp, _sz, _i64, _P(_sz), _P(_i32)]),
    "wsync_delta_enc_end": (_i32, [_vp, _P(_u64), _P(Stats)]),
    "wsync_delta_dec_begin": (_i32, [_vp, _vp, _vp, _sz, _sz]),
    "wsync_delta_dec_feed": (_i32, [_vp, _vp, _sz, _P(_u64)]),
    "wsync_delta_dec_wait": (_i32, [_vp, _u64, _i64]),
    "wsync_delta_dec_end": (_i32, [_vp, _u64, _i64]),
}


def _candidates():
    env = os.environ.get("WSYNC_DELTA_LIBRARY")
    if env:
        return [env]
    out = []
    try:
        from ._lib import lib as _wsync
        if os.sep in _wsync._wsync_path:
            here = os.path.dirname(os.path.abspath(_wsync._wsync_path))
            out += [os.path.join(here, "libwsync-delta.so"),
                    os.path.join(here, "libwsync-delta.so.0")]
    except (ImportError, AttributeError):
        pass
    pkg = os.path.dirname(os.path.abspath(__file__))
    out.append(os.path.normpath(os.path.join(pkg, "..", "..", "..", "build", "lib",
                                             "libwsync-delta.so")))
    try:
        from . import _paths
        out.append(getattr(_paths, "DELTA_LIBRARY"))
    except (ImportError, AttributeError):
        pass
    found = ctypes.util.find_library("wsync-delta")
    if found:
        out.append(found)
    out.append("libwsync-delta.so.0")
    return out


_lib = None
_load_error = None


def library():
    """The loaded libwsync-delta; ImportError saying where it looked."""
    global _lib, _load_error
    if _lib is not None:
        return _lib
    errors = []
    for name in _candidates():
        if os.path.isabs(name) and not os.path.exists(name):
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError as e:
            errors.append("%s: %s" % (name, e))
            continue
        for fn, (res, args) in _PROTOS.items():
            f = getattr(lib, fn)
            f.restype, f.argtypes = res, args
        lib._path = name
        _lib = lib
        return lib
    _load_error = ("cannot load libwsync-delta, the relay's codec (build it with make; "
                   "or set WSYNC_DELTA_LIBRARY): " + ("; ".join(errors) or "not found"))
    raise ImportError(_load_error)


def _check(rc, what):
    if rc < 0:
        msg = library().wsync_delta_errmsg().decode(errors="replace")
        raise CodecError(-rc, "%s: %s (%s)" % (what, msg or os.strerror(-rc),
                                               errno.errorcode.get(-rc, -rc)))
    return rc


def _ns(timeout):
    return FOREVER if timeout is None else max(0, int(timeout * 1e9))


class Codec:
    """A libwsync-delta codec: its threads live as long as the object. One
    operation at a time (hash, encode or decode). Addresses are ints: the
    caller keeps the memory alive until the operation ends."""

    def __init__(self, threads=0):
        self.lib = library()
        p = ctypes.c_void_p()
        _check(self.lib.wsync_delta_new(int(threads), ctypes.byref(p)), "codec")
        self._p = p
        self.threads = int(self.lib.wsync_delta_threads(p))
        self.version = self.lib.wsync_delta_version().decode()

    def close(self):
        if self._p:
            self.lib.wsync_delta_free(self._p)
            self._p = None

    def chunk_for(self, n):
        return int(self.lib.wsync_delta_chunk_for(n, self.threads))

    def frame_min(self, chunk):
        return int(self.lib.wsync_delta_frame_min(chunk))

    # -- whole-version checksums (and the source's copy of a full version) --

    def checksum(self, addr, n, chunk):
        out = ctypes.c_uint64()
        _check(self.lib.wsync_delta_checksum(self._p, addr, n, chunk, ctypes.byref(out)),
               "checksum")
        return out.value

    def hash_start(self, addr, n, chunk, dst=None):
        _check(self.lib.wsync_delta_hash_start(self._p, addr, n, chunk, dst), "hash")

    def hash_wait(self, timeout=None):
        out = ctypes.c_uint64()
        _check(self.lib.wsync_delta_hash_wait(self._p, _ns(timeout), ctypes.byref(out)),
               "hash")
        return out.value

    # -- encoder --

    def enc_begin(self, cur, base, n, chunk, level=1):
        _check(self.lib.wsync_delta_enc_begin(self._p, cur, base, n, chunk, level), "encode")

    def enc_read(self, out, cap, timeout=None):
        """(bytes written at out, last)."""
        n, last = ctypes.c_size_t(), ctypes.c_int()
        _check(self.lib.wsync_delta_enc_read(self._p, out, cap, _ns(timeout), ctypes.byref(n),
                                             ctypes.byref(last)), "encode")
        return n.value, bool(last.value)

    def enc_end(self):
        """(whole checksum, stats dict); CodecError if cancelled or failed."""
        s, st = ctypes.c_uint64(), Stats()
        _check(self.lib.wsync_delta_enc_end(self._p, ctypes.byref(s), ctypes.byref(st)),
               "encode")
        return s.value, st.as_dict()

    def enc_abort(self):
        """Ends an encode early (the base is then partly updated)."""
        self.lib.wsync_delta_enc_end(self._p, None, None)

    # -- decoder --

    def dec_begin(self, base, out, n, chunk):
        _check(self.lib.wsync_delta_dec_begin(self._p, base, out, n, chunk), "decode")

    def dec_feed(self, addr, n):
        """(ticket, None) or (ticket, why): a bad record fails the decode
        but the ticket still says when the frame's memory is free."""
        t = ctypes.c_uint64()
        rc = self.lib.wsync_delta_dec_feed(self._p, addr, n, ctypes.byref(t))
        why = None
        if rc < 0:
            why = self.lib.wsync_delta_errmsg().decode(errors="replace") or os.strerror(-rc)
        return t.value, why

    def dec_wait(self, ticket, timeout=None):
        _check(self.lib.wsync_delta_dec_wait(self._p, ticket, _ns(timeout)), "decode")

    def dec_end(self, checksum, timeout=None):
        """None if the rebuilt version is bit-exact, else why not."""
        rc = self.lib.wsync_delta_dec_end(self._p, checksum & (2**64 - 1), _ns(timeout))
        if rc < 0:
            return self.lib.wsync_delta_errmsg().decode(errors="replace") or os.strerror(-rc)
        return None
