"""dtype names, codes and their numpy/torch counterparts.

numpy has no bfloat16 and no 8-bit floats: a bf16 tensor appears in numpy
as uint16 and an f8_e4m3fn/f8_e5m2 tensor as uint8, the raw bits (view
them with ml_dtypes, if installed, as arr.view(ml_dtypes.float8_e4m3fn)).
torch has bfloat16; it has the 8-bit floats from 2.1 and uint16/32/64
from 2.3, which this module looks up at run time: with an older torch an
f8 tensor appears as uint8 raw bits too, and u16/u32/u64 have no torch
form at all (a TypeError naming the torch version that adds it, never a
signed tensor whose large values read as negative).
"""
import sys

import numpy as np

# name: (code, numpy dtype used for views): the codes are enum wsync_dtype
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
    "u16": (11, np.uint16),
    "u32": (12, np.uint32),
    "u64": (13, np.uint64),
    "f8_e4m3fn": (14, np.uint8),
    "f8_e5m2": (15, np.uint8),
}
CODE = {k: v[0] for k, v in _TABLE.items()}
NAME = {v[0]: k for k, v in _TABLE.items()}
NUMPY = {v[0]: np.dtype(v[1]) for v in _TABLE.values()}
ITEMSIZE = {c: NUMPY[c].itemsize for c in NUMPY}
BF16 = CODE["bf16"]
# Floats numpy lacks: their numpy arrays hold raw bits of the same size.
RAW_BITS = frozenset((BF16, CODE["f8_e4m3fn"], CODE["f8_e5m2"]))

_ALIASES = {
    "float32": "f32", "float": "f32", "float16": "f16", "half": "f16",
    "bfloat16": "bf16", "float64": "f64", "double": "f64", "int8": "i8",
    "int16": "i16", "short": "i16", "int32": "i32", "int": "i32", "int64": "i64",
    "long": "i64", "uint8": "u8", "bool_": "bool", "uint16": "u16", "uint32": "u32",
    "uint64": "u64", "float8_e4m3fn": "f8_e4m3fn", "float8_e5m2": "f8_e5m2",
}
_FROM_NUMPY = {np.dtype(v[1]): v[0] for v in _TABLE.values() if v[0] not in RAW_BITS}

# code: (torch attribute, the torch release that added it)
_TORCH_NAMES = {
    1: ("float32", None), 2: ("float16", None), 3: ("bfloat16", None),
    4: ("float64", None), 5: ("int8", None), 6: ("int16", None), 7: ("int32", None),
    8: ("int64", None), 9: ("uint8", None), 10: ("bool", None), 11: ("uint16", "2.3"),
    12: ("uint32", "2.3"), 13: ("uint64", "2.3"), 14: ("float8_e4m3fn", "2.1"),
    15: ("float8_e5m2", "2.1"),
}
# Codes an older torch may lack: looked up at run time.
NEWER_TORCH = frozenset(c for c, (_, since) in _TORCH_NAMES.items() if since)
_F8 = frozenset((CODE["f8_e4m3fn"], CODE["f8_e5m2"]))


def is_torch_tensor(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


_CODE_OF = {}            # torch and numpy dtype objects seen -> their code


def code_of(dtype):
    """A dtype code from "f32"/"bf16"/..., a numpy dtype, or a torch dtype."""
    try:
        return _CODE_OF[dtype]
    except (KeyError, TypeError):
        pass
    code = _code_of(dtype)
    if not isinstance(dtype, (str, int)):
        try:
            _CODE_OF[dtype] = code
        except TypeError:
            pass
    return code


def _code_of(dtype):
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


def torch_has(code):
    """Whether the imported torch has a dtype for code."""
    import torch
    return getattr(torch, _TORCH_NAMES[code][0], None) is not None


def torch_dtype(code, tensor=None):
    """The torch dtype of code; TypeError if this torch predates it."""
    import torch
    attr, since = _TORCH_NAMES[code]
    dt = getattr(torch, attr, None)
    if dt is None:
        what = "tensor %r is %s, which" % (tensor, NAME[code]) if tensor else NAME[code]
        raise TypeError("wsync: %s needs torch.%s: torch %s adds it (this is torch %s)%s"
                        % (what, attr, since, torch.__version__,
                           "; read it with numpy()" if tensor else ""))
    return dt


def raw_bits_of(code, got):
    """Whether a torch tensor of code got may stand for one of code as its
    raw bits (copied byte for byte): int16 for bf16, uint8 for the 8-bit
    floats."""
    return (code == BF16 and got == CODE["i16"]) or (code in _F8 and got == CODE["u8"])


def torch_hint(code):
    """For a dtype error: how to pass code where this torch lacks it."""
    if code not in NEWER_TORCH or torch_has(code):
        return ""
    attr, since = _TORCH_NAMES[code]
    if code in _F8:
        return " (torch.%s needs torch %s: pass its raw bits as a uint8 tensor)" % (attr, since)
    return " (torch.%s needs torch %s: pass a numpy %s array)" % (attr, since, NUMPY[code])


def torch_name(code):
    """code's torch dtype name for messages, saying when torch lacks it."""
    attr, since = _TORCH_NAMES[code]
    if torch_has(code):
        return attr
    return "%s (torch %s or later)" % (attr, since)


def check_torch(spec, t):
    """TypeError/ValueError unless torch tensor t fits tensor spec (a
    TensorSpec): its dtype (or, where this torch lacks it, its raw bits:
    int16 for bf16, uint8 for the 8-bit floats) and shape."""
    code = CODE[spec.dtype]
    got = code_of(t.dtype)
    if got != code and not raw_bits_of(code, got):
        raise TypeError("wsync: tensor %r is %s, the layout says %s%s"
                        % (spec.name, NAME[got], spec.dtype, torch_hint(code)))
    if tuple(t.shape) != spec.shape:
        raise ValueError("wsync: tensor %r has shape %s, the layout says %s"
                         % (spec.name, tuple(t.shape), spec.shape))
