"""wsync.relay on one machine: private brokers (their own instance names)
stand in for nodes, relays run as subprocesses over gloo on 127.0.0.1, the
trainer and the collectors are this test process.

Nothing here asserts on timing: every wait is for a condition, with a
generous deadline (a loaded 2-core machine is slow)."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import Broker, _PKG, _pdeathsig

import wsync

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("torch.distributed without gloo", allow_module_level=True)

from wsync import relay  # noqa: E402

DEADLINE_S = 60.0        # a condition that takes longer than this is a failure
MODEL = "policy"
SECRET = "test-secret-0123456789abcdef"
LAYOUT = [("fc.weight", "f32", (33, 17)), ("fc.bias", "f16", (7,)),
          ("emb", "bf16", (5, 3)), ("count", "i64", (3,)), ("mask", "u8", (13,))]


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def weights(version):
    """Deterministic, distinct bytes for each version."""
    rng = np.random.default_rng(version)
    out = {}
    for name, dtype, shape in LAYOUT:
        n = int(np.prod(shape))
        if dtype == "f32":
            a = rng.standard_normal(n).astype(np.float32)
        elif dtype == "f16":
            a = rng.standard_normal(n).astype(np.float16)
        elif dtype == "bf16":
            a = rng.integers(0, 2**16, n, dtype=np.uint16)
        elif dtype == "i64":
            a = rng.integers(-2**62, 2**62, n, dtype=np.int64)
        else:
            a = rng.integers(0, 256, n, dtype=np.uint8)
        out[name] = a.reshape(shape)
    return out


def wait_for(what, pred, deadline=DEADLINE_S):
    end = time.monotonic() + deadline
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > end:
            pytest.fail("no %s within %.0f s" % (what, deadline))
        time.sleep(0.05)


class Relay:
    """python3 -m wsync.relay for one node, its events in a JSON-lines log."""

    def __init__(self, node, rank, world, port, *extra):
        self.node, self.rank, self.world, self.port = node, rank, world, port
        self.extra = list(extra)
        self.log = os.path.join(node.dir, "relay%d.log" % rank)
        self.proc = None

    def start(self):
        env = dict(os.environ, XDG_RUNTIME_DIR=self.node.dir, WSYNC_RELAY_SECRET=SECRET,
                   PYTHONPATH=_PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self.log + ".err", "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "wsync.relay", "--model", MODEL,
                 "--endpoint", self.node.sock, "--master-addr", "127.0.0.1",
                 "--master-port", str(self.port), "--rank", str(self.rank),
                 "--world-size", str(self.world), "--backend", "gloo",
                 "--timeout", "5", "--log", self.log] + self.extra,
                stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env,
                preexec_fn=_pdeathsig)
        return self

    def events(self, kind=None):
        try:
            with open(self.log) as f:
                evs = [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []
        return [e for e in evs if kind is None or e["event"] == kind]

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        """SIGTERM; the relay must exit 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        assert rc == 0, "relay rank %d ended with %s\n%s" % (self.rank, rc, self.tail())

    def tail(self):
        out = []
        for p in (self.log, self.log + ".err"):
            try:
                with open(p, errors="replace") as f:
                    out.append("---- %s ----\n%s" % (p, "".join(f.readlines()[-30:])))
            except OSError:
                pass
        return "\n".join(out)


@pytest.fixture
def nodes(request):
    """nodes(n): n running private brokers; relays(nodes) starts a relay
    on each. At the end relays get SIGTERM (must exit 0), brokers too."""
    brokers, relays = [], []

    def make(n):
        for _ in range(n):
            brokers.append(Broker().start())
        return list(brokers)

    def start_relays(bs, *extra_by_rank):
        port = free_port()
        rs = [Relay(b, r, len(bs), port, *(extra_by_rank[r] if r < len(extra_by_rank)
                                           else ())).start() for r, b in enumerate(bs)]
        relays.extend(rs)
        return rs

    make.relays = start_relays
    try:
        yield make
        for r in relays:
            r.stop()
        for b in brokers:
            assert b.stop() == 0, "wsyncd %s did not exit 0\n%s" % (b.name, b.log_tail())
    except BaseException:
        for r in relays:
            if r.proc is not None and r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()
            sys.stderr.write(r.tail() + "\n")
        raise
    finally:
        for b in brokers:
            b.cleanup()


