#!/usr/bin/env python3
"""relay_bench.py: wsync-relay's deltas on links that cost something, and
the relay against a bare gloo broadcast on loopback (--loopback).

Default (make bench-relay): deltas against whole versions, in one run.

  Links: two network namespaces joined by a veth pair shaped by tc to
  1 Gbit/s and to 10 Gbit/s (relay_net.py; needs root, else skipped with
  the reason). Source broker, destination broker, the trainer and the
  collector (this process) are on this machine; the two relays run in the
  two namespaces, so everything between them crosses the shaped link.

  Workloads (a model of --mib MiB, carried as one tensor of bytes):
    adam-bf16   an MLP trained with real Adam steps (lr --lr), its weights
                published as bf16 after each step (f32 master weights)
    adam-f32    the same, its f32 weights
    bf16-0.5%, bf16-2%, bf16-20%
                synthetic bf16 weights, that share of the elements moved
                by one to three units in the last place per version
  Each workload publishes one version first (not counted: it replaces the
  previous workload's), then --versions versions, each after the last
  arrived.

  For each link, the relays run twice. First alternating (a hidden relay
  option): one version as a delta, the next one whole (the full broadcast
  of a version on the same link), and so on, so both ways are timed in
  turn under the same load. Then --delta auto (what the relay chooses).
  Figures per workload and link, medians over the counted versions:
    wire      delta bytes on the wire / version bytes (from the source
              relay's log)
    delta_ms  commit on the source to visible on the destination (the
              collector's CLOCK_REALTIME when it holds the version minus
              the source broker's commit time), deltas
    full_ms   the same, whole versions; speedup = full_ms / delta_ms
    auto      the modes the relay chose, and its time
  And, in this process, the codec on the same versions: encode time (all
  threads, streaming into frames) against a memcpy of the model (numpy,
  one thread), and decode time.

Prints tables and one JSON line per row. Exits 0 unless something fails.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from relay_net import ShapedLink

BENCH_SECRET = "relay-bench-secret-0123456789"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PKG = os.path.join(ROOT, "libclient", "python")
sys.path.insert(0, PKG)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pdeathsig():
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


# ---- bare gloo broadcast ------------------------------------------------------


def bare_peer(rank, world, port, nbytes, repeats, out):
    """One process of the bare broadcast; the driver's TCPStore says when
    each repeat starts ("go<i>"), each peer counts itself in "done<i>"."""
    import torch
    import torch.distributed as dist
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    store = dist.TCPStore("127.0.0.1", port, None, False)
    dist.init_process_group("gloo", store=dist.PrefixStore("pg/", store), rank=rank,
                            world_size=world)
    buf = (torch.ones if rank == 0 else torch.zeros)(nbytes, dtype=torch.uint8)
    times = []
    for i in range(repeats):
        store.wait(["go%d" % i])
        dist.barrier()
        time.sleep(0.002)
        t0 = time.monotonic_ns()
        dist.broadcast(buf, 0)
        t1 = time.monotonic_ns()
        times.append(t0 if rank == 0 else t1)
        store.add("done%d" % i, 1)
    gathered = [None] * world
    dist.all_gather_object(gathered, times)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(gathered, f)
    dist.destroy_process_group()


class Bare:
    """The bare broadcast's processes, started once; repeat(i) runs one
    broadcast between two of the relay's, so both see the same load."""

    def __init__(self, nodes, nbytes, repeats, tmp):
        import torch.distributed as dist
        self.world = nodes + 1
        self.repeats = repeats
        port = free_port()
        self.store = dist.TCPStore("127.0.0.1", port, None, True, wait_for_workers=False)
        self.out = os.path.join(tmp, "bare.json")
        self.procs = [subprocess.Popen([sys.executable, __file__, "--bare-peer", str(r),
                                        str(self.world), str(port), str(nbytes),
                                        str(repeats), self.out], preexec_fn=pdeathsig)
                      for r in range(self.world)]

    def repeat(self, i):
        self.store.set("go%d" % i, "1")
        end = time.monotonic() + 300
        while self.store.add("done%d" % i, 0) < self.world:
            if time.monotonic() > end or any(p.poll() for p in self.procs):
                raise RuntimeError("the bare gloo broadcast did not finish")
            time.sleep(0.005)

    def results(self):
        for p in self.procs:
            if p.wait(120) != 0:
                raise RuntimeError("a bare gloo peer exited with %s" % p.returncode)
        with open(self.out) as f:
            g = json.load(f)
        return [(max(g[r][i] for r in range(1, self.world)) - g[0][i]) / 1e6
                for i in range(self.repeats)]

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


