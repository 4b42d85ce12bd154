"""wsync.LivePolicy (docs/PYTHON.md, "Live policies"): a module's forward over
the newest version in place, swapping only between calls.

Checked: the output is the version's (zero copy, read-only tensors), threads
calling one policy while versions arrive at ~1 kHz never see two versions in
one call (the weights make a mixture show in the output) and the policy ends
holding one view; buffers the model lacks stay the module's; a layout that
does not fit is a MismatchError; max_lag with a stopped trainer raises by its
timeout naming the last commit, and a version arriving within it is taken;
a collector killed while holding a live view frees its slot; a live policy
keeps acting while the broker is down and follows the restarted one.
"""
import gc
import threading
import time

import pytest

torch = pytest.importorskip("torch")

import wsync  # noqa: E402
from conftest import WAIT_S  # noqa: E402

import live_procs  # noqa: E402

N = 32


def mlp(n=N):
    return live_procs.mlp(n).double()


def weights_of(model, step):
    """Every weight of the version of step equals step: the output for ones
    is N*N*step*step, and a call mixing layers of steps a and b would give
    N*N*a*b."""
    return {k: torch.full(t.shape, float(step), dtype=t.dtype)
            for k, t in model.state_dict().items()}


def expect(step):
    return float(N * N * step * step)


class Trainer:
    """A thread publishing steps 1, 2, ... every period seconds."""

    def __init__(self, sock, model, name="live", period=0.001, slots=0, first=True):
        self.client = wsync.connect(sock, "trainer")
        self.model = model
        self.pub = self.client.publisher_like(name, model.state_dict(), slots=slots)
        self.period = period
        self.step = 0
        self.errors = []
        self.stop = threading.Event()
        if first:
            self.publish()
        self.thread = None

    def publish(self):
        self.step += 1
        return self.pub.publish(weights_of(self.model, self.step), self.step, timeout=WAIT_S)

    def start(self):
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def run(self):
        while not self.stop.is_set():
            try:
                self.publish()
            except Exception as e:       # asserted on by the test
                self.errors.append(e)
                return
            time.sleep(self.period)

    def close(self):
        self.stop.set()
        if self.thread is not None:
            self.thread.join(WAIT_S)
        self.client.close()


def live_views(sub):
    gc.collect()
    return sorted(v.version for v in list(sub._views) if not v.released)


def test_a_call_runs_over_the_newest_version_in_place(broker):
    model = mlp()
    tr = Trainer(broker.sock, model)
    c = wsync.connect(broker.sock, "collector")
    try:
        sub = c.subscriber("live")
        policy = wsync.LivePolicy(sub, mlp())
        x = torch.ones(N, dtype=torch.float64)
        with torch.no_grad():
            assert policy(x).item() == expect(1)
        assert (policy.version, policy.step) == (1, 1)
        assert policy.lag == (0, 0.0)
        # the module's own parameters are untouched (zero copy: not loaded)
        assert all(float(p.flatten()[0]) != 1.0 for p in policy.module.parameters())
        tr.publish()
        tr.publish()
        lag = policy.lag
        assert lag.versions == 2 and lag.seconds >= 0.0
        with torch.no_grad():
            assert policy(x).item() == expect(3)
        assert (policy.version, policy.step) == (3, 3) and policy.lag == (0, 0.0)
        assert live_views(sub) == [3]
        policy.close()
        assert live_views(sub) == []
        with pytest.raises(wsync.ClosedError):
            policy(x)
    finally:
        tr.close()
        c.close()


