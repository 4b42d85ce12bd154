"""Publishers and collectors in different processes, through a real wsyncd."""
import errno
import os
import select
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


def test_numpy_zero_copy_in_another_process(broker, children):
    with wsync.connect(broker.sock, "trainer") as c:
        pub = c.publisher_like("policy", procs.numpy_weights(0))
        v = publish_numpy(pub, 7)
        res = children.start(procs.collect_numpy, broker.sock, "policy").result()
    assert res["version"] == v
    assert res["step"] == 7
    assert res["names"] == list(procs.numpy_weights(0))
    assert res["equal"] == {k: True for k in procs.numpy_weights(0)}
    assert not any(res["writeable"].values())
    assert res["write"] == "ValueError"
    assert res["set_writeable"] == "ValueError"
    # the array is the slab itself: inside a read-only shared mapping of one
    # of this broker's /dev/shm segments, at the same address on every acquire
    assert res["addr_in_slab"] and res["same_addr"] and res["same_version"]
    perms, path = res["mapping"]
    assert perms == "r--s", res["mapping"]
    # segments live in the instance's private directory (shm/segment.h)
    assert os.path.basename(os.path.dirname(path)).startswith(broker.prefix), res["mapping"]
    assert path.startswith("/dev/shm/"), res["mapping"]
    assert res["still_equal"]


def test_torch_round_trip_with_bf16(broker, children):
    torch = pytest.importorskip("torch")
    w = procs.torch_weights(3)
    with wsync.connect(broker.sock, "trainer") as c:
        pub = c.publisher_like("torchy", w)
        assert [s.dtype for s in pub.layout] == ["f32", "bf16", "f16", "i32", "bool", "f64"]
        with pub.begin(timeout=WAIT_S) as slab:      # written in place through torch
            for k, t in slab.state_dict("torch").items():
                assert t.dtype == w[k].dtype and t.shape == w[k].shape
                t.copy_(w[k])
            v = slab.commit(3)
        res = children.start(procs.collect_torch, broker.sock, "torchy").result(60)
        # and read back here, through another client
        with wsync.connect(broker.sock, "reader") as c2:
            with c2.subscriber("torchy").acquire() as view:
                t = view.torch("b16")
                assert t.dtype == torch.bfloat16
                assert torch.equal(t, w["b16"])
                assert view.numpy("b16").dtype == np.uint16
                del t
    assert res["version"] == v and res["step"] == 3
    assert res["dtypes"] == {k: str(t.dtype) for k, t in w.items()}
    assert res["equal"] == {k: True for k in w}
    assert res["zero_copy"] == {k: True for k in w}
    assert res["bf16_bits"] and res["linear_ok"]


def test_subscriber_before_publisher(broker, children):
    subscribed = children.event()
    child = children.start(procs.wait_first, broker.sock, "late", subscribed)
    assert subscribed.wait(WAIT_S)
    with wsync.connect(broker.sock, "trainer") as c:
        pub = c.publisher_like("late", procs.numpy_weights(0))
        v = publish_numpy(pub, 11)
        res = child.result()
    assert res == {"nodata_first": True, "version": v, "step": 11, "ok": True}


def test_busy_names_the_holder(broker, children):
    held1, held2, release = children.event(), children.event(), children.event()
    child = children.start(procs.hold_two, broker.sock, "small", "holder-7f3a", held1, held2,
                           release)
    with wsync.connect(broker.sock, "trainer") as c:
        pub = c.publisher_like("small", procs.numpy_weights(0), slots=2)
        v1 = publish_numpy(pub, 1)
        assert held1.wait(WAIT_S)
        v2 = publish_numpy(pub, 2)
        assert held2.wait(WAIT_S)
        t0 = time.monotonic()
        with pytest.raises(wsync.BusyError) as ei:
            pub.begin(timeout=0.2)
        assert time.monotonic() - t0 >= 0.15
        assert ei.value.errno == errno.EBUSY
        assert isinstance(ei.value, wsync.WsyncError)
        assert "holder-7f3a" in str(ei.value)
        assert "holder-7f3a" in ei.value.detail
        with pytest.raises(wsync.BusyError):
            pub.begin(timeout=0)
        release.set()
        res = child.result()
        assert res == {"versions": (v1, v2), "intact": True}
        v3 = publish_numpy(pub, 3)        # begin succeeds once a view is released
        assert v3 > v2


def test_layout_clash_and_second_publisher(broker, children):
    with wsync.connect(broker.sock, "first") as c1, wsync.connect(broker.sock, "second") as c2:
        pub = c1.publisher("clash", [("w", "f32", (4, 4)), ("b", np.float32, (4,))])
        with pytest.raises(wsync.LayoutError) as ei:
            c2.publisher("clash", [("w", "f32", (4, 5)), ("b", "f32", (4,))])
        assert ei.value.errno == errno.EEXIST
        assert "clash" in str(ei.value)
        with pytest.raises(wsync.BusyError) as ei:
            c2.publisher("clash", [("w", "f32", (4, 4)), ("b", "f32", (4,))])
        assert "first" in str(ei.value)
        pub.close()
        pub2 = c2.publisher("clash", [("w", "f32", (4, 4)), ("b", "f32", (4,))])
        with pub2.begin() as slab:
            slab.numpy("w")[:] = 1
            slab.numpy("b")[:] = 2
            assert slab.commit(1) >= 1
        with pytest.raises(wsync.LayoutError):      # still, after the first one left
            c1.publisher("clash", [("w", "i32", (4, 4)), ("b", "f32", (4,))])


