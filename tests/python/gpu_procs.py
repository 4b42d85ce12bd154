"""Child processes of test_gpu.py: device models against the fake CUDA
driver (tests/fakecuda, loaded by libwsync through $WSYNC_LIBCUDA).

The fake reads its FAKECUDA_* settings at a process's first cuInit, so every
client runs in a spawned child that inherits them. Each child makes a
context current on its GPU, as torch's CUDA runtime would, and moves bytes
in and out of device memory with the fake's cuMemcpyHtoD_v2/cuMemcpyDtoH_v2
(its device pointers are addresses of the process, but the tests go
through the driver as they would on a GPU). Every child ends by closing its
client and context and returns the fake's live counts, which must be zero.
"""
import ctypes
import gc
import os
import threading

import numpy as np

import wsync_procs  # noqa: F401  (puts the package on sys.path)
import wsync

WAIT_S = 15.0

# The test model: every dtype a GPU model ships in here, bf16 as raw bits,
# a scalar and an empty tensor.
LAYOUT = [
    ("w", "f32", (64, 33)),
    ("b16", "bf16", (40,)),
    ("ids", "i64", (10, 3)),
    ("half", "f16", (5, 4)),
    ("mask", "bool", (7,)),
    ("raw", "u8", (1000,)),
    ("scale", "f64", ()),
    ("empty", "i32", (0, 4)),
]


def weights(step):
    """{name: numpy array} of LAYOUT for step, every bit depending on it."""
    rng = np.random.default_rng(1000 + step)
    out = {}
    for name, dtype, shape in LAYOUT:
        nd = wsync._dtypes.NUMPY[wsync.DTYPES[dtype]]
        nbytes = int(np.prod(shape, dtype=np.int64)) * nd.itemsize
        raw = rng.integers(0, 256, nbytes, dtype=np.uint8)
        if dtype == "bool":
            raw &= 1
        out[name] = raw.view(nd).reshape(shape)
    return out


class Fake:
    """The fake driver of this process, through ctypes, with a context
    current on GPU ordinal."""

    def __init__(self, ordinal):
        self.lib = ctypes.CDLL(os.environ["WSYNC_LIBCUDA"])
        c = self.lib
        for fn in ("cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemAlloc_v2", "cuMemFree_v2"):
            getattr(c, fn).restype = ctypes.c_int
        self.ok(c.cuInit(0), "cuInit")
        self.dev = ctypes.c_int()
        self.ok(c.cuDeviceGet(ctypes.byref(self.dev), ordinal), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        self.ok(c.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), self.dev), "ctx retain")
        self.ok(c.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        self.allocs = []

    @staticmethod
    def ok(r, what):
        if r != 0:
            raise RuntimeError("fake driver: %s failed with CUresult %d" % (what, r))

    def alloc(self, nbytes):
        p = ctypes.c_uint64()
        self.ok(self.lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(max(nbytes, 1))),
                "cuMemAlloc_v2")
        self.allocs.append(p.value)
        return p.value

    def free_all(self):
        for p in self.allocs:
            self.ok(self.lib.cuMemFree_v2(ctypes.c_uint64(p)), "cuMemFree_v2")
        self.allocs = []

    def htod(self, dptr, arr):
        arr = np.ascontiguousarray(arr)
        if arr.nbytes:
            self.ok(self.lib.cuMemcpyHtoD_v2(ctypes.c_uint64(dptr), arr.ctypes.data_as(
                ctypes.c_void_p), ctypes.c_size_t(arr.nbytes)), "cuMemcpyHtoD_v2")

    def dtoh(self, dptr, nbytes):
        out = np.empty(nbytes, dtype=np.uint8)
        if nbytes:
            self.ok(self.lib.cuMemcpyDtoH_v2(out.ctypes.data_as(ctypes.c_void_p),
                                             ctypes.c_uint64(dptr), ctypes.c_size_t(nbytes)),
                    "cuMemcpyDtoH_v2")
        return out

    def stream(self):
        s = ctypes.c_void_p()
        self.ok(self.lib.cuStreamCreate(ctypes.byref(s), 1), "cuStreamCreate")
        return s.value

    def stream_destroy(self, s):
        self.ok(self.lib.cuStreamDestroy_v2(ctypes.c_void_p(s)), "cuStreamDestroy_v2")

    def hold(self, on):
        self.lib.fakecuda_hold_streams(ctypes.c_bool(on))

    def down(self):
        """Frees this process's buffers and context; returns the fake's
        live counts (all zero when nothing leaked)."""
        gc.collect()
        self.free_all()
        self.lib.cuCtxSetCurrent(None)
        self.ok(self.lib.cuDevicePrimaryCtxRelease_v2(self.dev), "ctx release")

        class Live(ctypes.Structure):
            _fields_ = [(n, ctypes.c_uint64) for n in (
                "allocations", "exports", "mappings", "reservations", "mem_allocs",
                "host_registrations", "streams", "events", "contexts")]
        live = Live()
        self.lib.fakecuda_live(ctypes.byref(live))
        return {n: getattr(live, n) for n, _ in Live._fields_}


