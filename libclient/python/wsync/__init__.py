"""wsync: Python binding of libwsync, the shared-memory weight broker client.

A trainer publishes versions of a model's weights; collectors read the newest
version in place, zero copy, or wait for a newer one::

    import wsync
    with wsync.connect() as client:
        pub = client.publisher_like("policy", model.state_dict())
        with pub.begin(timeout=1.0) as slab:
            slab.copy_from(model.state_dict())
            slab.commit(step)

    with wsync.connect() as client:
        sub = client.subscriber("policy")
        with sub.wait(after=0, timeout=5.0) as view:
            weights = view.state_dict("torch")   # valid until the block ends

See docs/PYTHON.md for the lifetime rules of zero-copy arrays.
"""
try:
    import numpy as _numpy  # noqa: F401  (the arrays; checked first for a clear message)
except ImportError as _e:
    raise ImportError(
        "wsync needs numpy, which this Python (%s) cannot import: %s. On Debian: "
        "apt-get install python3-numpy; in a virtual environment, create it with "
        "--system-site-packages to use Debian's (python3 -m venv --system-site-packages "
        "DIR), or install numpy into it." % (__import__("sys").executable, _e),
        name="numpy") from None

from ._lib import ALIGN, MAX_DIMS, MAX_VIEWS, NAME_MAX, lib as _libwsync
from ._errors import (BrokerRestartedError, BusyError, ChecksumError, ClosedError,
                      DroppedError, LayoutError, NoBrokerError, NoCudaError, NoDataError,
                      NoDeviceError, NotConnectedError, PermissionDeniedError, RemovedError,
                      WsyncError, WsyncTimeoutError)
from ._core import (PUB_GUARDED, PUB_REPLACE, PUB_UNGUARDED, Client, LatestVersion, ModelRef,
                    ModelStatus, PartSpec, Publisher, Slab, Subscriber, TensorSpec, View, connect,
                    default_endpoint)
from ._dtypes import CODE as DTYPES
from ._gpu import DeviceArray, DeviceSlab, DeviceView, gpu_ordinal, gpu_uuid
from ._module import LoadResult, MismatchError, NoStorageError
from ._live import Lag, LagError, LivePolicy

__all__ = [
    "connect", "Client", "Publisher", "Slab", "Subscriber", "View", "TensorSpec",
    "WsyncError", "WsyncTimeoutError", "BusyError", "NotConnectedError", "NoDataError",
    "LayoutError", "ClosedError", "DTYPES", "library_version", "library_path",
    "default_endpoint", "strerror", "MAX_VIEWS", "NAME_MAX", "MAX_DIMS", "ALIGN",
    "ModelRef", "PUB_UNGUARDED", "PUB_GUARDED", "PUB_REPLACE", "RemovedError",
    "ModelStatus", "LatestVersion", "LoadResult", "MismatchError", "PartSpec", "ReadOnlyError",
    "ReadOnlyTensor", "NoDeviceError", "NoCudaError", "DeviceArray", "DeviceSlab",
    "DeviceView", "gpu_uuid", "gpu_ordinal", "NoBrokerError", "PermissionDeniedError",
    "ChecksumError", "DroppedError", "BrokerRestartedError", "LivePolicy", "Lag", "LagError",
    "NoStorageError",
]


def __getattr__(name):
    # torch is imported only by what needs it
    if name in ("ReadOnlyError", "ReadOnlyTensor"):
        from . import _torch
        return getattr(_torch, name)
    raise AttributeError("module 'wsync' has no attribute %r" % name)

__version__ = "0.2.0"


def library_version():
    """The loaded libwsync's version string ("0.2.0")."""
    return _libwsync.wsync_version_string().decode()


def library_path():
    """Which libwsync was loaded."""
    return _libwsync._wsync_path


def strerror(err):
    """libwsync's name for an errno value (positive or negative)."""
    return _libwsync.wsync_strerror(-abs(int(err))).decode()
