"""wsync.rl.WsyncWeightSyncScheme: TorchRL's WeightSyncScheme interface and
semantics. A TorchRL-style multi-process collector drives it against a
stand-in of TorchRL's base class (torchrl_collector.py, in its own
interpreter so that wsync.rl subclasses the stand-in); the rest of the
contract is checked here with the scheme standing alone."""
import os
import pickle
import re
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import wsync
from conftest import ROOT, WAIT_S

torch = pytest.importorskip("torch", reason="python3-torch is not installed")
import wsync.rl as rl  # noqa: E402

nn = torch.nn
HERE = os.path.dirname(os.path.abspath(__file__))


def net(seed, width=16):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, width), nn.BatchNorm1d(width), nn.Tanh(),
                         nn.Linear(width, 2))


def same(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return set(sa) == set(sb) and all(torch.equal(x, sb[k]) for k, x in sa.items())


def step(model, value):
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)


@pytest.mark.parametrize("case,start,strategy", [
    ("main", "spawn", "tensordict"),
    ("main", "fork", "state_dict"),
    ("mismatch", "fork", "tensordict"),
    ("mismatch", "spawn", "state_dict"),
    ("two", "fork", "tensordict"),
    ("kill-swap", "spawn", "tensordict"),
])
def test_torchrl_s_collector_drives_the_scheme(broker, case, start, strategy):
    """The stand-in of TorchRL's multi-process collector (it sends the
    workers a meta policy, and rebuilds a worker's error from its message,
    as TorchRL 0.14.0 does) with the scheme; see torchrl_collector.py for
    each case: main (bit-exact on send()'s return, nested weights, the
    cascade, a SIGKILLed worker), mismatch (the parent sees MismatchError),
    two (two schemes in one process), kill-swap (SIGKILL during a swap)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "libclient", "python"))
    p = subprocess.run([sys.executable, os.path.join(HERE, "torchrl_collector.py"),
                        "--endpoint", broker.sock, "--strategy", strategy, "--start", start,
                        "--case", case],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=300)
    assert p.returncode == 0 and p.stdout.rstrip().endswith("OK"), p.stdout[-6000:]


@pytest.fixture
def sender(broker):
    trainer = net(1)
    s = rl.WsyncWeightSyncScheme("state_dict", endpoint=broker.sock, timeout=WAIT_S)
    s.init_on_sender(model_id="policy", model=trainer, num_workers=1)
    s.connect()
    s.trainer = trainer
    yield s
    s.shutdown()


def receiver_of(sender, policy, **kw):
    r = pickle.loads(pickle.dumps(sender))          # what a worker gets
    for k, v in kw.items():
        setattr(r, k, v)
    r.init_on_receiver(model_id="policy", model=policy, worker_idx=0)
    return r


def test_arguments_are_checked_at_once(broker):
    with pytest.raises(ValueError, match=r"name='policy'"):
        rl.WsyncWeightSyncScheme("policy", broker.sock)        # wsync 0.2's call
    for kw, exc in (({"sync": 1}, TypeError), ({"background": "yes"}, TypeError),
                    ({"name": 3}, TypeError), ({"timeout": -1}, ValueError),
                    ({"slots": -1}, ValueError)):
        with pytest.raises(exc):
            rl.WsyncWeightSyncScheme(**kw)
    s = rl.WsyncWeightSyncScheme(endpoint=broker.sock)
    with pytest.raises(TypeError, match="not str.*name='policy'"):
        s.create_receiver("policy")                        # a name where the module goes
    with pytest.raises(TypeError, match="not str"):
        s.init_on_receiver(model_id="policy", model="policy")
    assert not s.initialized_on_receiver
    with pytest.raises(RuntimeError, match="init_on_sender"):
        s.connect()
    with pytest.raises(RuntimeError, match="init_on_receiver"):
        s.receive(timeout=0)


def test_receive_returns_the_weights_or_none_and_blocks_by_default(sender):
    policy = net(2)
    rx = receiver_of(sender, policy, background=False)
    with pytest.raises(RuntimeError, match="connect"):
        rx.receive(timeout=0)
    rx.connect(worker_idx=0)                    # the first weights, applied
    try:
        assert same(policy, sender.trainer) and rx.version == sender.version
        assert rx.receive(timeout=0) is None    # nothing newer
        assert rx.receive(timeout=0.05) is None
        assert rx.lag().versions_behind == 0
        step(sender.trainer, 3.0)
        v = sender.send_async()
        assert rx.lag().versions_behind == 1 and rx.lag().latest_version == v
        got = rx.receive()                      # default: blocks until there is one
        assert isinstance(got, dict) and torch.equal(got["0.weight"], policy[0].weight)
        assert got["0.weight"].data_ptr() == policy[0].weight.data_ptr()   # the model's own
        assert same(policy, sender.trainer) and rx.version == v
        # a blocking receive wakes on the next send
        out = []
        th = threading.Thread(target=lambda: out.append(rx.receive()))
        th.start()
        step(sender.trainer, 4.0)
        sender.send_async()
        th.join(WAIT_S)
        assert out and out[0] is not None and torch.all(policy[0].weight == 4.0)
        with pytest.raises(RuntimeError, match="sender"):
            sender.receive(timeout=0)
        with pytest.raises(RuntimeError, match="already"):
            rx.connect()
    finally:
        rx.shutdown()


def test_tensordict_strategy_returns_nested_weights(sender, broker):
    s = rl.WsyncWeightSyncScheme(name="td", endpoint=broker.sock, background=False)
    trainer, policy = net(5), net(6)
    s.init_on_sender(model=trainer)
    s.connect()
    rx = pickle.loads(pickle.dumps(s))
    rx.init_on_receiver(model_id="policy", model=policy)
    rx.connect()
    try:
        step(trainer, 2.0)
        s.send_async()
        got = rx.receive(timeout=WAIT_S)
        try:
            import tensordict  # noqa: F401
            pytest.skip("tensordict installed: receive() gives a TensorDict")
        except ImportError:
            pass
        assert torch.equal(got["0"]["weight"], policy[0].weight)   # nested, as TensorDict
        assert torch.equal(got["1"]["running_mean"], policy[1].running_mean)
        # and nested weights go out as well as they come in
        nested = {"0": {"weight": torch.full((16, 4), 7.0), "bias": torch.zeros(16)}}
        flat = dict(trainer.state_dict())
        flat.pop("0.weight"), flat.pop("0.bias")
        nested.update(rl._unflatten(flat))
        s.send_async(nested)
        rx.receive(timeout=WAIT_S)
        assert torch.all(policy[0].weight == 7.0)
    finally:
        rx.shutdown()
        s.shutdown()


def test_a_synchronous_send_waits_for_workers_and_names_the_late(sender):
    rx = receiver_of(sender, net(2), background=False)
    rx.connect()
    try:
        sender.timeout = 0.3
        with pytest.raises(TimeoutError, match="torchrl-worker-policy-[0-9a-f]+-0"):
            sender.send()                       # rx never receives
        assert rx.receive(timeout=0) is not None
        sender.wait_async(timeout=WAIT_S)       # now it has
        rx.background = True
        rx._start_background()
        sender.timeout = WAIT_S
        for value in range(5):
            step(sender.trainer, float(value))
            sender.send()
            assert torch.all(rx.model[0].weight == float(value))   # applied on return
        with pytest.raises(ValueError, match="not registered"):
            sender.send(worker_ids=[3])
    finally:
        rx.shutdown()


def test_the_lock_is_free_while_the_background_thread_waits(sender):
    """The background receiver waits for versions without scheme.lock: a
    rollout step taking it is not stalled (it used to wait up to 0.25 s,
    the thread's wait slice). Versions are still applied under the lock:
    none lands while a step holds it."""
    policy = net(2)
    rx = receiver_of(sender, policy)            # background thread on
    rx.connect()
    try:
        time.sleep(0.3)                         # the thread is in its wait now
        waits = []
        for _ in range(50):
            t0 = time.monotonic()
            with rx.lock:
                waits.append(time.monotonic() - t0)
                time.sleep(0.002)               # a rollout step
            time.sleep(0.003)
        slow = [w for w in waits if w > 0.02]
        # (one slow acquisition is left to the scheduler of a loaded machine)
        assert len(slow) <= 1 and max(waits) < 0.1, \
            "scheme.lock waits (ms): %s" % ", ".join("%.1f" % (w * 1e3) for w in waits)
        # a version that comes while a step holds the lock waits for it
        with rx.lock:
            before = policy[0].weight.clone()
            step(sender.trainer, 6.0)
            v = sender.send_async()
            time.sleep(0.3)
            assert torch.equal(policy[0].weight, before) and rx.version < v
        sender.wait_async(timeout=WAIT_S)       # applied once the step let go
        assert rx.version == v and torch.all(policy[0].weight == 6.0)
        # and sends keep being applied with steps taking the lock in between
        for value in (7.0, 8.0, 9.0):
            step(sender.trainer, value)
            sender.send()
            with rx.lock:
                assert torch.all(policy[0].weight == value)
        assert rx.last_error is None
    finally:
        rx.shutdown()


def test_receive_and_the_background_thread_apply_each_version_once(sender):
    """A receive() beside the background thread: each version is applied by
    one of them, and a receive(timeout=0) with nothing new returns None at
    once."""
    policy = net(2)
    rx = receiver_of(sender, policy)
    rx.connect()
    try:
        got = rx.received
        for value in range(1, 6):
            step(sender.trainer, float(value))
            v = sender.send_async()
            rx.receive(timeout=0.05)            # races the background thread
            sender.wait_async(timeout=WAIT_S)
            assert rx.version == v and torch.all(policy[0].weight == float(value))
        assert rx.received == got + 5
        t0 = time.monotonic()
        assert rx.receive(timeout=0) is None
        assert time.monotonic() - t0 < 0.1
    finally:
        rx.shutdown()


def test_one_session_per_worker_acknowledges_exactly(sender):
    """A worker holds one broker session, whose subscription counts a
    version for send() only once the worker acknowledged it (applied)."""
    rx = receiver_of(sender, net(2), background=False)
    rx.connect()
    try:
        models = {m.name: m for m in sender._end.client.models()}
        assert models[sender.wsync_name].subscribers == 1
        step(sender.trainer, 3.0)
        v = sender.send_async()
        with rx._end.sub.wait(after=v - 1, timeout=WAIT_S):
            pass                                # taken, not applied
        with pytest.raises(TimeoutError):
            sender.wait_async(timeout=0.3)
        assert rx.receive(timeout=WAIT_S) is not None      # applies, then acks
        sender.wait_async(timeout=WAIT_S)
        assert torch.all(rx.model[0].weight == 3.0)
    finally:
        rx.shutdown()


def test_a_synchronous_send_asks_for_the_workers_right_behind_its_commit(sender,
                                                                           monkeypatch):
    """send() with sync=True commits without waiting for the broker's
    confirmation (commit_async) and asks at once for the workers'
    acknowledgements, which the broker answers at the same look; the
    confirmation is collected before send() returns. send_async() still
    commits the usual way."""
    rx = receiver_of(sender, net(2))
    rx.connect(worker_idx=0)
    try:
        pub = sender._end.publisher
        cls = type(pub)
        early = []
        orig = cls.publish_async
        monkeypatch.setattr(cls, "publish_async",
                            lambda self, *a, **k: early.append(1) or orig(self, *a, **k))
        for value in (2.0, 3.0):
            step(sender.trainer, value)
            sender.send()
            assert same(rx.model, sender.trainer)
            assert not sender._end.unconfirmed
            with pytest.raises(wsync.WsyncError, match="no async commit outstanding"):
                pub.wait_ack(0)
        assert early == [1, 1]
        step(sender.trainer, 4.0)
        v = sender.send_async()
        assert early == [1, 1] and not sender._end.unconfirmed
        sender.wait_async()
        assert same(rx.model, sender.trainer) and rx.version == v
    finally:
        rx.shutdown()


def test_send_follows_a_killed_and_restarted_broker(sender, broker):
    """kill -9 of the broker and a new one: the sender and the worker follow
    it by themselves, and a synchronous send() returns once the worker
    applied the new weights, through the new broker."""
    rx = receiver_of(sender, net(2))            # with the background thread
    rx.connect()
    try:
        assert same(rx.model, sender.trainer)
        broker.kill()
        broker.restart()
        for value in (3.0, 4.0):
            step(sender.trainer, value)
            sender.send()
            assert torch.all(rx.model[0].weight == value)   # applied on return
        assert sender._end.client.reconnects == 1 and rx._end.client.reconnects == 1
        assert rx.last_error is None or "went away" in str(rx.last_error)
    finally:
        rx.shutdown()


def test_a_model_swapped_after_connect_gets_the_weights(sender):
    """TorchRL's workers set scheme.model to their collector's copy of the
    policy after connect(): that copy must hold the weights too."""
    rx = receiver_of(sender, net(2), background=False)
    rx.connect()
    try:
        copy = net(9)
        rx.model = copy
        assert same(copy, sender.trainer)
        step(sender.trainer, 5.0)
        sender.send_async()
        assert rx.receive(timeout=WAIT_S) is not None
        assert torch.all(copy[0].weight == 5.0)
    finally:
        rx.shutdown()


def test_a_replaced_model_is_followed(sender, broker):
    """A new trainer publishes the name with another layout (replace): the
    worker subscribes again and applies it, its versions going on."""
    rx = receiver_of(sender, net(2), background=False)
    rx.connect()
    try:
        v_old = rx.version
        sender.shutdown()                       # the first job's trainer goes
        wide = net(7, width=24)
        s2 = rl.WsyncWeightSyncScheme("state_dict", endpoint=broker.sock,
                                      name=sender.wsync_name)      # the same model
        s2.init_on_sender(model=wide)
        s2.connect()                            # replaces the model: another layout
        rx.model = net(8, width=24)             # the worker's new policy: applied at once
        assert same(rx.model, wide) and rx.version > v_old
        step(wide, 2.0)
        s2.send_async()
        assert rx.receive(timeout=WAIT_S) is not None
        assert same(rx.model, wide) and rx.version > v_old
        s2.shutdown()
    finally:
        rx.shutdown()


def test_connect_without_a_sender_says_so(broker):
    """The library's hint (the model was never published: is the name
    right?) survives, with connect()'s own part after it."""
    s = rl.WsyncWeightSyncScheme(name="polcy", endpoint=broker.sock, connect_timeout=0.2)
    s.init_on_receiver(model_id="policy", model=net(0), worker_idx=3)
    with pytest.raises(wsync.WsyncTimeoutError) as e:
        s.connect()
    msg = str(e.value)
    assert "model 'polcy'" in msg and "never been published" in msg, msg
    assert "is the name right?" in msg and "within 0.2 s" in msg, msg
    assert "worker 3 got no weights within 0.2 s of connect()" in msg, msg
    assert msg.index("never been published") < msg.index("connect()"), msg
    assert not s.synchronized_on_receiver


