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


def test_two_ranks_publish_one_version(broker):
    clients = [wsync.connect(broker.sock, "rank%d" % r) for r in range(2)]
    try:
        pubs = [c.publisher_shard("sh", LAYOUT, r, 2, PARTS[r], timeout_ms=20000)
                for r, c in enumerate(clients)]
        assert [p.shape for p in pubs[1].parts] == [(4, 6), (4, 3)]
        sub = clients[0].subscriber("sh")
        for step in (1, 2, 3):
            versions, errors = [None, None], []

            def rank(r):
                try:
                    with pubs[r].begin(timeout=WAIT_S) as slab:
                        if r == 1:
                            with pytest.raises(ValueError):
                                slab.write_part(0, torch.zeros(3, 6))   # wrong shape
                            with pytest.raises(TypeError):
                                slab.write_part(0, torch.zeros(4, 6, dtype=torch.float64))
                        slab.copy_parts(shards(r, step))
                        versions[r] = slab.commit(step)
                except BaseException as e:
                    errors.append(e)

            ths = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
            for t in ths:
                t.start()
            for t in ths:
                t.join(WAIT_S)
            assert not errors and versions[0] == versions[1] is not None
            with sub.wait(timeout=WAIT_S) as view:
                assert view.step == step
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
