#!/usr/bin/env python3
"""relay_bench.py: wsync-relay against a bare gloo broadcast of the same
bytes, in the same run, on this machine (loopback).

Relay: private brokers (their own instance names) stand in for a source
node and N destination nodes; one `python3 -m wsync.relay` per broker
(gloo, 127.0.0.1). The trainer (this process) commits a version of a model
of 64 float32 tensors into the source broker; one collector thread per
destination broker waits for it. The figure of a repeat is (the last
collector's CLOCK_REALTIME when it holds the version) - (the version's
commit time on the source broker): end to end, trainer to collectors.

Bare: N+1 processes in one gloo group, started at the same time as the
relay's and taking turns with them (one bare repeat before each relay
repeat, so both see the same load); after a barrier rank 0 broadcasts
one flat uint8 tensor of the same size that it already holds; the figure is
(the last receiver's CLOCK_MONOTONIC when done) - (rank 0's before it
starts). The most favourable case for a hand-made relay: no broker, no
header, no commit.

The first --warmup repeats of each (the slabs and buffers are touched for
the first time) are not counted; the figure is the median of the others.
Prints a table and one JSON line per method ({"method", "mib", "nodes",
"ms", "samples"}), then the ratio. Exits 0 unless something fails.
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
        self.name = "relaybench%d-%d" % (os.getpid(), k)
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
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo",
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


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--bare-peer":
        pdeathsig()
        r, w, port, n, rep, out = sys.argv[2:8]
        bare_peer(int(r), int(w), int(port), int(n), int(rep), out)
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    a = p.parse_args()
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


if __name__ == "__main__":
    sys.exit(main())
