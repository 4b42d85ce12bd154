"""What a user of LivePolicy, max_lag and paced or bounded publishes sees for
wrong inputs and a stopped broker: a clear exception at once, naming the
argument, and no call that waits out the client's reconnect_timeout.

Checked: LivePolicy refuses what is not a Subscriber, a max_lag that is not
(versions, seconds) in the monitors' range and a timeout that is not one,
when it is made; Subscriber.set_max_lag names its seconds (not "timeout");
a live policy acts at once with the version it holds while the broker is
stopped (SIGTERM: the client sees the shutdown), its max_lag raises by its
own timeout then, and it follows the restarted broker; a publish's timeout
holds for all of its tries while no broker answers; a TorchRL scheme's
worker answers lag() at once then, and a scheme refuses a wrong endpoint,
weights to apply that are none, and a receive after its shutdown.
"""
import math
import time

import pytest

torch = pytest.importorskip("torch")

import wsync  # noqa: E402
from conftest import WAIT_S  # noqa: E402


def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(timeout="1"), TypeError, "timeout"),
    (dict(timeout=True), TypeError, "timeout"),
    (dict(timeout=-1), ValueError, "timeout"),
    (dict(timeout=math.nan), ValueError, "timeout"),
    (dict(max_lag={"versions": 1, "seconds": 2.0}), TypeError, r"max_lag must be \(versions"),
    (dict(max_lag="ab"), TypeError, r"max_lag must be \(versions"),
    (dict(max_lag=(2 ** 32, None)), ValueError, "max_lag versions"),
    (dict(max_lag=(None, math.inf)), ValueError, "max_lag seconds"),
    (dict(max_lag=(None, 0)), ValueError, "max_lag seconds"),
    (dict(device="cpu"), ValueError, "not a GPU"),
    (dict(device=1.5), TypeError, "a device is"),
])
def test_a_live_policy_refuses_bad_arguments_when_made(client, kwargs, exc, match):
    sub = client.subscriber("p")
    with pytest.raises(exc, match=match):
        wsync.LivePolicy(sub, net(), **kwargs)


def test_a_live_policy_needs_a_subscriber(client):
    model = net()
    pub = client.publisher_like("p", model)
    for wrong in ("p", client, pub):
        with pytest.raises(TypeError, match="wsync.Subscriber"):
            wsync.LivePolicy(wrong, model)
    # math.inf is a timeout too: forever
    assert wsync.LivePolicy(client.subscriber("p"), model, timeout=math.inf).timeout == math.inf


@pytest.mark.parametrize("seconds,exc", [
    ("1", TypeError), (True, TypeError), (-1, ValueError), (math.nan, ValueError),
    (math.inf, ValueError)])
def test_set_max_lag_names_its_seconds(client, seconds, exc):
    sub = client.subscriber("p")
    with pytest.raises(exc, match="max_lag seconds"):
        sub.set_max_lag(seconds)


def test_a_live_policy_acts_at_once_while_the_broker_is_stopped(broker):
    model = net()
    x = torch.ones(3, 4)
    with wsync.connect(broker.sock, "trainer") as tc, \
            wsync.connect(broker.sock, "collector") as cc:
        pub = tc.publisher_like("p", model)
        pub.publish(model, 1)
        policy = wsync.LivePolicy(cc.subscriber("p"), net())
        bounded = wsync.LivePolicy(cc.subscriber("p"), net(), max_lag=(None, 0.3),
                                   timeout=0.5)
        with torch.no_grad():
            want = model(x)
            assert torch.equal(policy(x), want) and torch.equal(bounded(x), want)
            assert broker.stop() == 0          # SIGTERM: the clients see a shutdown
            for _ in range(3):
                t0 = time.monotonic()
                assert torch.equal(policy(x), want)
                assert policy.lag == (0, 0.0) and policy.version == 1
                assert time.monotonic() - t0 < 1.0, "a call waited for a broker"
            time.sleep(0.35)                   # v1 is now older than the bound
            t0 = time.monotonic()
            with pytest.raises(wsync.LagError, match="last commit is v1"):
                bounded(x)
            assert time.monotonic() - t0 < 0.5 + 1.5, "max_lag's timeout was not kept"

            broker.restart()
            model[0].bias.data.fill_(3.0)
            pub.publish(model, 2, timeout=WAIT_S)   # the trainer follows it too
            end = time.monotonic() + WAIT_S
            while policy.version < 2:
                assert time.monotonic() < end, "the policy did not follow the restart"
                policy(x)
                time.sleep(0.01)
            assert torch.equal(policy(x), model(x))
        policy.close()
        bounded.close()


