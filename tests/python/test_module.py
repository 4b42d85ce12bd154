"""torch modules: View.load_into, Publisher.publish, read-only view
tensors, arrays after release, pickling, NUL bytes in names."""
import os
import pickle
import signal
import time

import numpy as np
import pytest

import wsync
import wsync_procs as procs
from conftest import WAIT_S

torch = pytest.importorskip("torch", reason="python3-torch is not installed")
nn = torch.nn


def small_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def scrambled(net, value):
    with torch.no_grad():
        for t in net.state_dict(keep_vars=True).values():
            t.fill_(value) if t.dtype != torch.int64 else t.fill_(int(value))
    return net


ALL_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8,
              torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool]


def test_every_dtype_round_trips_through_load_into(client):
    g = torch.Generator().manual_seed(1)
    src = {}
    for i, dt in enumerate(ALL_DTYPES):
        x = torch.randn(5, 3, generator=g) * 50
        src["t%d" % i] = (x > 0) if dt == torch.bool else x.to(dt)
    src["scalar"] = torch.tensor(2.5)
    src["empty"] = torch.zeros(0, 4, dtype=torch.int32)
    pub = client.publisher_like("dt", src)
    v = pub.publish(src, 3)
    dst = {k: torch.full_like(t, 0) for k, t in src.items()}
    ptrs = {k: t.data_ptr() for k, t in dst.items()}
    with client.subscriber("dt").wait(timeout=WAIT_S) as view:
        assert view.version == v and view.step == 3
        assert view.load_into(dst) == wsync.LoadResult([], [])
        for k, t in view.state_dict("torch").items():
            assert t.dtype == src[k].dtype and torch.equal(t, src[k]), k
    assert all(torch.equal(dst[k], src[k]) and dst[k].data_ptr() == ptrs[k] for k in src)


def test_load_into_a_module_in_place(client):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = small_net()
            self.head = nn.Linear(3, 3, bias=False)
            self.tail = nn.Linear(3, 3, bias=False)
            self.tail.weight = self.head.weight               # tied
            self.emb = nn.Parameter(torch.randn(4, 5).to(torch.bfloat16))
            # a non-contiguous destination: a transposed view as a buffer
            self.register_buffer("tr", torch.randn(5, 7).t())
            self.register_buffer("scratch", torch.zeros(2), persistent=False)

    src = Net()
    src.train()
    src.body(torch.randn(16, 6))                  # moves BatchNorm's running stats
    assert int(src.body[1].num_batches_tracked) == 1
    pub = client.publisher_like("net", src)
    pub.publish(src, 1)
    dst = Net()
    scrambled(dst, 0.0)
    params = {k: (p, p.data_ptr()) for k, p in dst.state_dict(keep_vars=True).items()}
    assert not dst.tr.is_contiguous()
    with client.subscriber("net").wait(timeout=WAIT_S) as view:
        assert "scratch" not in view.tensors and "tail.weight" in view.tensors
        view.load_into(dst)
    for k, t in src.state_dict().items():
        assert torch.equal(dst.state_dict()[k], t), k
    for k, (p, ptr) in params.items():           # the same tensors, the same memory
        assert dst.state_dict(keep_vars=True)[k] is p and p.data_ptr() == ptr
    assert dst.tail.weight is dst.head.weight
    assert int(dst.body[1].num_batches_tracked) == 1
    dst.eval()
    src.eval()
    x = torch.randn(2, 6)
    assert torch.equal(dst.body(x), src.body(x))


def test_load_into_lists_every_mismatch_and_copies_nothing(client):
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = small_net()

    class Other(Holder):
        def __init__(self):
            super().__init__()
            self.extra = nn.Parameter(torch.zeros(2))

    src = Holder()
    pub = client.publisher_like("mm", src)
    pub.publish(src, 1)
    dst = Other()
    dst.body[0] = nn.Linear(6, 9)                      # shape
    dst.body[3].bias.data = dst.body[3].bias.data.double()   # dtype
    dst.body[1] = nn.Identity()                         # BatchNorm gone
    before = {k: t.clone() for k, t in dst.state_dict().items()}
    sub = client.subscriber("mm")
    with sub.wait(timeout=WAIT_S) as view:
        with pytest.raises(wsync.MismatchError) as ei:
            view.load_into(dst)
        e = ei.value
        assert isinstance(e, RuntimeError)
        assert e.missing == ["extra"]
        assert "body.1.running_mean" in e.unexpected
        assert "body.1.num_batches_tracked" in e.unexpected
        what = {(n, w) for n, w, _, _ in e.mismatched}
        assert ("body.0.weight", "shape") in what and ("body.0.bias", "shape") in what
        assert ("body.3.bias", "dtype") in what
        msg = str(e)
        for name in e.missing + e.unexpected + [m[0] for m in e.mismatched]:
            assert name in msg
        assert "(9, 6) in the module, (8, 6) in the view" in msg
        assert "float64 in the module, float32 in the view" in msg
        assert pickle.loads(pickle.dumps(e)).mismatched == e.mismatched
        # strict=False tolerates names on one side only, never shape or dtype
        with pytest.raises(wsync.MismatchError) as ei:
            view.load_into(dst, strict=False)
        assert not ei.value.missing and not ei.value.unexpected and ei.value.mismatched
        assert all(torch.equal(before[k], t) for k, t in dst.state_dict().items())
        part = Holder()
        part.body = nn.Sequential(nn.Linear(6, 8))
        res = view.load_into(part, strict=False)
        assert res.missing_keys == [] and "body.3.weight" in res.unexpected_keys
        assert torch.equal(part.body[0].weight, src.body[0].weight)
        with pytest.raises(TypeError):
            view.load_into(part, strict=0)
        with pytest.raises(TypeError):
            view.load_into(42)


