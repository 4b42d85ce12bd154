"""A broker killed with SIGKILL and started again: clients that follow it
(reconnect=True, the default) and clients that are told (reconnect=False,
BrokerRestartedError); connect(timeout=) waiting for a broker to come up.

Each test kills the fixture's real wsyncd (kill -9) and restarts it on the
same socket: the new broker adopts the models and marks the old
generation superseded, which the library reports to every call of the old
clients (tests/integ/restart_superseded.c shows the C side).
"""
import errno
import select
import threading
import time

import numpy as np
import pytest

import wsync
from conftest import WAIT_S

LAYOUT = [("w", "f32", (4096,)), ("step", "i64", (1,))]


def weights(step):
    return {"w": np.full(4096, step, np.float32), "step": np.array([step], np.int64)}


def check_bytes(view):
    """A view's bytes are those of its step, whole."""
    w = view.numpy("w")
    assert view.numpy("step")[0] == view.step, view
    assert w[0] == view.step and w[-1] == view.step and np.all(w == view.step), view


class Trainer:
    """A thread publishing step 1, 2, ... every few ms through a client of
    its own that follows restarts; records (version, step) and errors."""

    def __init__(self, sock, model="m", **kw):
        self.published = []
        self.errors = []
        self.stop = threading.Event()
        self.client = wsync.connect(sock, "trainer", **kw)
        self.pub = self.client.publisher(model, LAYOUT)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        step = 0
        while not self.stop.is_set():
            step += 1
            try:
                v = self.pub.publish(weights(step), step, timeout=WAIT_S)
            except Exception as e:      # asserted on by the test
                self.errors.append(e)
                return
            self.published.append((v, step))
            time.sleep(0.003)

    def after(self, version, timeout=WAIT_S):
        """Waits until it published a version above version."""
        deadline = time.monotonic() + timeout
        while not (self.published and self.published[-1][0] > version):
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, "the trainer published nothing above v%d" \
                % version
            time.sleep(0.005)
        return self.published[-1][0]

    def close(self):
        self.stop.set()
        self.thread.join(WAIT_S)
        self.client.close()


def test_a_collector_looping_on_acquire_follows_a_restarted_broker(broker):
    trainer = Trainer(broker.sock)
    c = wsync.connect(broker.sock, "collector")
    try:
        sub = c.subscriber("m")
        held = sub.wait(after=0, timeout=WAIT_S)          # kept across everything
        held_w = held.numpy("w")
        held_step = held.step
        old_conn = c._cell
        trainer.after(held.version + 3)

        broker.kill()
        # no broker: the last version is what there is (nothing can change it)
        seen = []
        for _ in range(50):
            with sub.acquire() as v:
                check_bytes(v)
                seen.append(v.version)
        assert seen == sorted(seen)
        before = seen[-1]

        broker.restart()
        # from now on no view comes from the dead generation; versions only
        # go up, and the trainer's new versions arrive
        got_new, versions, end = None, [], time.monotonic() + WAIT_S
        while True:
            with sub.acquire() as v:
                assert v._cell.parent is not old_conn, \
                    "v%d came from the dead broker after the restart" % v.version
                check_bytes(v)
                versions.append(v.version)
                if got_new is None and v.version > before:
                    got_new = time.monotonic()
            if got_new is not None and time.monotonic() - got_new > 0.3:
                break
            assert time.monotonic() < end, "no version above v%d after the restart (%s)" \
                % (before, versions[-5:])
        assert versions == sorted(versions), versions
        assert versions[0] >= before
        assert c.reconnects == 1 and sub.moves == 1
        assert trainer.client.reconnects == 1 and not trainer.errors
        assert trainer.published[-1][0] > before

        # the view held across it all kept its bytes and its connection
        assert held.step == held_step and np.all(held_w == held_step)
        assert not old_conn.freed
        held.release()
        del held_w
        assert old_conn.freed, "the dead generation's client outlived its last view"
    finally:
        trainer.close()
        c.close()


