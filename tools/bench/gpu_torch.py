#!/usr/bin/env python3
"""gpu_torch.py: what torch pays to use a device view without a copy,
against references taken in the same run on the same GPU (docs/BENCHMARKS.md,
"GPU rows", the torch rows of `make bench-gpu`).

A private broker (its own instance name) serves a model of 64 float32
tensors on GPU 0 (torch's cuda:0); this process publishes it there and
reads it back:

  cuda_array  acquire_gpu + the __cuda_array_interface__ of every tensor +
              release, per pair; reference: host acquire + a numpy view of
              every tensor + release, of a host model of the same layout
  state_dict  acquire_gpu + state_dict() (64 torch CUDA tensors over the
              view, no copy) + release; reference: clone() of the same 64
              tensors + synchronise, what a copy would cost
  read        torch.sum over every tensor of a held view + synchronise;
              reference: the same over torch's own copy of it (target: the
              view reads as fast as torch's own memory, <= 1.1x)

Medians of --repeats figures, each over --pairs acquire pairs (cuda_array,
state_dict) or one pass (read). Where torch has no CUDA the torch rows are
skipped with the reason; against the tests' fake driver (WSYNC_LIBCUDA set
to it) every row counts as "no GPU" unless WSYNC_BENCH_GPU_FAKE=1, which
runs the cuda_array row on it (a context made current through the fake, as
torch's would be): figures that say nothing about GPUs. Prints a table and
one JSON line per row. Exits 0 unless something fails.
"""
import argparse
import ctypes
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "libclient", "python"))

import wsync  # noqa: E402

MODEL, HOST_MODEL = "gpu.torch.bench", "gpu.torch.host"


def pdeathsig():
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


class Broker:
    """A private wsyncd in a temporary directory, stopped with SIGTERM."""

    def __init__(self, wsyncd):
        self.name = "gputorch%d" % os.getpid()
        self.dir = tempfile.mkdtemp(prefix="wsync-gputorch-")
        self.sock = os.path.join(self.dir, self.name + ".sock")
        self.log = os.path.join(self.dir, "wsyncd.log")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([wsyncd, "--name", self.name, "--socket", self.sock,
                                          "--no-keep"], stdout=log, stderr=log,
                                         env=dict(os.environ, XDG_RUNTIME_DIR=self.dir),
                                         preexec_fn=pdeathsig)
        end = time.monotonic() + 30
        while True:
            try:
                wsync.connect(self.sock, "probe").close()
                return
            except wsync.WsyncError:
                if time.monotonic() > end or self.proc.poll() is not None:
                    raise RuntimeError("wsyncd did not start: %s" % open(self.log).read())
                time.sleep(0.02)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def fake_context():
    """Against the fake driver: GPU 0's primary context current in this
    thread (torch's runtime would have made it so). None otherwise."""
    path = os.environ.get("WSYNC_LIBCUDA")
    if not path:
        return None
    lib = ctypes.CDLL(path)
    if not hasattr(lib, "fakecuda_live"):
        return None
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    for rc in (lib.cuInit(0), lib.cuDeviceGet(ctypes.byref(dev), 0),
               lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev),
               lib.cuCtxSetCurrent(ctx)):
        if rc:
            raise RuntimeError("the fake driver refused a context (%d)" % rc)
    return lib


def torch_cuda():
    """(torch, None) where torch has CUDA, else (None, why)."""
    try:
        import torch
    except ImportError as e:
        return None, "no torch (%s)" % e
    if not torch.cuda.is_available():
        return None, "torch has no CUDA here"
    return torch, None


def median_of(fn, repeats):
    return statistics.median(fn() for _ in range(repeats))