@pytest.mark.parametrize("how", ["bind", "functional_call"])
def test_threads_calling_while_versions_arrive_at_1khz_never_mix_two(broker, monkeypatch, how):
    if how == "functional_call":    # the way for modules whose tensors it cannot bind
        monkeypatch.setattr(wsync.LivePolicy, "_slots_of", lambda self, m: None)
    model = mlp()
    tr = Trainer(broker.sock, model, period=0.001).start()
    c = wsync.connect(broker.sock, "collector")
    try:
        sub = c.subscriber("live")
        policy = wsync.LivePolicy(sub, mlp())
        x = torch.ones(N, dtype=torch.float64)
        bad, seen, counts = [], set(), []
        end = time.monotonic() + 1.5

        def caller():
            k = 0
            with torch.no_grad():
                while time.monotonic() < end:
                    out = policy(x).item()
                    step = policy.step           # this thread's last call
                    if out != expect(step):
                        bad.append((step, out))
                    seen.add(policy.version)
                    held = policy.held_versions     # the newest, and those calls read
                    if len(held) > len(threads) + 1:
                        bad.append(("held", held))
                    k += 1
            counts.append(k)

        threads = [threading.Thread(target=caller) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_S + 2)
        assert not tr.errors, tr.errors
        assert not bad, "calls mixed versions: %s" % bad[:5]
        assert len(counts) == 4 and min(counts) > 0, counts
        assert len(seen) >= 10, "only %d versions seen while %d were published" % (
            len(seen), tr.step)
        # no call runs now: the policy holds one view, the newest it took
        assert live_views(sub) == [policy.held_versions[0]]
    finally:
        tr.close()
        c.close()


def test_a_version_is_released_when_its_last_call_ends_without_the_collector(broker):
    # torch 1.13's functional_call keeps its mapping in a class that only the
    # garbage collector frees: the policy must not let that hold versions
    model = mlp()
    tr = Trainer(broker.sock, model, slots=2)
    c = wsync.connect(broker.sock, "collector")
    gc.collect()
    gc.disable()
    try:
        sub = c.subscriber("live")
        policy = wsync.LivePolicy(sub, mlp())
        x = torch.ones(N, dtype=torch.float64)
        with torch.no_grad():
            for _ in range(10):
                assert policy(x).item() == expect(tr.step)
                held = [v.version for v in list(sub._views) if not v.released]
                assert held == [tr.step], held
                tr.pub.publish(weights_of(model, tr.step + 1), tr.step + 1, timeout=1.0)
                tr.step += 1
    finally:
        gc.enable()
        tr.close()
        c.close()


def test_writes_into_the_versions_weights_raise_and_a_kept_tensor_is_closed(broker):
    # a call runs the replica bound to the version: whatever the forward does
    # to the weights raises ReadOnlyError (a write would hit the read-only
    # mapping: SIGSEGV), including the writes of batch norm's running stats
    # in training and an embedding's max_norm renormalisation
    writes = {
        "add_": lambda m, x: m.fc.weight.add_(1),
        "data": lambda m, x: m.fc.weight.data.mul_(2),
        "setitem": lambda m, x: m.fc.weight.__setitem__(0, 1.0),
        "alias": lambda m, x: m.fc.weight.t()[0].zero_(),
        "out": lambda m, x: torch.mul(x, 2, out=m.fc.weight),
        "numpy": lambda m, x: m.fc.weight.numpy().__setitem__(0, 1.0),
        "batch_norm": lambda m, x: torch.nn.functional.batch_norm(
            x.view(1, 4).expand(3, 4), m.bn.running_mean, m.bn.running_var, training=True),
        "embedding": lambda m, x: torch.nn.functional.embedding(
            torch.tensor([0, 1]), m.fc.weight, max_norm=0.5),
    }

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4, bias=False).double()
            self.bn = torch.nn.BatchNorm1d(4).double().eval()
            self.write = None
            self.kept = []

        def forward(self, x):
            if self.write is not None:
                writes[self.write](self, x)
            self.kept.append(self.fc.weight)
            return self.bn(self.fc(x).view(1, 4)).view(4)

    net = Net()
    c = wsync.connect(broker.sock, "both")
    try:
        sd = {k: v.detach().clone() for k, v in net.state_dict().items()}
        sd["fc.weight"].fill_(2.0)
        pub = c.publisher_like("rw", sd)
        pub.publish(sd, 1)
        policy = wsync.LivePolicy(c.subscriber("rw"), net)
        x = torch.ones(4, dtype=torch.float64)
        with torch.no_grad():
            assert policy(x).tolist() == pytest.approx([8.0 / (1 + 1e-5) ** 0.5] * 4)
            for name in writes:
                net.write = None
                policy._held.replica[0].write = name
                with pytest.raises((wsync.ReadOnlyError, ValueError)) as e:
                    policy(x)
                if name != "numpy":             # numpy's own read-only array refuses
                    assert isinstance(e.value, wsync.ReadOnlyError), (name, e.value)
                policy._held.replica[0].write = None
            assert policy(x).tolist() == pytest.approx([8.0 / (1 + 1e-5) ** 0.5] * 4)
        kept = policy._held.replica[0].kept[-1]
        assert float(kept.sum()) == 32.0
        sd["fc.weight"].fill_(3.0)
        pub.publish(sd, 2)
        with torch.no_grad():
            policy(x)                            # v1's last call ended: v1 released
        assert policy.held_versions == [2]
        with pytest.raises(wsync.ClosedError):
            kept.sum()                           # a tensor a module kept past its version
        with pytest.raises(wsync.ClosedError):
            torch.nn.functional.linear(x, kept)
        # the module itself was never bound: its weights are its own
        assert float(net.fc.weight.sum()) != 32.0 and net.kept == []
    finally:
        c.close()