class Trainer:
    def __init__(self, node):
        self.client = wsync.connect(node.sock, "test-trainer")
        self.pub = self.client.publisher(MODEL, LAYOUT)
        self.sub = self.client.subscriber(MODEL)
        self.n = 0

    def publish(self):
        """Publishes the next version; returns (version, step, published_ns)."""
        self.n += 1
        step = 1000 + 7 * self.n
        with self.pub.begin(timeout=DEADLINE_S) as slab:
            slab.copy_from(weights(self.n))
            v = slab.commit(step)
        with self.sub.wait(after=v - 1, timeout=DEADLINE_S) as view:
            assert view.version == v
            return v, step, view.published_ns, self.n

    def close(self):
        self.client.close()


class Collector:
    def __init__(self, node):
        self.client = wsync.connect(node.sock, "test-collector")
        self.sub = self.client.subscriber(MODEL)
        self.versions = []

    def wait_origin(self, src_version):
        """Waits until the newest local version comes from src_version;
        returns (local version, step, Origin, bytes ok)."""
        end = time.monotonic() + DEADLINE_S
        after = self.versions[-1] if self.versions else 0
        while True:
            try:
                view = self.sub.wait(after=after, timeout=0.5)
            except TimeoutError:
                view = None
            if view is not None:
                with view:
                    after = view.version
                    o = relay.origin(view)
                    assert not self.versions or view.version > self.versions[-1]
                    self.versions.append(view.version)
                    if o.version == src_version:
                        return view.version, view.step, o, self.same(view, o)
                    assert o.version < src_version, "origin %d is ahead of %d" % (
                        o.version, src_version)
            if time.monotonic() > end:
                pytest.fail("version %d of the source did not arrive within %.0f s"
                            % (src_version, DEADLINE_S))

    @staticmethod
    def same(view, o):
        want = weights(o.version)       # the trainer's n == its source version here
        sd = relay.state_dict(view)
        assert list(sd) == [n for n, _, _ in LAYOUT]
        return all(np.array_equal(sd[k].view(np.uint8), want[k].view(np.uint8)) for k in sd)

    def close(self):
        self.client.close()


def test_versions_arrive_bit_exact_with_origin(nodes):
    src, a, b = nodes(3)
    trainer = Trainer(src)
    first = trainer.publish()            # before the relays: sent when the group forms
    nodes.relays([src, a, b])
    cols = [Collector(a), Collector(b)]
    try:
        for i in range(4):
            v, step, pub_ns, n = first if i == 0 else trainer.publish()
            assert v == n
            for c in cols:
                local, lstep, o, ok = c.wait_origin(v)
                assert ok, "bytes of source version %d differ" % v
                assert lstep == step and o.step == step
                assert o.published_ns == pub_ns and o.hops == 1
        # On the source node origin() falls back to the view's own fields.
        with trainer.sub.acquire() as view:
            assert relay.origin(view) == relay.Origin(view.version, view.step,
                                                      view.published_ns, 0)
            assert relay.lag_ns(view, view.published_ns + 5) == 5
        for c in cols:
            with c.sub.acquire() as view:
                assert relay.ORIGIN_TENSOR in view.tensors
                assert relay.ORIGIN_TENSOR not in relay.state_dict(view, "torch")
    finally:
        for c in cols:
            c.close()
        trainer.close()


