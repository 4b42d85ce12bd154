"""The dtypes added for GPU models (u16, u32, u64, f8_e4m3fn, f8_e5m2)
through the Python package: the table agrees with the C library, numpy
publishes and reads each bit-exactly (the 8-bit floats as uint8 raw bits),
sources that cannot be bit-exact are refused, and torch gets each dtype it
has and a clear TypeError (or raw bits for the 8-bit floats) for the ones
it lacks: on torch 1.13 all five are missing."""
import numpy as np
import pytest

import wsync
from wsync import _dtypes
from wsync._lib import lib
from conftest import WAIT_S

ADDED = [("u16", "u16", (3, 4)), ("u32", np.uint32, (5,)), ("u64", "uint64", (2, 2)),
         ("e4m3", "f8_e4m3fn", (256,)), ("e5m2", "float8_e5m2", (2, 128))]


def added_weights():
    """Values at the ends of each range, and every byte for the 8-bit floats
    (NaNs, infinities and negative zero included)."""
    u16 = np.array([0, 1, 0x7fff, 0x8000, 0xfffe, 0xffff] * 2, np.uint16).reshape(3, 4)
    u32 = np.array([0, 1, 2**31 - 1, 2**31, 2**32 - 1], np.uint32)
    u64 = np.array([[0, 2**63 - 1], [2**63, 2**64 - 1]], np.uint64)
    every = np.arange(256, dtype=np.uint8)
    return {"u16": u16, "u32": u32, "u64": u64, "e4m3": every[::-1].copy(),
            "e5m2": every.reshape(2, 128)}


def test_table_agrees_with_the_library():
    assert {_dtypes.CODE[k] for k in ("u16", "u32", "u64", "f8_e4m3fn", "f8_e5m2")} == \
        set(range(11, 16))
    for name, code in wsync.DTYPES.items():
        assert lib.wsync_dtype_name(code).decode() == name
        assert lib.wsync_dtype_size(code) == _dtypes.ITEMSIZE[code]
    assert lib.wsync_dtype_size(max(wsync.DTYPES.values()) + 1) == 0


def test_numpy_round_trip_of_every_added_dtype(client):
    w = added_weights()
    pub = client.publisher("added", ADDED)
    assert [s.dtype for s in pub.layout] == ["u16", "u32", "u64", "f8_e4m3fn", "f8_e5m2"]
    assert [s.nbytes for s in pub.layout] == [24, 20, 32, 256, 256]
    with pub.begin(timeout=WAIT_S) as slab:
        # the slab's own arrays have the view dtypes too
        assert [slab.numpy(k).dtype for k in w] == [np.uint16, np.uint32, np.uint64,
                                                    np.uint8, np.uint8]
        slab.abort()
    v = pub.publish(w, 7)
    with client.subscriber("added").acquire() as view:
        assert view.version == v and view.step == 7
        got = view.state_dict("numpy")
        for k, a in w.items():
            assert got[k].dtype == a.dtype and got[k].shape == a.shape
            assert got[k].tobytes() == a.tobytes(), k
        del got


def test_publisher_like_maps_numpy_unsigned(client):
    w = added_weights()
    pub = client.publisher_like("like", {k: w[k] for k in ("u16", "u32", "u64")})
    assert [s.dtype for s in pub.layout] == ["u16", "u32", "u64"]
    # uint8 stays u8: an 8-bit float is declared by name, never guessed
    assert client.publisher_like("bytes", {"b": w["e4m3"]}).layout[0].dtype == "u8"


def test_sources_that_would_not_be_bit_exact_are_refused(client):
    pub = client.publisher("strict", ADDED)
    w = added_weights()
    bad = [("e4m3", [0.5] * 256, "raw bits as a numpy uint8"),
           ("e4m3", np.zeros(256, np.float32), "float32, the layout says f8_e4m3fn"),
           ("e5m2", np.zeros((2, 128), np.int8), "int8, the layout says f8_e5m2"),
           ("u64", w["u64"].astype(np.int64), "int64, the layout says u64"),
           ("u16", w["u16"].astype(np.int16), "int16, the layout says u16")]
    for name, src, why in bad:
        with pytest.raises(TypeError, match=why):
            pub.publish(dict(w, **{name: src}), 1)
    sub = client.subscriber("strict")
    with pytest.raises(wsync.NoDataError):      # nothing refused was published
        sub.acquire()
    # integers are raw bits and are taken as such
    v = pub.publish(dict(w, e4m3=list(range(256))), 2)
    with sub.acquire() as view:
        assert view.version == v and view.step == 2
        assert view.numpy("e4m3").tolist() == list(range(256))


# ---- torch ------------------------------------------------------------------


def _torch():
    return pytest.importorskip("torch", reason="python3-torch is not installed")