def test_a_policy_that_does_not_fit_raises_and_loads_nothing(sender):
    other = nn.Sequential(nn.Linear(4, 8))
    before = {k: v.clone() for k, v in other.state_dict().items()}
    rx = receiver_of(sender, other, background=False)
    with pytest.raises(wsync.MismatchError):
        rx.connect()
    assert all(torch.equal(v, other.state_dict()[k]) for k, v in before.items())


def test_model_ids_resolve_in_the_context():
    class Env:
        value_net = "v"

    class Ctx:
        env = Env()
        nets = ["a", "b"]
        models = {"pi": "p"}
        policy = "pol"
    c = Ctx()
    assert rl.resolve(c, "policy") == "pol"
    assert rl.resolve(c, "env.value_net") == "v"
    assert rl.resolve(c, "nets[1]") == "b"
    assert rl.resolve(c, "models['pi']") == "p" and rl.resolve(c, 'models["pi"]') == "p"
    with pytest.raises(AttributeError, match="no attribute 'critic'"):
        rl.resolve(c, "env.critic")


def test_apply_weights_copies_in_place(sender):
    policy = net(3)
    rx = receiver_of(sender, policy, background=False)
    ptr = policy[0].weight.data_ptr()
    rx.apply_weights({"0": {"weight": torch.ones(16, 4)}})      # nested, partial
    assert torch.all(policy[0].weight == 1) and policy[0].weight.data_ptr() == ptr
    with pytest.raises(ValueError, match="shape"):
        rx.apply_weights({"0.weight": torch.ones(3)})
    with pytest.raises(KeyError, match="nope"):
        rx.apply_weights({"nope": torch.ones(3)})
    with pytest.raises(RuntimeError, match="sender"):
        sender.apply_weights({})