def test_writing_through_a_view_tensor_raises_and_changes_nothing(client):
    src = {"w": torch.arange(12.0).reshape(3, 4), "h": torch.ones(4).to(torch.bfloat16)}
    pub = client.publisher_like("ro", src)
    pub.publish(src, 1)
    with client.subscriber("ro").wait(timeout=WAIT_S) as view:
        w = view.torch("w")
        assert isinstance(w, wsync.ReadOnlyTensor) and isinstance(w, torch.Tensor)
        writes = [lambda: w.add_(1), lambda: w.zero_(), lambda: w.__setitem__(0, 5.0),
                  lambda: w[1].fill_(3), lambda: w.view(-1).copy_(torch.zeros(12)),
                  lambda: w.t().mul_(2), lambda: w.detach().zero_(),
                  lambda: w.data.zero_(), lambda: torch.add(w, 1, out=w),
                  lambda: torch.relu_(w), lambda: nn.functional.relu(w, inplace=True),
                  lambda: view.torch("h").neg_(), lambda: w.__iadd__(1),
                  lambda: w.share_memory_(), lambda: w.resize_(2)]
        for write in writes:
            with pytest.raises(wsync.ReadOnlyError):
                write()
        with pytest.raises(ValueError):
            w.numpy()[0, 0] = 1.0                  # a read-only numpy array
        assert torch.equal(w, src["w"]) and np.array_equal(view.numpy("w"), src["w"].numpy())
        # reads and new tensors are ordinary
        out = w * 2 + 1
        assert type(out) is torch.Tensor
        out.add_(1)
        assert float(nn.functional.linear(torch.ones(1, 4), w).sum()) == float(src["w"].sum())
        c = w.clone()
        c.add_(1)
        assert type(c) is torch.Tensor


def test_arrays_after_release(client):
    pub = client.publisher("rel", [("w", "f32", (1024,))], slots=2)

    def publish(step):
        return pub.publish({"w": np.full(1024, step, np.float32)}, step)

    publish(1)
    sub = client.subscriber("rel")
    with sub.acquire() as view:
        arr = view.numpy("w")
        t = view.torch("w")
        t2 = view.state_dict("torch")["w"][:10]
    assert view.released
    with pytest.raises(wsync.ClosedError):
        t.sum()
    with pytest.raises(wsync.ClosedError):
        t2 + 1
    with pytest.raises(wsync.ClosedError):
        view.torch("w")
    # arrays alive keep the version held: it is never rewritten under them
    publish(2)
    with pytest.raises(wsync.BusyError):
        pub.begin(timeout=0.05)
    assert np.all(arr == 1)
    del arr, t, t2                   # the last array goes: the slab is given back
    assert publish(3) > 0
    with sub.acquire() as v:
        assert v.step == 3


def test_pickling_views_tensors_and_handles(client):
    src = {"w": torch.arange(6.0)}
    pub = client.publisher_like("pk", src)
    pub.publish(src, 1)
    sub = client.subscriber("pk")
    with sub.acquire() as view:
        for obj in (view, sub, pub, client):
            with pytest.raises(TypeError, match="pickle"):
                pickle.dumps(obj)
        t = pickle.loads(pickle.dumps(view.torch("w")))      # a copy of the values
        a = pickle.loads(pickle.dumps(view.numpy("w")))
        assert type(t) is torch.Tensor and torch.equal(t, src["w"])
        t.add_(1)
        assert a.flags.writeable and np.array_equal(a, src["w"].numpy())
        import copy
        d = copy.deepcopy(view.torch("w"))
        assert type(d) is torch.Tensor and torch.equal(d, src["w"])
    assert pickle.loads(pickle.dumps(sub.ref())) == sub.ref()


