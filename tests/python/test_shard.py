"""Sharded publishers from Python (publisher_shard, write_part) and
tensor-parallel loads (load_into with tp_rank/tp_size)."""
import threading

import numpy as np
import pytest

import wsync
from conftest import WAIT_S

torch = pytest.importorskip("torch", reason="python3-torch is not installed")

LAYOUT = [("w", "f32", (8, 6)), ("c", "f32", (4, 6)), ("b", "i64", (5,))]
PARTS = [[("w", 0, 0, 4), ("c", 1, 0, 3), "b"], [("w", 0, 4, 8), ("c", 1, 3, 6)]]


def full(step):
    return {"w": torch.arange(48.0).reshape(8, 6) + step,
            "c": torch.arange(24.0).reshape(4, 6) * step,
            "b": torch.arange(5) + step}


def shards(rank, step):
    f = full(step)
    if rank == 0:
        return [f["w"][:4], f["c"][:, :3].contiguous(), f["b"]]
    return [f["w"][4:], f["c"][:, 3:].contiguous()]


def in_threads(n, fn):
    """fn(r) for r in range(n), each in a thread; what they raised."""
    errors = []

    def run(r):
        try:
            fn(r)
        except BaseException as e:
            errors.append(e)
    ths = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(WAIT_S)
    return errors


def test_two_ranks_publish_one_version(broker):
    clients = [wsync.connect(broker.sock, "rank%d" % r) for r in range(2)]
    try:
        pubs = [c.publisher_shard("sh", LAYOUT, r, 2, PARTS[r], timeout_ms=20000)
                for r, c in enumerate(clients)]
        assert [p.shape for p in pubs[1].parts] == [(4, 6), (4, 3)]
        sub = clients[0].subscriber("sh")
        for step in (1, 2, 3):
            versions = [None, None]

            def rank(r):
                with pubs[r].begin(timeout=WAIT_S) as slab:
                    if r == 1:
                        with pytest.raises(ValueError):
                            slab.write_part(0, torch.zeros(3, 6))   # wrong shape
                        with pytest.raises(TypeError):
                            slab.write_part(0, torch.zeros(4, 6, dtype=torch.float64))
                    slab.copy_parts(shards(r, step))
                    versions[r] = slab.commit(step)

            errors = in_threads(2, rank)
            assert not errors and versions[0] == versions[1] is not None
            with sub.wait(timeout=WAIT_S) as view:
                assert view.step == step
                with pytest.raises(wsync.NoDataError):   # a group's default: none
                    view.verify()
                want = full(step)
                for k, t in view.state_dict("torch").items():
                    assert torch.equal(t, want[k]), (step, k)
                # tensor-parallel collectors: rank k of 2 reads its slices
                for k in range(2):
                    dst = {"w": torch.zeros(4, 6), "c": torch.zeros(4, 3),
                           "b": torch.zeros(5, dtype=torch.int64)}
                    nc = torch.zeros(3, 4).t()            # non-contiguous destination
                    dst["c"] = nc
                    view.load_into(dst, tp_rank=k, tp_size=2)
                    assert torch.equal(dst["w"], want["w"][4 * k:4 * k + 4])
                    assert torch.equal(nc, want["c"][:, 3 * k:3 * k + 3])
                    assert torch.equal(dst["b"], want["b"])
                with pytest.raises(wsync.MismatchError):
                    view.load_into({"w": torch.zeros(3, 6), "c": torch.zeros(4, 3),
                                    "b": torch.zeros(5, dtype=torch.int64)},
                                   tp_rank=0, tp_size=2)
                with pytest.raises(ValueError):
                    view.load_into({}, strict=False, tp_rank=2, tp_size=2)
                with pytest.raises(TypeError):
                    view.load_into({}, strict=False, tp_rank=0)
    finally:
        for c in clients:
            c.close()


