"""Every way out of a view stays read-only (a clear error) or copies: never a
writable array over the broker's read-only mapping, whose first write would
kill the process with SIGSEGV. Each way is tried in a child process that
writes through whatever it got (readonly_procs.py), so a way that leaks is
named, not a crashed test run."""
import multiprocessing

import numpy as np
import pytest

import wsync
from conftest import WAIT_S

torch = pytest.importorskip("torch", reason="python3-torch is not installed")

REFUSED_READONLY = "refused: ReadOnlyError"
ARRAY_REFUSED = "refused: ValueError"        # numpy: cannot set WRITEABLE to True
NOT_HERE = "refused: n/a"                    # a call this torch or numpy lacks

EXPECTED = {
    "view.numpy() made writeable": ARRAY_REFUSED,
    "np.asarray(view.numpy())": ARRAY_REFUSED,
    "np.asarray(tensor)": ARRAY_REFUSED,
    "np.array(tensor, copy=False)": ARRAY_REFUSED,
    "tensor.numpy()": ARRAY_REFUSED,
    "tensor slice, strided .numpy()": ARRAY_REFUSED,
    "tensor.view(int32).numpy()": ARRAY_REFUSED,
    "np.asarray(state_dict tensor)": ARRAY_REFUSED,
    "np.frombuffer(view.buffer())": ARRAY_REFUSED,
    "np.asarray(memoryview(view.numpy()))": ARRAY_REFUSED,
    "view.buffer()[0] = 1": "refused: TypeError",
    "tensor.__dlpack__()": REFUSED_READONLY,
    "torch.from_dlpack(tensor)": REFUSED_READONLY,
    "torch.from_dlpack(tensor.__dlpack__())": REFUSED_READONLY,
    "np.from_dlpack(tensor)": (REFUSED_READONLY, NOT_HERE),
    "tensor.storage()": REFUSED_READONLY,
    "tensor._storage()": (REFUSED_READONLY, NOT_HERE),
    "tensor.untyped_storage()": (REFUSED_READONLY, NOT_HERE),
    "tensor.as_subclass(torch.Tensor)": REFUSED_READONLY,
    "nn.Parameter(tensor)": REFUSED_READONLY,
    "nn.Parameter(tensor).data": REFUSED_READONLY,
    "batch_norm(training=True) over its running stats": REFUSED_READONLY,
    "embedding(max_norm=...) of it": REFUSED_READONLY,
    "np.asarray(bf16 tensor)": "refused: TypeError",     # numpy has no bfloat16
    "np.asarray(tensor, dtype=float64)": "copy",
    "bytearray(view.buffer())": "copy",
    "pickle of a tensor": "copy",
    "copy.deepcopy(tensor)": "copy",
    "tensor.clone()": "copy",
    "torch.tensor(tensor)": "copy",
    "np.array(tensor)": "copy",
}


def test_every_way_out_of_a_view_is_read_only_or_a_copy(client, broker):
    src = {"w": torch.arange(24.0).reshape(4, 6), "h": torch.ones(8).to(torch.bfloat16)}
    pub = client.publisher_like("ro", src)
    pub.publish(src, 1)
    with client.subscriber("ro").wait(timeout=WAIT_S) as view:
        before = bytes(view.buffer())
    from readonly_procs import try_every_way
    ctx = multiprocessing.get_context("spawn")
    rd, wr = ctx.Pipe(duplex=False)
    p = ctx.Process(target=try_every_way, args=(broker.sock, "ro", wr), daemon=True)
    p.start()
    wr.close()
    got, trying, after = {}, None, None
    try:
        while rd.poll(60):
            try:
                msg = rd.recv()
            except EOFError:
                break
            if msg[0] == "try":
                trying = msg[1]
            elif msg[0] == "done":
                got[msg[1]], trying = msg[2], None
            else:
                after = msg[1]
        p.join(WAIT_S)
    finally:
        if p.is_alive():
            p.kill()
    assert trying is None, "the child died (exit %s) writing through %r: a writable " \
                           "array over the read-only mapping" % (p.exitcode, trying)
    assert p.exitcode == 0, p.exitcode
    wrong = {}
    for way, want in EXPECTED.items():
        ok = got.get(way) in (want if isinstance(want, tuple) else (want,))
        if not ok:
            wrong[way] = got.get(way)
    assert not wrong, "ways out that did not stay read-only or copy: %s" % wrong
    assert set(got) == set(EXPECTED), set(got) ^ set(EXPECTED)
    assert after == before                     # nothing reached the shared bytes


def test_read_only_arrays_of_tensors_show_the_values_without_a_copy(client):
    src = {"w": torch.arange(24.0).reshape(4, 6)}
    pub = client.publisher_like("rov", src)
    pub.publish(src, 1)
    with client.subscriber("rov").wait(timeout=WAIT_S) as view:
        t = view.torch("w")
        base = view.numpy("w").__array_interface__["data"][0]
        for x, want in ((t, src["w"]), (t[1:, ::2], src["w"][1:, ::2]),
                        (t.t(), src["w"].t()), (t[2], src["w"][2])):
            a = np.asarray(x)
            assert not a.flags.writeable and np.array_equal(a, want.numpy())
            assert base <= a.__array_interface__["data"][0] < base + view.nbytes   # no copy
            assert np.array_equal(x.numpy(), want.numpy())
        assert np.asarray(t, dtype=np.float64).dtype == np.float64
        with pytest.raises(wsync.ReadOnlyError, match="clone"):
            t.__dlpack__()
        p = torch.nn.Parameter(t)                    # still read-only, still usable
        assert isinstance(p, wsync.ReadOnlyTensor)
        assert float(torch.nn.functional.linear(torch.ones(1, 6), p).sum()) == \
            float(src["w"].sum())
        r = t.as_subclass(wsync.ReadOnlyTensor)      # its own class is fine
        assert isinstance(r, wsync.ReadOnlyTensor) and torch.equal(r, src["w"])
        arr = np.asarray(t)
    with pytest.raises(wsync.ClosedError):
        np.asarray(t)                                # released: no new arrays
    assert np.array_equal(arr, src["w"].numpy())     # the one taken still reads its version
