"""Device models from Python (docs/PYTHON.md "GPUs") against the fake CUDA
driver: 3 fake GPUs, peer access 0<->1 only (GPU 2 is filled through
pinned host memory). The broker and every client process load the fake
through WSYNC_LIBCUDA; clients run in spawned children (gpu_procs.py)
because the fake reads its settings at a process's first cuInit.

Checked: bit-exact round trips through device slabs and views on every
GPU, devices named by ordinal, "cuda:N" and UUID, the
__cuda_array_interface__ of slabs (writable; the copy's stream) and views
(read-only, no stream), copy_to_device, host mirrors, release waiting for
the stream that read the view, errors with the library's detail, no
driver, a broker without GPUs, no leaked driver object in any process,
and that the torch bench rows (tools/bench/gpu_torch.py) stay runnable.
torch CUDA tensors need a GPU: those tests skip where torch has no CUDA
(make test-gpu runs test_torch_cuda against the real driver).
"""
import errno
import os

import pytest

import wsync
from conftest import ROOT, WAIT_S, running_broker

import gpu_procs

FAKE = os.environ.get("WSYNC_FAKECUDA") or os.path.join(
    ROOT, os.environ.get("BUILD") or "build", "tests", "fakecuda", "libcuda.so.1")

ZERO = {"allocations": 0, "exports": 0, "mappings": 0, "reservations": 0, "mem_allocs": 0,
        "host_registrations": 0, "streams": 0, "events": 0, "contexts": 0}


@pytest.fixture
def fake_env(monkeypatch):
    if not os.path.exists(FAKE):
        pytest.skip("no fake CUDA driver at %s: libwsync was built without the CUDA "
                    "Toolkit's cuda.h" % FAKE)
    monkeypatch.setenv("WSYNC_LIBCUDA", FAKE)
    monkeypatch.setenv("FAKECUDA_DEVICES", "3")
    monkeypatch.setenv("FAKECUDA_PEERS", "01,10")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("FAKECUDA_FAIL", raising=False)
    monkeypatch.delenv("FAKECUDA_DIE", raising=False)


@pytest.fixture
def gpu_broker(fake_env, monkeypatch):
    """A broker serving device models on the 3 fake GPUs."""
    yield from running_broker(monkeypatch)


def test_round_trip_every_gpu(gpu_broker, children):
    model = "gpu.policy"
    steps = [1, 2, 3, 4]
    go = children.event()
    ready = [children.event() for _ in range(2)]
    cols = [children.start(gpu_procs.collector, gpu_broker.sock, model, gpu, steps[-1], r)
            for gpu, r in zip((1, 2), ready)]
    for r in ready:
        assert r.wait(WAIT_S)
    tr = children.start(gpu_procs.trainer, gpu_broker.sock, model, steps, go)
    go.set()
    facts = tr.result()
    uuids = facts["uuids"]
    # ordinal, "cuda:N" and a UUID all name the GPU the process sees
    assert facts["devices"] == uuids
    assert all(u.startswith("GPU-") and len(u) == 40 for u in uuids)
    assert len(facts["versions"]) == len(steps)
    assert facts["versions"] == sorted(facts["versions"])
    assert facts["slab_device"] == uuids[0]
    assert facts["slab_cai"] == {"version": 3, "typestr": "<f4", "shape": (64, 33),
                                 "readonly": False, "ptr_ok": True, "strides": None,
                                 "stream": None}
    # after a copy on a stream, the slab's arrays are ready on that stream
    assert facts["slab_stream"] == facts["stream"]
    assert facts["live"] == ZERO
    for gpu, c in zip((1, 2), cols):
        seen, bad, f = c.result()
        assert bad == [], "GPU %d read wrong bytes: %s" % (gpu, bad)
        assert seen[-1] == steps[-1] and seen == sorted(seen)
        assert f["device"] == uuids[gpu]
        assert f["cai"] == {"version": 3, "typestr": "<f4", "shape": (64, 33),
                            "readonly": True, "ptr_ok": True, "strides": None,
                            "stream": None}
        assert f["cai_b16"]["typestr"] == "<u2" and f["cai_b16"]["readonly"] is True
        # read_part: the bytes were checked with the rest (bad); uneven parts refused
        assert "part 0 of 4" in f["part_uneven"], f["part_uneven"]
        assert f["released_is_closed"]
        assert f["live"] == ZERO, "GPU %d: the fake still holds %s" % (gpu, f["live"])


