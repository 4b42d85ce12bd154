"""Code that runs in child processes of the Python tests (multiprocessing,
spawn context), and the test data both sides compute.

Each child function connects on its own (a client is never shared across
processes), returns plain data for the parent to assert on, and raises on
anything unexpected (the parent then fails with the child's traceback).
"""
import os
import sys
import traceback

_HERE = os.path.dirname(os.path.abspath(__file__))
_PKG = os.path.join(_HERE, "..", "..", "libclient", "python")
if os.path.abspath(_PKG) not in [os.path.abspath(p) for p in sys.path]:
    sys.path.insert(0, os.path.abspath(_PKG))

import numpy as np  # noqa: E402

import wsync  # noqa: E402

WAIT_S = 15.0


def child_main(conn, fn, args):
    try:
        res = fn(*args)
        conn.send(("ok", res))
    except BaseException:
        conn.send(("err", traceback.format_exc()))
    finally:
        conn.close()


# ---- test data ------------------------------------------------------------------


def numpy_weights(step):
    """A model of every numpy-representable dtype, a scalar and an empty
    tensor; its contents depend on step."""
    rng = np.random.default_rng(step)
    return {
        "fc.weight": rng.standard_normal((64, 33), dtype=np.float32),
        "fc.bias": np.full(64, step, dtype=np.float32),
        "embed": rng.integers(-2**40, 2**40, (10, 3), dtype=np.int64),
        "mask": rng.integers(0, 2, 7).astype(np.bool_),
        "raw": rng.integers(0, 256, 1000, dtype=np.uint8),
        "scale": np.array(step * 0.5, dtype=np.float64),
        "half": rng.standard_normal((5, 4)).astype(np.float16),
        "small": rng.integers(-100, 100, (3, 3), dtype=np.int8),
        "short": rng.integers(-30000, 30000, 6, dtype=np.int16),
        "empty": np.zeros((0, 4), dtype=np.int32),
    }


def torch_weights(step):
    import torch
    g = torch.Generator().manual_seed(step)
    return {
        "w": torch.randn(16, 8, generator=g),
        "b16": torch.randn(32, generator=g).to(torch.bfloat16),
        "h": torch.randn(4, 4, generator=g).to(torch.float16),
        "idx": torch.randint(-1000, 1000, (9,), generator=g, dtype=torch.int32),
        "flag": torch.randint(0, 2, (3,), generator=g).to(torch.bool),
        "d": torch.full((2, 2), float(step), dtype=torch.float64),
    }


def mapping_of(addr):
    """(permissions, path) of the mapping of this process holding addr."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= addr < hi:
                return parts[1], parts[5].strip() if len(parts) > 5 else ""
    return None, None


# ---- child functions ---------------------------------------------------------------


def collect_numpy(sock, model):
    """Waits for a version, checks it against numpy_weights(step), tries to
    write through it; reports what it saw."""
    with wsync.connect(sock, "collector-np") as c:
        sub = c.subscriber(model)
        with sub.wait(0, timeout=WAIT_S) as v:
            exp = numpy_weights(v.step)
            sd = v.state_dict()
            res = {"version": v.version, "step": v.step, "names": v.tensors,
                   "equal": {k: (a.dtype == exp[k].dtype and a.shape == exp[k].shape and
                                 bool(np.array_equal(a, exp[k]))) for k, a in sd.items()},
                   "writeable": {k: bool(a.flags.writeable) for k, a in sd.items()}}
            w = v.numpy("fc.weight")
            try:
                w[0, 0] = 42.0
                res["write"] = "no error"
            except ValueError:
                res["write"] = "ValueError"
            try:
                w.flags.writeable = True
                res["set_writeable"] = "no error"
            except ValueError:
                res["set_writeable"] = "ValueError"
            addr = w.__array_interface__["data"][0]
            spec = [s for s in v.layout if s.name == "fc.weight"][0]
            res["addr_in_slab"] = v._c.base + spec.offset == addr
            res["mapping"] = mapping_of(addr)
            with sub.acquire() as again:
                res["same_version"] = again.version == v.version
                res["same_addr"] = again.numpy("fc.weight").__array_interface__["data"][0] == addr
            res["still_equal"] = bool(np.array_equal(w, exp["fc.weight"]))
        return res


def collect_torch(sock, model):
    import torch
    with wsync.connect(sock, "collector-torch") as c:
        sub = c.subscriber(model)
        with sub.wait(0, timeout=WAIT_S) as v:
            exp = torch_weights(v.step)
            sd = v.state_dict("torch")
            res = {"version": v.version, "step": v.step, "dtypes": {}, "equal": {},
                   "zero_copy": {}}
            for k, t in sd.items():
                res["dtypes"][k] = str(t.dtype)
                res["equal"][k] = t.dtype == exp[k].dtype and bool(torch.equal(t, exp[k]))
                res["zero_copy"][k] = t.data_ptr() == v.numpy(k).__array_interface__["data"][0]
            res["bf16_bits"] = bool(np.array_equal(
                v.numpy("b16"), exp["b16"].view(torch.int16).numpy().view(np.uint16)))
            model_out = torch.nn.functional.linear(torch.ones(1, 8), sd["w"])
            res["linear_ok"] = bool(torch.allclose(model_out, exp["w"].sum(1).unsqueeze(0)))
            del sd, t
        return res


def wait_first(sock, model, subscribed):
    """Subscribes before the model exists, says so, then waits for a version."""
    with wsync.connect(sock, "early-collector") as c:
        sub = c.subscriber(model)
        try:
            sub.acquire()
            nodata = False
        except wsync.NoDataError:
            nodata = True
        subscribed.set()
        with sub.wait(0, timeout=WAIT_S) as v:
            exp = numpy_weights(v.step)
            ok = all(np.array_equal(v.numpy(k), exp[k]) for k in exp)
            return {"nodata_first": nodata, "version": v.version, "step": v.step, "ok": ok}


def hold_two(sock, model, client_name, held1, held2, release):
    """Holds the first version, then the second, until told to release;
    checks both stayed intact meanwhile."""
    with wsync.connect(sock, client_name) as c:
        sub = c.subscriber(model)
        v1 = sub.wait(0, timeout=WAIT_S)
        held1.set()
        v2 = sub.wait(v1, timeout=WAIT_S)
        held2.set()
        if not release.wait(WAIT_S):
            raise RuntimeError("no release signal")
        ok = all(np.array_equal(v.numpy(k), numpy_weights(v.step)[k])
                 for v in (v1, v2) for k in v.tensors)
        versions = (v1.version, v2.version)
        v1.release()
        v2.release()
        return {"versions": versions, "intact": ok}


def publish(sock, model, steps, slots=0):
    """Publishes numpy_weights(step) for each step; returns the versions."""
    with wsync.connect(sock, "trainer-np") as c:
        w = numpy_weights(0)
        pub = c.publisher_like(model, w, slots=slots)
        out = []
        for step in steps:
            with pub.begin(timeout=WAIT_S) as slab:
                slab.copy_from(numpy_weights(step))
                out.append(slab.commit(step))
        pub.close()
        return out


def hold_module(sock, model, held):
    """Loads the first version into a module and keeps holding its view
    (and a tensor of it) until killed."""
    import time
    import torch
    with wsync.connect(sock, "holder") as c:
        view = c.subscriber(model).wait(0, timeout=WAIT_S)
        net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8),
                                  torch.nn.ReLU(), torch.nn.Linear(8, 3))
        view.load_into(net)
        t = view.torch("0.weight")
        held.set()
        while True:
            time.sleep(1)
            t.sum()