def test_part_declarations_are_checked(broker):
    with wsync.connect(broker.sock, "r") as c:
        for parts, exc in (([("nope", 0, 0, 1)], KeyError), ([("w", 2, 0, 1)], ValueError),
                           ([("w", 0, 4, 9)], ValueError), ([("w", 0, 3, 3)], ValueError),
                           ([], ValueError), ([42], TypeError)):
            with pytest.raises(exc):
                c.publisher_shard("bad", LAYOUT, 0, 2, parts)
        with pytest.raises(ValueError):
            c.publisher_shard("bad", LAYOUT, 2, 2, ["b"])
        p0 = c.publisher_shard("ov", LAYOUT, 0, 2, [("w", 0, 0, 5)])
        with wsync.connect(broker.sock, "r1") as c1:
            with pytest.raises(wsync.WsyncError) as ei:     # overlaps rank 0's rows
                c1.publisher_shard("ov", LAYOUT, 1, 2, [("w", 0, 4, 8)])
            assert ei.value.errno == 22
        p0.close()
        with wsync.connect(broker.sock, "r2") as c2:
            plain = c2.publisher("one", [("x", "f32", (2,))])
            with plain.begin(timeout=WAIT_S) as slab:
                with pytest.raises(ValueError):
                    slab.write_part(0, np.zeros(2, np.float32))
                slab.abort()


# ---- a rank's local shards: ShardedTensor, DTensor, FSDP state_dicts ------------


def test_sharded_tensor_ranks_publish_full_tensors(broker, children, tmp_path):
    """4 spawned ranks in one gloo group, each holding real ShardedTensors
    (ChunkShardingSpec along dim 0, dim 1, uneven, two chunks on one rank)
    and a plain tensor, publish with publisher_shard(model, state_dict) and
    publish(state_dict, step); the collector sees bit-exact whole tensors of
    one step in every view."""
    import shard_procs
    if shard_procs.sharded_tensor() is None:
        pytest.skip("this torch has no torch.distributed._shard")
    world, steps = 4, [1, 2, 3, 4, 5]
    with wsync.connect(broker.sock, "collector") as c:
        sub = c.subscriber("fsdp")
        ranks = [children.start(shard_procs.sharded_rank, broker.sock, "fsdp", r, world,
                                str(tmp_path / "store"), steps) for r in range(world)]
        seen, after = [], 0
        while not seen or seen[-1] != steps[-1]:
            with sub.wait(after=after, timeout=120) as view:
                want = shard_procs.full(view.step)
                got = view.state_dict("torch")
                assert list(got) == ["rows", "cols", "b16", "bias"]
                for k, t in got.items():
                    assert t.dtype == want[k].dtype and torch.equal(t, want[k]), (view.step, k)
                seen.append(view.step)
                after = view.version
        assert seen == sorted(set(seen))
        res = [r.result(120) for r in ranks]
    parts = [p for p, _ in res]
    assert parts[0] == [("rows", 0, 0, 4), ("cols", 1, 0, 2), ("b16", 0, 0, 2),
                        ("bias", None, 0, 0)]
    assert parts[1] == [("rows", 0, 4, 6), ("cols", 1, 2, 4), ("b16", 0, 2, 4)]
    assert parts[3] == [("rows", 0, 8, 10), ("cols", 1, 6, 8), ("b16", 0, 6, 7)]
    refused = [r for _, r in res]
    for r in range(world):
        assert "'deep'" in refused[r][0] and "dim 2" in refused[r][0]
    for r in (0, 1):
        assert "'gap'" in refused[r][1] and "not contiguous" in refused[r][1]
    assert "holds no part" in refused[3][1]


# torch 1.13 has no DTensor (torch.distributed._tensor, torch >= 2.0): these
# stand-ins have the attributes wsync reads of one (to_local, placements with
# is_shard/is_replicate and .dim, device_mesh with get_coordinate, size, ndim,
# shape, dtype), so the DTensor path is tested without it.
class _Placement:
    def __init__(self, kind, dim=None):
        self.kind, self.dim = kind, dim

    def is_shard(self):
        return self.kind == "shard"

    def is_replicate(self):
        return self.kind == "replicate"

    def __repr__(self):
        return "%s(%s)" % (self.kind, "" if self.dim is None else self.dim)