def test_errors(gpu_broker, children):
    uuid2 = children.start(gpu_procs.gpu_uuid_of, 2).result()
    out = children.start(gpu_procs.errors, gpu_broker.sock, "gpu.errors", uuid2).result()
    assert out["version"] >= 1 and out["step"] == 5

    def is_(key, exc, err=None, *words):
        got = out[key]
        assert got is not None, "%s raised nothing" % key
        assert got[0] == exc, "%s: %s" % (key, got)
        if err is not None:
            assert got[1] == err, "%s: %s" % (key, got)
        for w in words:
            assert w in got[2], "%s: %r lacks %r" % (key, got[2], w)

    # a GPU the model is not on: the library's message names it
    is_("begin_other_gpu", "NoDeviceError", errno.ENODEV, uuid2)
    is_("acquire_other_gpu", "NoDeviceError", errno.ENODEV, uuid2)
    is_("host_view", "NoDeviceError", errno.ENODEV)
    is_("host_begin", "WsyncError", errno.EINVAL)
    is_("commit_without_begin", "WsyncError", errno.ENOENT, "begin_gpu")
    is_("wrong_dtype", "TypeError", None, "'w'", "f32")
    is_("wrong_shape", "ValueError", None, "'w'", "(33, 64)")
    is_("missing", "KeyError", None, "missing")
    is_("host_source", "TypeError", None, "__cuda_array_interface__")
    is_("wait_timeout", "WsyncTimeoutError", errno.ETIMEDOUT, "0.05 s")
    is_("bad_device", "ValueError", None, "gpu7")
    is_("no_such_ordinal", "NoDeviceError", errno.ENODEV, "7")
    is_("mirror_without_devices", "ValueError", None, "host_mirror")
    is_("too_many_devices", "ValueError", None, "twice")
    is_("copy_too_long", "WsyncError", errno.EINVAL)
    is_("after_release", "ClosedError", None, "released")
    assert out["ordinal_of_uuid2"] == 2
    if not gpu_procs.torch_has_cuda():      # else test_torch_cuda covers them
        for key in ("torch_tensor", "torch_state_dict", "load_into"):
            is_(key, "NoCudaError", errno.ENOSYS, "torch", "CUDA")
    assert out["live"] == ZERO


def test_host_mirror(gpu_broker, children):
    out = children.start(gpu_procs.mirror, gpu_broker.sock, "gpu.mirrored").result()
    assert out["host_mirror"] is True and out["version"] >= 1
    assert out["host_ok"], "the host mirror differs from the device version"
    assert out["copy_ok"], "View.copy_to_device copied wrong bytes"
    assert out["live"] == ZERO


@pytest.mark.parametrize("explicit", [True, False], ids=["stream", "copy-stream"])
def test_release_synchronises_stream(gpu_broker, children, explicit):
    out = children.start(gpu_procs.release_waits, gpu_broker.sock, "gpu.release",
                         explicit).result()
    assert not out["returned_while_held"], "release returned before its stream ran"
    assert out["returned"] and out["copy_ok"]
    assert out["live"] == ZERO


def test_abort_waits_for_copies(gpu_broker, children):
    out = children.start(gpu_procs.abort_waits, gpu_broker.sock, "gpu.abort").result()
    assert not out["returned_while_held"], "abort returned before copy_from's copy ran"
    assert out["returned"]
    assert out["latest"] == (out["version"], 1, True)
    assert out["live"] == ZERO


