"""A weight-sync scheme for RL loops: a trainer sends its policy's weights,
collectors update their own policy modules in place between rollouts.

Shaped like TorchRL's weight-sync schemes (torchrl.weight_update: a
picklable scheme, a sender with send / send_async / wait_async, a receiver
with receive(timeout)) without needing TorchRL::

    scheme = wsync.rl.WsyncWeightSyncScheme("policy")      # picklable
    sender = scheme.create_sender(policy)                   # in the trainer
    sender.send_weights(policy, step)                       # each update

    receiver = scheme.create_receiver(policy)               # in each collector
    if receiver.receive(timeout=0.0):                       # between rollouts
        ...                                                 # policy is updated
    lag = receiver.lag()                                    # PolicyLag

Weights go through a wsync broker: the trainer writes each version once
into shared memory, each collector copies it into its module with
View.load_into (checked, in place). A collector that dies, even by SIGKILL,
never blocks the trainer. See docs/PYTHON.md.
"""
import math
import time
from collections import namedtuple
from typing import Any, Optional

from ._core import Client, ModelRef, _timeout_s, _uint
from ._errors import NoDataError, WsyncTimeoutError

__all__ = ["WsyncWeightSyncScheme", "WeightSender", "WeightReceiver", "PolicyLag"]

PolicyLag = namedtuple("PolicyLag", "versions_behind steps_behind seconds_behind age_s "
                                    "version latest_version")
PolicyLag.__doc__ = """How far a receiver's policy is behind the trainer.

versions_behind  versions published since the one loaded (0: up to date)
steps_behind     trainer steps between the loaded version and the newest
seconds_behind   commit time of the newest version minus that of the loaded
                 one, in seconds (0.0 when up to date)
age_s            seconds since the loaded version was committed
version          the version loaded (0: none yet)
latest_version   the newest version published (0: none yet)"""


class WsyncWeightSyncScheme:
    """How to reach one model's weights: a broker endpoint (None:
    $WSYNC_ENDPOINT or the default broker) and a model name, plus the
    sender's options. Picklable: build it in the parent, hand it to the
    workers, call create_receiver() there.

    sync=True makes every send wait, after publishing, until n_readers
    receivers (0: every current subscriber) took that version or a newer
    one, up to sync_timeout seconds (None: forever); else send returns as
    soon as the version is visible. slots: the model's slabs (0: the
    broker's default). strict: load_into's strictness on receivers."""

    def __init__(self, model: str = "policy", endpoint: Optional[str] = None,
                 sync: bool = False, sync_timeout: Optional[float] = None, n_readers: int = 0,
                 slots: int = 0, strict: bool = True) -> None:
        if not isinstance(model, str):
            raise TypeError("wsync: model must be a str, not %s" % type(model).__name__)
        for what, val in (("sync", sync), ("strict", strict)):
            if not isinstance(val, bool):
                raise TypeError("wsync: %s must be True or False, not %s"
                                % (what, type(val).__name__))
        self.model = model
        self.endpoint = endpoint
        self.sync = sync
        self.sync_timeout = _timeout_s(sync_timeout)
        self.n_readers = _uint(n_readers, "n_readers", 32)
        self.slots = _uint(slots, "slots", 32)
        self.strict = strict

    @classmethod
    def from_ref(cls, ref, **kwargs):
        """A scheme for a wsync.ModelRef (endpoint, model)."""
        return cls(ref.model, ref.endpoint, **kwargs)

    def ref(self):
        return ModelRef(self.endpoint, self.model)

    def create_sender(self, weights: Any, client: Optional[Client] = None,
                      name: str = "wsync-trainer") -> "WeightSender":
        """The trainer's end, publishing a model laid out like weights (an
        nn.Module or a state_dict). Uses client if given, else connects."""
        return WeightSender(self, weights, client, name)

    def create_receiver(self, policy: Any, client: Optional[Client] = None,
                        name: str = "wsync-collector") -> "WeightReceiver":
        """A collector's end, updating policy (an nn.Module, or a mapping of
        tensors) in place. Uses client if given, else connects."""
        return WeightReceiver(self, policy, client, name)

    def __repr__(self):
        return "WsyncWeightSyncScheme(model=%r, endpoint=%r, sync=%r)" % (
            self.model, self.endpoint, self.sync)