class _Mesh:
    def __init__(self, shape, coord):
        self.shape, self.ndim, self._coord = shape, len(shape), coord

    def get_coordinate(self):
        return list(self._coord)

    def size(self, i):
        return self.shape[i]


class _FakeDTensor:
    """A DTensor stand-in cutting full like DTensor does (torch.chunk)."""

    def __init__(self, full, mesh, placements):
        self.shape, self.dtype = full.shape, full.dtype
        self.device_mesh, self.placements = mesh, placements
        local = full
        for i, p in enumerate(placements):
            if p.is_shard():
                chunks = torch.chunk(local, mesh.shape[i], dim=p.dim)
                c = mesh.get_coordinate()[i]
                local = chunks[c] if c < len(chunks) else local.narrow(p.dim, 0, 0)
        self._local = local.contiguous()

    def to_local(self):
        return self._local


def _dt_state_dict(step, rank):
    mesh = _Mesh((2,), (rank,))
    f = {"w": torch.arange(42.0).reshape(7, 6) + step,
         "c": torch.arange(24.0).reshape(4, 6) * step,
         "r": torch.arange(5) + step, "n": np.arange(3, dtype=np.int32) + step}
    return f, {"w": _FakeDTensor(f["w"], mesh, [_Placement("shard", 0)]),
               "c": _FakeDTensor(f["c"], mesh, [_Placement("shard", -1)]),
               "r": _FakeDTensor(f["r"], mesh, [_Placement("replicate")]),
               "n": f["n"]}


def test_dtensor_ranks_publish_full_tensors(broker):
    clients = [wsync.connect(broker.sock, "dt%d" % r) for r in range(2)]
    try:
        pubs = [c.publisher_shard("dt", _dt_state_dict(0, r)[1], rank=r, world=2)
                for r, c in enumerate(clients)]
        assert [(p.name, p.dim, p.start, p.end) for p in pubs[0].parts] == [
            ("w", 0, 0, 4), ("c", 1, 0, 3), ("r", None, 0, 0), ("n", None, 0, 0)]
        assert [(p.name, p.dim, p.start, p.end) for p in pubs[1].parts] == [
            ("w", 0, 4, 7), ("c", 1, 3, 6)]
        assert [(s.name, s.dtype, s.shape) for s in pubs[1].layout] == [
            ("w", "f32", (7, 6)), ("c", "f32", (4, 6)), ("r", "i64", (5,)), ("n", "i32", (3,))]
        sub = clients[0].subscriber("dt")
        for step in (1, 2):
            assert not in_threads(2, lambda r: pubs[r].publish(_dt_state_dict(step, r)[1],
                                                               step, timeout=WAIT_S))
            with sub.wait(timeout=WAIT_S) as view:
                assert view.step == step
                want = _dt_state_dict(step, 0)[0]
                for k, t in view.state_dict("numpy").items():
                    assert np.array_equal(t, np.asarray(want[k])), (step, k)
        # a publish whose local shards are not the declared parts: nothing sent
        other = _dt_state_dict(3, 0)[1]
        with pytest.raises(ValueError, match="'w'.*opened for"):
            pubs[1].publish(other, 3, timeout=WAIT_S)
        with pytest.raises(KeyError, match="missing: w"):
            pubs[1].publish({"c": _dt_state_dict(3, 1)[1]["c"]}, 3, timeout=WAIT_S)
    finally:
        for c in clients:
            c.close()


class _FakeShard:
    def __init__(self, tensor, offsets):
        self.tensor = tensor
        self.metadata = type("M", (), {"shard_offsets": offsets,
                                       "shard_sizes": list(tensor.shape)})()


class _FakeSharded:
    """A ShardedTensor stand-in for local shards a real one cannot hold
    (it refuses overlaps when it is built)."""

    def __init__(self, shape, shards):
        self._shards = shards
        props = type("P", (), {"dtype": torch.float32})()
        self._md = type("MD", (), {"size": shape, "tensor_properties": props})()

    def local_shards(self):
        return self._shards

    def metadata(self):
        return self._md