def test_a_version_is_bound_once_and_calls_run_the_plain_forward(broker, monkeypatch):
    # the binding happens at the swap: a call between swaps binds nothing,
    # and the replicas are reused, not made per version
    model = mlp()
    tr = Trainer(broker.sock, model)
    c = wsync.connect(broker.sock, "collector")
    try:
        policy = wsync.LivePolicy(c.subscriber("live"), mlp())
        binds = []
        real_bind = policy._bind
        monkeypatch.setattr(policy, "_bind", lambda t: binds.append(1) or real_bind(t))
        made = []
        real_new = policy._new_replica
        monkeypatch.setattr(policy, "_new_replica", lambda: made.append(1) or real_new())
        x = torch.ones(N, dtype=torch.float64)
        with torch.no_grad():
            for k in range(1, 6):
                for _ in range(20):
                    assert policy(x).item() == expect(tr.step)
                assert len(binds) == k
                tr.publish()
        assert made == []                        # two spares, reused version after version
        rep = policy._held.replica[0]
        assert type(rep[0].weight).__name__ == "_LiveTensor"
        assert all(type(p) is torch.nn.Parameter for p in policy.module.parameters())
        policy.close()
        # released versions give the replica the module's own tensors back
        assert all(p is q for p, q in zip(rep.parameters(), policy.module.parameters()))
    finally:
        tr.close()
        c.close()


def test_a_slots_tensors_are_taken_again_unless_something_kept_one(broker):
    # a released version's tensors wait for the next version of their slot
    # (one attribute store each instead of a new alias); a set one of whose
    # tensors a module kept is never taken again: that tensor holds its
    # version, and must never come to name a later one
    model = mlp()
    tr = Trainer(broker.sock, model, slots=3)
    c = wsync.connect(broker.sock, "collector")
    try:
        policy = wsync.LivePolicy(c.subscriber("live"), mlp())
        x = torch.ones(N, dtype=torch.float64)

        def act(k):
            got = []
            with torch.no_grad():
                for _ in range(k):
                    assert policy(x).item() == expect(tr.step)
                    got.append((policy._held.view._c.priv_slot, policy._held.tensors))
                    tr.publish()
            return got

        seen = act(6)
        by_slot = {}
        for slot, ts in seen:
            assert by_slot.setdefault(slot, ts) is ts    # the same set for each slot
        assert len(by_slot) == 3
        kept_slot, kept_set = seen[-1]
        kept = kept_set["0.weight"]                     # a module kept v6's weight
        kept_version = policy.version
        later = act(6)                                  # v6's slot stays pinned
        assert all(slot != kept_slot for slot, _ in later)
        assert all(ts is not kept_set for _, ts in later)
        with pytest.raises(wsync.ClosedError, match="v%d" % kept_version):
            kept.sum()
        del kept, kept_set, seen, by_slot, ts
        gc.collect()
        later = act(6)                                  # the slot is back, with new tensors
        assert any(slot == kept_slot for slot, _ in later)
        policy.close()
        assert policy._parked == {}
    finally:
        tr.close()
        c.close()