class DeviceBuf:
    """A device buffer of the fake holding one tensor, offered through
    __cuda_array_interface__ (what a CuPy array or torch CUDA tensor
    offers)."""

    def __init__(self, fake, arr):
        self.ptr = fake.alloc(arr.nbytes)
        fake.htod(self.ptr, arr)
        self.__cuda_array_interface__ = {"version": 3, "shape": arr.shape,
                                         "typestr": arr.dtype.str, "data": (self.ptr, False),
                                         "strides": None, "stream": None}


def _cai_facts(arr):
    cai = arr.__cuda_array_interface__
    return {"version": cai["version"], "typestr": cai["typestr"], "shape": cai["shape"],
            "readonly": cai["data"][1], "ptr_ok": cai["data"][0] == arr.ptr,
            "strides": cai["strides"], "stream": cai["stream"]}


def _read_tensors(fake, view):
    """{name: bytes} of every tensor of a device slab or view, read back
    through the driver from its __cuda_array_interface__ pointer."""
    out = {}
    for name in view.tensors:
        a = view.cuda_array(name)
        out[name] = fake.dtoh(a.__cuda_array_interface__["data"][0], a.nbytes).tobytes()
    return out


def _expect(step):
    return {k: v.tobytes() for k, v in weights(step).items()}


# ---- children ----------------------------------------------------------------


def trainer(sock, model, steps, go):
    """Publishes steps on GPU 0 of a model on GPUs 0, 1, 2 (named three
    ways): publish_gpu from __cuda_array_interface__ sources, and, for the
    last step, begin_gpu + the slab's own device pointers + commit_gpu on a
    stream. Returns what it saw."""
    fake = Fake(0)
    facts = {}
    with wsync.connect(sock, "gpu-trainer") as c:
        uuid2 = wsync.gpu_uuid(2)
        pub = c.publisher(model, LAYOUT, slots=3, devices=["cuda:0", 1, uuid2])
        facts["devices"] = list(pub.devices)
        facts["uuids"] = [wsync.gpu_uuid(i) for i in range(3)]
        go.wait(WAIT_S)
        versions = []
        for step in steps[:-1]:
            src = {k: DeviceBuf(fake, v) for k, v in weights(step).items()}
            versions.append(pub.publish_gpu(src, step, device="cuda:0"))
        st = fake.stream()
        with pub.begin_gpu(0) as slab:
            facts["slab_cai"] = _cai_facts(slab.cuda_array("w"))
            facts["slab_device"] = slab.device
            for k, v in weights(steps[-1]).items():
                fake.htod(slab.cuda_array(k).ptr, v)
            versions.append(pub.commit_gpu(steps[-1], stream=st))
        # a copy on a stream: the slab's arrays say which stream to wait on
        with pub.begin_gpu("cuda:0") as slab:
            src = {k: DeviceBuf(fake, v) for k, v in weights(0).items()}
            slab.copy_from(src, stream=st)
            facts["slab_stream"] = slab.cuda_array("w").__cuda_array_interface__["stream"]
            facts["stream"] = st
            slab.abort()
        facts["versions"] = versions
        pub.close()
        del slab, src
    fake.stream_destroy(st)
    facts["live"] = fake.down()
    return facts