def test_what_a_rank_cannot_express_is_refused(broker):
    mesh2 = _Mesh((2, 2), (0, 1))
    full = torch.zeros(4, 6, 8)
    cases = {
        "two mesh dims": _FakeDTensor(full, mesh2, [_Placement("shard", 0),
                                                    _Placement("shard", 1)]),
        "dim 2": _FakeDTensor(full, _Mesh((2,), (0,)), [_Placement("shard", 2)]),
        "partial": _FakeDTensor(full, _Mesh((2,), (0,)), [_Placement("partial")]),
        "overlap": _FakeSharded((6, 2), [_FakeShard(torch.zeros(3, 2), [0, 0]),
                                         _FakeShard(torch.zeros(3, 2), [2, 0])]),
        "block": _FakeSharded((6, 4), [_FakeShard(torch.zeros(3, 2), [0, 0])]),
    }
    bad_local = _FakeDTensor(torch.zeros(6, 2), _Mesh((2,), (0,)), [_Placement("shard", 0)])
    bad_local._local = torch.zeros(2, 2)               # not chunk 0 of 2 (3 rows)
    cases["chunk"] = bad_local
    whys = {"two mesh dims": "2 mesh dims", "dim 2": "along dim 2",
            "partial": "neither Shard nor Replicate", "overlap": "overlap",
            "block": "cut along dims (0, 1)", "chunk": "chunk 0 of 2"}
    with wsync.connect(broker.sock, "r") as c:
        for name, x in cases.items():
            with pytest.raises(ValueError) as ei:
                c.publisher_shard("bad", {name: x}, rank=0, world=2)
            assert repr(name) in str(ei.value) and whys[name] in str(ei.value), str(ei.value)
        # a replica at coordinate 1 of a replicated mesh dim writes nothing
        rep = _FakeDTensor(torch.zeros(4, 6), _Mesh((2, 2), (1, 0)),
                           [_Placement("replicate"), _Placement("shard", 0)])
        with pytest.raises(ValueError, match="holds no part"):
            c.publisher_shard("bad", {"x": rep}, rank=1, world=4)
        with pytest.raises(TypeError, match="needs parts"):
            c.publisher_shard("bad", LAYOUT, 0, 2)


def test_plain_full_tensors_with_declared_parts(broker):
    """A state_dict of whole plain tensors with explicit parts: publish
    writes each part's range of them."""
    clients = [wsync.connect(broker.sock, "p%d" % r) for r in range(2)]
    try:
        pubs = [c.publisher_shard("plain", full(0), r, 2, PARTS[r])
                for r, c in enumerate(clients)]
        assert not in_threads(2, lambda r: pubs[r].publish(full(7), 7, timeout=WAIT_S))
        with clients[0].subscriber("plain").wait(timeout=WAIT_S) as view:
            for k, t in view.state_dict("torch").items():
                assert torch.equal(t, full(7)[k]), k
    finally:
        for c in clients:
            c.close()


def test_ranks_that_ask_for_checksums_publish_verified_versions(broker):
    """checksum=True: rank 0 forms each version's checksum after it
    appears (it reads rank 1's part); View.verify waits for it."""
    pytest.importorskip("torch")
    clients = [wsync.connect(broker.sock, "rank%d" % r) for r in range(2)]
    try:
        pubs = [c.publisher_shard("shs", LAYOUT, r, 2, PARTS[r], timeout_ms=20000,
                                  checksum=True)
                for r, c in enumerate(clients)]
        sub = clients[0].subscriber("shs")
        for step in (1, 2, 3):
            def rank(r):
                with pubs[r].begin(timeout=WAIT_S) as slab:
                    slab.copy_parts(shards(r, step))
                    slab.commit(step)

            assert not in_threads(2, rank)
            with sub.wait(timeout=WAIT_S) as view:
                assert view.step == step
                view.verify()
        with pytest.raises(TypeError, match="checksum"):
            clients[0].publisher_shard("bad", LAYOUT, 0, 2, PARTS[0], checksum="yes")
    finally:
        for c in clients:
            c.close()