def test_no_driver_and_broker_without_gpus(fake_env, monkeypatch, children):
    uuid0 = children.start(gpu_procs.gpu_uuid_of, 0).result()
    gen = running_broker(monkeypatch, ["--gpus", "none"])
    b = next(gen)
    try:
        out = children.start(gpu_procs.no_driver, b.sock, uuid0).result()
    finally:
        gen.close()
    for key in ("gpu_uuid", "gpu_ordinal"):
        assert out[key] is not None and out[key][0] == "NoCudaError", out
        assert out[key][1] == errno.ENOENT and "no CUDA driver" in out[key][2], out
    assert out["open"] is not None and out["open"][0] == "NoDeviceError", out
    assert out["open"][1] == errno.ENODEV and "gpu" in out["open"][2].lower(), out


def test_device_names_without_driver():
    # UUIDs are taken as they are (spelling normalised), no driver needed
    u = "8E1F0C4A-1234-5678-9abc-DEF012345678"
    assert wsync.gpu_uuid(u) == "GPU-" + u.lower()
    assert wsync.gpu_uuid("gpu-" + u) == "GPU-" + u.lower()
    for bad in ("cuda:x", "GPU-123", "", "cpu", 1.0, None, True):
        with pytest.raises((TypeError, ValueError)):
            wsync.gpu_uuid(bad)


@pytest.mark.skipif(not gpu_procs.torch_has_cuda(), reason="torch has no CUDA here")
def test_torch_cuda(broker):
    """On a real GPU (the broker and this process use the real driver):
    torch CUDA tensors in and out without a copy, load_into a CUDA module."""
    import torch
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Linear(8, 4)).cuda()
    copy = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Linear(8, 4)).cuda()
    with wsync.connect(broker.sock) as c:
        pub = c.publisher_like("gpu.torch", net.state_dict(), devices=["cuda:0"])
        v = pub.publish_gpu(net, 7)
        sub = c.subscriber("gpu.torch")
        with sub.acquire_gpu(torch.device("cuda", 0)) as dv:
            assert dv.version == v and dv.step == 7
            sd = dv.state_dict()
            for k, t in net.state_dict().items():
                assert sd[k].is_cuda and torch.equal(sd[k], t)
                assert sd[k].data_ptr() == dv.cuda_array(k).ptr     # no copy
            with pytest.raises(wsync.ReadOnlyError):
                sd["0.weight"].add_(1)
            dv.load_into(copy)
        for a, b in zip(net.parameters(), copy.parameters()):
            assert torch.equal(a, b)
        with pub.begin_gpu("cuda:0") as slab:
            slab.torch("0.bias").fill_(3.0)
            for k, t in net.state_dict().items():
                if k != "0.bias":
                    slab.torch(k).copy_(t)
            v2 = slab.commit(8, stream=torch.cuda.current_stream())
        with sub.wait_gpu(0, after=v, timeout=WAIT_S) as dv:
            assert dv.version == v2
            assert torch.equal(dv.torch("0.bias"), torch.full((8,), 3.0, device="cuda"))


def test_bench_torch_rows_stay_runnable(fake_env, monkeypatch):
    """tools/bench/gpu_torch.py (make bench-gpu) against the fake: the
    cuda_array row runs (WSYNC_BENCH_GPU_FAKE=1), the torch rows say why
    they cannot, and without the opt-in every row says the fake is no GPU."""
    import json
    import subprocess
    import sys
    script = os.path.join(ROOT, "tools", "bench", "gpu_torch.py")
    wsyncd = os.environ.get("WSYNC_WSYNCD") or os.path.join(
        ROOT, os.environ.get("BUILD") or "build", "bin", "wsyncd")

    def rows(opt_in):
        env = dict(os.environ, WSYNC_BENCH_GPU_FAKE="1" if opt_in else "0")
        out = subprocess.run([sys.executable, script, "--quick", "--pairs", "50",
                              "--wsyncd", wsyncd], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        return {r["figure"]: r for r in (json.loads(line) for line in out.stdout.splitlines()
                                          if line.startswith("{"))}

    got = rows(True)
    assert got["cuda_array"]["skipped"] is None and got["cuda_array"]["value"] > 0
    assert got["cuda_array"]["ref_value"] > 0
    for name in ("state_dict", "read"):
        assert "fake" in got[name]["skipped"], got[name]
    got = rows(False)
    for name in ("cuda_array", "state_dict", "read"):
        assert "the driver is the tests' fake" in got[name]["skipped"], got[name]