def collector(sock, model, gpu, last_step, ready):
    """Waits on GPU gpu for every version up to last_step; each one is read
    back through the driver and compared bit-exact; checks the read-only
    __cuda_array_interface__ and copy_to_device. Returns the steps seen."""
    fake = Fake(gpu)
    seen, bad, facts = [], [], {}
    with wsync.connect(sock, "gpu-collector") as c:
        sub = c.subscriber(model)
        ready.set()
        after = 0
        while not seen or seen[-1] < last_step:
            with sub.wait_gpu("cuda:%d" % gpu, after=after, timeout=WAIT_S) as dv:
                if _read_tensors(fake, dv) != _expect(dv.step):
                    bad.append(dv.step)
                seen.append(dv.step)
                after = dv.version
                facts["cai"] = _cai_facts(dv.cuda_array("w"))
                facts["cai_b16"] = _cai_facts(dv.cuda_array("b16"))
                facts["device"] = dv.device
                # the whole version, copied into our own buffer; the
                # release at the end of the block waits for the copy
                dst = fake.alloc(dv.nbytes)
                dv.copy_to_device(dst)
                # a tensor-parallel part: columns 11..21 of w (64 x 33)
                pdst = fake.alloc(64 * 11 * 4)
                pn = dv.read_part("w", 1, 3, 1, pdst)
                try:
                    dv.read_part("w", 0, 4, 1, pdst)       # 4 does not divide 33
                    facts["part_uneven"] = "accepted"
                except ValueError as e:
                    facts["part_uneven"] = str(e)
                pstep = dv.step
            whole = fake.dtoh(dst, dv.nbytes)
            part = fake.dtoh(pdst, pn)
            if part.tobytes() != np.ascontiguousarray(weights(pstep)["w"][:, 11:22]).tobytes():
                bad.append(("part", pstep))
            for s in dv.layout:
                if whole[s.offset:s.offset + s.nbytes].tobytes() != _expect(dv.step)[s.name]:
                    bad.append(("copy", dv.step, s.name))
        facts["released_is_closed"] = _closed_after_release(sub, gpu)
        sub.close()
        del dv
    facts["live"] = fake.down()
    return seen, bad, facts


def _closed_after_release(sub, gpu):
    dv = sub.acquire_gpu(gpu)
    arr = dv.cuda_array("w")
    dv.release()
    try:
        arr.__cuda_array_interface__
    except wsync.ClosedError:
        return True
    return False


def torch_has_cuda():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def gpu_uuid_of(ordinal):
    """wsync.gpu_uuid(ordinal) in a process that loads the fake."""
    return wsync.gpu_uuid(ordinal)


def errors(sock, model, uuid2):
    """Misuse of a model on GPUs 0 and 1 only, and what each raises."""
    fake = Fake(0)
    out = {}

    def catch(key, fn):
        try:
            fn()
            out[key] = None
        except Exception as e:          # the test asserts on the type and message
            out[key] = (type(e).__name__, getattr(e, "errno", None), str(e))

    with wsync.connect(sock, "gpu-errors") as c:
        pub = c.publisher(model, LAYOUT, devices=[0, "cuda:1"])
        src = {k: DeviceBuf(fake, v) for k, v in weights(5).items()}
        v = pub.publish_gpu(src, 5)
        out["version"] = v
        catch("begin_other_gpu", lambda: pub.begin_gpu(2))
        catch("host_begin", lambda: pub.begin())
        catch("commit_without_begin", lambda: pub.commit_gpu(1))
        bad = dict(src, w=DeviceBuf(fake, np.zeros((64, 33), np.float64)))
        catch("wrong_dtype", lambda: pub.publish_gpu(bad, 6))
        bad = dict(src, w=DeviceBuf(fake, np.zeros((33, 64), np.float32)))
        catch("wrong_shape", lambda: pub.publish_gpu(bad, 6))
        catch("missing", lambda: pub.publish_gpu({"w": src["w"]}, 6))
        catch("host_source", lambda: pub.publish_gpu(weights(6), 6))
        sub = c.subscriber(model)
        catch("acquire_other_gpu", lambda: sub.acquire_gpu(uuid2))
        catch("host_view", lambda: sub.acquire())
        catch("wait_timeout", lambda: sub.wait_gpu(0, after=v, timeout=0.05))
        catch("bad_device", lambda: sub.acquire_gpu("gpu7"))
        catch("no_such_ordinal", lambda: wsync.gpu_uuid(7))
        catch("mirror_without_devices",
              lambda: c.publisher(model + ".m", LAYOUT, host_mirror=True))
        catch("too_many_devices", lambda: c.publisher(model + ".n", LAYOUT,
                                                      devices=[0, 0]))
        out["ordinal_of_uuid2"] = wsync.gpu_ordinal(uuid2)
        with sub.acquire_gpu(0) as dv:
            out["step"] = dv.step
            catch("torch_tensor", lambda: dv.torch("w"))
            catch("torch_state_dict", lambda: dv.state_dict())
            catch("load_into", lambda: dv.load_into({}))
            catch("copy_too_long", lambda: dv.copy_to_device(fake.alloc(16), nbytes=dv.nbytes
                                                             + 1))
        catch("after_release", lambda: dv.cuda_array("w"))
        pub.close()
        sub.close()
        dv = None
    out["live"] = fake.down()
    return out


