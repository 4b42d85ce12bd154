"""wsync.rl: the weight-sync scheme's contract (timeouts, no new weights,
policy lag, synchronous mode)."""
import pickle
import threading

import pytest

import wsync
from conftest import WAIT_S

torch = pytest.importorskip("torch", reason="python3-torch is not installed")
import wsync.rl as rl  # noqa: E402

nn = torch.nn


def net(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 16), nn.LayerNorm(16), nn.Tanh(), nn.Linear(16, 2))


def same(a, b):
    return all(torch.equal(x, b.state_dict()[k]) for k, x in a.state_dict().items())


@pytest.fixture
def scheme(broker):
    return rl.WsyncWeightSyncScheme("policy", broker.sock)


def test_scheme_pickles_and_checks_its_arguments(scheme):
    s2 = pickle.loads(pickle.dumps(scheme))
    assert (s2.model, s2.endpoint, s2.sync) == (scheme.model, scheme.endpoint, False)
    assert rl.WsyncWeightSyncScheme.from_ref(scheme.ref()).endpoint == scheme.endpoint
    for kw, exc in (({"model": 3}, TypeError), ({"sync": 1}, TypeError),
                    ({"sync_timeout": -1}, ValueError), ({"n_readers": -1}, ValueError),
                    ({"model": "a\0"}, ValueError)):
        with pytest.raises(exc):
            s = rl.WsyncWeightSyncScheme(**dict({"endpoint": scheme.endpoint}, **kw))
            s.create_receiver(net(0)).close()


def test_receive_contract(scheme):
    trainer, policy = net(1), net(2)
    with scheme.create_receiver(policy) as rx:
        assert rx.receive(timeout=0) is False          # nothing published yet
        assert rx.receive(timeout=0.05) is False
        assert rx.lag() == rl.PolicyLag(0, 0, 0.0, 0.0, 0, 0)
        with scheme.create_sender(trainer) as tx:
            v1 = tx.send_weights()                      # step 1, the module given
            assert tx.step == 1 and rx.lag().versions_behind == 1
            assert rx.lag().age_s == float("inf")       # nothing loaded yet
            assert rx.update_policy_weights_() is True
            assert same(policy, trainer) and rx.version == v1 and rx.step == 1
            assert rx.receive(timeout=0) is False       # no new weights
            assert rx.receive(timeout=0.05) is False
            lag = rx.lag()
            assert lag.versions_behind == 0 and lag.steps_behind == 0
            assert lag.seconds_behind == 0.0 and lag.age_s >= 0 and lag.version == v1
            for step in (5, 6, 7):
                with torch.no_grad():
                    trainer[0].bias.fill_(step)
                tx.send_weights(step=step)
            lag = rx.lag()
            assert (lag.versions_behind, lag.steps_behind) == (3, 6)
            assert lag.seconds_behind >= 0 and lag.latest_version == tx.version
            assert rx.receive(timeout=WAIT_S) is True   # the newest one, at once
            assert rx.step == 7 and torch.all(policy[0].bias == 7) and rx.received == 2
            assert rx.lag().versions_behind == 0
            # a blocking receive wakes on the next send
            got = []
            th = threading.Thread(target=lambda: got.append(rx.receive(timeout=WAIT_S)))
            th.start()
            tx.send_weights_async(step=8)
            assert tx.wait_ack(timeout=WAIT_S) == tx.version
            th.join(WAIT_S)
            assert got == [True] and rx.step == 8


def test_a_policy_that_does_not_fit_raises(scheme):
    with scheme.create_sender(net(1)) as tx:
        tx.send_weights()
        other = nn.Sequential(nn.Linear(4, 8))
        with scheme.create_receiver(other) as rx:
            with pytest.raises(wsync.MismatchError):
                rx.receive(timeout=WAIT_S)
            assert rx.version == 0                     # nothing loaded


def test_synchronous_mode_waits_for_the_receivers(broker):
    scheme = rl.WsyncWeightSyncScheme("policy", broker.sock, sync=True, sync_timeout=0.3)
    trainer = net(1)
    with scheme.create_sender(trainer) as tx, scheme.create_receiver(net(2)) as rx:
        with pytest.raises(TimeoutError):               # rx never receives
            tx.send_weights(step=1)
        assert rx.receive(timeout=0) is True
        stop = threading.Event()

        def collector():
            while not stop.is_set():
                rx.receive(timeout=0.05)

        th = threading.Thread(target=collector)
        th.start()
        try:
            slow = rl.WsyncWeightSyncScheme("policy", broker.sock, sync=True,
                                            sync_timeout=WAIT_S)
            tx.scheme = slow
            for step in range(2, 12):
                v = tx.send_weights(step=step)          # returns once rx took it
        finally:
            stop.set()
            th.join(WAIT_S)
        assert rx.version == v and same(rx.policy, trainer)
