"""Argument checking, timeout messages, model options, pickling, and what
a collector sees after the broker crashes or shuts down."""
import math
import pickle
import os
import subprocess
import sys

import numpy as np
import pytest

import wsync
from conftest import ROOT, WAIT_S

LAYOUT = [("w", "f32", (256,)), ("b", "i64", ())]


def publish(pub, step):
    with pub.begin(timeout=WAIT_S) as slab:
        slab.numpy("w")[:] = step
        slab.numpy("b")[...] = step
        return slab.commit(step)


BAD_INTS = [(-1, ValueError), (2**64, ValueError), (1.5, TypeError), ("7", TypeError),
            (None, TypeError), (True, TypeError), (np.float64(2.0), TypeError)]
BAD_TIMEOUTS = [(-1, ValueError), (-0.5, ValueError), (math.nan, ValueError),
                ("1", TypeError), (True, TypeError), ([1], TypeError)]


@pytest.mark.parametrize("bad,exc", BAD_INTS)
def test_commit_step_is_checked(client, bad, exc):
    pub = client.publisher("m", LAYOUT)
    v1 = publish(pub, 1)
    slab = pub.begin(timeout=WAIT_S)
    with pytest.raises(exc, match="step"):
        slab.commit(bad)
    with pytest.raises(exc, match="step"):
        slab.commit_async(bad)
    assert slab.active                    # nothing happened: commit a good one
    assert slab.commit(np.int64(2)) > v1
    with client.subscriber("m").acquire() as v:
        assert v.step == 2


@pytest.mark.parametrize("bad,exc", BAD_INTS)
def test_wait_after_is_checked(client, bad, exc):
    sub = client.subscriber("m")
    with pytest.raises(exc, match="after"):
        sub.wait(after=bad, timeout=0)


@pytest.mark.parametrize("bad,exc", BAD_TIMEOUTS)
def test_timeouts_are_checked(client, bad, exc):
    pub = client.publisher("m", LAYOUT)
    sub = client.subscriber("m")
    for call in (lambda: sub.wait(timeout=bad), lambda: pub.begin(timeout=bad),
                 lambda: pub.wait_commit(timeout=bad)):
        with pytest.raises(exc, match="timeout"):
            call()


@pytest.mark.parametrize("bad,exc", [(-1, ValueError), (2**32, ValueError),
                                     (1.0, TypeError), ("4", TypeError)])
def test_options_and_threads_are_checked(client, bad, exc):
    with pytest.raises(exc, match="slots"):
        client.publisher("m", LAYOUT, slots=bad)
    with pytest.raises(exc, match="flags"):
        client.publisher("m", LAYOUT, flags=bad)
    with pytest.raises(TypeError, match="guard"):
        client.publisher("m", LAYOUT, guard=0)
    with pytest.raises(TypeError, match="model name"):
        client.subscriber(b"m")
    pub = client.publisher("m", LAYOUT)
    with pub.begin(timeout=WAIT_S) as slab:
        with pytest.raises(exc, match="threads"):
            slab.copy_from({"w": np.zeros(256, np.float32), "b": 0}, threads=bad)
        slab.abort()


def test_infinite_timeout_waits_and_the_message_names_the_callers_timeout(client):
    pub = client.publisher("m", LAYOUT)
    sub = client.subscriber("m")
    v1 = publish(pub, 1)
    with sub.wait(after=0, timeout=math.inf) as v:    # inf: forever (here: at once)
        assert v.version == v1
    for timeout, text in ((0.6, "0.6 s"), (0, "0 s")):
        with pytest.raises(wsync.WsyncTimeoutError) as ei:
            sub.wait(after=v1, timeout=timeout)
        assert ei.value.detail == "model 'm': no version after v%d within %s" % (v1, text)
        assert text in str(ei.value)


def test_a_wait_on_a_typoed_name_keeps_the_librarys_hint(client):
    """The library says a model was never published and to check its name;
    the Python message keeps that, with the caller's timeout, not the last
    0.25 s slice's."""
    client.publisher("policy", LAYOUT)
    sub = client.subscriber("polcy")
    for timeout, text in ((0.6, "0.6 s"), (0, "0 s")):
        with pytest.raises(wsync.WsyncTimeoutError) as ei:
            sub.wait(timeout=timeout)
        d = ei.value.detail
        assert d.startswith("model 'polcy': no version within %s: " % text), d
        assert "never been published" in d and "is the name right?" in d, d
        assert " ns" not in d, d
    with pytest.raises(wsync.NoDataError):
        sub.acquire()


def test_slots_reach_the_library(client):
    pub = client.publisher("two", LAYOUT, slots=2)
    assert pub.slots == 2 and not pub.guarded
    sub = client.subscriber("two")
    publish(pub, 1)
    with sub.acquire():
        publish(pub, 2)                   # the second slab
        with pytest.raises(wsync.BusyError):
            pub.begin(timeout=0)          # v1 held, v2 the latest: none left
    publish(pub, 3)
    with pytest.raises(wsync.WsyncError) as ei:
        client.publisher("one", LAYOUT, slots=1)
    assert ei.value.errno == 22           # EINVAL from the library


