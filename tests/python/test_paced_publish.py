"""Publisher.publish(spread=...), publish_async(spread=...) and
Slab.copy_from(spread=...): a paced copy takes at least its spread in wall
time and little CPU (bounds generous for a loaded machine), publishes the
right bytes with a checksum that verifies, refuses bad spreads before
anything is begun, and a trainer killed in the middle of one publishes
nothing."""
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import wsync
from conftest import ROOT, WAIT_S

MIB = 1 << 20


def weights(step):
    return {"a": np.full((6 * MIB,), step, np.float32),          # 24 MiB
            "b": np.arange(2 * MIB, dtype=np.float32) + step}     # 8 MiB


def check(sub, version, step):
    with sub.acquire() as view:
        assert (view.version, view.step) == (version, step)
        view.verify()
        w = weights(step)
        for k in w:
            assert np.array_equal(view.numpy(k), w[k])


def test_a_paced_publish_takes_its_spread_and_little_cpu(client):
    pub = client.publisher_like("paced", weights(0))
    sub = client.subscriber("paced")
    pub.publish(weights(1), 1)                    # slabs faulted in, helpers warm
    for step, threads in ((2, 0), (3, 2)):
        w = weights(step)
        w0, c0 = time.monotonic(), time.process_time()
        v = pub.publish(w, step, threads=threads, spread=0.2)
        wall, cpu = time.monotonic() - w0, time.process_time() - c0
        assert wall >= 0.2, "a publish spread over 0.2 s took %.3f s" % wall
        # a burst of 32 MiB is ~10 ms of CPU; sleeping between blocks is none
        assert cpu < 0.1, "a publish spread over 0.2 s used %.3f s of CPU" % cpu
        check(sub, v, step)


def test_publish_async_and_copy_from_pace_too(client):
    pub = client.publisher_like("paced2", weights(0))
    sub = client.subscriber("paced2")
    t0 = time.monotonic()
    v = pub.publish_async(weights(4), 4, spread=0.1)
    assert time.monotonic() - t0 >= 0.1
    pub.wait_ack(WAIT_S)
    check(sub, v, 4)
    # one buffer laid out like the slab (wsync_slab_copy_with)
    w = weights(5)
    with pub.begin(WAIT_S) as slab:
        buf = np.zeros(slab.nbytes, np.uint8)
        for s in pub._layout:
            buf[s.offset:s.offset + s.nbytes] = w[s.name].view(np.uint8)
        t0 = time.monotonic()
        slab.copy_from(buf, spread=0.1)
        assert time.monotonic() - t0 >= 0.1
        v = slab.commit(5)
    check(sub, v, 5)
    # 0 and None: as fast as possible, as before
    for step, spread in ((6, 0), (7, None), (8, 0.0)):
        check(sub, pub.publish(weights(step), step, spread=spread), step)


@pytest.mark.parametrize("spread,exc", [
    (-0.1, ValueError), (-1e-12, ValueError), (math.nan, ValueError), (math.inf, ValueError),
    (3601, ValueError), (1e30, ValueError), (10**400, ValueError), ("0.1", TypeError),
    (True, TypeError), ([0.1], TypeError),
])
def test_bad_spreads_are_refused_before_anything_is_begun(client, spread, exc):
    pub = client.publisher_like("badspread", weights(0))
    sub = client.subscriber("badspread")
    v = pub.publish(weights(1), 1)
    with pytest.raises(exc, match="spread"):
        pub.publish(weights(2), 2, spread=spread)
    with pytest.raises(exc, match="spread"):
        pub.publish_async(weights(2), 2, spread=spread)
    with pub.begin(WAIT_S) as slab:
        with pytest.raises(exc, match="spread"):
            slab.copy_from(weights(2), spread=spread)
        slab.abort()
    check(sub, v, 1)
    check(sub, pub.publish(weights(3), 3), 3)     # the publisher still works


def test_a_trainer_killed_in_a_paced_publish_publishes_nothing(broker, client):
    script = ("import sys, numpy as np, wsync\n"
              "c = wsync.connect(sys.argv[1], 'paced-trainer')\n"
              "w = lambda s: {'a': np.full((6 << 20,), s, np.float32),\n"
              "               'b': np.arange(2 << 20, dtype=np.float32) + s}\n"
              "p = c.publisher_like('killed', w(0))\n"
              "p.publish(w(1), 1)\n"
              "print('copying', flush=True)\n"
              "p.publish(w(2), 2, spread=60)\n"
              "print('published', flush=True)\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "libclient", "python"))
    proc = subprocess.Popen([sys.executable, "-c", script, broker.sock], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "copying"
        sub = client.subscriber("killed")
        with sub.acquire() as view:
            v1 = view.version
        time.sleep(0.5)                          # well inside the minute's copy
        proc.kill()
        proc.wait(WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT_S)
    with pytest.raises(wsync.WsyncTimeoutError):
        sub.wait(v1, timeout=0.3)
    check(sub, v1, 1)
