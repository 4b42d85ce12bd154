"""dtype names, codes and their numpy/torch counterparts.

numpy has no bfloat16: a bf16 tensor appears in numpy as uint16 (the raw
bits) and in torch as torch.bfloat16.
"""
import sys

import numpy as np

# name: (code, numpy dtype used for views)
_TABLE = {
    "f32": (1, np.float32),
    "f16": (2, np.float16),
    "bf16": (3, np.uint16),
    "f64": (4, np.float64),
    "i8": (5, np.int8),
    "i16": (6, np.int16),
    "i32": (7, np.int32),
    "i64": (8, np.int64),
    "u8": (9, np.uint8),
    "bool": (10, np.bool_),
}
CODE = {k: v[0] for k, v in _TABLE.items()}
NAME = {v[0]: k for k, v in _TABLE.items()}
NUMPY = {v[0]: np.dtype(v[1]) for v in _TABLE.values()}
ITEMSIZE = {c: NUMPY[c].itemsize for c in NUMPY}
BF16 = CODE["bf16"]

_ALIASES = {
    "float32": "f32", "float": "f32", "float16": "f16", "half": "f16",
    "bfloat16": "bf16", "float64": "f64", "double": "f64", "int8": "i8",
    "int16": "i16", "short": "i16", "int32": "i32", "int": "i32", "int64": "i64",
    "long": "i64", "uint8": "u8", "bool_": "bool",
}
_FROM_NUMPY = {np.dtype(v[1]): v[0] for k, v in _TABLE.items() if k != "bf16"}

_TORCH_NAMES = {
    1: "float32", 2: "float16", 3: "bfloat16", 4: "float64", 5: "int8",
    6: "int16", 7: "int32", 8: "int64", 9: "uint8", 10: "bool",
}


def is_torch_tensor(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def code_of(dtype):
    """A dtype code from "f32"/"bf16"/..., a numpy dtype, or a torch dtype."""
    if isinstance(dtype, int) and not isinstance(dtype, bool) and dtype in NAME:
        return dtype
    if isinstance(dtype, str):
        key = _ALIASES.get(dtype, dtype)
        if key in CODE:
            return CODE[key]
    mod = type(dtype).__module__
    if mod == "torch":                 # torch.float32 etc., without importing torch
        name = str(dtype).rpartition(".")[2]
        name = _ALIASES.get(name, name)
        if name in CODE:
            return CODE[name]
        raise TypeError("wsync: torch dtype %s has no wsync counterpart" % dtype)
    try:
        nd = np.dtype(dtype)
    except TypeError:
        raise TypeError("wsync: %r is not a dtype (use 'f32', 'bf16', ..., a numpy "
                        "or a torch dtype)" % (dtype,)) from None
    if nd in _FROM_NUMPY:
        return _FROM_NUMPY[nd]
    raise TypeError("wsync: numpy dtype %s has no wsync counterpart" % nd)


def code_of_array(x):
    """The dtype code of a numpy array or torch tensor."""
    if is_torch_tensor(x):
        return code_of(x.dtype)
    return code_of(np.asarray(x).dtype)


def torch_dtype(code):
    import torch
    return getattr(torch, _TORCH_NAMES[code])


def check_torch(spec, t):
    """TypeError/ValueError unless torch tensor t fits tensor spec (a
    TensorSpec): its dtype (bf16 also as int16 bits) and shape."""
    code = CODE[spec.dtype]
    got = code_of(t.dtype)
    if got != code and not (code == BF16 and got == CODE["i16"]):
        raise TypeError("wsync: tensor %r is %s, the layout says %s"
                        % (spec.name, NAME[got], spec.dtype))
    if tuple(t.shape) != spec.shape:
        raise ValueError("wsync: tensor %r has shape %s, the layout says %s"
                         % (spec.name, tuple(t.shape), spec.shape))
