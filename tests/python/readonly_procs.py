"""The child of test_readonly.py: takes a view and tries every way out of it
to something writable, writing through whatever it gets. It reports each way
on a pipe before trying it, so a way that gives a writable array over the
read-only mapping (the write kills the process with SIGSEGV) is named by the
parent as the last one tried."""
import copy
import os
import pickle
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PKG = os.path.abspath(os.path.join(_HERE, "..", "..", "libclient", "python"))
if _PKG not in sys.path:
    sys.path.insert(0, _PKG)

import numpy as np  # noqa: E402

import wsync  # noqa: E402


def _outcome(fn):
    """What fn did: "refused: <exception>" or whatever it returned."""
    try:
        return fn()
    except (ValueError, TypeError, RuntimeError, BufferError) as e:
        kind = "ReadOnlyError" if isinstance(e, wsync.ReadOnlyError) else type(e).__name__
        return "refused: %s" % kind


def _write_array(a):
    """Makes numpy array a writeable if numpy lets it, and writes through it."""
    a.flags.writeable = True
    a.reshape(-1)[:1] = 7
    return "written"


def _array_way(make):
    def way():
        a = make()
        if not isinstance(a, np.ndarray):
            return "not an array: %s" % type(a).__name__
        if a.flags.writeable:
            return "writeable"
        return _write_array(a)
    return way


def _copy_way(make, write):
    """A way that must give a copy: writes through it (the parent checks
    the view's bytes are unchanged afterwards)."""
    def way():
        write(make())
        return "copy"
    return way


def ways(view, torch):
    nn = torch.nn
    t = view.torch("w")
    half = view.torch("h")

    def tensor_write(x):
        x.view(-1)[0] = 7
        return "written"

    def param():
        p = nn.Parameter(t)
        if not isinstance(p, wsync.ReadOnlyTensor):
            return "plain %s" % type(p).__name__
        return tensor_write(p)

    def param_data():
        return tensor_write(nn.Parameter(t, requires_grad=False).data)

    def buffer_item():
        mv = view.buffer()
        mv[0] = 1
        return "written"

    def np_from_dlpack():
        if not hasattr(np, "from_dlpack"):
            return "refused: n/a"
        return _write_array(np.from_dlpack(t))

    def storage(name):
        def way():
            if not hasattr(t, name):
                return "refused: n/a"
            s = getattr(t, name)()
            s[0] = 7
            return "written"
        return way

    return [
        ("view.numpy() made writeable", _array_way(lambda: view.numpy("w"))),
        ("np.asarray(view.numpy())", _array_way(lambda: np.asarray(view.numpy("w")))),
        ("np.asarray(tensor)", _array_way(lambda: np.asarray(t))),
        ("np.array(tensor, copy=False)", _array_way(lambda: np.array(t, copy=False))),
        ("tensor.numpy()", _array_way(lambda: t.numpy())),
        ("tensor slice, strided .numpy()", _array_way(lambda: t[1:, ::2].numpy())),
        ("tensor.view(int32).numpy()", _array_way(lambda: t.view(torch.int32).numpy())),
        ("np.asarray(state_dict tensor)",
         _array_way(lambda: np.asarray(view.state_dict("torch")["w"].reshape(-1)))),
        ("np.frombuffer(view.buffer())", _array_way(lambda: np.frombuffer(view.buffer(),
                                                                          np.uint8))),
        ("np.asarray(memoryview(view.numpy()))",
         _array_way(lambda: np.asarray(memoryview(view.numpy("w"))))),
        ("view.buffer()[0] = 1", buffer_item),
        ("tensor.__dlpack__()", lambda: t.__dlpack__() and "exported"),
        ("torch.from_dlpack(tensor)", lambda: tensor_write(torch.from_dlpack(t))),
        ("torch.from_dlpack(tensor.__dlpack__())",
         lambda: tensor_write(torch.from_dlpack(t.__dlpack__()))),
        ("np.from_dlpack(tensor)", np_from_dlpack),
        ("tensor.storage()", storage("storage")),
        ("tensor._storage()", storage("_storage")),
        ("tensor.untyped_storage()", storage("untyped_storage")),
        ("tensor.as_subclass(torch.Tensor)",
         lambda: tensor_write(t.as_subclass(torch.Tensor))),
        ("nn.Parameter(tensor)", param),
        ("nn.Parameter(tensor).data", param_data),
        ("batch_norm(training=True) over its running stats",
         lambda: nn.functional.batch_norm(torch.randn(3, 6), t[0], t[1], training=True) is
         not None and "written"),
        ("embedding(max_norm=...) of it",
         lambda: nn.functional.embedding(torch.tensor([0, 1]), t, max_norm=0.5) is not None and
         "written"),
        ("np.asarray(bf16 tensor)", _array_way(lambda: np.asarray(half))),
        ("np.asarray(tensor, dtype=float64)",
         _copy_way(lambda: np.asarray(t, dtype=np.float64), _write_array)),
        ("bytearray(view.buffer())",
         _copy_way(lambda: bytearray(view.buffer()), lambda b: b.__setitem__(0, 1))),
        ("pickle of a tensor", _copy_way(lambda: pickle.loads(pickle.dumps(t)), tensor_write)),
        ("copy.deepcopy(tensor)", _copy_way(lambda: copy.deepcopy(t), tensor_write)),
        ("tensor.clone()", _copy_way(lambda: t.clone(), tensor_write)),
        ("torch.tensor(tensor)", _copy_way(lambda: torch.tensor(t), tensor_write)),
        ("np.array(tensor)", _copy_way(lambda: np.array(t), _write_array)),
    ]


def try_every_way(endpoint, model, conn):
    """Runs every way, sending ("try", name) before and ("done", name,
    outcome) after each; at the end ("bytes", the view's bytes), read again
    after all the attempts."""
    import warnings

    import torch
    warnings.simplefilter("ignore")
    with wsync.connect(endpoint, "readonly-child") as client:
        sub = client.subscriber(model)
        with sub.wait(timeout=15.0) as view:
            for name, way in ways(view, torch):
                conn.send(("try", name))
                conn.send(("done", name, _outcome(way)))
            conn.send(("bytes", bytes(view.buffer())))
    conn.close()
