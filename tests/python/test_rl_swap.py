"""wsync.rl's worker swap after the first one: the plan a swap leaves
(SwapPlan: the next version goes into the same places unchecked while the
module looks as the swap left it), the versions swapped out (never read
after their release, never released while a tensor of theirs is used), and
the read-only tensors' .data and copy_, which TorchRL's collectors call on
every tensor after each swap."""
import gc
import pickle

import pytest

import wsync
from conftest import WAIT_S

torch = pytest.importorskip("torch", reason="python3-torch is not installed")
import wsync.rl as rl  # noqa: E402
from wsync import _module  # noqa: E402
from test_rl import meta_net, net  # noqa: E402  (the same nets as the first swap's tests)

nn = torch.nn


def fill(model, value):
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)


def same(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return set(sa) == set(sb) and all(torch.equal(x, sb[k]) for k, x in sa.items())


@pytest.fixture
def pair(broker):
    """A sender (3 slots: one version held beside the module's leaves one
    to write, so every slot is granted again and again) and a connected
    worker without background thread, on a meta policy."""
    trainer = net(1)
    s = rl.WsyncWeightSyncScheme("state_dict", endpoint=broker.sock, timeout=WAIT_S,
                                 slots=3)
    s.init_on_sender(model_id="policy", model=trainer, num_workers=1)
    s.connect()
    r = pickle.loads(pickle.dumps(s))
    r.background = False
    r.init_on_receiver(model_id="policy", model=meta_net(0), worker_idx=0)
    r.connect(worker_idx=0)
    s.trainer, s.rx = trainer, r
    yield s
    r.shutdown()
    s.shutdown()


def update(s, value):
    fill(s.trainer, value)
    s.send_async()
    assert s.rx.receive(timeout=WAIT_S) is not None


def test_later_swaps_follow_the_plan_and_stay_exact(pair, monkeypatch):
    rx = pair.rx
    calls = []
    full = _module.swap_into
    monkeypatch.setattr(_module, "swap_into", lambda *a, **k: calls.append(1) or full(*a, **k))
    for value in (1.0, 2.0, 3.0, 4.0, 5.0):
        update(pair, value)
        assert same(rx.model, pair.trainer)
        assert all(isinstance(t, wsync.ReadOnlyTensor) for t in rx.model.state_dict().values())
    assert calls == [], "a module the last swap left as it was is swapped by the plan"
    w = rx.model[0].weight
    assert isinstance(w, nn.Parameter) and not w.requires_grad


@pytest.mark.parametrize("change", ["parameter", "shape", "buffer", "submodule", "strict"])
def test_a_module_changed_since_the_last_swap_is_checked_again(pair, change, monkeypatch):
    """Whatever changed in the module (a tensor replaced, a buffer or a
    submodule added, strict turned off), the next swap does not follow
    the plan: it checks everything again, and a layout that no longer
    fits raises MismatchError with nothing changed."""
    rx = pair.rx
    update(pair, 1.0)
    model = rx.model
    calls = []
    full = _module.swap_into
    monkeypatch.setattr(_module, "swap_into", lambda *a, **k: calls.append(1) or full(*a, **k))
    if change == "parameter":
        model[0].bias = nn.Parameter(torch.zeros(16))      # a writable one, same shape
    elif change == "shape":
        model[3].weight = nn.Parameter(torch.zeros(2, 17))
    elif change == "buffer":
        model[2].register_buffer("extra", torch.zeros(3))
    elif change == "submodule":
        model[2] = nn.Linear(2, 2)                          # Tanh -> Linear: new names
    else:
        rx.strict = False
    fill(pair.trainer, 2.0)
    pair.send_async()
    if change in ("shape", "buffer", "submodule"):
        with pytest.raises(wsync.MismatchError):
            rx.receive(timeout=WAIT_S)
        assert calls == [1]
        if change == "shape":
            assert model[3].weight.shape == (2, 17)         # nothing changed
        return
    assert rx.receive(timeout=WAIT_S) is not None
    assert calls == [1] and same(model, pair.trainer)
    assert isinstance(model[0].bias, wsync.ReadOnlyTensor)
    update(pair, 3.0)                                       # and the plan again after
    assert calls == [1] and same(model, pair.trainer)


def test_a_plan_is_for_one_module_and_one_layout(pair):
    rx = pair.rx
    update(pair, 1.0)
    plan = rx._plan
    view = rx._held
    other = net(3)
    assert _module.swap_again(plan, view, other, True, {}) is None      # another module
    assert _module.swap_again(plan, view, rx.model, False, {}) is None  # other strictness
    assert _module.swap_again(None, view, rx.model, True, {}) is None
    plan.forget()
    assert _module.swap_again(plan, view, rx.model, True, {}) is None


def test_a_version_swapped_out_is_kept_while_its_tensors_are_used(pair):
    """A tensor of a version taken before later swaps (the tensor itself, or
    its .data) keeps showing that version, however many versions come
    after, in the slots left (3 here): its version stays held, and is
    released once the last of them is gone, so that every slot is granted
    again."""
    rx = pair.rx
    update(pair, 1.0)
    w, d = rx.model[0].weight, rx.model[3].bias.data
    sub_before = rx._end.sub
    for value in range(2, 12):
        update(pair, float(value))
        assert torch.all(w == 1.0) and torch.all(d == 1.0)
        assert torch.all(rx.model[0].weight == float(value))
    del w, d
    gc.collect()
    seen = set()
    for value in range(12, 18):                   # the old slot is granted again
        update(pair, float(value))
        assert same(rx.model, pair.trainer)
        seen.add(rx._held._c.priv_slot)
    assert len(seen) == 3, seen
    assert rx._end.sub is sub_before


def test_data_and_copy_of_the_read_only_tensors(pair):
    rx = pair.rx
    update(pair, 1.0)
    t = rx.model[0].weight
    d = t.data
    assert isinstance(d, wsync.ReadOnlyTensor) and not isinstance(d, nn.Parameter)
    assert d.data_ptr() == t.data_ptr() and torch.equal(d, t)
    assert d.data.data_ptr() == t.data_ptr()
    assert t.data.copy_(t.data) is not None         # onto itself: nothing written
    assert t.copy_(t) is t and t.copy_(d) is t and d.copy_(t) is d
    with pytest.raises(wsync.ReadOnlyError):
        t.data.copy_(torch.zeros(16, 4))             # other values
    with pytest.raises(wsync.ReadOnlyError):
        t.data.copy_(t.data.clone())                 # the same values, other memory
    with pytest.raises(wsync.ReadOnlyError):
        t[0].copy_(t[1])                             # another part of the same view
    with pytest.raises(wsync.ReadOnlyError):
        torch.Tensor.copy_(t, torch.zeros(16, 4))    # past the method: the dispatch
    assert torch.all(t == 1.0)
    # a tensor of a released view: ClosedError, also through .data and copy_
    with wsync.connect(pair.endpoint, "data-of-released") as c:
        with c.subscriber(pair.wsync_name).acquire() as view:
            ro = view.torch("0.weight")
        with pytest.raises(wsync.ClosedError):
            ro.data
        with pytest.raises(wsync.ClosedError):
            ro.copy_(ro)
