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

from conftest import ROOT, Broker, _PKG, _pdeathsig

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
    """python3 -m wsync.relay for one node, its events in a JSON-lines log.
    prefix: a command to run it under (a network namespace)."""

    def __init__(self, node, rank, world, port, *extra, secret=SECRET, prefix=(),
                 master="127.0.0.1", tag=""):
        self.node, self.rank, self.world, self.port = node, rank, world, port
        self.extra = list(extra)
        self.secret, self.prefix, self.master = secret, list(prefix), master
        self.log = os.path.join(node.dir, "relay%d%s.log" % (rank, tag))
        self.proc = None

    def start(self):
        env = dict(os.environ, XDG_RUNTIME_DIR=self.node.dir, WSYNC_RELAY_SECRET=self.secret,
                   PYTHONPATH=_PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self.log + ".err", "ab") as err:
            self.proc = subprocess.Popen(
                self.prefix + [sys.executable, "-m", "wsync.relay", "--model", MODEL,
                 "--endpoint", self.node.sock, "--master-addr", self.master,
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

    def start_relays(bs, *extra_by_rank, port=None, **kw):
        port = port or free_port()
        rs = [Relay(b, r, len(bs), port, *(extra_by_rank[r] if r < len(extra_by_rank)
                                           else ()), **(kw.get("by_rank", {}).get(r, {})))
              .start() for r, b in enumerate(bs)]
        relays.extend(rs)
        return rs

    make.relays = start_relays
    make.adopt = relays.append
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

    def wait_origin(self, src_version, same=None):
        """Waits until the newest local version comes from src_version;
        returns (local version, step, Origin, bytes ok). Every version seen
        on the way must pass same(view, origin) (default: weights())."""
        same = same or self.same
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
                    ok = same(view, o)
                    assert ok, "source version %d arrived different" % o.version
                    if o.version == src_version:
                        return view.version, view.step, o, ok
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
        # Each new group starts with a whole version: the base is confirmed anew.
        sent = wait_for("the restarted source's log of version %d" % v4, lambda: (
            lambda es: es if es and es[-1]["version"] == v4 else None)(rsrc.events("sent")))
        starts = [e for e in sent if e["why"] == "new group"]
        assert starts and all(e["mode"] == "full" for e in starts), sent
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


# ---- deltas -------------------------------------------------------------------

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "bench"))
from relay_net import ShapedLink  # noqa: E402

EMB = 2048
DELTA_LAYOUT = [("emb", "bf16", (EMB, EMB)), ("fc1.weight", "f32", (64, 32)),
                ("fc1.bias", "f32", (64,)), ("fc2.weight", "f32", (8, 64))]