def test_the_modules_train_and_eval_modes_are_followed(broker):
    # calls run replicas made with the policy: model.eval() after that must
    # still turn dropout off in them, and model.train() back on
    net = torch.nn.Sequential(torch.nn.Linear(64, 64, bias=False).double(),
                              torch.nn.Dropout(0.5))
    c = wsync.connect(broker.sock, "both")
    try:
        pub = c.publisher_like("modes", net.state_dict())
        pub.publish({"0.weight": torch.eye(64, dtype=torch.float64)}, 1)
        policy = wsync.LivePolicy(c.subscriber("modes"), net)      # made in train mode
        x = torch.ones(64, dtype=torch.float64)
        with torch.no_grad():
            assert (policy(x) == 0).any()
            net.eval()
            assert policy(x).tolist() == [1.0] * 64
            net[1].train()                      # one submodule: followed at the next swap
            pub.publish({"0.weight": torch.eye(64, dtype=torch.float64)}, 2)
            assert (policy(x) == 0).any()
            net.eval()
            assert policy(x).tolist() == [1.0] * 64
            net.train()
            assert (policy(x) == 0).any()
    finally:
        c.close()


def test_a_weight_normed_module_runs_over_the_version(broker):
    # weight_norm computes weight from weight_g and weight_v in a hook
    # before each forward: it reads the version's tensors like any other
    net = torch.nn.utils.weight_norm(torch.nn.Linear(4, 2, bias=False).double())
    c = wsync.connect(broker.sock, "both")
    try:
        sd = {k: v.detach().clone() for k, v in net.state_dict().items()}
        pub = c.publisher_like("wn", sd)
        sd["weight_g"].fill_(3.0)
        sd["weight_v"].fill_(1.0)                   # each row: 3 * v / |v| = 1.5
        pub.publish(sd, 1)
        policy = wsync.LivePolicy(c.subscriber("wn"), net)
        with torch.no_grad():
            assert policy(torch.ones(4, dtype=torch.float64)).tolist() == [6.0, 6.0]
    finally:
        c.close()


def test_buffers_the_model_lacks_stay_the_modules(broker):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4, bias=False).double()
            self.register_buffer("scale", torch.full((4,), 10.0, dtype=torch.float64))

        def forward(self, x):
            return self.fc(x) * self.scale

    net = Net()
    c = wsync.connect(broker.sock, "both")
    try:
        pub = c.publisher_like("buf", {"fc.weight": net.fc.weight.detach()})
        pub.publish({"fc.weight": torch.full((4, 4), 2.0, dtype=torch.float64)}, 5)
        policy = wsync.LivePolicy(c.subscriber("buf"), net)
        with torch.no_grad():
            out = policy(torch.ones(4, dtype=torch.float64))
        assert out.tolist() == [80.0] * 4 and policy.step == 5

        # a parameter the model lacks, a shape that differs: nothing runs
        pub2 = c.publisher_like("other", {"fc.weight": torch.zeros(4, 3, dtype=torch.float64),
                                          "extra": torch.zeros(2)})
        pub2.publish({"fc.weight": torch.zeros(4, 3, dtype=torch.float64),
                      "extra": torch.zeros(2)}, 1)
        bad = wsync.LivePolicy(c.subscriber("other"), Net())
        with pytest.raises(wsync.MismatchError) as e:
            bad(torch.ones(4, dtype=torch.float64))
        assert e.value.unexpected == ["extra"]
        assert e.value.mismatched[0][:2] == ("fc.weight", "shape")
        with pytest.raises(TypeError):
            wsync.LivePolicy(c.subscriber("buf"), net, max_lag=5)
        with pytest.raises(ValueError):
            wsync.LivePolicy(c.subscriber("buf"), net, max_lag=(None, -1))
    finally:
        c.close()


