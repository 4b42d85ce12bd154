"""Subscriber.declare_max_lag: a staleness bound declared for monitors only.
wsyncctl --json sessions and wsync-top --json show it beside the
collector's lag (max_lag_versions, max_lag_s) and flag the collector past
it (over_bound); set_max_lag's age is declared too; None clears it; bad
bounds raise before anything is declared, and a closed subscriber refuses."""
import json
import math
import os
import subprocess
import time

import pytest

import wsync
from conftest import ROOT, WAIT_S

BUILD = os.environ.get("BUILD") or "build"
CTL = os.path.join(ROOT, BUILD, "bin", "wsyncctl")
TOP = os.path.join(ROOT, BUILD, "bin", "wsync-top")
LAYOUT = [("w", "f32", (16,))]


def session(args, name):
    r = subprocess.run(args, capture_output=True, text=True, timeout=WAIT_S)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout.splitlines()[0])
    (s,) = [s for s in doc["sessions"] if s["name"] == name]
    return s


def wait_session(name, **want):
    """The session as wsyncctl shows it once every field in want reads so
    (the broker mirrors bounds once a second)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        s = session([CTL, "--json", "sessions"], name)
        if all(s[k] == v for k, v in want.items()):
            return s
        assert time.monotonic() < deadline, (want, s)
        time.sleep(0.1)


def publish(pub, step):
    with pub.begin(timeout=WAIT_S) as slab:
        slab.commit(step)


def test_declared_bound_is_shown_and_flagged(broker):
    with wsync.connect(broker.sock, "trainer") as tc, \
            wsync.connect(broker.sock, "collector") as cc:
        pub = tc.publisher("pol", LAYOUT)
        publish(pub, 1)
        sub = cc.subscriber("pol")
        sub.acquire().release()
        s = wait_session("collector", version=1)
        assert (s["max_lag_versions"], s["max_lag_s"], s["over_bound"]) == (None, None, False)

        sub.declare_max_lag(3, 0.5)
        wait_session("collector", max_lag_versions=3, max_lag_s=0.5)
        # declaring changes no acquire: a version older than 0.5 s is taken
        time.sleep(0.6)
        with sub.acquire() as v:
            assert v.version == 1
        sub.declare_max_lag(1, None)
        s = wait_session("collector", max_lag_versions=1, max_lag_s=None)
        assert not s["over_bound"]
        publish(pub, 2)
        publish(pub, 3)                              # 2 behind, bound 1
        s = wait_session("collector", over_bound=True)
        assert s["lag"] == 2
        t = session([TOP, "--json", "-n", "1"], "collector")
        assert (t["max_lag_versions"], t["over_bound"]) == (1, True), t
        sub.acquire().release()
        wait_session("collector", over_bound=False, lag=0)

        # set_max_lag declares its age; declare_max_lag(None, None) clears all
        sub.set_max_lag(30.0, timeout=1)
        wait_session("collector", max_lag_versions=1, max_lag_s=30.0)
        sub.declare_max_lag(None, None)
        wait_session("collector", max_lag_versions=None, max_lag_s=None)
        sub.set_max_lag(None)


@pytest.mark.parametrize("versions,seconds", [
    (-1, None), (2 ** 32, None), (True, None), ("3", None), (1.5, None),
    (None, -0.5), (None, math.nan), (None, math.inf), (None, True), (None, "1")])
def test_bad_bounds_raise(broker, versions, seconds):
    with wsync.connect(broker.sock, "collector") as c:
        sub = c.subscriber("pol")
        with pytest.raises(ValueError):
            sub.declare_max_lag(versions, seconds)


def test_a_closed_subscriber_refuses(broker):
    with wsync.connect(broker.sock, "collector") as c:
        sub = c.subscriber("pol")
        sub.close()
        with pytest.raises(wsync.ClosedError):
            sub.declare_max_lag(2, 1.0)


def test_a_live_policy_declares_its_bound_until_closed(broker):
    torch = pytest.importorskip("torch")
    module = torch.nn.Linear(4, 2)
    layout = [(n, "f32", tuple(t.shape)) for n, t in module.state_dict().items()]
    with wsync.connect(broker.sock, "trainer") as tc, \
            wsync.connect(broker.sock, "live") as cc:
        pub = tc.publisher("pol", layout)
        with pub.begin(timeout=WAIT_S) as slab:
            for n, t in module.state_dict().items():
                slab.torch(n).copy_(t)
            slab.commit(1)
        sub = cc.subscriber("pol")
        policy = wsync.LivePolicy(sub, module, max_lag=(2, 5.0))
        policy(torch.zeros(1, 4))
        wait_session("live", version=1, max_lag_versions=2, max_lag_s=5.0)
        policy.close()
        # the subscription stays open: the bound shown is gone with the policy
        sub.acquire().release()
        wait_session("live", max_lag_versions=None, max_lag_s=None)
