"""A trainer rank's local shards as publisher_shard parts.

FSDP and tensor-parallel trainers hold each parameter as a ShardedTensor
(torch.distributed._shard, what FSDP's SHARDED_STATE_DICT gives) or a
DTensor (torch >= 2.0), or as a plain tensor every rank holds whole. Both
sharded kinds are recognised by their attributes, not by import, so this
module works with any torch (or none) and never imports torch itself.

A rank's part of a tensor is what wsync can express (docs/SHARDING.md): the
whole tensor, or one contiguous index range along dim 0 or dim 1. A plain
tensor, or a DTensor replicated on the mesh, is written by one rank only:
rank 0 for a plain tensor, the rank at coordinate 0 of every replicated
mesh dimension for a DTensor. Anything else raises ValueError naming the
tensor.
"""
from collections import namedtuple
from collections.abc import Mapping

import numpy as np

from . import _dtypes

# One local piece of a tensor: dim None for the whole tensor, else the index
# range [start, end) along dim (0 or 1); tensor holds exactly that piece.
Piece = namedtuple("Piece", "dim start end tensor")


def is_sharded_tensor(x):
    """A torch.distributed._shard ShardedTensor (local_shards + metadata)."""
    return callable(getattr(x, "local_shards", None)) and callable(getattr(x, "metadata", None))


def is_dtensor(x):
    """A DTensor (to_local, placements, device_mesh)."""
    return (callable(getattr(x, "to_local", None)) and hasattr(x, "placements")
            and hasattr(x, "device_mesh"))


def global_spec(name, x):
    """(dtype, shape) of the whole tensor x of a state_dict."""
    if is_sharded_tensor(x):
        md = x.metadata()
        return md.tensor_properties.dtype, tuple(int(n) for n in md.size)
    if is_dtensor(x) or _dtypes.is_torch_tensor(x):
        return x.dtype, tuple(int(n) for n in x.shape)
    a = np.asarray(x)
    return a.dtype, a.shape


def _refuse(name, why):
    return ValueError("wsync: tensor %r: %s; a rank writes a whole tensor or one contiguous "
                      "range along dim 0 or 1 (docs/SHARDING.md)" % (name, why))


def _one_dim(name, shape, offsets, sizes):
    """(dim, start, end) of a block of a tensor of shape, dim None when the
    block is the whole tensor."""
    cut = [d for d in range(len(shape)) if sizes[d] != shape[d]]
    if not cut:
        return None, 0, 0
    if len(cut) > 1:
        raise _refuse(name, "a local shard is cut along dims %s" % (tuple(cut),))
    d = cut[0]
    if d >= 2:
        raise _refuse(name, "a local shard is cut along dim %d" % d)
    if any(offsets[k] for k in range(len(shape)) if k != d):
        raise _refuse(name, "a local shard starts at offsets %s" % (tuple(offsets),))
    return d, int(offsets[d]), int(offsets[d]) + int(sizes[d])


def _merge(name, pieces):
    """The local pieces of one tensor as at most one Piece: adjacent ranges
    along the same dim are concatenated (a ChunkShardingSpec that places
    two neighbouring chunks on one rank); a gap or an overlap is refused."""
    if len(pieces) <= 1:
        return pieces
    if any(p.dim is None for p in pieces) or len({p.dim for p in pieces}) != 1:
        raise _refuse(name, "this rank holds %d local shards that overlap or are cut along "
                      "different dims" % len(pieces))
    pieces = sorted(pieces, key=lambda p: p.start)
    for a, b in zip(pieces, pieces[1:]):
        if b.start < a.end:
            raise _refuse(name, "local shards [%d, %d) and [%d, %d) of dim %d overlap"
                          % (a.start, a.end, b.start, b.end, a.dim))
        if b.start > a.end:
            raise _refuse(name, "local shards [%d, %d) and [%d, %d) of dim %d are not "
                          "contiguous" % (a.start, a.end, b.start, b.end, a.dim))
    import torch
    d = pieces[0].dim
    return [Piece(d, pieces[0].start, pieces[-1].end,
                  torch.cat([p.tensor for p in pieces], dim=d))]


def _sharded_pieces(name, x):
    _, shape = global_spec(name, x)
    pieces = []
    for s in x.local_shards():
        md = s.metadata
        sizes = tuple(int(n) for n in md.shard_sizes)
        if 0 in sizes and shape:
            continue                    # an empty chunk: nothing to write
        d, start, end = _one_dim(name, shape, tuple(md.shard_offsets), sizes)
        pieces.append(Piece(d, start, end, s.tensor))
    return _merge(name, pieces)


