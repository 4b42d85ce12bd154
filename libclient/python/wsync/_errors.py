"""Exceptions: every negative return of libwsync becomes a WsyncError."""
import builtins
import errno as _errno
import os as _os
import re

from ._lib import lib


class WsyncError(OSError):
    """A libwsync call failed.

    errno     the positive errno value (``-rc`` of the C call)
    strerror  wsync_strerror(rc): what the code means
    detail    wsync_errmsg() read right after the failing call: the specifics
              ("model 'policy': layout differs ...", who holds which slot)

    Built the full way, WsyncError(errno, strerror, detail); every class of
    the package can also be built from one message, as code that rebuilds
    an exception from its text does (TorchRL's collectors, for a worker's
    error): a message that starts as str() of a WsyncError does
    ("[Errno 16] Device or resource busy: ...") gives back errno, strerror
    and the detail; any other message is the detail, with errno the class's
    own (EBUSY for BusyError; None for WsyncError). Pickling keeps every
    field.
    """

    _ERRNO = None            # the errno a class stands for, when built from a message

    def __init__(self, errno, strerror=None, detail=""):
        if strerror is None and isinstance(errno, str) and not detail:
            errno, strerror, detail = _parse_message(errno, self._ERRNO)
        if errno is None:
            super().__init__(detail)
        else:
            super().__init__(errno, strerror)
        self.detail = detail

    def __reduce__(self):
        if self.errno is None:
            return (type(self), (self.detail,))
        return (type(self), (self.errno, self.strerror, self.detail))

    def __str__(self):
        if self.errno is None:
            return self.detail
        s = "[Errno %s] %s" % (self.errno, self.strerror)
        return "%s: %s" % (s, self.detail) if self.detail else s


_STR_FORM = re.compile(r"\[Errno (\d+)\] ([^:\n]*)(?:: (.*))?\Z", re.S)


def _parse_message(msg, default_errno):
    """(errno, strerror, detail) of a one-message construction."""
    m = _STR_FORM.match(msg)
    if m:
        return int(m.group(1)), m.group(2), m.group(3) or ""
    if default_errno is None:
        return None, None, msg
    return default_errno, _os.strerror(default_errno), msg


class WsyncTimeoutError(WsyncError, builtins.TimeoutError):
    """-ETIMEDOUT; also a builtin TimeoutError."""


class BusyError(WsyncError):
    """-EBUSY: every slot is held by readers (detail names the holders), or
    the model has another publisher (detail names it)."""


class NotConnectedError(WsyncError, builtins.ConnectionError):
    """-ENOTCONN: the broker shut down or went away. Views already held stay
    readable; close the client and connect again."""


class BrokerRestartedError(NotConnectedError):
    """-ENOTCONN after the broker restarted: a new broker took the models
    over, and this client's connection belongs to the generation that
    crashed (the detail, the library's, says so). A client opened with
    reconnect=False raises it from every call from then on; connect again
    (the versions go on above the old ones). With reconnect=True (the
    default) the client follows the new broker by itself, and this is
    raised only when no broker answers in time."""


class NoDataError(WsyncError):
    """-ENODATA: nothing was published on this model yet."""


class LayoutError(WsyncError):
    """-EEXIST: the model exists with a different tensor layout (detail says
    what differs)."""


class RemovedError(WsyncError):
    """-EIDRM: the model was deleted or replaced (another layout) since
    this subscription opened it. Views held stay valid; subscribe again."""


class NoDeviceError(WsyncError):
    """-ENODEV: a GPU the model is not on, a GPU this process does not see
    (CUDA_VISIBLE_DEVICES), a host view of a device model without a host
    mirror, or a device model on a broker without GPUs (detail says which)."""


class NoCudaError(WsyncError):
    """No usable CUDA for a GPU call: no CUDA driver (ENOENT), libwsync
    built without the CUDA headers (ENOSYS), a driver too old (ENOTSUP), or
    torch without CUDA where a torch CUDA tensor was asked for (ENOSYS)."""


class NoBrokerError(WsyncError, builtins.ConnectionError):
    """connect() found no broker at the endpoint: no socket there (ENOENT)
    or nobody listening on it (ECONNREFUSED). The detail names the path;
    start wsyncd (python3 -m wsync.broker, or the service), or check
    WSYNC_ENDPOINT and the instance name."""


class PermissionDeniedError(WsyncError, builtins.PermissionError):
    """EPERM / EACCES: the broker refused this user (not its uid or
    --group), or this user may not do that to the model (delete or replace
    a model it does not own). The detail says which."""


class ChecksumError(WsyncError):
    """EBADMSG: View.verify() found the version's bytes differ from the
    checksum its publisher stored."""


class DroppedError(WsyncError):
    """ECONNABORTED: a group (sharded) version was dropped, because a rank
    aborted, died or missed the group's deadline; the detail says which.
    Begin the next version."""


class ClosedError(ValueError):
    """The handle (client, publisher, subscriber, slab or view) was closed,
    released, committed or aborted, or belongs to the parent of a fork()."""


_BY_ERRNO = {
    _errno.ETIMEDOUT: WsyncTimeoutError,
    _errno.EBUSY: BusyError,
    _errno.ENOTCONN: NotConnectedError,
    _errno.ENODATA: NoDataError,
    _errno.EEXIST: LayoutError,
    _errno.EIDRM: RemovedError,
    _errno.ENODEV: NoDeviceError,
    _errno.EPERM: PermissionDeniedError,
    _errno.EACCES: PermissionDeniedError,
    _errno.EBADMSG: ChecksumError,
    _errno.ECONNABORTED: DroppedError,
    _errno.ECONNREFUSED: NoBrokerError,
}

for _code, _cls in _BY_ERRNO.items():
    if "_ERRNO" not in _cls.__dict__:
        _cls._ERRNO = _code          # BusyError("...") is an EBUSY error
NoCudaError._ERRNO = _errno.ENOSYS


# What a failed driver load returns from the GPU calls (libclient/gpu.c).
_NO_CUDA = (_errno.ENOENT, _errno.ENOSYS, _errno.ENOTSUP)


def error_from_rc(rc, what=None):
    """Builds the exception for a negative return code; reads wsync_errmsg()
    at once, so call it right after the failing call in the same thread."""
    detail = (lib.wsync_errmsg() or b"").decode("utf-8", "replace")
    text = (lib.wsync_strerror(rc) or b"").decode("utf-8", "replace")
    if what and not detail:
        detail = what
    if -rc == _errno.ENOTCONN and "broker restarted" in detail:
        return BrokerRestartedError(-rc, text, detail)
    return _BY_ERRNO.get(-rc, WsyncError)(-rc, text, detail)


def connect_error_from_rc(rc):
    """error_from_rc for wsync_connect: a missing socket is no broker."""
    err = error_from_rc(rc)
    if -rc == _errno.ENOENT:
        return NoBrokerError(err.errno, err.strerror, err.detail)
    return err


def gpu_error_from_rc(rc, what=None):
    """error_from_rc for the GPU calls: a driver that cannot be used is
    NoCudaError (their ENOENT/ENOSYS/ENOTSUP come from loading it)."""
    err = error_from_rc(rc, what)
    if (-rc in _NO_CUDA and "driver" in err.detail.lower()) or -rc == _errno.ENOSYS:
        return NoCudaError(err.errno, err.strerror, err.detail)
    return err


def gpu_check(rc, what=None):
    if rc < 0:
        raise gpu_error_from_rc(rc, what)
    return rc


def check(rc, what=None):
    if rc < 0:
        raise error_from_rc(rc, what)
    return rc