def test_max_lag_with_a_stopped_trainer_raises_by_its_timeout(broker):
    model = mlp()
    tr = Trainer(broker.sock, model)
    for _ in range(6):
        tr.publish()                            # v7, step 7
    c = wsync.connect(broker.sock, "collector")
    try:
        policy = wsync.LivePolicy(c.subscriber("live"), mlp(), max_lag=(None, 0.3),
                                  timeout=0.4)
        x = torch.ones(N, dtype=torch.float64)
        with torch.no_grad():
            assert policy(x).item() == expect(7)
            time.sleep(0.35)                    # the trainer stopped: v7 is too old now
            t0 = time.monotonic()
            with pytest.raises(wsync.LagError) as e:
                policy(x)
            took = time.monotonic() - t0
        assert 0.35 <= took < 0.4 + 1.0, took
        assert isinstance(e.value, TimeoutError)
        assert "last commit is v7 (step 7)" in str(e.value), str(e.value)

        # a version arriving within the timeout is taken
        threading.Timer(0.1, tr.publish).start()
        with torch.no_grad():
            assert policy(x).item() == expect(8)
        assert policy.version == 8
    finally:
        tr.close()
        c.close()


def test_a_collector_killed_while_holding_a_live_view_frees_its_slot(broker, children):
    model = mlp()
    tr = Trainer(broker.sock, model, slots=2)   # v1 in one slot
    try:
        ready, stop = children.event(), children.event()
        child = children.start(live_procs.live_holder, broker.sock, "live", N, ready, stop)
        assert ready.wait(WAIT_S)
        tr.publish()                            # v2 in the other slot
        # v1 is held by the collector, v2 is the newest: no slot is free
        with pytest.raises(wsync.BusyError):
            tr.pub.begin(timeout=0.2).abort()
        child.proc.kill()                       # SIGKILL
        child.proc.join(WAIT_S)
        slab = tr.pub.begin(timeout=WAIT_S)     # its slot comes back
        slab.abort()
        tr.publish()
    finally:
        tr.close()


def test_a_live_policy_keeps_acting_across_a_broker_restart(broker):
    model = mlp()
    tr = Trainer(broker.sock, model, period=0.005).start()
    c = wsync.connect(broker.sock, "collector")
    try:
        sub = c.subscriber("live")
        policy = wsync.LivePolicy(sub, mlp())
        x = torch.ones(N, dtype=torch.float64)

        def act(k):
            versions = []
            with torch.no_grad():
                for _ in range(k):
                    assert policy(x).item() == expect(policy.step)
                    versions.append(policy.version)
            return versions

        while tr.step < 5:
            time.sleep(0.005)
        act(20)
        broker.kill()
        before = act(50)                        # no broker: the held version goes on
        assert before == sorted(before)
        broker.restart()
        end = time.monotonic() + WAIT_S
        while policy.version <= before[-1] + 3:
            assert time.monotonic() < end, "no new version after the restart (%d)" \
                % policy.version
            act(1)
            time.sleep(0.002)
        assert c.reconnects == 1 and sub.moves == 1
        assert not tr.errors, tr.errors
        assert len(live_views(sub)) == 1
    finally:
        tr.close()
        c.close()


