"""Finalization in any order: scripts that leave handles open run in a
subprocess and must exit 0 (no hang, no crash) at interpreter exit or when
the garbage collector breaks a cycle; closing a subscription or client while
arrays of its views are alive leaves them readable."""
import os
import subprocess
import sys
import textwrap

import pytest

import wsync
from conftest import ROOT, WAIT_S

_PKG = os.path.join(ROOT, "libclient", "python")

# Each body runs after `import wsync, gc` and `c = wsync.connect(SOCK)`.
# A module-level function puts the module's globals in a reference cycle,
# so their finalizers run in no fixed order at exit.
LAYOUT = [("w", "f32", (4,)), ("b", "i64", ())]
_SETUP = """
LAYOUT = %r


def publish(c, model, step=1):
    pub = c.publisher(model, LAYOUT)
    s = pub.begin(timeout=5)
    s.numpy("w")[:] = step
    s.numpy("b")[...] = step
    s.commit(step)
    return pub
""" % (LAYOUT,)

SCRIPTS = {
    "client": "",
    "publisher": 'pub = c.publisher("m", LAYOUT)',
    "subscriber": 'sub = c.subscriber("m")',
    "publish_then_subscribe": 'pub = publish(c, "m")\nsub = c.subscriber("m")',
    "begun_slab": 'pub = c.publisher("m", LAYOUT)\nslab = pub.begin(timeout=5)',
    "slab_arrays": 'pub = publish(c, "m")\nslab = pub.begin(timeout=5)\n'
                   'a = slab.numpy("w")',
    "held_view": 'pub = publish(c, "m")\nsub = c.subscriber("m")\nview = sub.acquire()',
    "held_arrays": 'pub = publish(c, "m")\nsub = c.subscriber("m")\n'
                   'arrays = sub.acquire().state_dict()\nw = sub.wait(timeout=0).numpy("w")',
    "torch_tensor": 'import torch\npub = publish(c, "m")\nsub = c.subscriber("m")\n'
                    't = sub.acquire().torch("w")',
    "two_clients": 'c2 = wsync.connect(SOCK)\npub = publish(c2, "m")\n'
                   'sub = c.subscriber("m")\nview = sub.acquire()\na = view.numpy("w")',
    "daemon_thread_waiting": """
import threading, time
sub = c.subscriber("m")
started = threading.Event()
def waiter():
    started.set()
    sub.wait(after=0, timeout=None)
threading.Thread(target=waiter, daemon=True).start()
started.wait()
time.sleep(0.3)
""",
    # explicit cycles, collected by gc.collect() before exit, in both orders
    "cycle_client_first": """
class Box:
    pass
box = Box()
box.self = box
box.pub = publish(c, "m")
box.sub = c.subscriber("m")
box.view = box.sub.acquire()
box.arr = box.view.numpy("w")
box.c = c
del c
box.c.close()
del box
gc.collect()
""",
    "cycle_gc_only": """
class Box:
    pass
for i in range(3):
    box = Box()
    box.self = box
    box.c = wsync.connect(SOCK)
    box.pub = publish(box.c, "m%d" % i)
    box.sub = box.c.subscriber("m%d" % i)
    box.view = box.sub.acquire()
    box.t = box.view.numpy("w")
    del box
    gc.collect()
""",
    "closed_subscriber_keeps_arrays": """
pub = publish(c, "m", 7)
sub = c.subscriber("m")
a = sub.acquire().numpy("w")
sub.close()
assert sub.closed and list(a) == [7.0] * 4
c.close()
assert list(a) == [7.0] * 4
del a
""",
}


def _run(broker, body):
    script = "import gc, wsync\nSOCK = %r\n%s\nc = wsync.connect(SOCK)\n%s\ndef f():\n    pass\n" \
        % (broker.sock, _SETUP, textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=_PKG)
    try:
        return subprocess.run([sys.executable, "-c", script], env=env, timeout=WAIT_S,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except subprocess.TimeoutExpired:
        pytest.fail("the script hung at exit:\n%s" % script)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_exit_with_handles_left_open(broker, name):
    if "torch" in SCRIPTS[name]:
        pytest.importorskip("torch")
    r = _run(broker, SCRIPTS[name])
    assert r.returncode == 0, "exit status %d:\n%s" % (r.returncode, r.stdout.decode())
    assert r.stdout == b""
    # the broker saw the script's clients go: a new publisher takes "m" over
    with wsync.connect(broker.sock, "after-exit") as c:
        c.publisher("m", LAYOUT).close()


def test_closing_a_subscriber_keeps_live_torch_tensors_readable(broker):
    torch = pytest.importorskip("torch")
    c = wsync.connect(broker.sock, "reader")
    with wsync.connect(broker.sock, "trainer") as t:
        pub = t.publisher("m", [("w", "f32", (1024,))], slots=2)

        def publish(step, timeout=WAIT_S):
            with pub.begin(timeout=timeout) as slab:
                slab.numpy("w")[:] = float(step)
                return slab.commit(step)

        publish(1)
        sub = c.subscriber("m")
        view = sub.acquire()
        tensor = view.torch("w")
        sub.close()
        c.close()
        assert sub.closed and c.closed and not view.released  # its array is alive
        with pytest.raises(wsync.ClosedError):
            view.numpy("w")               # no new arrays from a closed subscription
        publish(2)
        # two slots: v2 is the latest, v1 is still held by the live tensor
        with pytest.raises(wsync.BusyError):
            publish(3, timeout=0)
        assert torch.all(tensor == 1.0)   # mapped, and never rewritten
        del tensor, view                  # the last reference: released, closed
        publish(3)


def test_closing_a_publisher_keeps_live_slab_arrays_mapped(broker):
    torch = pytest.importorskip("torch")
    with wsync.connect(broker.sock, "trainer") as t:
        pub = t.publisher("m", [("w", "f32", (1024,))])
        with pub.begin(timeout=WAIT_S) as slab:
            slab.numpy("w")[:] = 2.0
            slab.commit(1)
        slab = pub.begin(timeout=WAIT_S)
        tensor = slab.torch("w")          # a begun slab, closed under it
        tensor[:] = 5.0
        pub.close()
        assert not slab.active
        assert torch.all(tensor == 5.0)   # still mapped (the slab was aborted)
        with wsync.connect(broker.sock, "reader") as c:
            with c.subscriber("m").acquire() as v:
                assert v.step == 1 and v.numpy("w")[0] == 2.0
        del tensor, slab                  # the last array: the publisher goes
        with wsync.connect(broker.sock, "next") as c2:
            c2.publisher("m", [("w", "f32", (1024,))]).close()