def per_pair_us(fn, pairs):
    t0 = time.perf_counter_ns()
    for _ in range(pairs):
        fn()
    return (time.perf_counter_ns() - t0) / pairs / 1000.0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wsyncd", default=os.path.join(ROOT, "build", "bin", "wsyncd"))
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--tensors", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--pairs", type=int, default=2000)
    p.add_argument("--quick", action="store_true", help="16 MiB, 2 repeats, 200 pairs")
    a = p.parse_args()
    if a.quick:
        a.mib, a.repeats, a.pairs = 16, 2, 200
    rows = []

    def row(name, value, unit, ref_name=None, ref=None, target=None, skip=None):
        rows.append({"figure": name, "value": value, "unit": unit, "ref": ref_name,
                     "ref_value": ref, "target": target, "skipped": skip})

    fake = None
    try:
        fake = fake_context()
    except OSError:
        pass
    torch, why_torch = (None, "the driver is the tests' fake") if fake else torch_cuda()
    opt_in = os.environ.get("WSYNC_BENCH_GPU_FAKE") == "1"
    try:
        wsync.gpu_uuid(0)
        why_gpu = None
    except wsync.WsyncError as e:
        why_gpu = "no GPU: %s" % (e.detail or e)
    if fake and not opt_in:
        why_gpu = "no GPU: the driver is the tests' fake (WSYNC_BENCH_GPU_FAKE=1 runs the " \
                  "cuda_array row on it)"
    names = ["cuda_array", "state_dict", "read"]
    if why_gpu:
        for n in names:
            row(n, None, None, skip=why_gpu)
        return report(rows, a)
    if torch is not None:
        torch.cuda.set_device(0)
        torch.zeros(1, device="cuda")    # torch's context, current in this thread
    n = a.tensors
    elems = max(1, a.mib * 1024 * 1024 // 4 // n)
    layout = [("t%02d" % i, "f32", (elems,)) for i in range(n)]
    broker = Broker(a.wsyncd)
    try:
        with wsync.connect(broker.sock, "gpu-torch-bench") as c:
            pub = c.publisher(MODEL, layout, slots=3, devices=[0])
            hpub = c.publisher(HOST_MODEL, layout, slots=3)
            with pub.begin_gpu(0) as slab:
                if torch is not None:
                    for name, _, _ in layout:
                        slab.torch(name).fill_(1.0)
                slab.commit(1)
            with hpub.begin() as hs:
                hs.commit(1)
            sub, hsub = c.subscriber(MODEL), c.subscriber(HOST_MODEL)

            def cai_pair():
                with sub.acquire_gpu(0) as dv:
                    for name, _, _ in layout:
                        dv.cuda_array(name).__cuda_array_interface__

            def host_pair():
                with hsub.acquire() as v:
                    for name, _, _ in layout:
                        v.numpy(name)

            cai = median_of(lambda: per_pair_us(cai_pair, a.pairs), a.repeats)
            host = median_of(lambda: per_pair_us(host_pair, a.pairs), a.repeats)
            row("cuda_array", cai, "us", "host acquire + numpy views + release", host,
                target=None if torch is not None else "fake driver")
            if torch is None:
                for nm in names[1:]:
                    row(nm, None, None, skip=why_torch)
            else:
                bench_torch(torch, sub, layout, a, row)
            sub.close()
            hsub.close()
            pub.close()
            hpub.close()
    finally:
        broker.stop()
    return report(rows, a)


def bench_torch(torch, sub, layout, a, row):
    def sd_pair():
        with sub.acquire_gpu(0) as dv:
            dv.state_dict()

    with sub.acquire_gpu(0) as dv:
        own = {k: t.clone() for k, t in dv.state_dict().items()}
    torch.cuda.synchronize()

    def clone_all():
        t0 = time.perf_counter_ns()
        for t in own.values():
            t.clone()
        torch.cuda.synchronize()
        return (time.perf_counter_ns() - t0) / 1000.0

    sd = median_of(lambda: per_pair_us(sd_pair, max(1, a.pairs // 10)), a.repeats)
    clone = median_of(clone_all, a.repeats)
    row("state_dict", sd, "us", "clone() of the same tensors + sync", clone)

    def read(tensors):
        t0 = time.perf_counter_ns()
        for t in tensors:
            t.sum()
        torch.cuda.synchronize()
        return (time.perf_counter_ns() - t0) / 1000.0

    with sub.acquire_gpu(0) as dv:
        view = list(dv.state_dict().values())
        read(view)
        r_view = median_of(lambda: read(view), a.repeats)
        dv.release(stream=torch.cuda.current_stream())
    r_own = median_of(lambda: read(list(own.values())), a.repeats)
    row("read", r_view, "us", "the same over torch's own copy", r_own, target=1.1)


def report(rows, a):
    print("gpu torch rows: %d tensors, %d MiB, medians of %d" % (a.tensors, a.mib, a.repeats))
    print("%-12s %12s %12s %8s  %s" % ("row", "value", "reference", "ratio", "reference is"))
    for r in rows:
        if r["skipped"]:
            print("%-12s skipped: %s" % (r["figure"], r["skipped"]))
            continue
        ratio = r["value"] / r["ref_value"] if r["ref_value"] else None
        tgt = r["target"]
        verdict = "" if tgt is None else (" (target: %s)" % tgt if isinstance(tgt, str) else
                                          " (target <= %.2fx: %s)" %
                                          (tgt, "met" if ratio <= tgt else "missed"))
        print("%-12s %10.1f%s %10.1f%s %7.2fx  %s%s" % (r["figure"], r["value"], r["unit"],
                                                        r["ref_value"], r["unit"], ratio,
                                                        r["ref"], verdict))
    for r in rows:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