def test_pickled_schemes_carry_no_connection(sender):
    s2 = pickle.loads(pickle.dumps(sender))
    assert not s2.initialized_on_sender and not s2.synchronized_on_sender
    assert s2.endpoint == sender.endpoint and s2.wsync_name == sender.wsync_name
    assert s2.version == 0 and s2.model is None
    ref = sender.ref()
    assert rl.WsyncWeightSyncScheme.from_ref(ref).wsync_name == sender.wsync_name


def test_the_deprecated_helpers_still_work(broker):
    s = rl.WsyncWeightSyncScheme(name="old", endpoint=broker.sock, sync=False)
    trainer, policy = net(1), net(2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        tx = s.create_sender(trainer)
        rx = s.create_receiver(policy)
    assert sum(issubclass(x.category, DeprecationWarning) for x in w) == 2
    with tx, rx:
        assert rx.receive(timeout=0) is False
        tx.send_weights()
        assert rx.receive(timeout=WAIT_S) is True and same(policy, trainer)
        assert rx.lag().versions_behind == 0


@pytest.fixture
def three(broker):
    """A sender with three registered workers, each a receiver with its own
    session (background threads on)."""
    trainer = net(1)
    s = rl.WsyncWeightSyncScheme("state_dict", name="three", endpoint=broker.sock,
                                 timeout=WAIT_S)
    s.init_on_sender(model_id="policy", model=trainer, num_workers=3)
    s.connect()
    s.trainer = trainer
    rxs = []
    try:
        for i in range(3):
            r = pickle.loads(pickle.dumps(s))
            r.init_on_receiver(model_id="policy", model=net(10 + i), worker_idx=i)
            r.connect()
            rxs.append(r)
        yield s, rxs
    finally:
        for r in rxs:
            r.shutdown()
        s.shutdown()


def test_sender_transports_share_one_version(three):
    """TorchRL's loop over the per-worker transports (send_weights_async
    with the same prepared weights on each, then wait_ack on each)
    publishes one version and waits for it once; a loop of send_weights
    likewise. Weights changed in place, another object, a transport
    sending again or a send() in between: a new version."""
    s, rxs = three
    ts = [s.sender_transports[i] for i in range(3)]
    assert [t.worker_idx for t in ts] == [0, 1, 2] and all(t.role == "sender" for t in ts)
    v0 = s.version
    # TorchRL's WeightSyncScheme.send, over the transports
    step(s.trainer, 2.0)
    prepared = s.prepare_weights(None)
    vs = [t.send_weights_async(prepared) for t in ts]
    assert vs == [v0 + 1] * 3 and s.version == v0 + 1        # published once
    for t in ts:
        t.wait_ack()
    assert all(torch.all(r.model[0].weight == 2.0) and r.version == v0 + 1 for r in rxs)
    # a synchronous send_weights per transport: one version; the first
    # wait covers every worker (wsync counts acknowledgements per model)
    step(s.trainer, 3.0)
    prepared = s.prepare_weights(None)
    assert ts[0].send_weights(prepared) == v0 + 2
    assert all(torch.all(r.model[0].weight == 3.0) for r in rxs)   # applied on return
    assert [t.send_weights(prepared) for t in ts[1:]] == [v0 + 2] * 2
    assert s.version == v0 + 2
    # the same module, trained in place between two transports: republished
    assert ts[0].send_weights(s.trainer) == v0 + 3
    step(s.trainer, 4.0)
    assert ts[1].send_weights(s.trainer) == v0 + 4
    assert all(torch.all(r.model[0].weight == 4.0) for r in rxs)
    # a state_dict's tensors share the parameters' version counters
    sd = s.trainer.state_dict()
    assert ts[0].send_weights(sd) == v0 + 5
    step(s.trainer, 5.0)
    assert ts[1].send_weights(sd) == v0 + 6
    assert all(torch.all(r.model[0].weight == 5.0) for r in rxs)
    # the same transport again, or another weights object: a new version
    assert ts[1].send_weights(sd) == v0 + 7
    assert ts[2].send_weights(s.trainer.state_dict()) == v0 + 8
    # a scheme.send() in between: the transports' version is not joined
    sd = s.trainer.state_dict()
    assert ts[0].send_weights(sd) == v0 + 9
    s.send()
    assert ts[1].send_weights(sd) == v0 + 11
    # weights whose changes cannot be told (numpy arrays) are never joined
    assert s._fingerprint({"w": np.zeros(3)})[1] is None
    assert all(r.last_error is None for r in rxs)


def test_transport_checks(three):
    s, rxs = three
    tx, rt = s.sender_transports[0], rxs[0].receiver_transport
    assert rt.role == "receiver" and rt.worker_idx == 0
    with pytest.raises(RuntimeError, match="receiver's transport"):
        rt.send_weights(s.trainer)
    with pytest.raises(RuntimeError, match="sender's transport"):
        tx.receive_weights(timeout=0)
    for bad, exc in ((-1, ValueError), (float("nan"), ValueError), ("1", TypeError),
                     (True, TypeError)):
        with pytest.raises(exc, match="timeout"):
            rt.receive_weights(timeout=bad)
        with pytest.raises(exc, match="timeout"):
            tx.wait_ack(timeout=bad)
    with pytest.raises(ValueError, match="worker_idx"):
        s.create_transport(worker_idx=-1)
    with pytest.raises(TypeError, match="worker_idx"):
        s.create_transport(worker_idx="0")
    with pytest.raises(ValueError, match="role"):
        s.create_transport(role="both")
    assert s.create_transport(worker_idx=5).role == "sender"
    assert rxs[0].create_transport().role == "receiver"
    # set-up through every transport (TorchRL's base class does): once
    v = s.version
    for t in s.sender_transports.values():
        t.setup_connection_and_weights_on_sender()
    assert s.version == v and rt.setup_connection_and_weights_on_receiver(worker_idx=0) is None
    assert tx.check_connection()


def test_receive_weights_leaves_the_ack_to_send_ack(sender):
    """TorchRL's transport protocol: receive_weights applies and returns
    (model_id, weights) or None; the scheme (or its caller) cascades and
    acknowledges with send_ack, which lets a synchronous send return."""
    policy = net(2)
    rx = receiver_of(sender, policy, background=False)
    rx.connect()
    try:
        rt = rx.receiver_transport
        assert rt.receive_weights(timeout=0) is None
        step(sender.trainer, 3.0)
        v = sender.send_async()
        got = rt.receive_weights(timeout=WAIT_S)
        assert got is not None and got[0] == "policy"
        assert torch.equal(got[1]["0.weight"], policy[0].weight) and rx.version == v
        with pytest.raises(TimeoutError):
            sender.wait_async(timeout=0.3)      # applied, not acknowledged yet
        rt.send_ack()
        sender.wait_async(timeout=WAIT_S)
    finally:
        rx.shutdown()


# ---- zero-copy receivers, meta policies, errors from a message, names ----------------

def meta_net(seed, width=16):
    """net() as TorchRL sends it to its workers: every parameter and buffer
    on the meta device (no storage), parameters without grad."""
    m = net(seed, width)
    for prefix, sub in m.named_modules():
        for n, p in list(sub._parameters.items()):
            if p is not None:
                sub._parameters[n] = nn.Parameter(p.data.to("meta"), requires_grad=False)
        for n, b in list(sub._buffers.items()):
            if b is not None:
                sub._buffers[n] = b.to("meta")
    return m


def test_a_meta_policy_is_filled_by_zero_copy_swaps(sender):
    """connect() puts the version's read-only tensors in place of the meta
    ones; each new version is swapped in, nothing copied; the version
    swapped out is released once nothing holds its tensors."""
    import weakref
    policy = meta_net(2)
    assert policy[0].weight.device.type == "meta"
    rx = receiver_of(sender, policy, background=False)
    rx.connect()
    try:
        assert same(policy, sender.trainer)
        w = policy[0].weight
        assert isinstance(w, wsync.ReadOnlyTensor) and not w.requires_grad
        x = torch.randn(5, 4)
        with torch.no_grad():
            assert torch.equal(policy.eval()(x), sender.trainer.eval()(x))
        with pytest.raises(wsync.ReadOnlyError):
            w.add_(1)
        # what TorchRL's worker collector does with the weights it is told
        # of: copies them into the policy, i.e. onto themselves (nothing)
        def cascade():
            weights = rx.weights
            with torch.no_grad():
                for k, t in policy.state_dict(keep_vars=True).items():
                    t.data.copy_(weights[k].data)
        cascade()
        first = weakref.ref(rx._held)
        del w
        step(sender.trainer, 4.0)
        sender.send_async()
        assert rx.receive(timeout=WAIT_S) is not None
        assert torch.all(policy[0].weight == 4.0) and same(policy, sender.trainer)
        import gc
        gc.collect()
        assert first() is None or first().released, "the swapped-out view is still held"
        with pytest.raises(wsync.ReadOnlyError):
            policy[0].weight.data.copy_(torch.zeros(16, 4))    # other values: refused
    finally:
        rx.shutdown()
    assert same(policy, sender.trainer)       # the module keeps its version after shutdown


def test_a_copy_into_a_tensor_without_storage_raises(sender):
    rx = receiver_of(sender, meta_net(2), background=False, zero_copy=False)
    with pytest.raises(wsync.NoStorageError, match="meta"):
        rx.connect()
    assert not rx.synchronized_on_receiver
    view = rx_view = None
    with wsync.connect(sender.endpoint, "meta-copy") as c:
        with c.subscriber(sender.wsync_name).acquire() as view:
            with pytest.raises(wsync.NoStorageError, match="0.weight"):
                view.load_into(meta_net(3))
            rx_view = view
    assert rx_view is not None
    rx2 = receiver_of(sender, meta_net(2), background=False)
    with pytest.raises(wsync.NoStorageError):
        rx2.apply_weights(sender.trainer.state_dict(), inplace=True)
    rx2.apply_weights(sender.trainer.state_dict(), inplace=False)   # to_module: put in
    assert same(rx2.model, sender.trainer)


def test_a_module_on_the_cpu_is_swapped_unless_told_to_copy(sender):
    for zero_copy in (True, False):
        policy = net(2)
        ptr = policy[0].weight.data_ptr()
        rx = receiver_of(sender, policy, background=False, zero_copy=zero_copy)
        rx.connect()
        try:
            assert same(policy, sender.trainer)
            assert isinstance(policy[0].weight, wsync.ReadOnlyTensor) == zero_copy
            assert (policy[0].weight.data_ptr() == ptr) != zero_copy
        finally:
            rx.shutdown()


def test_every_exception_builds_from_one_message_and_pickles():
    """TorchRL rebuilds a worker's error as type(e)(message) in the parent:
    every exception class of the package must take one message; pickling
    keeps the fields of one built the full way."""
    import importlib
    import pkgutil
    classes = set()
    for info in pkgutil.iter_modules(wsync.__path__):
        try:
            mod = importlib.import_module("wsync." + info.name)
        except Exception:          # an optional dependency (the relay's) missing
            continue
        for v in vars(mod).values():
            if isinstance(v, type) and issubclass(v, BaseException) and \
                    v.__module__.startswith("wsync"):
                classes.add(v)
    assert wsync.MismatchError in classes and wsync.BusyError in classes, classes
    msg = "it went wrong\n\nWorker traceback:\n  File x"
    for cls in classes:
        e = cls(msg)
        assert msg in str(e), (cls, str(e))
        e2 = pickle.loads(pickle.dumps(e))
        assert type(e2) is cls and str(e2) == str(e), cls
    full = wsync.BusyError(16, "Device or resource busy", "model 'p': held by 3")
    again = wsync.BusyError(str(full))          # what TorchRL builds from str(e)
    assert (again.errno, again.strerror, again.detail) == (16, "Device or resource busy",
                                                           "model 'p': held by 3")
    assert wsync.BusyError("held").errno == 16 and wsync.WsyncError("x").errno is None
    m = wsync.MismatchError("view v1 of 'p'", ["a"], [], [("b", "shape", (1,), (2,))])
    m2 = pickle.loads(pickle.dumps(m))
    assert m2.missing == ["a"] and m2.mismatched == m.mismatched and str(m2) == str(m)
    assert wsync.MismatchError(str(m)).missing == [] and str(wsync.MismatchError(str(m))) \
        == str(m)


def test_default_names_are_unique_per_scheme_and_travel(broker):
    """Two schemes in one process publish two models; each worker (a
    pickled copy) finds its own; an explicit name wins."""
    a, b = (rl.WsyncWeightSyncScheme("state_dict", endpoint=broker.sock, timeout=WAIT_S)
            for _ in range(2))
    ta, tb = net(1), net(5)
    for s, t in ((a, ta), (b, tb)):
        s.init_on_sender(model_id="policy", model=t, num_workers=1)
        s.connect()
    try:
        assert a.wsync_name != b.wsync_name and a.wsync_name.startswith("policy-")
        ra, rb = receiver_of(a, meta_net(0)), receiver_of(b, meta_net(0))
        ra.connect()
        rb.connect()
        assert same(ra.model, ta) and same(rb.model, tb)
        for value in (1.0, 2.0):
            step(ta, value)
            step(tb, -value)
            a.send()
            b.send()
            assert torch.all(ra.model[0].weight == value)
            assert torch.all(rb.model[0].weight == -value)
        ra.shutdown()
        rb.shutdown()
    finally:
        a.shutdown()
        b.shutdown()
    assert rl.WsyncWeightSyncScheme(name="mine").wsync_name == "mine"
    s = rl.WsyncWeightSyncScheme()
    s.init_on_sender(model_id="nets['pi']", model=net(0))
    assert re.fullmatch(r"nets__pi__-[0-9a-f]{8}", s.wsync_name), s.wsync_name
    r = pickle.loads(pickle.dumps(s))
    r.init_on_receiver(model_id="policy", model=net(0))     # another model_id: same name
    assert r.wsync_name == s.wsync_name


def test_a_synchronous_send_waits_for_the_registered_workers(broker):
    """Workers still starting have not subscribed: the first synchronous
    send waits for as many as were registered, or says how many came."""
    s = rl.WsyncWeightSyncScheme("state_dict", endpoint=broker.sock, timeout=0.4)
    s.init_on_sender(model_id="policy", model=net(1), num_workers=2)
    s.connect()
    try:
        with pytest.raises(TimeoutError, match="0 of the 2 registered workers"):
            s.send()
        s.timeout = WAIT_S
        rxs = [receiver_of(s, net(2)) for _ in range(2)]
        late = threading.Thread(target=lambda: (time.sleep(0.5), rxs[1].connect()))
        rxs[0].connect()
        late.start()
        t0 = time.monotonic()
        step(s.model, 7.0)
        s.send()
        took = time.monotonic() - t0
        late.join()
        assert took >= 0.4, took
        assert all(torch.all(r.model[0].weight == 7.0) for r in rxs)
        for r in rxs:
            r.shutdown()
    finally:
        s.shutdown()


def test_versions_kept_by_a_reference_cycle_are_given_back(sender):
    """Code told of the weights (the cascade) that keeps them in a
    reference cycle would pin each swapped-out version until the garbage
    collector runs: the receiver collects once when the version swapped
    out an update ago is still alive, so sends never run out of slabs."""
    import gc

    class Leaky:
        def update_policy_weights_(self, model_id=None, policy_or_weights=None):
            node = {"weights": policy_or_weights}
            node["self"] = node                 # a cycle holding the tensors

    rx = receiver_of(sender, meta_net(2), background=True)
    ctx = Leaky()
    was = gc.isenabled()
    gc.disable()
    try:
        rx.connect()
        rx.context = ctx
        for value in range(12):                 # more versions than the slabs
            step(sender.trainer, float(value))
            sender.send()
            assert torch.all(rx.model[0].weight == float(value))
    finally:
        if was:
            gc.enable()
        rx.shutdown()


def test_apply_weights_of_a_view_copies_or_swaps_as_told(sender):
    rx = receiver_of(sender, net(2), background=False)
    with wsync.connect(sender.endpoint, "apply-view") as c:
        sub = c.subscriber(sender.wsync_name)
        view = sub.acquire()
        ptr = rx.model[0].weight.data_ptr()
        rx.apply_weights(view, inplace=True)            # copied into the module's tensors
        assert rx.model[0].weight.data_ptr() == ptr and same(rx.model, sender.trainer)
        assert not isinstance(rx.model[0].weight, wsync.ReadOnlyTensor)
        rx.apply_weights(view, inplace=False)           # its tensors put in (to_module)
        assert isinstance(rx.model[0].weight, wsync.ReadOnlyTensor)
        assert same(rx.model, sender.trainer)
        view.release()