class _End:
    def _connect(self, client, name):
        self._own = client is None
        self.client = Client(self.scheme.endpoint, name) if client is None else client

    def close(self) -> None:
        """Closes this end (and its client, if it made one). Idempotent."""
        self._close_handle()
        if self._own:
            self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class WeightSender(_End):
    """The trainer's end of a WsyncWeightSyncScheme."""

    def __init__(self, scheme, weights, client=None, name="wsync-trainer"):
        self.scheme = scheme
        self._weights = weights
        self._connect(client, name)
        try:
            self.publisher = self.client.publisher_like(scheme.model, weights,
                                                        slots=scheme.slots)
        except BaseException:
            if self._own:
                self.client.close()
            raise
        self.step = 0
        self.version = 0

    def _close_handle(self):
        self.publisher.close()

    def _args(self, weights, step):
        weights = self._weights if weights is None else weights
        step = self.step + 1 if step is None else _uint(step, "step")
        return weights, step

    def send_weights(self, weights: Any = None, step: Optional[int] = None,
                     timeout: Optional[float] = None) -> int:
        """Publishes weights (default: those given at creation, e.g. the
        trained module) stamped with step (default: the last step + 1);
        waits up to timeout for a free slab (BusyError after). With
        sync=True, then waits for the receivers (see the scheme). Returns
        the version."""
        weights, step = self._args(weights, step)
        v = self.publisher.publish(weights, step, timeout)
        self.step, self.version = step, v
        if self.scheme.sync:
            self.publisher.wait_readers(v, self.scheme.sync_timeout, self.scheme.n_readers)
        return v

    send = send_weights

    def send_weights_async(self, weights: Any = None, step: Optional[int] = None,
                           timeout: Optional[float] = None) -> int:
        """Like send_weights() with sync=False, returning as soon as the
        version is visible; wait_ack() collects the broker's confirmation
        (and, with sync=True, waits for the receivers)."""
        weights, step = self._args(weights, step)
        v = self.publisher.publish_async(weights, step, timeout)
        self.step, self.version = step, v
        return v

    send_async = send_weights_async

    def wait_ack(self, timeout: Optional[float] = None) -> int:
        """Waits for the confirmation of the last send_weights_async (and,
        with sync=True, for the receivers); returns its version."""
        t = _timeout_s(timeout)
        deadline = None if t is None else time.monotonic() + t
        v = self.publisher.wait_ack(t)
        if self.scheme.sync:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self.scheme.sync_timeout is not None:
                left = self.scheme.sync_timeout if left is None else \
                    min(left, self.scheme.sync_timeout)
            self.publisher.wait_readers(v, left, self.scheme.n_readers)
        return v

    wait_async = wait_ack

    def __repr__(self):
        return "<wsync.rl.WeightSender %r v%d step %d>" % (self.scheme.model, self.version,
                                                           self.step)


class WeightReceiver(_End):
    """A collector's end of a WsyncWeightSyncScheme: receive() updates its
    policy in place when the trainer published newer weights."""

    def __init__(self, scheme, policy, client=None, name="wsync-collector"):
        self.scheme = scheme
        self.policy = policy
        self._connect(client, name)
        try:
            self.subscriber = self.client.subscriber(scheme.model)
        except BaseException:
            if self._own:
                self.client.close()
            raise
        self.version = 0           # the version loaded into policy (0: none)
        self.step = 0
        self.published_ns = 0
        self.received = 0          # how many versions receive() loaded

    def _close_handle(self):
        self.subscriber.close()

    def receive(self, timeout: Optional[float] = 0.0) -> bool:
        """Loads the newest version into the policy if it is newer than the
        one loaded, waiting up to timeout seconds (0: only look, None:
        until one comes) for one. Returns True if the policy was updated,
        False if no newer weights came in time (the policy is unchanged).
        A version that does not fit the policy raises MismatchError (and
        is not loaded)."""
        t = _timeout_s(timeout)
        try:
            view = self.subscriber.wait(after=self.version, timeout=t)
        except WsyncTimeoutError:
            return False
        with view:
            view.load_into(self.policy, strict=self.scheme.strict)
            self.version, self.step = view.version, view.step
            self.published_ns = view.published_ns
        self.received += 1
        return True

    def update_policy_weights_(self, timeout: Optional[float] = 0.0) -> bool:
        """receive(timeout), under the name TorchRL's collectors use."""
        return self.receive(timeout)

    def lag(self) -> PolicyLag:
        """A PolicyLag: how far the loaded weights are behind the newest
        published ones (no system call)."""
        now = time.time_ns()
        try:
            latest = self.subscriber.latest()
        except NoDataError:
            return PolicyLag(0, 0, 0.0, 0.0, self.version, 0)
        if self.version == 0:
            return PolicyLag(latest.version, latest.step, math.inf, math.inf, 0,
                             latest.version)
        behind = max(0, latest.version - self.version)
        return PolicyLag(behind, max(0, latest.step - self.step),
                         max(0, latest.published_ns - self.published_ns) / 1e9 if behind
                         else 0.0,
                         max(0, now - self.published_ns) / 1e9, self.version, latest.version)

    def __repr__(self):
        return "<wsync.rl.WeightReceiver %r v%d step %d>" % (self.scheme.model, self.version,
                                                             self.step)