def test_a_wait_follows_a_restart_within_its_timeout(broker):
    trainer = Trainer(broker.sock)
    c = wsync.connect(broker.sock, "collector")
    try:
        sub = c.subscriber("m")
        first = trainer.after(0)
        trainer.stop.set()
        trainer.thread.join(WAIT_S)
        out = {}

        def waiter():
            try:
                with sub.wait(after=trainer.published[-1][0], timeout=2 * WAIT_S) as v:
                    check_bytes(v)
                    out["v"] = (v.version, v.step)
            except Exception as e:
                out["e"] = e
        th = threading.Thread(target=waiter)
        th.start()
        time.sleep(0.2)
        broker.kill()
        # a wait with a short timeout meanwhile: no version (whether it
        # noticed the broker's death or not)
        with pytest.raises(wsync.WsyncTimeoutError):
            sub.wait(after=trainer.published[-1][0], timeout=0.5)
        time.sleep(0.3)
        broker.restart()
        assert "e" not in out, out          # still waiting, or followed: never failed
        last, last_step = trainer.published[-1]
        v = trainer.pub.publish(weights(1000), 1000, timeout=WAIT_S)
        assert v > last >= first
        th.join(WAIT_S)
        assert not th.is_alive() and "e" not in out, out
        # the new publish, or the adopted latest republished above a grant the
        # dead broker had handed out (docs/INVARIANTS.md: across a crash),
        # which the waiter may take as soon as it follows the restart
        assert out["v"] == (v, 1000) or last < out["v"][0] < v and out["v"][1] == last_step, \
            (out, last, last_step, v)
    finally:
        trainer.close()
        c.close()


def test_without_reconnect_every_call_says_the_broker_restarted(broker):
    with wsync.connect(broker.sock, "t", reconnect=False) as t:
        pub = t.publisher("m", LAYOUT)
        v1 = pub.publish(weights(5), 5)
    c = wsync.connect(broker.sock, "c", reconnect=False)
    sub = c.subscriber("m")
    held = sub.acquire()
    broker.kill()
    with sub.acquire() as v:                 # dead, not restarted: the last one
        assert v.version == v1
    broker.restart()
    end = time.monotonic() + WAIT_S
    while True:
        try:
            sub.acquire().release()
        except wsync.BrokerRestartedError as e:
            err = e
            break
        assert time.monotonic() < end, "acquire kept serving the dead generation"
    assert isinstance(err, wsync.NotConnectedError) and err.errno == errno.ENOTCONN
    assert "restarted" in err.detail and "'m'" in err.detail
    for call in (sub.latest, c.models, lambda: sub.wait(after=v1, timeout=1.0)):
        with pytest.raises(wsync.BrokerRestartedError, match="restarted"):
            call()
    assert held.version == v1 and np.all(held.numpy("w") == 5)
    held.release()
    assert c.reconnects == 0
    c.close()
    # connecting again: the versions go on
    with wsync.connect(broker.sock, "c2") as c2:
        with c2.subscriber("m").acquire() as v:
            assert v.version >= v1 and v.step == 5
            check_bytes(v)


def test_a_slab_begun_across_a_restart_fails_once_then_publishing_goes_on(broker):
    c = wsync.connect(broker.sock, "collector")
    t = wsync.connect(broker.sock, "trainer")
    try:
        pub = t.publisher("m", LAYOUT)
        v1 = pub.publish(weights(1), 1)
        sub = c.subscriber("m")
        slab = pub.begin(timeout=WAIT_S)
        slab.copy_from(weights(2))
        broker.kill()
        broker.restart()
        with pytest.raises(wsync.NotConnectedError):
            slab.commit(2)
        assert not slab.active
        v3 = pub.publish(weights(3), 3, timeout=WAIT_S)
        assert v3 > v1 and t.reconnects == 1 and pub.moves == 1
        with sub.wait(after=v1, timeout=WAIT_S) as v:
            assert v.version == v3
            check_bytes(v)
        # a slab begun on the old connection after another handle of the
        # client moved it: its commit says what happened
        slab = pub.begin(timeout=WAIT_S)
        broker.kill()
        broker.restart()
        t.models()                         # moves the client
        with pytest.raises(wsync.NotConnectedError, match="while this slab was begun"):
            slab.commit(4)
        assert pub.publish(weights(5), 5, timeout=WAIT_S) > v3
    finally:
        t.close()
        c.close()