# ---- relay --------------------------------------------------------------------


class Broker:
    def __init__(self, wsyncd, k):
        self.name = "relaybench%d-%s" % (os.getpid(), k)
        self.dir = tempfile.mkdtemp(prefix="wsync-relaybench-")
        self.sock = os.path.join(self.dir, self.name + ".sock")
        env = dict(os.environ, XDG_RUNTIME_DIR=self.dir)
        with open(os.path.join(self.dir, "wsyncd.log"), "ab") as log:
            self.proc = subprocess.Popen([wsyncd, "--name", self.name, "--socket", self.sock,
                                          "--no-keep"],
                                         stdout=log, stderr=log, env=env,
                                         preexec_fn=pdeathsig)
        import wsync
        end = time.monotonic() + 10
        while True:
            try:
                wsync.connect(self.sock, "probe").close()
                return
            except wsync.WsyncError:
                if time.monotonic() > end or self.proc.poll() is not None:
                    raise RuntimeError("wsyncd %s did not start" % self.name)
                time.sleep(0.02)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        prefix = "wsync.%d.%s." % (os.getuid(), self.name)
        for n in os.listdir("/dev/shm"):
            if n.startswith(prefix):
                try:
                    os.unlink(os.path.join("/dev/shm", n))
                except OSError:
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)


