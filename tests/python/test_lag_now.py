"""Lag as of the reading, not as of the broker's last tick: a collector
holds one version while a trainer publishes at about 10 Hz, and wsyncctl
sessions --json and wsync-top --json, sampled mid-hold, never read its lag
(commits and milliseconds) lower than the truth at the moment they were
started, nor higher than the truth when they returned."""
import json
import os
import subprocess
import threading
import time

import wsync
from conftest import ROOT, WAIT_S

BUILD = os.environ.get("BUILD") or "build"
CTL = os.path.join(ROOT, BUILD, "bin", "wsyncctl")
TOP = os.path.join(ROOT, BUILD, "bin", "wsync-top")
LAYOUT = [("w", "f32", (16,))]


class Trainer(threading.Thread):
    """Commits a version every 0.1 s; commits[] holds (version, ns before
    begin, ns after commit) of each."""

    def __init__(self, pub):
        super().__init__(daemon=True)
        self.pub = pub
        self.commits = []
        self.lock = threading.Lock()
        self.done = threading.Event()

    def run(self):
        step = 100
        while not self.done.wait(0.1):
            t0 = time.time_ns()
            with self.pub.begin(timeout=WAIT_S) as slab:
                v = slab.commit(step)
            with self.lock:
                self.commits.append((v, t0, time.time_ns()))
            step += 1

    def after(self, version):
        """The commits of versions above version, so far."""
        with self.lock:
            return [c for c in self.commits if c[0] > version]


def sample(tool_args, trainer, held):
    before = trainer.after(held)
    t0 = time.time_ns()
    r = subprocess.run(tool_args, capture_output=True, text=True, timeout=WAIT_S)
    t1 = time.time_ns()
    after = trainer.after(held)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout.splitlines()[0])
    (s,) = [s for s in doc["sessions"] if s["name"] == "holder"]
    (m,) = [m for m in doc["models"] if m["name"] == "pol"] if "models" in doc else [None]
    return s, m, before, after, t0, t1


def test_a_held_version_lags_as_of_the_reading(broker):
    with wsync.connect(broker.sock, "trainer") as tc, \
            wsync.connect(broker.sock, "holder") as hc:
        pub = tc.publisher("pol", LAYOUT)
        with pub.begin(timeout=WAIT_S) as slab:
            slab.commit(1)
        view = hc.subscriber("pol").acquire()
        trainer = Trainer(pub)
        trainer.start()
        try:
            checked = 0
            deadline = time.monotonic() + 2.0
            tools = [[CTL, "--json", "sessions"], [TOP, "--json", "-n", "1"]]
            while time.monotonic() < deadline or checked < 4:
                time.sleep(0.27)        # out of step with the broker's 1 s tick
                args = tools[checked % 2]
                s, m, before, after, t0, t1 = sample(args, trainer, view.version)
                if not before or not s["held"]:
                    continue            # not superseded, or no tick saw the hold yet
                assert s["version"] == view.version, s
                # commits: at least those done when the tool started, at most
                # those done when it returned (+1: booked by the broker, not
                # yet noted by the trainer thread)
                assert len(before) <= s["lag"] <= len(after) + 1, (args, s, len(before),
                                                                   len(after))
                # ms: its successor committed between begin and commit
                succ = after[0]
                low_ms = (t0 - succ[2]) / 1e6
                high_ms = (t1 - succ[1]) / 1e6
                assert low_ms - 1 <= s["lag_ms"], (args, s, low_ms)
                # exact unless the tick saw it current (then bounded from above)
                assert s["lag_estimated"] or s["lag_ms"] <= high_ms + 1, (args, s, high_ms)
                if m is not None:
                    assert m["worst_lag"] >= len(before), (m, len(before))
                checked += 1
            assert checked >= 4
        finally:
            trainer.done.set()
            trainer.join(WAIT_S)
            view.release()