class DeltaTrainer:
    """Publishes versions the way a trainer does between RL steps: a bf16
    embedding of which 2 % of the elements change per version (by one or a
    few units in the last place), and a small f32 MLP trained with real Adam
    steps. Remembers the bytes of every version it published."""

    def __init__(self, node):
        torch.manual_seed(0)
        self.client = wsync.connect(node.sock, "test-trainer")
        self.pub = self.client.publisher(MODEL, DELTA_LAYOUT)
        self.sub = self.client.subscriber(MODEL)
        self.rng = np.random.default_rng(7)
        self.emb = (self.rng.standard_normal(EMB * EMB).astype(np.float32) * 0.02) \
            .view(np.uint32).__rshift__(16).astype(np.uint16).reshape(EMB, EMB)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(),
                                       torch.nn.Linear(64, 8, bias=False))
        self.opt = torch.optim.Adam(self.mlp.parameters(), lr=1e-3)
        self.x, self.y = torch.randn(256, 32), torch.randn(256, 8)
        self.published = {}
        self.n = 0

    def step(self):
        if self.n:
            flat = self.emb.reshape(-1)
            idx = np.flatnonzero(self.rng.random(flat.size) < 0.02)
            flat[idx] += self.rng.integers(1, 4, idx.size).astype(np.uint16)
            loss = torch.nn.functional.mse_loss(self.mlp(self.x), self.y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        sd = self.mlp.state_dict()
        return {"emb": self.emb, "fc1.weight": sd["0.weight"].numpy(),
                "fc1.bias": sd["0.bias"].numpy(), "fc2.weight": sd["2.weight"].numpy()}

    def publish(self):
        w = self.step()
        self.n += 1
        with self.pub.begin(timeout=DEADLINE_S) as slab:
            slab.copy_from(w)
            v = slab.commit(self.n)
        self.published[v] = {k: np.array(a, copy=True) for k, a in w.items()}
        return v

    def close(self):
        self.client.close()


def same_as_published(trainer):
    """A Collector check: the view's bytes are those the trainer published."""
    def check(view, o):
        want = trainer.published[o.version]
        sd = relay.state_dict(view)
        assert list(sd) == [n for n, _, _ in DELTA_LAYOUT]
        return all(np.array_equal(sd[k].view(np.uint8), want[k].view(np.uint8)) for k in sd)
    return check


def listening(pid):
    """The local addresses of the TCP sockets process pid listens on."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if t.startswith("socket:["):
            inodes.add(t[8:-1])
    out = []
    for table, v6 in (("tcp", False), ("tcp6", True)):
        try:
            with open("/proc/%d/net/%s" % (pid, table)) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            col = row.split()
            if col[3] != "0A" or col[9] not in inodes:
                continue
            hexaddr = col[1].split(":")[0]
            raw = bytes.fromhex(hexaddr)
            if v6:
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                out.append(socket.inet_ntop(socket.AF_INET6, raw))
            else:
                out.append(socket.inet_ntop(socket.AF_INET, raw[::-1]))
    return out


def test_deltas_over_a_shaped_link(nodes):
    """1 Gbit/s between two network namespaces: the first version goes whole,
    then the relay measures both ways and settles on deltas, each at most
    10 % of the version's bytes, every version bit-exact; and each relay
    listens only on its own address of the link."""
    why = ShapedLink.unavailable()
    if why:
        pytest.skip("no shaped link: " + why)
    src, dst = nodes(2)
    trainer = DeltaTrainer(src)
    col = Collector(dst)
    with ShapedLink("1gbit") as link:
        a, b = link.addr["a"], link.addr["b"]
        rs = nodes.relays([src, dst], by_rank={0: dict(prefix=link.run_in("a"), master=a),
                                                1: dict(prefix=link.run_in("b"), master=a)})
        try:
            for _ in range(6):
                v = trainer.publish()
                assert col.wait_origin(v, same_as_published(trainer))[3], \
                    "source version %d arrived different" % v
            sent = wait_for("the source's log of 6 versions",
                            lambda: (lambda es: es if len(es) >= 6 else None)(rs[0].events("sent")))
            # The first goes whole (a new group); then the cost model measures
            # each way once and deltas win on this link.
            assert sent[0]["mode"] == "full" and sent[0]["why"] == "new group", sent[0]
            for e in sent[1:]:
                assert e["committed_everywhere"], e
                if e["mode"] == "full":
                    assert e["why"] == "full not measured yet", e
                else:
                    assert e["wire_bytes"] <= 0.10 * e["nbytes"], e
            assert [e["mode"] for e in sent[-3:]] == ["delta"] * 3, sent
            assert "predicted" in sent[-1]["why"], sent[-1]
            got = rs[1].events("committed")
            assert [e["mode"] for e in got] == [e["mode"] for e in sent]
            assert set(listening(rs[0].proc.pid)) == {a}
            assert set(listening(rs[1].proc.pid)) <= {b}
        finally:
            for r in rs:
                r.stop()
    col.close()
    trainer.close()


def test_damaged_versions_are_never_published(nodes):
    """A byte flipped in one delta, another delta cut short, and a byte
    flipped in a whole version, each between the wire and the checks: none
    is published; each version is sent again whole and arrives bit-exact;
    the delta after them applies again."""
    src, dst = nodes(2)
    trainer = DeltaTrainer(src)
    rsrc, rdst = nodes.relays([src, dst], ["--delta", "on"],
                              ["--inject", "flip:1,truncate:2,wholeflip:3"])
    col = Collector(dst)
    check = same_as_published(trainer)
    try:
        vs = []
        for _ in range(4):
            vs.append(trainer.publish())
            assert col.wait_origin(vs[-1], check)[3]
        bad = wait_for("three refusals", lambda: (lambda es: es if len(es) >= 3 else None)(
            rdst.events("not_published")))
        assert [(e["origin_version"], e["mode"]) for e in bad] == [
            (vs[1], "delta"), (vs[2], "delta"), (vs[2], "full")]
        assert "chunk" in bad[0]["why"] or "checksum" in bad[0]["why"], bad[0]
        assert "cut short" in bad[1]["why"] or "truncated" in bad[1]["why"], bad[1]
        assert "whole-version checksum" in bad[2]["why"], bad[2]
        got = wait_for("4 commits", lambda: (lambda es: es if len(es) >= 4 else None)(
            rdst.events("committed")))
        assert [(e["origin_version"], e["mode"]) for e in got] == [
            (vs[0], "full"), (vs[1], "full"), (vs[2], "full"), (vs[3], "delta")]
        # the source logs a version's "sent" once its ack is back, which can
        # be after the destination's "committed" line was read
        sent = wait_for("7 sends", lambda: (lambda es: es if len(es) >= 7 else None)(
            rsrc.events("sent")))
        assert [(e["version"], e["mode"], e["ack"]) for e in sent] == [
            (vs[0], "full", "ok"), (vs[1], "delta", "failed"), (vs[1], "full", "ok"),
            (vs[2], "delta", "failed"), (vs[2], "full", "failed"), (vs[2], "full", "ok"),
            (vs[3], "delta", "ok")]
    finally:
        col.close()
        trainer.close()


def test_a_version_declaring_too_many_bytes_is_refused(nodes):
    """A hostile source (--inject oversize:2: its second whole version
    declares, and sends, 1 MiB more than its layout spans): the destination
    refuses it before a byte is written, saying so; the slot a local
    collector holds keeps its bytes (before: the relay wrote past its slab
    into it, or died of SIGSEGV); the next generation carries the version
    again, bit-exact, and the one after."""
    src, dst = nodes(2)
    trainer = Trainer(src)
    rsrc, rdst = nodes.relays([src, dst], ["--delta", "off", "--inject", "oversize:2"],
                              ["--delta", "off"])
    col = Collector(dst)
    try:
        v1 = trainer.publish()[0]
        col.wait_origin(v1)
        held = col.sub.acquire()
        before = bytes(held.buffer())
        held.verify()
        v2 = trainer.publish()[0]
        bad = wait_for("the destination's refusal",
                       lambda: [e for e in rdst.events("group_failed")
                                if "declares" in e["error"]])
        assert "refused before a byte of it was written" in bad[0]["error"], bad[0]
        assert rsrc.events("injected")[0]["fault"] == "oversize"
        assert col.wait_origin(v2)[3]
        v3 = trainer.publish()[0]
        assert col.wait_origin(v3)[3]
        assert bytes(held.buffer()) == before, "the held slot changed"
        held.verify()
        assert relay.origin(held).version == v1 and Collector.same(held, relay.origin(held))
        held.release()
    finally:
        col.close()
        trainer.close()


# ---- exposure -----------------------------------------------------------------


def test_peers_without_the_secret_are_refused(nodes):
    """Rank 0's store listens only on the given address and admits only
    peers that prove they hold the job's secret: a stranger sending bytes
    is disconnected and logged, a relay with another secret exits 2 saying
    so; the relay with the right one joins and carries versions."""
    src, dst = nodes(2)
    port = free_port()
    r0 = Relay(src, 0, 2, port).start()
    nodes.adopt(r0)

    def store_up():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False
    wait_for("rank 0's store", store_up)
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as s:
        hello = s.recv(64)
        assert hello.startswith(b"WSYNCRS1")
        s.sendall(os.urandom(64))
        assert s.recv(1) == b"", "the store answered a peer without the secret"
    ref = wait_for("the refusal in rank 0's log", lambda: r0.events("refused"))
    assert ref[0]["reason"] == "wrong secret" and ref[0]["peer"].startswith("127.0.0.1:")

    bad = Relay(dst, 1, 2, port, secret="another-secret-0123456789", tag="-bad").start()
    try:
        rc = bad.proc.wait(DEADLINE_S)
    except subprocess.TimeoutExpired:
        bad.kill()
        pytest.fail("a relay with the wrong secret kept running")
    with open(bad.log + ".err") as f:
        err = f.read()
    assert rc == 2 and "secret differs" in err, (rc, err)

    good = Relay(dst, 1, 2, port).start()
    nodes.adopt(good)
    trainer, col = Trainer(src), Collector(dst)
    try:
        v = trainer.publish()[0]
        assert col.wait_origin(v)[3]
        assert set(listening(r0.proc.pid)) == {"127.0.0.1"}
        assert set(listening(good.proc.pid)) <= {"127.0.0.1"}
    finally:
        col.close()
        trainer.close()


# ---- the command line ---------------------------------------------------------


def _relay_cmd(args, env_extra=None, cmd=None, timeout=DEADLINE_S):
    env = dict(os.environ, PYTHONPATH=_PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("WSYNC_RELAY_SECRET", None)
    env.update(env_extra or {})
    p = subprocess.run((cmd or [sys.executable, "-m", "wsync.relay"]) + args,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def test_command_line_contract(tmp_path):
    rc, out, err = _relay_cmd(["--help"])
    assert rc == 0 and "--client-name LABEL" in out and "--name INSTANCE" in out, out
    assert "--json" in out and "--version" in out and "--secret-file" in out
    rc, out, _ = _relay_cmd(["-h"])
    assert rc == 0 and out.startswith("usage: wsync-relay")
    rc, out, _ = _relay_cmd(["--version"])
    assert rc == 0 and out.startswith("wsync-relay %s (libwsync " % wsync.__version__), out
    assert "libwsync-delta 1 (zstd " in out, out
    rc, out, _ = _relay_cmd(["--version", "--json"])
    doc = json.loads(out)
    assert rc == 0 and doc["ok"] is True and doc["relay"] == wsync.__version__, out
    # Errors follow the tools' contract (docs/TOOLS.md): one line on stderr,
    # and with --json one JSON object on stdout with the same fields.
    rc, out, err = _relay_cmd(["--json", "--bogus"])
    assert rc == 2 and out.count("\n") == 1, out
    doc = json.loads(out)
    msg = "unknown option '--bogus' (try 'wsync-relay --help')"
    assert doc == {"ok": False, "error": msg, "reason": "usage", "exit": 2}, doc
    assert err == "wsync-relay: %s\n" % msg, err
    rc, out, err = _relay_cmd(["--bogus"])
    assert rc == 2 and out == "" and err == "wsync-relay: %s\n" % msg, (out, err)
    rc, out, err = _relay_cmd(["--model", "m", "--name", "x", "--endpoint", "y"])
    assert rc == 2 and "not allowed with argument" in err, err
    group = ["--model", "m", "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
             "--rank", "0", "--world-size", "2"]
    rc, out, err = _relay_cmd(group + ["--json"])
    doc = json.loads(out)
    assert rc == 2 and doc["ok"] is False and "no secret" in doc["error"], out
    assert doc["reason"] == "usage" and doc["exit"] == 2 and doc["error"] in err, (doc, err)
    # no broker: exit 3 and reason no_broker, as wsyncctl says it
    sock = str(tmp_path / "no-broker.sock")
    rc, out, err = _relay_cmd(group + ["--insecure", "--json", "--endpoint", sock])
    doc = json.loads(out)
    assert rc == 3 and doc["ok"] is False and doc["exit"] == 3, (rc, out, err)
    assert doc["reason"] == "no_broker" and "no broker at %s" % sock in doc["error"], doc
    assert "[Errno" not in doc["error"] and "wsync-relay: " + doc["error"] in err, (doc, err)
    ctl = os.path.join(ROOT, os.environ.get("BUILD") or "build", "bin", "wsyncctl")
    p = subprocess.run([ctl, "--json", "--endpoint", sock, "wait", "m", "--timeout", "1"],
                       capture_output=True, text=True, timeout=DEADLINE_S)
    tool = json.loads(p.stdout)
    assert p.returncode == rc and tool["reason"] == doc["reason"], (p, doc)
    assert set(tool) == set(doc), (tool, doc)
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123\n")
    os.chmod(secret, 0o644)
    rc, _, err = _relay_cmd(group + ["--secret-file", str(secret)])
    assert rc == 2 and "can be read by other users" in err, err
    rc, _, err = _relay_cmd(group, {"WSYNC_RELAY_SECRET": "short"})
    assert rc == 2 and "at least 16" in err, err
    rc, _, err = _relay_cmd(group + ["--log", str(tmp_path / "no" / "such.log")])
    assert rc == 2 and "cannot open the log" in err, err


def test_installed_wsync_relay_command(tmp_path):
    """make install puts a wsync-relay command that runs the installed
    package with the installed libraries, with no PYTHONPATH."""
    from conftest import ROOT
    prefix = str(tmp_path / "prefix")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "WSYNC_LIBRARY", "WSYNC_DELTA_LIBRARY", "MAKEFLAGS",
                        "MAKELEVEL", "MFLAGS")}
    p = subprocess.run(["make", "-s", "install", "PREFIX=" + prefix,
                        "BUILD=" + os.environ.get("BUILD", "build"), "PYTHON=" + sys.executable],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    cmd = os.path.join(prefix, "bin", "wsync-relay")
    p = subprocess.run([cmd, "--version", "--json"], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=DEADLINE_S)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["codec_library"] == os.path.join(prefix, "lib", "libwsync-delta.so.0"), doc
    assert doc["library"] == os.path.join(prefix, "lib", "libwsync.so.0"), doc