def run_relay(nodes, mib, repeats, wsyncd, tensors, logs=None, relay_args=(), between=None):
    import numpy as np
    import wsync
    from wsync import relay
    brokers, relays = [], []
    try:
        for k in range(nodes + 1):
            brokers.append(Broker(wsyncd, k))
        port = free_port()
        env = dict(os.environ, WSYNC_RELAY_SECRET=BENCH_SECRET,
                   PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for r, b in enumerate(brokers):
            relays.append(subprocess.Popen(
                [sys.executable, "-m", "wsync.relay", "--model", "bench",
                 "--endpoint", b.sock, "--master-addr", "127.0.0.1", "--master-port",
                 str(port), "--rank", str(r), "--world-size", str(nodes + 1),
                 "--backend", "gloo", "--timeout", "120"] + list(relay_args) +
                (["--log", os.path.join(logs, "relay%d.log" % r)] if logs else
                 ["--quiet", "--log", os.path.join(b.dir, "relay.log")]),
                env=dict(env, XDG_RUNTIME_DIR=b.dir), preexec_fn=pdeathsig))
        per = mib * 1024 * 1024 // 4 // tensors
        sd = {"layer%03d.weight" % i: np.full(per, i, dtype=np.float32)
              for i in range(tensors)}
        trainer = wsync.connect(brokers[0].sock, "bench-trainer")
        pub = trainer.publisher_like("bench", sd)
        clients = [wsync.connect(b.sock, "bench-collector") for b in brokers[1:]]
        subs = [c.subscriber("bench") for c in clients]
        samples = []
        for i in range(1, repeats + 1):
            if between is not None:
                between(i - 1)
            arrived = [None] * nodes
            errors = []

            def collect(k, want):
                try:
                    end = time.monotonic() + 300
                    while time.monotonic() < end:
                        try:
                            v = subs[k].wait(after=0 if not seen[k] else seen[k], timeout=1)
                        except TimeoutError:
                            continue
                        with v:
                            now = time.time_ns()
                            seen[k] = v.version
                            o = relay.origin(v)
                            if o.version == want:
                                arrived[k] = now - o.published_ns
                                return
                    errors.append("collector %d: version %d did not arrive" % (k, want))
                except Exception as e:        # noqa: BLE001
                    errors.append("collector %d: %r" % (k, e))

            if i == 1:
                seen = [0] * nodes
            with pub.begin(timeout=60) as slab:
                for name, arr in sd.items():
                    arr[0] = i                # a new version differs
                slab.copy_from(sd)
                # Collectors start waiting before the commit.
                ths = [threading.Thread(target=collect, args=(k, i)) for k in range(nodes)]
                for t in ths:
                    t.start()
                time.sleep(0.05)
                v = slab.commit(i)
            assert v == i
            for t in ths:
                t.join()
            if errors:
                raise RuntimeError("; ".join(errors))
            samples.append(max(arrived) / 1e6)
        for c in clients:
            c.close()
        trainer.close()
        return samples
    finally:
        for p in relays:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in relays:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for b in brokers:
            b.stop()


def loopback_main(argv):
    p = argparse.ArgumentParser(prog="relay_bench.py --loopback",
                                description="wsync-relay against a bare gloo broadcast on loopback")
    p.add_argument("--wsyncd", default=os.path.join(ROOT, "build", "bin", "wsyncd"))
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--nodes", type=int, default=2, help="destination nodes (default 2)")
    p.add_argument("--repeats", type=int, default=8, help="counted repeats (default 8)")
    p.add_argument("--warmup", type=int, default=5,
                   help="uncounted first repeats (default 5: every slab touched once)")
    p.add_argument("--tensors", type=int, default=64)
    p.add_argument("--logs", default=None,
                   help="a folder for the relays' event logs (default: not kept)")
    p.add_argument("--relay-args", default="",
                   help="more options for every relay, e.g. --relay-args=--staging")
    p.add_argument("--quick", action="store_true", help="64 MiB, 4 counted repeats")
    a = p.parse_args(argv)
    if a.quick:
        a.mib, a.repeats = 64, 4
    try:
        import torch  # noqa: F401
        import torch.distributed as dist
        if not dist.is_gloo_available():
            raise ImportError("torch without gloo")
    except ImportError as e:
        print("relay bench: skipped (%s)" % e)
        return 0
    n = a.repeats + a.warmup
    nbytes = a.mib * 1024 * 1024
    tmp = tempfile.mkdtemp(prefix="wsync-relaybench-")
    try:
        print("relay bench: %d MiB to %d nodes on loopback (gloo), %d repeats + %d warm-up"
              % (a.mib, a.nodes, a.repeats, a.warmup), flush=True)
        bare = Bare(a.nodes, nbytes, n, tmp)
        try:
            rel = run_relay(a.nodes, a.mib, n, a.wsyncd, a.tensors, a.logs,
                            a.relay_args.split(), between=bare.repeat)[a.warmup:]
            bare = bare.results()[a.warmup:]
        finally:
            if not isinstance(bare, list):
                bare.kill()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = [("gloo_broadcast", bare), ("wsync_relay", rel)]
    print("%-16s %8s %8s %8s" % ("method", "median", "min", "max"))
    for name, xs in rows:
        print("%-16s %7.1fms %7.1fms %7.1fms" % (name, statistics.median(xs), min(xs), max(xs)))
    for name, xs in rows:
        print(json.dumps({"method": name, "mib": a.mib, "nodes": a.nodes,
                          "ms": round(statistics.median(xs), 2), "samples": len(xs)}))
    ratio = statistics.median(rel) / statistics.median(bare)
    print("relay / bare broadcast: %.2fx (target <= 1.1x)" % ratio, flush=True)
    return 0





# ---- deltas on shaped links ------------------------------------------------------


def bf16_bits(a):
    """float32 -> bf16 bits, rounded to nearest even (as torch does)."""
    u = a.astype(np.float32).view(np.uint32)
    return ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def synthetic(nbytes, share, versions, seed):
    """bf16 weights; each version moves `share` of the elements by 1-3 ulp."""
    rng = np.random.default_rng(seed)
    w = bf16_bits(rng.standard_normal(nbytes // 2).astype(np.float32) * 0.02)
    yield w.view(np.uint8)
    for _ in range(versions):
        idx = np.flatnonzero(rng.random(w.size) < share)
        w[idx] += rng.integers(1, 4, idx.size).astype(np.uint16)
        yield w.view(np.uint8)


def adam(nbytes, dtype, versions, lr, seed):
    """An MLP of width 1024 trained with Adam on a fixed regression task;
    yields its weights (f32 or bf16 casts), nbytes long (the last layer
    trimmed to fit), after each step."""
    import torch
    torch.manual_seed(seed)
    esize = 4 if dtype == "f32" else 2
    width = 1024
    layers = max(1, nbytes // esize // (width * width))
    model = torch.nn.Sequential(*[m for _ in range(layers)
                                  for m in (torch.nn.Linear(width, width, bias=False),
                                            torch.nn.Tanh())])
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    x, y = torch.randn(16, width), torch.randn(16, width)
    out = np.zeros(nbytes, dtype=np.uint8)

    def flat():
        with torch.no_grad():
            ps = torch.cat([p.reshape(-1) for p in model.parameters()])
            raw = (ps.to(torch.bfloat16).view(torch.int16) if dtype == "bf16" else ps) \
                .numpy().view(np.uint8)
        n = min(nbytes, raw.size)
        out[:n] = raw[:n]
        return out
    yield flat()
    for _ in range(versions):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        yield flat()


_trained = {}


def cached(key, gen):
    """The versions of a generator, made once (training is the slow part)."""
    def replay():
        if key not in _trained:
            _trained[key] = [v.copy() for v in gen()]
        return iter(_trained[key])
    return replay


def workloads(nbytes, versions, lr):
    return [("adam-bf16", cached(("bf16", nbytes, versions, lr),
                                 lambda: adam(nbytes, "bf16", versions, lr, 1))),
            ("adam-f32", cached(("f32", nbytes, versions, lr),
                                lambda: adam(nbytes, "f32", versions, lr, 2))),
            ("bf16-0.5%", lambda: synthetic(nbytes, 0.005, versions, 3)),
            ("bf16-2%", lambda: synthetic(nbytes, 0.02, versions, 4)),
            ("bf16-20%", lambda: synthetic(nbytes, 0.20, versions, 5))]


def changed_share(prev, cur, esize):
    dt = np.uint16 if esize == 2 else np.uint32
    return float(np.mean(prev.view(dt) != cur.view(dt)))


def codec_figures(nbytes, versions, lr, repeats=3):
    """Encode and decode time against a memcpy, and the ratio, per workload."""
    from wsync._relay_codec import Codec
    codec = Codec()
    chunk = codec.chunk_for(nbytes)
    cap = 16 << 20
    frame = np.empty(cap + codec.frame_min(chunk), dtype=np.uint8)
    stream = np.empty(2 * nbytes + (1 << 20), dtype=np.uint8)
    rows = []
    try:
        for name, gen in workloads(nbytes, versions, lr):
            prev = None
            enc_ms, dec_ms, cpy_ms, ratios, changed, cpu_ms = [], [], [], [], [], []
            esize = 4 if "f32" in name else 2
            base = np.empty(nbytes, dtype=np.uint8)
            out = np.empty(nbytes, dtype=np.uint8)
            dst = np.empty(nbytes, dtype=np.uint8)
            np.copyto(dst, 0)
            np.copyto(out, 0)
            for cur in gen():
                if prev is None:
                    prev = cur.copy()
                    continue
                changed.append(changed_share(prev, cur, esize))
                for _ in range(repeats):
                    np.copyto(base, prev)
                    t0 = time.perf_counter()
                    codec.enc_begin(cur.ctypes.data, base.ctypes.data, nbytes, chunk, 1)
                    used, last = 0, False
                    while not last:
                        n, last = codec.enc_read(frame.ctypes.data, cap + codec.frame_min(chunk))
                        stream[used:used + n] = frame[:n]
                        used += n
                    checksum, st = codec.enc_end()
                    enc_ms.append((time.perf_counter() - t0) * 1e3)
                    cpu_ms.append(st["busy_ns"] / 1e6)
                    t0 = time.perf_counter()
                    np.copyto(dst, cur)
                    cpy_ms.append((time.perf_counter() - t0) * 1e3)
                    t0 = time.perf_counter()
                    codec.dec_begin(prev.ctypes.data, out.ctypes.data, nbytes, chunk)
                    ticket, bad = codec.dec_feed(stream.ctypes.data, used)
                    bad = bad or codec.dec_end(checksum)
                    dec_ms.append((time.perf_counter() - t0) * 1e3)
                    if bad or not np.array_equal(out, cur):
                        raise RuntimeError("%s: the codec did not round-trip: %s" % (name, bad))
                ratios.append(used / nbytes)
                prev = cur.copy()
            rows.append({"workload": name, "changed": round(statistics.median(changed), 4),
                         "wire": round(statistics.median(ratios), 4),
                         "encode_ms": round(statistics.median(enc_ms), 2),
                         "encode_cpu_ms": round(statistics.median(cpu_ms), 2),
                         "decode_ms": round(statistics.median(dec_ms), 2),
                         "memcpy_ms": round(statistics.median(cpy_ms), 2),
                         "threads": codec.threads})
    finally:
        codec.close()
    return rows


def run_link(link, mode, nbytes, versions, lr, wsyncd, logs):
    """Relays in the two namespaces with --delta mode (or "alternate": delta
    and whole versions in turn, so both ways are timed under the same
    load); every workload in turn. {workload: [(ms, mode, wire ratio)]}."""
    import wsync
    from wsync import relay
    brokers, procs = [], []
    out = {}
    tag = "%s-%s" % (link.rate, mode)
    try:
        for k in range(2):
            brokers.append(Broker(wsyncd, "%s-%d" % (tag, k)))
        port = free_port()
        env = dict(os.environ, WSYNC_RELAY_SECRET=BENCH_SECRET,
                   PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
        logfile = [os.path.join(logs, "relay%d-%s.log" % (r, tag)) for r in range(2)]
        for f in logfile:                 # this run's lines only
            if os.path.exists(f):
                os.unlink(f)
        for r, (side, b) in enumerate(zip("ab", brokers)):
            procs.append(subprocess.Popen(
                link.run_in(side) + [sys.executable, "-m", "wsync.relay", "--model", "bench",
                                     "--endpoint", b.sock, "--master-addr", link.addr["a"],
                                     "--master-port", str(port), "--rank", str(r),
                                     "--world-size", "2", "--backend", "gloo", "--timeout", "120",
                                     "--log", logfile[r]] +
                (["--delta", "on", "--alternate"] if mode == "alternate" else ["--delta", mode]),
                env=dict(env, XDG_RUNTIME_DIR=b.dir), preexec_fn=pdeathsig))
        trainer = wsync.connect(brokers[0].sock, "bench-trainer")
        pub = trainer.publisher("bench", [("bytes", "u8", (nbytes,))])
        col = wsync.connect(brokers[1].sock, "bench-collector")
        sub = col.subscriber("bench")
        seen = 0
        counted = {}              # source version -> (workload, ms)
        warm = ("warm-up", lambda: synthetic(nbytes, 0.02, 5, 9))   # every slot touched once
        for name, gen in [warm] + workloads(nbytes, versions, lr):
            for i, cur in enumerate(gen()):
                with pub.begin(timeout=120) as slab:
                    slab.numpy("bytes")[:] = cur
                    v = slab.commit(i)
                end = time.monotonic() + 300
                while True:
                    if time.monotonic() > end:
                        raise RuntimeError("%s: version %d did not arrive" % (tag, v))
                    try:
                        view = sub.wait(after=seen, timeout=1.0)
                    except TimeoutError:
                        continue
                    with view:
                        now = time.time_ns()
                        seen = view.version
                        o = relay.origin(view)
                        if o.version == v:
                            if i and name != "warm-up":
                                counted[v] = (name, (now - o.published_ns) / 1e6)
                            break
            if name != "warm-up":
                out[name] = []
        col.close()
        trainer.close()
        time.sleep(0.5)            # the last "sent" line
        with open(logfile[0]) as f:
            for line in f:
                e = json.loads(line)
                if e.get("event") == "sent" and e["version"] in counted and e["ack"] == "ok":
                    name, ms = counted[e["version"]]
                    out[name].append((ms, e["mode"], e["wire_bytes"] / e["nbytes"]))
        return out
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for b in brokers:
            b.stop()


def delta_main(argv):
    p = argparse.ArgumentParser(prog="relay_bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--wsyncd", default=os.path.join(ROOT, "build", "bin", "wsyncd"))
    p.add_argument("--mib", type=int, default=64, help="model size (default 64 MiB)")
    p.add_argument("--versions", type=int, default=8,
                   help="counted versions per workload (default 8: 4 delta and 4 whole in "
                        "the alternating run)")
    p.add_argument("--lr", type=float, default=1e-5, help="Adam's learning rate (default 1e-5)")
    p.add_argument("--rates", default="1gbit,10gbit", help="links (tc rates), comma-separated")
    p.add_argument("--modes", default="alternate,auto",
                   help="relay runs per link: alternate (delta and whole in turn), auto, "
                        "on, off (default alternate,auto)")
    p.add_argument("--logs", default=None, help="keep the relays' logs in this folder")
    p.add_argument("--quick", action="store_true", help="16 MiB, 4 versions per workload")
    a = p.parse_args(argv)
    if a.quick:
        a.mib, a.versions = 16, 4
    try:
        import torch  # noqa: F401
        import torch.distributed as dist
        if not dist.is_gloo_available():
            raise ImportError("torch without gloo")
    except ImportError as e:
        print("relay bench: skipped (%s)" % e)
        return 0
    nbytes = a.mib << 20
    cpu = cpu_name()
    print("relay bench: a %d MiB model, %d versions per workload, Adam lr %g; %s, %d CPUs, "
          "load average %s" % (a.mib, a.versions, a.lr, cpu, os.cpu_count(),
                               " ".join("%.1f" % x for x in os.getloadavg())), flush=True)
    print("\ncodec on this machine (no link): encode/decode on all threads vs memcpy "
          "(numpy, one thread)")
    print("%-10s %8s %7s %10s %8s %10s %10s %9s" % ("workload", "changed", "wire", "encode_ms",
                                                     "cpu_ms", "decode_ms", "memcpy_ms",
                                                     "enc/copy"))
    for r in codec_figures(nbytes, a.versions, a.lr):
        print("%-10s %7.2f%% %6.2f%% %10.1f %8.1f %10.1f %10.1f %8.2fx" % (
            r["workload"], 100 * r["changed"], 100 * r["wire"], r["encode_ms"],
            r["encode_cpu_ms"], r["decode_ms"], r["memcpy_ms"], r["encode_ms"] / r["memcpy_ms"]))
        print(json.dumps(dict(r, table="codec", mib=a.mib, cpu=cpu)), flush=True)
    why = ShapedLink.unavailable()
    if why:
        print("\nshaped links: skipped (%s)" % why)
        return 0
    logs = a.logs or tempfile.mkdtemp(prefix="wsync-relaybench-logs-")
    os.makedirs(logs, exist_ok=True)
    try:
        for rate in a.rates.split(","):
            res = {}
            with ShapedLink(rate) as link:
                for mode in a.modes.split(","):
                    res[mode] = run_link(link, mode, nbytes, a.versions, a.lr, a.wsyncd, logs)
            print("\n%s link (tc tbf, between two network namespaces): commit on the source "
                  "to visible on the destination, medians; delta and full in turn in one run, "
                  "then auto" % rate)
            print("%-10s %7s %10s %10s %8s %10s %s" % ("workload", "wire", "delta_ms", "full_ms",
                                                       "speedup", "auto_ms", "auto chose"))
            for name in res[next(iter(res))]:
                row = {"table": "link", "link": rate, "workload": name, "mib": a.mib, "cpu": cpu}
                alt = res.get("alternate", {}).get(name, [])
                dl = [ms for ms, m, _ in alt if m == "delta"]
                fl = [ms for ms, m, _ in alt if m == "full"]
                wire = [w for _, m, w in alt if m == "delta"]
                row["delta_ms"] = round(statistics.median(dl), 2) if dl else None
                row["full_ms"] = round(statistics.median(fl), 2) if fl else None
                row["wire"] = round(statistics.median(wire), 4) if wire else None
                row["speedup"] = round(row["full_ms"] / row["delta_ms"], 2) \
                    if dl and fl else None
                auto = res.get("auto", {}).get(name, [])
                row["auto_ms"] = round(statistics.median([x[0] for x in auto]), 2) if auto else None
                row["auto_modes"] = [x[1] for x in auto]
                print("%-10s %6.2f%% %10s %10s %8s %10s %s" % (
                    name, 100 * (row["wire"] or float("nan")), row["delta_ms"], row["full_ms"],
                    "%.2fx" % row["speedup"] if row["speedup"] else "-", row["auto_ms"],
                    ",".join(row["auto_modes"])))
                print(json.dumps(row), flush=True)
    finally:
        if not a.logs:
            shutil.rmtree(logs, ignore_errors=True)
    return 0


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def _terminate(signum, frame):
    raise KeyboardInterrupt    # unwinds: the namespaces, relays and brokers are removed


def main():
    signal.signal(signal.SIGTERM, _terminate)
    if len(sys.argv) > 1 and sys.argv[1] == "--bare-peer":
        pdeathsig()
        r, w, port, n, rep, out = sys.argv[2:8]
        bare_peer(int(r), int(w), int(port), int(n), int(rep), out)
        return 0
    if "--loopback" in sys.argv[1:]:
        return loopback_main([x for x in sys.argv[1:] if x != "--loopback"])
    return delta_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