def mirror(sock, model):
    """A host-mirrored model: host views of the device versions, and a
    host view copied into device memory (View.copy_to_device)."""
    fake = Fake(1)
    out = {}
    with wsync.connect(sock, "gpu-mirror") as c:
        pub = c.publisher(model, LAYOUT, devices=["cuda:0", "cuda:1"], host_mirror=True)
        out["host_mirror"] = pub.host_mirror
        src = {k: DeviceBuf(fake, v) for k, v in weights(9).items()}
        out["version"] = pub.publish_gpu(src, 9, device=1)
        sub = c.subscriber(model)
        with sub.acquire() as v:
            out["host_ok"] = all(v.numpy(k).tobytes() == b for k, b in _expect(9).items())
            dst = fake.alloc(v.nbytes)
            v.copy_to_device(dst)
            whole = fake.dtoh(dst, v.nbytes)
            out["copy_ok"] = all(whole[s.offset:s.offset + s.nbytes].tobytes() ==
                                 _expect(9)[s.name] for s in v.layout)
        pub.close()
        sub.close()
    out["live"] = fake.down()
    return out


def _while_held(fake, call):
    """Runs call in a thread while the fake's streams are held, then lets
    them go. A call that synchronises a stream cannot return while it is
    held; one that does not returns at once. Says which happened."""
    done = threading.Event()

    def run():
        fake.lib.cuCtxSetCurrent(fake.ctx)     # as torch makes one per thread
        call()
        done.set()
    t = threading.Thread(target=run)
    t.start()
    held = done.wait(0.5)
    fake.hold(False)
    t.join(WAIT_S)
    return {"returned_while_held": held, "returned": done.is_set()}


def release_waits(sock, model, explicit):
    """With the fake's streams held, a device view copied out on a stream:
    release (with that stream, or without one: the copy's) must not return
    before the copy ran. Returns whether it waited and the copied bytes were
    right."""
    fake = Fake(1)
    out = {}
    with wsync.connect(sock, "gpu-release") as c:
        pub = c.publisher(model, LAYOUT, devices=[0, 1])
        pub.publish_gpu({k: DeviceBuf(fake, v) for k, v in weights(3).items()}, 3, device=1)
        sub = c.subscriber(model)
        st = fake.stream()
        dv = sub.acquire_gpu(1)
        dst = fake.alloc(dv.nbytes)
        fake.hold(True)
        dv.copy_to_device(dst, stream=st)
        out.update(_while_held(fake, lambda: dv.release(stream=st) if explicit
                               else dv.release()))
        whole = fake.dtoh(dst, dv.nbytes)
        out["copy_ok"] = all(whole[s.offset:s.offset + s.nbytes].tobytes() ==
                             _expect(3)[s.name] for s in dv.layout)
        pub.close()
        sub.close()
        dv = None
    fake.stream_destroy(st)
    out["live"] = fake.down()
    return out


def abort_waits(sock, model):
    """With the fake's streams held, a device slab filled by copy_from on a
    stream, then aborted: abort must wait for the copy (the slot goes back
    and may be unmapped) and leave the latest version as it was."""
    fake = Fake(0)
    out = {}
    with wsync.connect(sock, "gpu-abort") as c:
        pub = c.publisher(model, LAYOUT, devices=[0, 1])
        out["version"] = pub.publish_gpu({k: DeviceBuf(fake, v) for k, v in
                                          weights(1).items()}, 1)
        st = fake.stream()
        slab = pub.begin_gpu(0)
        fake.hold(True)
        slab.copy_from({k: DeviceBuf(fake, v) for k, v in weights(2).items()}, stream=st)
        out.update(_while_held(fake, slab.abort))
        sub = c.subscriber(model)
        with sub.acquire_gpu(1) as dv:
            out["latest"] = (dv.version, dv.step, _read_tensors(fake, dv) == _expect(1))
        pub.close()
        sub.close()
        del slab, dv
    fake.stream_destroy(st)
    out["live"] = fake.down()
    return out


def no_driver(sock, uuid0):
    """Without a CUDA driver: the GPU calls say so (NoCudaError); a device
    model named by UUID on a broker without GPUs is refused
    (NoDeviceError)."""
    os.environ["WSYNC_LIBCUDA"] = "/nonexistent/libcuda.so.1"   # read at first load
    out = {}
    for key, fn in (("gpu_uuid", lambda: wsync.gpu_uuid(0)),
                    ("gpu_ordinal", lambda: wsync.gpu_ordinal(uuid0))):
        try:
            fn()
            out[key] = None
        except wsync.WsyncError as e:
            out[key] = (type(e).__name__, e.errno, str(e))
    with wsync.connect(sock, "gpu-none") as c:
        try:
            c.publisher("gpu.none", LAYOUT, devices=[uuid0])
            out["open"] = None
        except wsync.WsyncError as e:
            out["open"] = (type(e).__name__, e.errno, str(e))
    return out