def test_nul_bytes_in_names_are_rejected(client, broker):
    with pytest.raises(ValueError, match="NUL"):
        client.publisher("a\0b", [("w", "f32", (2,))])
    with pytest.raises(ValueError, match="NUL"):
        client.publisher("ok", [("w\0x", "f32", (2,))])
    with pytest.raises(ValueError, match="NUL"):
        client.subscriber("p\0")
    with pytest.raises(ValueError, match="NUL"):
        client.delete("p\0")
    with pytest.raises(ValueError, match="NUL"):
        wsync.connect(broker.sock + "\0junk")
    with pytest.raises(ValueError, match="NUL"):
        wsync.connect(broker.sock, "name\0")


def test_publish_async_and_wait_ack(client):
    net = small_net()
    pub = client.publisher_like("pa", net)
    with pytest.raises(TypeError):
        pub.publish(net, 1.0)
    with pytest.raises(TypeError):
        pub.publish(object(), 1)
    v1 = pub.publish_async(net, 1)
    assert pub.wait_ack(timeout=WAIT_S) == v1
    v2 = pub.publish_async(net.state_dict(), 2)   # confirmed by the next publish
    v3 = pub.publish(net, 3)
    assert v1 < v2 < v3
    with client.subscriber("pa").acquire() as view:
        assert view.step == 3


def test_many_small_versions_loaded_into_a_module(client):
    net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    mirror = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    pub = client.publisher_like("many", net, slots=2)
    sub = client.subscriber("many")
    seen = 0
    for step in range(1, 301):
        with torch.no_grad():
            for i, p in enumerate(net.parameters()):
                p.fill_(step * 10 + i)
        pub.publish(net, step)
        with sub.wait(after=seen, timeout=WAIT_S) as view:
            assert view.step == step
            view.load_into(mirror)
            seen = view.version
        for i, p in enumerate(mirror.parameters()):
            assert torch.all(p == step * 10 + i), (step, i)


def test_a_killed_collector_gives_its_slab_back(broker, children):
    net = small_net()
    with wsync.connect(broker.sock, "trainer") as c:
        pub = c.publisher_like("kill", net, slots=2)
        pub.publish(net, 1)
        held = children.event()
        child = children.start(procs.hold_module, broker.sock, "kill", held)
        assert held.wait(WAIT_S)
        pub.publish(net, 2)                       # the other slot
        with pytest.raises(wsync.BusyError):
            pub.begin(timeout=0.05)               # slot of v1 held by the child
        os.kill(child.proc.pid, signal.SIGKILL)
        child.proc.join(WAIT_S)
        assert pub.publish(net, 3, timeout=WAIT_S) > 0


@pytest.mark.parametrize("keep", ["tensor", "alias", "numpy"])
def test_one_array_of_a_released_view_keeps_its_version_held(client, keep):
    """Tensors of a view are aliases of tensors cached per slot: what keeps
    the version held is each one's own reference to its view, so any one
    of them (or a slice of one) alone keeps it, and its going frees it."""
    pub = client.publisher("held1", [("w", "f32", (1024,)), ("b", "f32", (8,))], slots=2)

    def publish(step):
        return pub.publish({"w": np.full(1024, step, np.float32),
                            "b": np.full(8, step, np.float32)}, step)

    publish(1)
    sub = client.subscriber("held1")
    for _ in range(3):                  # the slot's tensors are cached by now
        with sub.acquire() as view:
            view.state_dict("torch")
    with sub.acquire() as view:
        if keep == "numpy":
            a = view.numpy("w")
        else:
            a = view.state_dict("torch")["w"]
            if keep == "alias":
                a = a[3:7]
    publish(2)
    with pytest.raises(wsync.BusyError):
        pub.begin(timeout=0.05)         # v1's slot is still held
    if keep == "numpy":
        assert np.all(a == 1)
    else:
        with pytest.raises(wsync.ClosedError):
            a.sum()
    del a
    assert publish(3) > 0
    with sub.acquire() as view:         # a new view of a cached slot: its own tensors
        t = view.torch("w")
        assert view.step == 3 and torch.all(t == 3)