def test_max_lead_waits_for_a_slow_collector_and_never_for_a_dead_one(broker, children):
    model = mlp()
    c = wsync.connect(broker.sock, "trainer")
    try:
        with pytest.raises(ValueError):
            c.publisher_like("lead", model.state_dict(), max_lead=-1)
        pub = c.publisher_like("lead", model.state_dict(), max_lead=1)
        assert pub.max_lead == 1
        pub.publish(weights_of(model, 1), 1)
        ready, stop = children.event(), children.event()
        child = children.start(live_procs.live_holder, broker.sock, "lead", N, ready, stop)
        assert ready.wait(WAIT_S)                  # acts with v1, then stops
        idle = wsync.connect(broker.sock, "idle").subscriber("lead")   # never acquires
        pub.publish(weights_of(model, 2), 2, timeout=1.0)   # the holder is 1 behind
        t0 = time.monotonic()
        with pytest.raises(wsync.WsyncTimeoutError) as e:
            pub.publish(weights_of(model, 3), 3, timeout=0.3)
        assert 0.25 <= time.monotonic() - t0 < 2.0
        assert "max_lead 1" in str(e.value) and "live-holder" in str(e.value), str(e.value)
        assert "idle" not in str(e.value)
        child.proc.kill()                          # SIGKILL: it no longer holds anyone
        child.proc.join(WAIT_S)
        t0 = time.monotonic()
        assert pub.publish(weights_of(model, 3), 3, timeout=WAIT_S) > 2
        assert time.monotonic() - t0 < 2.0
        pub.set_max_lead(0)
        idle.client.close()
    finally:
        c.close()


def test_device_views_without_a_cuda_driver_say_so_and_hold_nothing(broker, monkeypatch):
    # device= runs over Subscriber.acquire_gpu's views (tests/python/test_gpu.py
    # covers those against the fake driver); without a driver the first call
    # says so and no view is left held
    monkeypatch.setenv("WSYNC_LIBCUDA", "/nonexistent/libcuda.so.1")
    model = mlp()
    tr = Trainer(broker.sock, model)
    c = wsync.connect(broker.sock, "collector")
    try:
        sub = c.subscriber("live")
        policy = wsync.LivePolicy(sub, mlp(), device=0)
        with pytest.raises((wsync.NoCudaError, wsync.NoDeviceError)):
            policy(torch.ones(N, dtype=torch.float64))
        assert policy.held_versions == [] and live_views(sub) == []
    finally:
        tr.close()
        c.close()


def test_the_torchrl_scheme_hands_a_worker_a_live_policy(broker):
    from wsync import rl
    import pickle
    trainer = mlp()
    s = rl.WsyncWeightSyncScheme("state_dict", endpoint=broker.sock, timeout=WAIT_S)
    s.init_on_sender(model_id="policy", model=trainer, num_workers=1)
    s.connect()
    r = pickle.loads(pickle.dumps(s))               # what a worker gets
    try:
        with torch.no_grad():
            for p in trainer.parameters():
                p.fill_(2.0)
        r.init_on_receiver(model_id="policy", model=mlp(), worker_idx=0)
        with pytest.raises(RuntimeError, match="connect"):
            r.live_policy()
        r.connect(worker_idx=0)
        policy = r.live_policy()
        s.send()
        x = torch.ones(N, dtype=torch.float64)
        with torch.no_grad():
            assert policy(x).item() == expect(2)
            for p in trainer.parameters():
                p.fill_(3.0)
            s.send()
            assert policy(x).item() == expect(3)
        assert policy.lag.versions == 0
        policy.close()
    finally:
        r.shutdown()
        s.shutdown()


def test_a_subscribers_max_lag_refuses_old_versions_by_its_timeout(broker):
    model = mlp()
    tr = Trainer(broker.sock, model)                # v1
    c = wsync.connect(broker.sock, "collector")
    try:
        sub = c.subscriber("live")
        with pytest.raises(ValueError):
            sub.set_max_lag(-1)
        sub.set_max_lag(0.2, timeout=0.3)
        sub.acquire().release()                     # fresh
        time.sleep(0.25)
        t0 = time.monotonic()
        with pytest.raises(wsync.WsyncTimeoutError) as e:
            sub.acquire()
        assert 0.25 <= time.monotonic() - t0 < 1.5
        assert "last commit is v1 (step 1)" in str(e.value), str(e.value)
        threading.Timer(0.1, tr.publish).start()
        with sub.acquire() as v:                    # one committed within the timeout
            assert v.step == 2
        sub.set_max_lag(None)
        time.sleep(0.25)
        sub.acquire().release()
    finally:
        tr.close()
        c.close()