_GUARD_SCRIPT = """
import wsync
c = wsync.connect(%r)
pub = c.publisher("g", [("w", "f32", (1024,))], guard=%r)
with pub.begin(timeout=5) as slab:
    t = slab.numpy("w")[:]            # a derived view stays writable in numpy
    slab.commit(1)
t[0] = 1.0                            # after commit: faults if the slab is guarded
print("wrote")
"""


@pytest.mark.parametrize("guard", [True, False])
def test_guard_option_reaches_the_library(broker, guard):
    script = _GUARD_SCRIPT % (broker.sock, guard)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "libclient", "python"))
    r = subprocess.run([sys.executable, "-c", script], env=env, timeout=WAIT_S,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if guard:
        assert r.returncode == -11 and r.stdout == b""     # SIGSEGV in the trainer
    else:
        assert r.returncode == 0 and r.stdout == b"wrote\n", r.stderr.decode()
    with wsync.connect(broker.sock) as c:
        assert c.publisher("g", [("w", "f32", (1024,))], guard=not guard).guarded != guard


def test_handles_do_not_pickle_but_model_refs_do(client):
    pub = client.publisher("m", LAYOUT)
    sub = client.subscriber("m")
    publish(pub, 3)
    with sub.acquire() as view, pub.begin(timeout=WAIT_S) as slab:
        for h in (client, pub, sub, view, slab):
            with pytest.raises(TypeError, match="connect in the child"):
                pickle.dumps(h)
        slab.abort()
    ref = pickle.loads(pickle.dumps(sub.ref()))
    assert ref == pub.ref() == wsync.ModelRef(client.endpoint, "m")
    v1 = publish(pub, 4)
    with ref.connect("child") as c2:
        with ref.subscriber(c2).acquire() as v:
            assert v.version == v1 and v.step == 4


def test_default_endpoint_ref(broker, monkeypatch):
    monkeypatch.setenv("WSYNC_ENDPOINT", broker.sock)
    with wsync.connect() as c:
        assert c.ref("m") == (broker.sock, "m")


def test_after_a_crash_the_last_version_stays_and_blocking_waits_raise(broker):
    with wsync.connect(broker.sock, "c", reconnect=False) as c, \
            wsync.connect(broker.sock, "t", reconnect=False) as t:
        v1 = publish(t.publisher("m", LAYOUT), 5)
        sub = c.subscriber("m")
        broker.kill()
        with sub.acquire() as v:          # nothing can change it any more
            assert (v.version, v.step) == (v1, 5)
        with sub.wait(after=0, timeout=0) as v:   # satisfied without blocking
            assert v.version == v1
        with pytest.raises(wsync.NotConnectedError):
            sub.wait(after=v1, timeout=WAIT_S)


def test_after_a_shutdown_acquire_and_waits_raise(broker):
    with wsync.connect(broker.sock, "c", reconnect=False) as c, \
            wsync.connect(broker.sock, "t", reconnect=False) as t:
        v1 = publish(t.publisher("m", LAYOUT), 5)
        sub = c.subscriber("m")
        view = sub.acquire()
        a = view.numpy("w")
        assert broker.stop() == 0
        with pytest.raises(wsync.NotConnectedError):
            sub.acquire()
        with pytest.raises(wsync.NotConnectedError):
            sub.wait(after=0, timeout=0)
        with pytest.raises(wsync.NotConnectedError):
            sub.wait(after=v1, timeout=WAIT_S)
        assert view.version == v1 and np.all(a == 5)     # held views stay readable
        view.release()


_BIG_COPY_SCRIPT = """
import numpy as np, wsync
rng = np.random.default_rng(1)
# 40 MiB in tensors of odd sizes: the process's first large copy picks the
# copy method on its first chunks, which straddle tensors
sizes = [3 << 20, 5, (7 << 20) + 3, 1 << 20, (29 << 20) + 1001, 77]
sd = {"t" + str(i): rng.integers(0, 255, n, dtype=np.uint8) for i, n in enumerate(sizes)}
with wsync.connect(%r) as c:
    pub = c.publisher_like("big", sd, guard=%r)
    sub = c.subscriber("big")
    for step in (1, 2, 3):
        sd = {k: v + np.uint8(step) for k, v in sd.items()}
        with pub.begin(timeout=10) as slab:
            slab.copy_from(sd, threads=step - 1)
            slab.commit(step)
        with sub.acquire() as v:
            assert all(np.array_equal(v.numpy(k), sd[k]) for k in sd), step
print("ok")
"""


@pytest.mark.parametrize("guard", [True, False])
def test_copy_from_large_model_in_a_fresh_process(broker, guard):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "libclient", "python"))
    r = subprocess.run([sys.executable, "-c", _BIG_COPY_SCRIPT % (broker.sock, guard)],
                       env=env, timeout=60, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert r.returncode == 0 and r.stdout == b"ok\n", r.stdout.decode()