def test_a_publish_keeps_its_timeout_while_no_broker_answers(broker):
    model = net()
    with wsync.connect(broker.sock, "trainer") as tc:
        pub = tc.publisher_like("p", model)
        pub.publish(model, 1)
        assert broker.stop() == 0
        for publish in (pub.publish, pub.publish_async):
            t0 = time.monotonic()
            with pytest.raises(wsync.NotConnectedError, match="within 1 s"):
                publish(model, 2, timeout=1.0)
            assert time.monotonic() - t0 < 2.0, "publish took its timeout more than once"


def test_a_workers_lag_answers_at_once_while_the_broker_is_stopped(broker):
    from wsync.rl import WsyncWeightSyncScheme
    model, mine = net(), net()
    sender = WsyncWeightSyncScheme("state_dict", name="p", endpoint=broker.sock, timeout=WAIT_S)
    sender.init_on_sender(model_id="p", model=model)
    sender.connect()
    worker = WsyncWeightSyncScheme("state_dict", name="p", endpoint=broker.sock,
                                   background=False)
    worker.init_on_receiver(model_id="p", model=mine, worker_idx=0)
    try:
        worker.connect()
        live = worker.live_policy(max_lag=(None, 30.0), timeout=0.5)
        assert live.timeout == 0.5
        x = torch.ones(2, 4)
        with torch.no_grad():
            assert torch.equal(live(x), model(x))
        assert broker.stop() == 0
        t0 = time.monotonic()
        lag = worker.lag()             # what a rollout asks every step
        assert time.monotonic() - t0 < 1.0, "lag() waited for a broker"
        assert (lag.versions_behind, lag.version, lag.latest_version) == (0, 1, 1)
        with torch.no_grad():
            assert torch.equal(live(x), model(x))   # the version it holds
    finally:
        worker.shutdown()
        sender.shutdown()


def test_a_scheme_names_what_is_wrong(broker):
    from wsync.rl import WsyncWeightSyncScheme
    with pytest.raises(TypeError, match="endpoint"):
        WsyncWeightSyncScheme("state_dict", endpoint=3)
    model = net()
    sender = WsyncWeightSyncScheme("state_dict", name="p", endpoint=broker.sock, timeout=WAIT_S)
    sender.init_on_sender(model_id="p", model=model)
    sender.connect()
    worker = WsyncWeightSyncScheme("state_dict", name="p", endpoint=broker.sock,
                                   background=False)
    worker.init_on_receiver(model_id="p", model=net(), worker_idx=0)
    try:
        worker.connect()
        with pytest.raises(TypeError, match="weights to apply"):
            worker.apply_weights("p")
        worker.shutdown()
        for receive in (lambda: worker.receive(0),
                        lambda: worker.receiver_transport.receive_weights(0)):
            with pytest.raises(wsync.ClosedError, match="shut down"):
                receive()
    finally:
        worker.shutdown()
        sender.shutdown()


def test_publishing_a_meta_module_says_it_has_no_values(client):
    model = net()
    pub = client.publisher_like("p", model.to("meta"))   # a layout needs no values
    with pytest.raises(wsync.NoStorageError, match="'0.weight' is on the meta device"):
        pub.publish(model, 1, spread=0.01)
    with pytest.raises(wsync.NoStorageError, match="meta device"):
        with pub.begin(timeout=WAIT_S) as slab:
            slab.copy_from(torch.empty(slab.nbytes, dtype=torch.uint8, device="meta"))
    assert pub.publish(net(), 2) >= 1
    with client.subscriber("p").acquire() as v:
        assert v.step == 2


def test_a_paced_publish_cut_by_a_restart_is_published_again(broker):
    # the timeout bounds each begin's wait, not the copy: a broker that
    # restarts during a copy longer than the timeout is followed
    import threading
    model = net()
    with wsync.connect(broker.sock, "trainer") as tc:
        pub = tc.publisher_like("p", model)
        pub.publish(model, 1)
        out = []
        t = threading.Thread(target=lambda: out.append(
            pub.publish(model, 2, timeout=0.5, spread=1.5)))
        t.start()
        time.sleep(0.3)
        assert broker.stop() == 0
        broker.restart()
        t.join(WAIT_S)
        assert out and out[0] >= 1, "the publish cut by the restart was not made again"
        with tc.subscriber("p").acquire() as v:
            assert v.step == 2
