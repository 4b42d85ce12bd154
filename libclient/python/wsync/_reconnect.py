"""Waiting for a broker to come up, and following one that restarted.

The library tells a client that its broker is gone: a wait notices a
hang-up within 200 ms (-ENOTCONN "broker went away"), and once a restarted
broker has taken the models over, every call of the old generation
(acquire, latest, models, wait, begin, commit, ...) returns -ENOTCONN
saying "the broker restarted", never the old generation's versions. A
client opened with reconnect=True (the default) then:

1. reconnects, in the call that got -ENOTCONN: wsync_connect_wait in slices
   (so Ctrl-C and close() are noticed), within the call's deadline (a
   wait's or begin's timeout) or Client.reconnect_timeout for calls
   without one; one thread reconnects, the others wait for it
   (Client._reconnect);
2. moves each publisher and subscriber to the new connection at its next
   call (Handle._follow in _core): a subscription is opened again by name,
   with its explicit-ack mode and its fileno() readiness; a publisher is
   opened again with the same layout and options (a slab begun on the old
   connection fails at its commit, once, saying so); the call then goes on,
   so a wait keeps waiting for a version newer than the caller's, and the
   versions go on above the old ones;
3. leaves what was taken from the old connection valid: a View of the old
   generation keeps its subscription and client (their mappings) until it
   is released (_handle's cells).

Subscriptions whose fileno() was asked for are moved by the reconnecting
thread at once, so that the descriptor the caller registered (an epoll
descriptor watching the current subscription's eventfd, Notify) becomes
readable again without a call. And since an event loop may make no call at
all while the broker is away, a client with such a subscription has a
watcher thread that looks, every WATCH_S, whether its broker's generation
ended (wsync_models, which reads shared memory only) and reconnects then.
"""
import ctypes
import errno as _errno
import logging
import select
import threading
import time
import weakref

from ._errors import ClosedError, NoBrokerError, WsyncTimeoutError, connect_error_from_rc
from ._lib import lib

log = logging.getLogger("wsync")

SLICE_S = 0.25           # connect attempts are cut into slices this long
WATCH_S = 0.2            # how often the watcher looks at the generation


class NoBrokerInTimeError(NoBrokerError, WsyncTimeoutError):
    """connect(timeout=T): no broker came up at the endpoint within T (a
    NoBrokerError and a TimeoutError)."""


def connect_ptr(bend, bname, deadline, closed=None):
    """A wsync_client pointer, waiting for a broker up to deadline (a
    time.monotonic() value; None: forever; one already past: one try), in
    slices of wsync_connect_wait. None if no broker answered by then;
    other errors (EPERM, EPROTO, ...) raise. closed(): stop with
    ClosedError."""
    while True:
        if deadline is None:
            ns = int(SLICE_S * 1e9)
        else:
            ns = max(0, int(min(deadline - time.monotonic(), SLICE_S) * 1e9))
        ptr = ctypes.c_void_p()
        rc = lib.wsync_connect_wait(bend, bname, ns, ctypes.byref(ptr))
        if rc == 0:
            return ptr.value
        if rc != -_errno.ETIMEDOUT:
            raise connect_error_from_rc(rc)
        if deadline is not None and time.monotonic() >= deadline:
            return None
        if closed is not None and closed():
            raise ClosedError("wsync: the client was closed while connecting")


def first_connect(bend, bname, timeout):
    """Client(): one wsync_connect with timeout 0 (NoBrokerError at once
    when none runs), else waiting up to timeout seconds (None: forever)."""
    if timeout == 0:
        ptr = ctypes.c_void_p()
        rc = lib.wsync_connect(bend, bname, ctypes.byref(ptr))
        if rc < 0:
            raise connect_error_from_rc(rc)
        return ptr.value
    ptr = connect_ptr(bend, bname, None if timeout is None else time.monotonic() + timeout)
    if ptr is None:
        where = endpoint_text(bend)
        raise NoBrokerInTimeError(_errno.ETIMEDOUT, "no broker came up",
                                  "no broker at %s within %g s (is wsyncd running?)"
                                  % (where, timeout))
    return ptr


def endpoint_text(bend):
    """The socket path an endpoint names, for messages."""
    from ._core import default_endpoint
    if bend is not None and b"/" in bend:
        return bend.decode(errors="replace")
    try:
        if bend is None:
            return default_endpoint()
        return "instance %r" % bend.decode(errors="replace")
    except Exception:
        return "(the default broker)"


def unreached(err, client, deadline_s):
    """err (the NotConnectedError that started a reconnect), saying that no
    broker answered in time."""
    err.detail = "%s; reconnecting: no broker answered at %s within %s" % (
        err.detail or err.strerror, endpoint_text(client._bend),
        "forever" if deadline_s is None else "%g s" % deadline_s)
    return err


class Notify:
    """Subscriber.fileno() of a client that follows restarts: an epoll
    descriptor watching the current C subscription's eventfd (readable
    while it is), pointed at the new one after a move, so that the number
    the caller registered stays valid. select, poll, epoll and asyncio take
    it like the eventfd itself; read it with acquire() or wait() only."""

    def __init__(self):
        self._ep = select.epoll()
        self._efd = None

    def fileno(self):
        return self._ep.fileno()

    def point(self, efd):
        if efd == self._efd:
            return
        self._ep.register(efd, select.EPOLLIN)
        if self._efd is not None:
            try:
                self._ep.unregister(self._efd)
            except OSError:
                pass
        self._efd = efd

    def close(self):
        self._ep.close()


def start_watcher(client):
    """The watcher thread of client (see the module's docstring): a daemon
    holding only a weak reference to it; it ends with the client."""
    stop = threading.Event()
    t = threading.Thread(target=_watch, args=(weakref.ref(client), stop), daemon=True,
                         name="wsync-watch-%s" % (client.name or "client"))
    t.start()
    return stop


def _watch(wclient, stop):
    while not stop.wait(WATCH_S):
        c = wclient()
        if c is None or c._closed:
            return
        try:
            c._watch_once()
        except ClosedError:
            return
        except Exception as e:          # tried again at the next look
            log.debug("wsync: watcher: %s", e)
        del c
