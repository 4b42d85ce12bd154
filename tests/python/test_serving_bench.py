"""The serving benchmark's GPU ways (tools/bench/serving_bench.py,
docs/BENCHMARKS.md "Serving during updates"): where they cannot run, each
is skipped with the reason, found before any collector process starts;
where torch has CUDA and the broker serves GPU 0, they run and no pass of
LivePolicy or load_into reads two versions.

gpu_why's steps after torch (the CUDA driver's GPU 0, the broker's) run in
a child process against the tests' fake CUDA driver, with a stand-in for a
torch that has CUDA: the fake reads its settings at a process's first
cuInit, and Debian's torch has none.
"""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, running_broker

import gpu_procs

SCRIPT = os.path.join(ROOT, "tools", "bench", "serving_bench.py")
GPU_WAYS = ("live_gpu", "load_into_gpu", "reference_gpu")
FAKE = os.environ.get("WSYNC_FAKECUDA") or os.path.join(
    ROOT, os.environ.get("BUILD") or "build", "tests", "fakecuda", "libcuda.so.1")


def rows(out):
    return {r["row"]: r for r in (json.loads(line) for line in out.splitlines()
                                  if line.startswith("{"))}


def test_gpu_ways(broker):
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, SCRIPT, "--endpoint", broker.sock, "--quick",
                          "--seconds", "1", "--gpu-collectors", "2",
                          "--only", ",".join(GPU_WAYS)],
                         capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t0
    assert out.returncode == 0, out.stdout + out.stderr
    got = rows(out.stdout)
    assert got["serving_setup"]["gpu_collectors"] == 2
    # every way has its row: the host ways say they were not asked for
    for way in ("live", "load_into", "broadcast", "pause", "torn", "reference",
                "live_paced", "reference_paced"):
        assert got["serving_" + way]["skipped"].startswith("not asked for"), got
    if not gpu_procs.torch_has_cuda():
        assert got["serving_setup"]["gpu"] is None
        for way in GPU_WAYS:
            why = got["serving_" + way].get("skipped")
            assert why and "has no CUDA" in why and "CUDA build of torch" in why, got
        # found without starting a collector: no 1 s phase ran (the torch
        # import is most of it)
        assert took < 60, took
        assert "Traceback" not in out.stderr, out.stderr
        return
    for way in GPU_WAYS:
        r = got["serving_" + way]
        if r.get("skipped"):           # a torch with CUDA on a machine without a GPU
            assert r["skipped"].startswith(("no GPU", "the broker serves no GPU")), r
            continue
        assert r["passes"] > 0 and r["pps_base"] > 0 and r["updates"] > 0, r
        assert r["mixed"] == 0, r


_WHY = """
import json, sys
sys.path.insert(0, %r)
import serving_bench, wsync

class _Cuda:
    @staticmethod
    def is_available():
        return True

class _Torch:          # a torch with CUDA, as far as gpu_why asks
    __version__ = "0+stand-in"
    cuda = _Cuda

print(json.dumps(serving_bench.gpu_why(_Torch, wsync, sys.argv[1])))
""" % os.path.join(ROOT, "tools", "bench")


def gpu_why(sock, **env):
    e = dict(os.environ, FAKECUDA_DEVICES="1")
    e.pop("CUDA_VISIBLE_DEVICES", None)
    e.update(env)
    out = subprocess.run([sys.executable, "-c", _WHY, sock], env=e, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.fixture
def fake(monkeypatch):
    if not os.path.exists(FAKE):
        pytest.skip("no fake CUDA driver at %s: libwsync was built without the CUDA "
                    "Toolkit's cuda.h" % FAKE)
    monkeypatch.setenv("WSYNC_LIBCUDA", FAKE)
    monkeypatch.setenv("FAKECUDA_DEVICES", "1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("FAKECUDA_FAIL", raising=False)
    monkeypatch.delenv("FAKECUDA_DIE", raising=False)
    return FAKE


def test_gpu_why_no_driver(broker):
    why = gpu_why(broker.sock, WSYNC_LIBCUDA=os.path.join(broker.dir, "no-libcuda.so"))
    assert why.startswith("no GPU 0 for libwsync: "), why


def test_gpu_why_broker_without_gpus(fake, monkeypatch):
    gen = running_broker(monkeypatch, ["--gpus", "none"])
    b = next(gen)
    try:
        why = gpu_why(b.sock)
    finally:
        gen.close()
    assert why.startswith("the broker serves no GPU 0: "), why


def test_gpu_why_fake_gpu(fake, monkeypatch):
    gen = running_broker(monkeypatch)
    b = next(gen)
    try:
        # every step passed (the probe model opened on GPU 0 and deleted),
        # but a fake runs no torch
        why = gpu_why(b.sock)
        import wsync
        with wsync.connect(b.sock) as c:
            assert [m.name for m in c.models()] == []
    finally:
        gen.close()
    assert why == "no GPU: the driver is the tests' fake (WSYNC_LIBCUDA)", why
