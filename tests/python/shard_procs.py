"""Trainer ranks holding real ShardedTensors (torch.distributed._shard, what
FSDP's SHARDED_STATE_DICT gives), run as spawned processes in one gloo
group by tests/python/test_shard.py, and the data both sides compute.

Debian's torch 1.13 cannot import torch.distributed._shard under Python
3.11: its sharded_tensor/metadata.py declares a dataclass field with an
instance as default (`field(default=TensorProperties())`), which Python 3.11
refuses (torch >= 2.0 uses default_factory). sharded_tensor() loads that one
file with the default_factory spelling; nothing else of torch is changed,
and with a torch that imports it as is the shim does nothing.
"""
import importlib.abc
import importlib.machinery
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PKG = os.path.abspath(os.path.join(_HERE, "..", "..", "libclient", "python"))
if _PKG not in sys.path:
    sys.path.insert(0, _PKG)

import wsync  # noqa: E402

WAIT_S = 15.0
_META = "torch.distributed._shard.sharded_tensor.metadata"
_BAD = b"field(default=TensorProperties())"


class _MetadataFix(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _META:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec

        class Loader(importlib.machinery.SourceFileLoader):
            def get_code(self, fullname):
                src = self.get_data(self.path)
                if _BAD in src:
                    src = src.replace(_BAD, b"field(default_factory=TensorProperties)")
                return self.source_to_code(src, self.path)
        spec.loader = Loader(spec.loader.name, spec.loader.path)
        return spec


def sharded_tensor():
    """(torch, torch.distributed._shard.sharded_tensor, ChunkShardingSpec),
    or None when this torch has no ShardedTensor."""
    if not any(isinstance(f, _MetadataFix) for f in sys.meta_path):
        sys.meta_path.insert(0, _MetadataFix())
    try:
        import torch
        import torch.distributed._shard.sharded_tensor as st
        from torch.distributed._shard.sharding_spec import ChunkShardingSpec
    except ImportError:
        return None
    return torch, st, ChunkShardingSpec


def full(step):
    """The whole model at step: every element differs between steps."""
    import torch
    return {
        "rows": torch.arange(60, dtype=torch.float32).reshape(10, 6) + 1000 * step,
        "cols": torch.arange(40, dtype=torch.float64).reshape(5, 8) * (step + 1),
        "b16": (torch.arange(21, dtype=torch.float32).reshape(7, 3) + step).to(torch.bfloat16),
        "bias": torch.arange(4, dtype=torch.int64) - step,
    }


def _state_dict(world):
    """This rank's state_dict: rows along dim 0 with two neighbouring chunks
    on rank 0 (merged into one part), cols along dim 1, b16 along dim 0
    unevenly (7 rows on 4 ranks), bias a plain tensor (rank 0 writes it)."""
    torch, st, Spec = sharded_tensor()
    places = ["rank:%d/cpu" % r for r in range(world)]
    return {
        "rows": st.empty(Spec(dim=0, placements=places[:1] + places), 10, 6),
        "cols": st.empty(Spec(dim=1, placements=places), 5, 8, dtype=torch.float64),
        "b16": st.empty(Spec(dim=0, placements=places), 7, 3, dtype=torch.bfloat16),
        "bias": torch.zeros(4, dtype=torch.int64),
    }


def _fill(sd, step):
    want = full(step)
    for name, x in sd.items():
        if not hasattr(x, "local_shards"):
            x.copy_(want[name])
            continue
        for s in x.local_shards():
            idx = tuple(slice(o, o + n) for o, n in zip(s.metadata.shard_offsets,
                                                       s.metadata.shard_sizes))
            s.tensor.copy_(want[name][idx])


def _refusals(client, rank, world):
    """What publisher_shard refuses, on real ShardedTensors: a cut along dim
    2, and (on rank 0) two local chunks that are not neighbours."""
    torch, st, Spec = sharded_tensor()
    places = ["rank:%d/cpu" % r for r in range(world)]
    out = []
    bad = {"deep": st.empty(Spec(dim=2, placements=places), 2, 3, 8)}
    try:
        client.publisher_shard("bad", bad, rank=rank, world=world)
        out.append("dim 2 accepted")
    except ValueError as e:
        out.append(str(e))
    gap = {"gap": st.empty(Spec(dim=0, placements=places[:1] + places[1:2] + places), 10, 2)}
    try:
        client.publisher_shard("bad", gap, rank=rank, world=world).close()
        out.append("gap accepted")
    except ValueError as e:
        out.append(str(e))
    return out


def sharded_rank(sock, model, rank, world, store, steps):
    """One FSDP-style rank: joins the gloo group, opens its publisher from
    its state_dict and publishes steps. Returns its parts and what
    publisher_shard refused."""
    sharded_tensor()
    import torch.distributed as dist
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank,
                            world_size=world)
    try:
        sd = _state_dict(world)
        with wsync.connect(sock, "rank%d" % rank) as c:
            refused = _refusals(c, rank, world)
            pub = c.publisher_shard(model, sd, rank=rank, world=world, timeout_ms=60000)
            parts = [tuple(p[:1] + p[2:5]) for p in pub.parts]
            for step in steps:
                _fill(sd, step)
                pub.publish(sd, step, timeout=WAIT_S)
            dist.barrier()      # no rank closes while another still commits
        return parts, refused
    finally:
        dist.destroy_process_group()