def test_torch_dtype_names_resolve():
    torch = _torch()
    for attr, name in (("uint16", "u16"), ("uint32", "u32"), ("uint64", "u64"),
                       ("float8_e4m3fn", "f8_e4m3fn"), ("float8_e5m2", "f8_e5m2")):
        assert _dtypes.code_of(attr) == _dtypes.CODE[name]
        if hasattr(torch, attr):
            assert _dtypes.code_of(getattr(torch, attr)) == _dtypes.CODE[name]
            assert _dtypes.torch_dtype(_dtypes.CODE[name]) is getattr(torch, attr)
        else:
            with pytest.raises(TypeError, match="needs torch.%s: torch 2.[13] adds it" % attr):
                _dtypes.torch_dtype(_dtypes.CODE[name])


def test_torch_views_of_the_8bit_floats(client):
    torch = _torch()
    w = added_weights()
    client.publisher("f8", ADDED).publish(w, 1)
    with client.subscriber("f8").acquire() as view:
        for name, attr in (("e4m3", "float8_e4m3fn"), ("e5m2", "float8_e5m2")):
            t = view.torch(name)
            if hasattr(torch, attr):
                assert t.dtype == getattr(torch, attr)
                bits = t.view(torch.uint8)
            else:                        # raw bits, as numpy has them
                assert t.dtype == torch.uint8
                bits = t
            assert bits.clone().numpy().tobytes() == w[name].tobytes()
            del t, bits


def test_torch_unsigned_views_exist_or_refuse(client):
    torch = _torch()
    w = added_weights()
    client.publisher("u", ADDED).publish(w, 1)
    with client.subscriber("u").acquire() as view:
        for name in ("u16", "u32", "u64"):
            attr = "uint" + name[1:]
            if hasattr(torch, attr):
                t = view.torch(name)
                assert t.dtype == getattr(torch, attr)
                signed = getattr(torch, "int" + name[1:])
                assert t.view(signed).clone().numpy().tobytes() == w[name].tobytes()
                del t
            else:
                # never a signed tensor whose top half reads as negative
                with pytest.raises(TypeError, match="tensor '%s' is %s, which needs torch.%s: "
                                   "torch 2.3 adds it" % (name, name, attr)):
                    view.torch(name)
        if not hasattr(torch, "uint32"):
            with pytest.raises(TypeError, match="read it with numpy"):
                view.state_dict("torch")


def test_torch_sources_for_the_added_dtypes(client):
    torch = _torch()
    w = added_weights()
    pub = client.publisher("tsrc", ADDED)
    src = dict(w)
    # an 8-bit float from its raw bits in a uint8 tensor, bit for bit
    src["e4m3"] = torch.from_numpy(w["e4m3"])
    src["e5m2"] = torch.from_numpy(w["e5m2"])
    v = pub.publish(src, 3)
    with client.subscriber("tsrc").acquire() as view:
        assert view.version == v
        assert view.numpy("e4m3").tobytes() == w["e4m3"].tobytes()
        assert view.numpy("e5m2").tobytes() == w["e5m2"].tobytes()
    # an int8 tensor is not an 8-bit float's bits; signed is not unsigned
    with pytest.raises(TypeError, match="i8, the layout says f8_e4m3fn"):
        pub.publish(dict(w, e4m3=torch.zeros(256, dtype=torch.int8)), 4)
    if not hasattr(torch, "uint32"):
        with pytest.raises(TypeError, match=r"i32, the layout says u32 \(torch.uint32 needs "
                           r"torch 2.3: pass a numpy uint32 array\)"):
            pub.publish(dict(w, u32=torch.from_numpy(w["u32"].view(np.int32))), 4)
    if not hasattr(torch, "float8_e4m3fn"):
        with pytest.raises(TypeError, match=r"torch.float8_e4m3fn needs torch 2.1: pass "
                           r"its raw bits as a uint8 tensor"):
            pub.publish(dict(w, e4m3=torch.zeros(256)), 4)
    with client.subscriber("tsrc").acquire() as view:
        assert view.version == v              # nothing refused was published


def test_load_into_checks_the_added_dtypes(client):
    torch = _torch()
    w = added_weights()
    client.publisher("load", ADDED).publish(w, 1)
    dest = {"e4m3": torch.zeros(256, dtype=torch.uint8)}
    with client.subscriber("load").acquire() as view:
        if hasattr(torch, "float8_e4m3fn"):
            tgt = {"e4m3": torch.zeros(256, dtype=torch.float8_e4m3fn)}
            view.load_into(tgt, strict=False)
            assert tgt["e4m3"].view(torch.uint8).numpy().tobytes() == w["e4m3"].tobytes()
        with pytest.raises(wsync.MismatchError) as e:
            view.load_into(dest, strict=False)
        assert e.value.mismatched[0][:3] == ("e4m3", "dtype", "uint8")
        assert e.value.mismatched[0][3].startswith("float8_e4m3fn")
        if not hasattr(torch, "float8_e4m3fn"):
            assert e.value.mismatched[0][3] == "float8_e4m3fn (torch 2.1 or later)"
    assert not dest["e4m3"].any()             # nothing copied