def test_abort_on_exception_keeps_latest(broker, children):
    with wsync.connect(broker.sock, "trainer") as c:
        pub = c.publisher_like("ab", procs.numpy_weights(0))
        v1 = publish_numpy(pub, 5)
        with pytest.raises(KeyError):
            with pub.begin(timeout=WAIT_S) as slab:
                slab.numpy("fc.weight")[:] = -1.0     # scribble
                slab.numpy("fc.bias")[:] = -1.0
                raise KeyError("optimizer blew up")
        assert not slab.active
        # the uncommitted slab was aborted: the latest version is unchanged and
        # intact for a collector in another process
        res = children.start(procs.collect_numpy, broker.sock, "ab").result()
        assert res["version"] == v1 and res["step"] == 5
        assert all(res["equal"].values())
        # leaving the block without commit() aborts and says so
        with pytest.raises(RuntimeError, match="without commit"):
            with pub.begin(timeout=WAIT_S) as slab:
                slab.numpy("fc.bias")[:] = -2.0
        with c.subscriber("ab").acquire() as view:
            assert view.version == v1
            assert np.array_equal(view.numpy("fc.bias"), procs.numpy_weights(5)["fc.bias"])
        assert publish_numpy(pub, 6) > v1            # no slab left begun


def test_broker_sigkill_wait_raises_and_held_arrays_stay_readable(broker):
    # reconnect=False: the calls say the broker went away (test_reconnect.py
    # follows it instead)
    c = wsync.connect(broker.sock, "collector", reconnect=False)
    with wsync.connect(broker.sock, "trainer", reconnect=False) as t:
        pub = t.publisher_like("m", procs.numpy_weights(0))
        v1 = publish_numpy(pub, 9)
        sub = c.subscriber("m")
        view = sub.acquire()
        arrays = view.state_dict()
        broker.kill()
        t0 = time.monotonic()
        with pytest.raises(wsync.NotConnectedError) as ei:
            sub.wait(after=v1, timeout=None)
        assert time.monotonic() - t0 < 10.0
        assert ei.value.errno == errno.ENOTCONN
        assert isinstance(ei.value, ConnectionError)
        exp = procs.numpy_weights(9)
        assert all(np.array_equal(arrays[k], exp[k]) for k in exp)
        # after a crash acquire still gives the last version
        with sub.acquire() as again:
            assert again.version == v1
        assert view.version == v1
        view.release()
        del arrays
    c.close()
    # a restarted broker adopts the model; a new client reads the same bytes
    broker.restart()
    with wsync.connect(broker.sock, "collector2") as c2:
        with c2.subscriber("m").acquire() as v:
            assert v.version >= v1 and v.step == 9
            assert all(np.array_equal(v.numpy(k), exp[k]) for k in exp)


def test_fileno_readable_after_commit(broker, children):
    with wsync.connect(broker.sock, "collector") as c:
        sub = c.subscriber("fd")
        fd = sub.fileno()
        assert fd >= 0 and sub.fileno() == fd
        assert select.select([fd], [], [], 0)[0] == []
        versions = children.start(procs.publish, broker.sock, "fd", [1]).result()
        assert select.select([fd], [], [], WAIT_S)[0] == [fd]
        with sub.acquire() as v:                  # acquire drains it
            assert v.version == versions[0]
        assert select.select([fd], [], [], 0)[0] == []
        versions = children.start(procs.publish, broker.sock, "fd", [2]).result()
        assert select.select([fd], [], [], WAIT_S)[0] == [fd]
        with sub.wait(after=v.version, timeout=WAIT_S) as v2:
            assert v2.version == versions[0] and v2.step == 2
        assert select.select([fd], [], [], 0)[0] == []


def test_commit_after_broker_sigkill_changes_nothing(broker):
    # The trainer holds a prefetched grant and has not used its socket since
    # the broker died: its commit must fail before it moves `latest`.
    with wsync.connect(broker.sock, "collector", reconnect=False) as c, \
            wsync.connect(broker.sock, "trainer", reconnect=False) as t:
        pub = t.publisher_like("m", procs.numpy_weights(0))
        v1 = publish_numpy(pub, 9)
        sub = c.subscriber("m")
        broker.kill()
        with pytest.raises(wsync.NotConnectedError):
            sub.wait(after=v1, timeout=WAIT_S)
        # begin may succeed on the grant that came with the last commit; the
        # commit must then fail, and leave what collectors see unchanged
        with pytest.raises(wsync.WsyncError):
            slab = pub.begin(timeout=1.0)
            try:
                slab.copy_from(procs.numpy_weights(10))
                slab.commit(10)
            finally:
                assert not slab.active
        with sub.acquire() as again:
            assert (again.version, again.step) == (v1, 9)
