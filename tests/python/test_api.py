"""The binding's own behaviour, in one process against a real wsyncd: errors,
timeouts, threads, lifetimes, copies."""
import errno
import gc
import pickle
import signal
import threading
import time

import numpy as np
import pytest

import wsync
import wsync_procs as procs
from conftest import WAIT_S


def publish_numpy(pub, step):
    with pub.begin(timeout=WAIT_S) as slab:
        slab.copy_from(procs.numpy_weights(step))
        return slab.commit(step)


@pytest.fixture
def pub(client):
    return client.publisher_like("p", procs.numpy_weights(0))


def test_error_classes():
    e = wsync._errors.error_from_rc(-errno.ETIMEDOUT)
    assert isinstance(e, wsync.WsyncTimeoutError)
    assert isinstance(e, TimeoutError) and isinstance(e, OSError)
    assert isinstance(e, wsync.WsyncError)
    assert e.errno == errno.ETIMEDOUT and e.strerror == "timed out"
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is type(e) and e2.errno == e.errno and e2.detail == e.detail
    assert issubclass(wsync.NotConnectedError, ConnectionError)
    for code, cls in [(errno.EBUSY, wsync.BusyError), (errno.ENOTCONN, wsync.NotConnectedError),
                      (errno.ENODATA, wsync.NoDataError), (errno.EEXIST, wsync.LayoutError),
                      (errno.EINVAL, wsync.WsyncError),
                      (errno.EPERM, wsync.PermissionDeniedError),
                      (errno.EACCES, wsync.PermissionDeniedError),
                      (errno.EBADMSG, wsync.ChecksumError),
                      (errno.ECONNABORTED, wsync.DroppedError),
                      (errno.ECONNREFUSED, wsync.NoBrokerError)]:
        assert type(wsync._errors.error_from_rc(-code)) is cls
    assert wsync.strerror(errno.ENODATA) == "nothing published yet"
    assert wsync.library_version() == "0.2.0"


def test_connect_errors_and_default_endpoint(broker, tmp_path):
    with pytest.raises(wsync.NoBrokerError) as ei:
        wsync.connect(str(tmp_path / "nobody.sock"))
    assert ei.value.errno in (errno.ENOENT, errno.ECONNREFUSED)
    assert isinstance(ei.value, ConnectionError) and isinstance(ei.value, wsync.WsyncError)
    assert "nobody.sock" in ei.value.detail, ei.value.detail
    assert issubclass(wsync.PermissionDeniedError, PermissionError)
    assert wsync.default_endpoint() == broker.sock        # $WSYNC_ENDPOINT
    with wsync.connect() as c:
        assert not c.closed
    assert c.closed


def test_layout_validation(client):
    with pytest.raises(TypeError):
        client.publisher("x", [("w", "f33", (2,))])
    with pytest.raises(TypeError):
        client.publisher("x", [("w", np.complex64, (2,))])
    with pytest.raises(ValueError):
        client.publisher("x", [])
    with pytest.raises(wsync.WsyncError) as ei:
        client.publisher("bad name!", [("w", "f32", (2,))])
    assert ei.value.errno == errno.EINVAL and "invalid" in str(ei.value)
    with pytest.raises(wsync.WsyncError) as ei:
        client.publisher("x", [("w", "f32", (2,)), ("w", "f32", (3,))])
    assert ei.value.errno == errno.EINVAL
    torch = pytest.importorskip("torch")
    p = client.publisher("x", [("a", torch.bfloat16, [3]), ("b", "float16", 2), ("c", "u8", ())])
    assert [(s.dtype, s.shape) for s in p.layout] == [("bf16", (3,)), ("f16", (2,)), ("u8", ())]


def test_acquire_nodata_and_wait_timeouts(client):
    sub = client.subscriber("nothing-yet")
    with pytest.raises(wsync.NoDataError) as ei:
        sub.acquire()
    assert "nothing published" in str(ei.value)
    for timeout in (0, 0.1, 0.6):          # 0.6 s: longer than one wait slice
        t0 = time.monotonic()
        with pytest.raises(TimeoutError) as ei:
            sub.wait(timeout=timeout)
        took = time.monotonic() - t0
        assert isinstance(ei.value, wsync.WsyncTimeoutError)
        assert ei.value.errno == errno.ETIMEDOUT
        assert timeout * 0.9 <= took < timeout + 5.0
    with pytest.raises(ValueError):
        sub.wait(timeout=-1)


def test_wait_returns_at_once_when_newer_exists(client, pub):
    sub = client.subscriber("p")
    v1 = publish_numpy(pub, 1)
    with sub.wait(timeout=0) as view:
        assert view.version == v1
    with pytest.raises(TimeoutError):
        sub.wait(after=v1, timeout=0.05)
    v2 = publish_numpy(pub, 2)
    with sub.wait(after=view, timeout=0) as v:      # a View works as `after`
        assert (v.version, v.step) == (v2, 2)
        assert v.published_ns > 0