def test_load_into_marks_the_tensors_written_as_copy_does(client):
    """The library copies into the parameters; autograd still learns they
    changed, as with load_state_dict's copy_ (a backward through a forward
    from before the load raises)."""
    net = nn.Linear(16, 4)
    pub = client.publisher_like("marked", net)
    pub.publish(net, 1)
    x = torch.randn(3, 16, requires_grad=True)
    y = net(x).sum()                       # saves net.weight for x's gradient
    versions = [p._version for p in net.parameters()]
    with client.subscriber("marked").acquire() as view:
        view.load_into(net)
    assert all(p._version > v for p, v in zip(net.parameters(), versions))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_load_into_of_a_large_model_splits_the_copy_and_is_exact(client):
    """Big enough for the copy to be split across threads, with tensors of
    odd sizes (cuts inside tensors), aliased targets copied in order, and
    non-contiguous or non-plain targets copied by torch."""
    g = torch.Generator().manual_seed(3)
    sizes = [5 << 20, 3, (3 << 20) + 7, 1, 4 << 20, 4099]
    src = {"t%d" % i: torch.randint(-2**31, 2**31 - 1, (n,), generator=g, dtype=torch.int32)
           for i, n in enumerate(sizes)}
    src["m"] = torch.randn(64, 32, generator=g)
    pub = client.publisher_like("big", src)
    pub.publish(src, 1)
    dst = {k: torch.zeros_like(v) for k, v in src.items()}
    dst["m"] = torch.zeros(32, 64).t()          # not contiguous: torch copies it
    with client.subscriber("big").acquire() as view:
        view.load_into(dst)
        assert all(torch.equal(dst[k], src[k]) for k in src)
        # two targets over the same memory: in order, as copy_ would
        shared = torch.zeros(sizes[0], dtype=torch.int32)
        alias = dict(dst, t0=shared, t4=shared[:sizes[4]])
        view.load_into(alias)
        assert torch.equal(shared[:sizes[4]], src["t4"])
        assert torch.equal(shared[sizes[4]:], src["t0"][sizes[4]:])


def test_the_split_of_a_copy_covers_every_byte_once():
    from wsync import _views
    segs = [(1000, 5000, 10), (2 << 20, 9 << 20, 5 << 20), (50 << 20, 70 << 20, 4097),
            (80 << 20, 90 << 20, 3 << 20)]
    total = sum(n for _, _, n in segs)
    for k in (1, 2, 3, 8):
        parts = _views._split(segs, total, k)
        assert 1 <= len(parts) <= k
        pieces = sorted(p for part in parts for p in part)
        covered = {}
        for d, s, n in pieces:
            assert n > 0
            covered.setdefault(d - s, []).append((s, s + n))
        assert sum(n for _, _, n in pieces) == total
        for d, s, n in segs:                      # each source range exactly once
            runs = sorted(covered[d - s])
            assert runs[0][0] == s and runs[-1][1] == s + n
            assert all(a[1] == b[0] for a, b in zip(runs, runs[1:]))


def test_swap_into_puts_read_only_parameters_and_says_which(client):
    """A swap puts nn.Parameters that are the view's read-only tensors
    (marked, not rebuilt: the same object in the module and in put), put
    lists what state_dict names (no non-persistent buffer), and the fast
    path of the read-only tensors' dispatch still refuses every write and
    any use after release."""
    from wsync import _module
    from wsync._torch import ReadOnlyTensor, ReadOnlyError
    net = small_net()
    net.register_buffer("scratch", torch.zeros(3), persistent=False)
    src = dict(net.state_dict())
    src["scratch"] = torch.full((3,), 7.0)
    pub = client.publisher_like("module.swap", src, slots=3)
    pub.publish(src, 1, WAIT_S)
    sub = client.subscriber("module.swap")
    rx = scrambled(small_net(), 0.0)
    rx.register_buffer("scratch", torch.zeros(3), persistent=False)
    view = sub.acquire()
    put = {}
    res = _module.swap_into(view, rx, put=put)
    assert res.missing_keys == [] and res.unexpected_keys == []
    assert list(put) == list(rx.state_dict())            # scratch is not there
    assert rx.scratch.tolist() == [7.0] * 3               # but it was swapped in
    for name, p in rx.named_parameters():
        assert put[name] is p
        assert isinstance(p, nn.Parameter) and isinstance(p, ReadOnlyTensor)
        assert not p.requires_grad
        assert torch.equal(p, src[name])
    w = rx[0].weight
    for write in (lambda: w.add_(1), lambda: w.data.add_(1), lambda: w.detach().zero_(),
                  lambda: torch.relu_(w), lambda: nn.functional.relu(w, inplace=True),
                  lambda: torch.add(w, 1, out=w)):
        with pytest.raises(ReadOnlyError):
            write()
    assert torch.equal(w, src["0.weight"])
    assert isinstance(w.data, ReadOnlyTensor) and isinstance(w.detach(), ReadOnlyTensor)
    view.release()
    with pytest.raises(wsync.ClosedError):
        w.data
    with pytest.raises(wsync.ClosedError):
        w.detach()
    sub.close()
    pub.close()
