"""Model lifecycle from Python: list, delete, replace, peek, wait_readers."""
import threading

import numpy as np
import pytest

import wsync

LAYOUT = [("w", "f32", (256,))]


def publish(pub, step, value):
    with pub.begin(timeout=5) as slab:
        slab.numpy("w")[:] = value
        return slab.commit(step)


def test_models_lists_published_and_subscribed(client):
    pub = client.publisher("life.a", LAYOUT)
    v = publish(pub, 3, 1.0)
    typo = client.subscriber("life.typo")   # kept: a closed one frees the name
    models = {m.name: m for m in client.models()}
    a = models["life.a"]
    assert a.published and a.version == v and a.step == 3 and a.publishers == 1
    assert a.n_tensors == 1 and a.nbytes >= 1024 and a.published_ns > 0
    assert not models["life.typo"].published and models["life.typo"].subscribers == 1
    typo.close()


def test_delete_keeps_held_views_and_tells_subscribers(client):
    pub = client.publisher("life.del", LAYOUT)
    old = publish(pub, 1, 7.0)
    sub = client.subscriber("life.del")
    view = sub.acquire()
    arr = view.numpy("w")
    with pytest.raises(wsync.BusyError):
        client.delete("life.del")
    pub.close()
    client.delete("life.del")
    assert np.all(arr == 7.0)                   # the held view's bytes stay
    with pytest.raises(wsync.RemovedError):
        sub.acquire()
    with pytest.raises(wsync.RemovedError):
        sub.latest()
    view.release()
    with pytest.raises(wsync.WsyncError) as ei:
        client.delete("life.del")
    assert ei.value.errno == 2                  # ENOENT
    pub = client.publisher("life.del", LAYOUT)  # the name again, versions above
    assert publish(pub, 1, 8.0) > old


def test_replace_with_another_layout(client):
    pub = client.publisher("life.re", LAYOUT)
    publish(pub, 1, 1.0)
    sub = client.subscriber("life.re")
    view = sub.acquire()
    pub.close()
    with pytest.raises(wsync.LayoutError):
        client.publisher("life.re", [("w", "f32", (512,))])
    pub2 = client.publisher("life.re", [("w", "f32", (512,))], replace=True)
    assert np.all(view.numpy("w") == 1.0)
    with pytest.raises(wsync.RemovedError):
        sub.acquire()
    view.release()
    v = publish(pub2, 2, 2.0)
    sub2 = client.subscriber("life.re")
    with sub2.acquire() as v2:
        assert v2.version == v and v2.numpy("w").shape == (512,)
    with pytest.raises(TypeError):
        client.publisher("life.x", LAYOUT, replace=1)


def test_latest_peeks_without_a_view(client):
    pub = client.publisher("life.peek", LAYOUT)
    sub = client.subscriber("life.peek")
    with pytest.raises(wsync.NoDataError):
        sub.latest()
    v = publish(pub, 42, 0.5)
    lv = sub.latest()
    assert lv.version == v and lv.step == 42 and lv.published_ns > 0


def test_wait_readers(client, broker):
    pub = client.publisher("life.sync", LAYOUT)
    v = publish(pub, 1, 1.0)
    assert pub.wait_readers(v, timeout=1) == 0          # nobody subscribed
    other = wsync.connect(broker.sock)
    sub = other.subscriber("life.sync")
    v = publish(pub, 2, 2.0)
    with pytest.raises(wsync.WsyncTimeoutError) as ei:
        pub.wait_readers(v, timeout=0.2)
    assert "behind" in str(ei.value)

    def reader():
        with sub.wait(after=0, timeout=5):
            pass
    t = threading.Thread(target=reader)
    t.start()
    assert pub.wait_readers(v, timeout=5) == 1
    t.join()
    other.close()


def test_explicit_acks_count_for_wait_readers_and_nothing_else(client, broker):
    pub = client.publisher("life.ack", LAYOUT)
    v1 = publish(pub, 1, 1.0)
    other = wsync.connect(broker.sock, "acking")
    try:
        sub = other.subscriber("life.ack")
        with pytest.raises(TypeError):
            sub.set_ack("yes")
        sub.set_ack(True)
        with pytest.raises(wsync.WsyncError) as ei:
            sub.ack(1)                                   # nothing acquired yet
        assert ei.value.errno == 22 and "not acquired" in ei.value.detail
        view = sub.acquire()
        with pytest.raises(wsync.WsyncTimeoutError, match="acking"):
            pub.wait_readers(v1, timeout=0.3)            # taken, not applied
        for bad in (0, v1 + 1):
            with pytest.raises(wsync.WsyncError):
                sub.ack(bad)
        with pytest.raises(TypeError):
            sub.ack(1.0)
        sub.ack(view)                                    # a View says its version
        assert pub.wait_readers(v1, timeout=5) == 1
        view.release()
        v2 = publish(pub, 2, 2.0)
        with sub.acquire() as view:
            assert view.version == v2
        with pytest.raises(wsync.WsyncTimeoutError):
            pub.wait_readers(v2, timeout=0.2)
        sub.ack(v2)
        assert pub.wait_readers(v2, timeout=5) == 1
        sub.set_ack(False)                               # acquiring counts again
        v3 = publish(pub, 3, 3.0)
        sub.acquire().release()
        assert pub.wait_readers(v3, timeout=5) == 1
        sub.set_ack(True)
        pub.close()
        client.delete("life.ack")
        with pytest.raises(wsync.RemovedError):
            sub.ack(v3)
    finally:
        other.close()