def test_wait_in_thread_does_not_hold_the_gil(client, pub):
    sub = client.subscriber("p")
    got = []
    th = threading.Thread(target=lambda: got.append(sub.wait(timeout=WAIT_S)))
    th.start()
    # this thread runs Python while the other sleeps in the library; were the
    # GIL held during the wait, this would only finish once the wait timed out
    time.sleep(0.1)
    n = 0
    for i in range(200000):
        n += i
    assert n == 199999 * 200000 // 2
    assert th.is_alive() and not got
    v = publish_numpy(pub, 4)
    th.join(WAIT_S)
    assert not th.is_alive()
    assert got[0].version == v and got[0].step == 4
    got[0].release()


def test_signal_interrupts_a_forever_wait(client):
    sub = client.subscriber("quiet")

    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted()

    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        t0 = time.monotonic()
        with pytest.raises(Interrupted):
            sub.wait(timeout=None)
        assert time.monotonic() - t0 < WAIT_S
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    with pytest.raises(TimeoutError):             # still usable
        sub.wait(timeout=0)


def test_close_from_another_thread_ends_a_wait(client):
    sub = client.subscriber("quiet")
    errs = []

    def waiter():
        try:
            sub.wait(timeout=None)
        except Exception as e:
            errs.append(e)

    th = threading.Thread(target=waiter)
    th.start()
    time.sleep(0.1)
    sub.close()
    th.join(WAIT_S)
    assert not th.is_alive()
    assert len(errs) == 1 and isinstance(errs[0], wsync.ClosedError)


def test_commit_async_and_wait_commit(client, pub):
    sub = client.subscriber("p")
    with pytest.raises(wsync.WsyncError) as ei:
        pub.wait_commit(timeout=0)
    assert ei.value.errno == errno.ENOENT
    with pub.begin(timeout=WAIT_S) as slab:
        slab.copy_from(procs.numpy_weights(8))
        v = slab.commit_async(8)
    assert slab.version == v
    with sub.acquire() as view:                  # visible at once
        assert (view.version, view.step) == (v, 8)
    assert pub.wait_commit(timeout=WAIT_S) == v


def test_slab_and_view_lifetimes(client, pub):
    sub = client.subscriber("p")
    with pub.begin(timeout=WAIT_S) as slab:
        sd = slab.state_dict()
        for k, a in procs.numpy_weights(1).items():
            assert sd[k].flags.writeable
            sd[k][...] = a
        slab.commit(1)
    # arrays handed out by the slab are read-only once it is committed
    assert not any(a.flags.writeable for a in sd.values())
    with pytest.raises(ValueError):
        sd["fc.bias"][0] = 1.0
    with pytest.raises(wsync.ClosedError):
        slab.numpy("fc.bias")
    with pytest.raises(wsync.ClosedError):
        slab.commit(2)
    with sub.acquire() as view:
        with pytest.raises(KeyError):
            view.numpy("nope")
        assert view.tensors == list(procs.numpy_weights(0))
        assert [s.offset % wsync.ALIGN for s in view.layout] == [0] * len(view.tensors)
    assert view.released
    with pytest.raises(wsync.ClosedError):
        view.numpy("fc.bias")
    view.release()                               # idempotent


def test_gc_never_releases_under_a_live_array(client):
    pub = client.publisher("gc", [("w", "f32", (1024,))], slots=2)
    sub = client.subscriber("gc")

    def commit(step):
        with pub.begin(timeout=WAIT_S) as slab:
            slab.numpy("w")[:] = step
            return slab.commit(step)

    commit(1)
    gc.disable()                        # reference counting alone must do it
    try:
        arr = sub.acquire().numpy("w")  # the View object itself is dropped at once
        commit(2)                       # the free slot; slot 1 stays pinned by arr
        with pytest.raises(wsync.BusyError):
            pub.begin(timeout=0.05)
        assert np.all(arr == 1)
        del arr                         # the view goes with its last array
        assert commit(3) > 0
    finally:
        gc.enable()


def test_views_per_client_are_bounded(client, pub):
    publish_numpy(pub, 1)
    sub = client.subscriber("p")
    views = [sub.acquire() for _ in range(wsync.MAX_VIEWS)]
    with pytest.raises(wsync.WsyncError) as ei:
        sub.acquire()
    assert ei.value.errno == errno.EAGAIN
    views.pop().release()
    with sub.acquire() as v:
        assert v.version == views[0].version
    for v in views:
        v.release()