def test_fileno_becomes_readable_again_after_a_restart_without_a_call(broker):
    trainer = Trainer(broker.sock)
    c = wsync.connect(broker.sock, "collector")
    try:
        sub = c.subscriber("m")
        fd = sub.fileno()
        v = trainer.after(0)
        trainer.stop.set()
        trainer.thread.join(WAIT_S)
        with sub.acquire() as view:              # drains it
            seen = view.version
        assert select.select([fd], [], [], 0)[0] == []
        broker.kill()
        broker.restart()
        # the watcher reconnects and the descriptor reports the new broker
        assert select.select([fd], [], [], WAIT_S)[0] == [fd]
        assert c.reconnects == 1 and sub.fileno() == fd
        with sub.acquire() as view:
            assert view.version >= seen >= v
        assert select.select([fd], [], [], 0)[0] == []
        v2 = trainer.pub.publish(weights(77), 77, timeout=WAIT_S)
        assert select.select([fd], [], [], WAIT_S)[0] == [fd]
        with sub.acquire() as view:
            assert view.version == v2 and view.step == 77
    finally:
        trainer.close()
        c.close()


def test_connect_waits_for_a_broker_that_is_not_up_yet(broker):
    assert broker.stop() == 0
    with pytest.raises(wsync.NoBrokerError):
        wsync.connect(broker.sock, "early")            # timeout 0: at once
    t0 = time.monotonic()
    with pytest.raises(wsync.NoBrokerError) as ei:
        wsync.connect(broker.sock, "early", timeout=0.3)
    assert time.monotonic() - t0 >= 0.3
    assert isinstance(ei.value, TimeoutError) and broker.sock in ei.value.detail
    # (the broker is started by this thread: it dies with the thread that
    # started it, PR_SET_PDEATHSIG)
    out = {}

    def late():
        try:
            with wsync.connect(broker.sock, "late", timeout=WAIT_S) as c:
                out["models"] = c.models()
        except Exception as e:
            out["e"] = e
    th = threading.Thread(target=late)
    th.start()
    time.sleep(0.3)
    assert th.is_alive()
    broker.restart()
    th.join(WAIT_S)
    assert "e" not in out and all(not m.published for m in out["models"]), out
    for bad in (-1, "1", float("nan")):
        with pytest.raises((TypeError, ValueError)):
            wsync.connect(broker.sock, timeout=bad)
    with pytest.raises(TypeError):
        wsync.connect(broker.sock, reconnect=1)


def test_a_call_without_timeout_gives_up_after_reconnect_timeout(broker):
    with wsync.connect(broker.sock, "t") as t:
        t.publisher("m", LAYOUT).publish(weights(1), 1)
    c = wsync.connect(broker.sock, "c", reconnect_timeout=0.5)
    sub = c.subscriber("m")
    assert broker.stop() == 0                    # a clean stop: acquire refuses
    t0 = time.monotonic()
    with pytest.raises(wsync.NotConnectedError) as ei:
        sub.acquire()
    assert time.monotonic() - t0 >= 0.5
    assert "shut down" in ei.value.detail and "no broker answered" in ei.value.detail
    # a wait gets its timeout, saying why nothing came
    t0 = time.monotonic()
    with pytest.raises(wsync.WsyncTimeoutError) as ei:
        sub.wait(after=0, timeout=0.4)
    assert time.monotonic() - t0 >= 0.4
    assert "went away" in ei.value.detail and broker.sock in ei.value.detail
    broker.restart()                             # (--no-keep: without the weights)
    with pytest.raises(wsync.NoDataError):       # the next call finds it
        sub.acquire()
    assert c.reconnects == 1
    c.close()