def _mesh_coordinate(mesh):
    get = getattr(mesh, "get_coordinate", None)
    if callable(get):
        return get()                    # None: this process is not in the mesh
    return [mesh.get_coordinate_on_dim(i) for i in range(mesh.ndim)]   # torch 2.0


def _dtensor_pieces(name, x):
    _, shape = global_spec(name, x)
    mesh = x.device_mesh
    coord = _mesh_coordinate(mesh)
    if coord is None:
        return []
    shards = []
    for i, p in enumerate(x.placements):
        if p.is_shard() and not hasattr(p, "split_factor"):
            shards.append((i, p.dim % max(len(shape), 1)))
        elif p.is_shard() or not p.is_replicate():
            raise _refuse(name, "placement %r on mesh dim %d is neither Shard nor Replicate"
                          % (p, i))
        elif coord[i] != 0:
            return []                   # a replica: coordinate 0 of that mesh dim writes it
    local = x.to_local()
    if not shards:
        return [Piece(None, 0, 0, local)]
    if len(shards) > 1:
        raise _refuse(name, "sharded on %d mesh dims" % len(shards))
    i, d = shards[0]
    if d >= 2:
        raise _refuse(name, "sharded along dim %d" % d)
    # DTensor's Shard(d) splits as torch.chunk: ceil(n / k) per rank, the
    # last ones shorter or empty.
    n, k = shape[d], mesh.size(i)
    step = -(-n // k)
    start = min(coord[i] * step, n)
    end = min(start + step, n)
    want = shape[:d] + (end - start,) + shape[d + 1:]
    if tuple(local.shape) != want:
        raise _refuse(name, "the local tensor has shape %s, not the %s of chunk %d of %d "
                      "along dim %d" % (tuple(local.shape), want, coord[i], k, d))
    if start == end:
        return []
    if (end - start) == n:
        return [Piece(None, 0, 0, local)]
    return [Piece(d, start, end, local)]


def local_pieces(name, x, rank):
    """What this rank writes of tensor x: a list of at most one Piece."""
    if is_sharded_tensor(x):
        return _sharded_pieces(name, x)
    if is_dtensor(x):
        return _dtensor_pieces(name, x)
    return [Piece(None, 0, 0, x)] if rank == 0 else []


def plan(state_dict, rank):
    """(layout, parts) of publisher_shard for a state_dict of sharded and
    plain tensors: the whole model's layout (global shapes) and the parts
    this rank writes."""
    if not isinstance(state_dict, Mapping):
        raise TypeError("wsync: publisher_shard without parts needs a state_dict "
                        "(a mapping, or a module), not %s" % type(state_dict).__name__)
    layout, parts = [], []
    for name, x in state_dict.items():
        dtype, shape = global_spec(name, x)
        layout.append((name, dtype, shape))
        for p in local_pieces(name, x, rank):
            parts.append(name if p.dim is None else (name, p.dim, p.start, p.end))
    return layout, parts


def sources(pub, state_dict):
    """This rank's shard of every part of pub (a publisher_shard rank), in
    pub.parts order, from a state_dict as the one it was opened with: a
    sharded tensor's local shard (which must still be the declared part),
    or a plain tensor, whole or the part's range of it."""
    if not isinstance(state_dict, Mapping):
        raise TypeError("wsync: a rank publishes a state_dict (a mapping, or a module), "
                        "not %s" % type(state_dict).__name__)
    known = {s.name for s in pub._layout}
    unknown = [k for k in state_dict if k not in known]
    missing = [p.name for p in pub.parts if p.name not in state_dict]
    if unknown or missing:
        raise KeyError("wsync: model %r, rank %d: %s%s" % (
            pub.model, pub.rank, "missing: %s" % ", ".join(missing) if missing else "",
            "%sunknown: %s" % ("; " if missing else "", ", ".join(map(str, unknown)))
            if unknown else ""))
    out = []
    for part in pub.parts:
        x = state_dict[part.name]
        if is_sharded_tensor(x) or is_dtensor(x):
            got = local_pieces(part.name, x, pub.rank)
            if len(got) != 1 or got[0][:3] != (part.dim, part.start, part.end):
                raise ValueError("wsync: tensor %r: this rank's local shard is %s, the "
                                 "publisher was opened for %s" % (
                                     part.name, _fmt(got), _fmt([part])))
            out.append(got[0].tensor)
            continue
        shape = tuple(getattr(x, "shape", np.shape(x)))
        if part.dim is not None and shape != part.shape:
            # the whole tensor: take the part's range of it
            x = x[part.start:part.end] if part.dim == 0 else x[:, part.start:part.end]
        out.append(x)
    return out


def _fmt(pieces):
    if not pieces:
        return "nothing"
    p = pieces[0]
    return "whole" if p.dim is None else "[%d, %d) of dim %d" % (p.start, p.end, p.dim)