def test_copy_from_checks_then_copies(client, pub):
    sub = client.subscriber("p")
    v1 = publish_numpy(pub, 1)
    good = procs.numpy_weights(2)
    bad_dtype = dict(good, **{"fc.bias": good["fc.bias"].astype(np.float64)})
    bad_shape = dict(good, **{"fc.bias": good["fc.bias"][:10]})
    missing = {k: v for k, v in good.items() if k != "raw"}
    extra = dict(good, other=np.zeros(1))
    with pub.begin(timeout=WAIT_S) as slab:
        with pytest.raises(TypeError):
            slab.copy_from(bad_dtype)
        with pytest.raises(ValueError):
            slab.copy_from(bad_shape)
        with pytest.raises(KeyError, match="raw"):
            slab.copy_from(missing)
        with pytest.raises(KeyError, match="other"):
            slab.copy_from(extra)
        # non-contiguous sources and Python scalars are fine
        src = dict(good, **{"fc.weight": np.asfortranarray(good["fc.weight"]),
                            "scale": float(good["scale"])})
        assert slab.copy_from(src, threads=2) >= 1
        v2 = slab.commit(2)
    with sub.acquire() as view:
        assert view.version == v2 > v1
        assert all(np.array_equal(view.numpy(k), good[k]) for k in good)
        # relaying a view into another model of the same layout: its arrays
        # sit exactly as in the slab, so it is one wsync_slab_copy
        relay = client.publisher("relay", [(s.name, s.dtype, s.shape) for s in view.layout])
        with relay.begin(timeout=WAIT_S) as slab:
            assert slab.copy_from(view.state_dict()) == 1
            slab.commit(view.step)
        with relay.begin(timeout=WAIT_S) as slab:    # and as one buffer
            assert slab.copy_from(view.buffer()) == 1
            slab.commit(view.step + 1)
        with pub.begin(timeout=WAIT_S) as slab:
            with pytest.raises(ValueError):
                slab.copy_from(b"short")
            slab.abort()
    with client.subscriber("relay").acquire() as r:
        assert r.step == 3
        assert all(np.array_equal(r.numpy(k), good[k]) for k in good)


def test_checksums_by_default_and_writes_after_a_copy(client):
    """Every host version carries a checksum unless checksum=False; bytes
    written through slab.numpy()/torch() after copy_from (which hashed them
    as it copied) are hashed again at commit, never a false mismatch."""
    w = procs.numpy_weights(1)
    name = next(k for k, a in w.items() if a.dtype == np.float32 and a.size > 1)
    default = client.publisher_like("summed", w)
    with default.begin(timeout=WAIT_S) as slab:
        slab.copy_from(w)
        slab.numpy(name).flat[0] += 1.0        # written after the copy hashed it
        slab.commit(1)
    with client.subscriber("summed").acquire() as view:
        view.verify()                          # a mismatch would raise ChecksumError
        assert view.numpy(name).flat[0] == w[name].flat[0] + 1.0
    plain = client.publisher_like("plain", w, checksum=False)
    with plain.begin(timeout=WAIT_S) as slab:
        slab.copy_from(w)
        slab.commit(1)
    with client.subscriber("plain").acquire() as view:
        with pytest.raises(wsync.NoDataError):
            view.verify()
    with pytest.raises(TypeError, match="checksum"):
        client.publisher_like("bad", w, checksum="yes")


def test_copy_from_torch_including_bf16(client):
    torch = pytest.importorskip("torch")
    w = procs.torch_weights(5)
    pub = client.publisher_like("t", w)
    with pub.begin(timeout=WAIT_S) as slab:
        slab.copy_from({k: (t.t().contiguous().t() if t.dim() == 2 else t)
                        for k, t in w.items()})
        slab.commit(5)
    with client.subscriber("t").acquire() as view:
        sd = view.state_dict("torch")
        assert all(sd[k].dtype == w[k].dtype and torch.equal(sd[k], w[k]) for k in w)
        del sd


def test_closed_handles_raise_instead_of_crashing(broker):
    c = wsync.connect(broker.sock, "closer")
    pub = c.publisher_like("p", procs.numpy_weights(0))
    publish_numpy(pub, 1)
    sub = c.subscriber("p")
    view = sub.acquire()
    slab = pub.begin(timeout=WAIT_S)
    c.close()
    c.close()
    assert pub.closed and sub.closed and view.released and not slab.active
    for call in (sub.acquire, lambda: sub.wait(timeout=0), sub.fileno,
                 lambda: pub.begin(timeout=0), lambda: slab.commit(1),
                 lambda: c.subscriber("p"), lambda: view.numpy("fc.bias")):
        with pytest.raises(wsync.ClosedError):
            call()
    view.release()
    # the abandoned slab was aborted: a new publisher takes the model over
    with wsync.connect(broker.sock, "next") as c2:
        p2 = c2.publisher_like("p", procs.numpy_weights(0))
        assert publish_numpy(p2, 2) > 0


def test_fork_child_cannot_use_parent_handles(client):
    import os
    pub = client.publisher("f", [("w", "i64", (512,))], slots=2)

    def commit(step):
        with pub.begin(timeout=WAIT_S) as slab:
            slab.numpy("w")[:] = step
            return slab.commit(step)

    commit(1)
    sub = client.subscriber("f")
    view = sub.acquire()
    pid = os.fork()
    if pid == 0:                      # the child: every parent handle refuses
        code = 0
        try:
            for call in (sub.acquire, lambda: pub.begin(timeout=0),
                         lambda: client.subscriber("f")):
                try:
                    call()
                    code = 1
                except wsync.ClosedError:
                    pass
            view.release()            # a no-op here: must not unpin the parent's view
            del view
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # the parent's view still pins its slab: of 2 slots, one is the latest
    # and the other still held, so there is nothing to grant
    commit(2)
    with pytest.raises(wsync.BusyError):
        pub.begin(timeout=0.05)
    assert np.all(view.numpy("w") == 1)
    view.release()
    assert commit(3) > 0