def test_relay_killed_and_restarted(nodes):
    src, dst = nodes(2)
    trainer = Trainer(src)
    rsrc, rdst = nodes.relays([src, dst])
    col = Collector(dst)
    try:
        v1 = trainer.publish()[0]
        assert col.wait_origin(v1)[3]

        # A destination relay dies: its broker keeps serving what it had.
        rdst.kill()
        v2 = trainer.publish()[0]
        with col.sub.acquire() as view:
            assert relay.origin(view).version == v1
        rdst.start()
        assert col.wait_origin(v2)[3]

        # The source relay dies: the destination waits, and takes the
        # newest version from the restarted one.
        rsrc.kill()
        v3 = trainer.publish()[0]
        v4 = trainer.publish()[0]
        with col.sub.acquire() as view:
            assert relay.origin(view).version == v2
        rsrc.start()
        local, _, o, ok = col.wait_origin(v4)
        assert ok and o.version == v4 > v3
        assert rdst.events("group_failed"), "the destination never saw its group fail"
    finally:
        col.close()
        trainer.close()


def test_slow_destination_makes_the_source_skip(nodes):
    src, dst = nodes(2)
    trainer = Trainer(src)
    rsrc, rdst = nodes.relays([src, dst], [], ["--throttle", "0.3"])
    col = Collector(dst)
    try:
        v = trainer.publish()[0]
        col.wait_origin(v)               # the group is up
        published = [trainer.publish()[0] for _ in range(30)]
        last = published[-1]
        assert col.wait_origin(last)[3]
        # The relay logs a version after committing it.
        got = wait_for("the destination's log of version %d" % last, lambda: (
            lambda vs: vs if vs and vs[-1] == last else None)(
                [e["origin_version"] for e in rdst.events("committed")]))
        assert got == sorted(set(got)), "versions arrived out of order or twice: %s" % got
        assert got[-1] == last
        carried = [x for x in got if x in published]
        assert len(carried) < len(published), "every version was carried: nothing skipped"
        sent = wait_for("the source's log of version %d" % last, lambda: (
            lambda es: es if es and es[-1]["version"] == last else None)(rsrc.events("sent")))
        assert sent[-1]["skipped"] == len(published) - len(carried) > 0
    finally:
        col.close()
        trainer.close()


def _relay_fails(args, env_extra=None, timeout=DEADLINE_S):
    env = dict(os.environ, PYTHONPATH=_PKG + os.pathsep + os.environ.get("PYTHONPATH", ""),
               WSYNC_RELAY_SECRET=SECRET)
    for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        env.pop(k, None)
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, "-m", "wsync.relay", "--model", MODEL] + args,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                       timeout=timeout)
    return p.returncode, p.stderr


def test_bad_address_or_port_fails_fast(broker):
    # Nothing in these is retried for long: each says what is wrong.
    rc, err = _relay_fails(["--endpoint", broker.sock],
                           {"MASTER_ADDR": "no-such-host.invalid", "MASTER_PORT": "29500",
                            "RANK": "1", "WORLD_SIZE": "2"})
    assert rc == 2 and "cannot resolve master address 'no-such-host.invalid'" in err, err

    rc, err = _relay_fails(["--master-addr", "127.0.0.1", "--master-port", "70000",
                            "--rank", "0", "--world-size", "2"])
    assert rc == 2 and "not a TCP port" in err, err

    rc, err = _relay_fails(["--master-addr", "127.0.0.1", "--rank", "0"])
    assert rc == 2 and "missing --master-port/MASTER_PORT, --world-size/WORLD_SIZE" in err, err

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        rc, err = _relay_fails(["--endpoint", broker.sock, "--master-addr", "127.0.0.1",
                                "--master-port", str(port), "--rank", "0",
                                "--world-size", "2"])
        assert rc == 2 and "rank 0 cannot listen on port %d" % port in err, err

    port = free_port()                   # nobody listens there
    rc, err = _relay_fails(["--endpoint", broker.sock, "--master-addr", "127.0.0.1",
                            "--master-port", str(port), "--rank", "1", "--world-size", "2",
                            "--connect-timeout", "1"])
    assert rc == 2 and "no relay rank 0 at 127.0.0.1:%d after 1 s" % port in err, err
