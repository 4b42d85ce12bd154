"""TorchRL's weight-sync scheme on a wsync broker.

WsyncWeightSyncScheme has the interface and the semantics of TorchRL's
WeightSyncScheme (torchrl.weight_update, TorchRL 0.11 and later): a TorchRL
collector takes it as weight_sync_schemes={"policy": scheme} and drives it,
or any trainer and collector processes use it directly::

    scheme = WsyncWeightSyncScheme()                  # picklable
    # trainer (what a TorchRL collector does for you)
    scheme.init_on_sender(model_id="policy", context=collector)   # or model=policy
    scheme.connect()                                  # publishes the first weights
    scheme.send()                                     # returns once every worker applied them
    # each worker
    scheme.init_on_receiver(model_id="policy", context=inner_collector, worker_idx=i)
    scheme.connect(worker_idx=i)                      # applies the first weights
    weights = scheme.receive(timeout=None)            # or leave it to the background thread

Where TorchRL is installed the scheme is a subclass of its WeightSyncScheme
(so a TorchRL collector accepts it); elsewhere it stands alone with the same
interface. Weights travel through shared memory: send() writes the version
once, every worker swaps its read-only tensors into its own module (no
copy; a module on the meta device, as TorchRL sends the policy, is filled
so; a module on a GPU is copied into), and a synchronous send() returns
when every worker has applied it (wsync_pub_wait_readers). A worker that
dies, even by SIGKILL, stops counting at once: it never stalls a send. The
scheme follows TorchRL 0.14.0. See docs/PYTHON.md.

The create_sender / create_receiver helpers of wsync 0.2 are deprecated;
they still work (WeightSender, WeightReceiver).
"""
import errno
import gc
import logging
import math
import re
import secrets
import threading
import time
import warnings
import weakref
from collections import namedtuple
from collections.abc import Mapping
from typing import Any, Dict, Optional

from ._core import Client, ModelRef, View, _enc, _timeout_s, _uint, default_endpoint
from . import _module
from ._errors import (ClosedError, NoDataError, NotConnectedError, RemovedError, WsyncError,
                      WsyncTimeoutError)

__all__ = ["WsyncWeightSyncScheme", "WsyncTransport", "WsyncWeightStrategy", "PolicyLag",
           "WeightSender", "WeightReceiver"]

_log = logging.getLogger("wsync.rl")

try:          # TorchRL's base class, so that its collectors take the scheme
    from torchrl.weight_update import WeightSyncScheme as _TorchRLScheme
except Exception:        # not installed (or not importable): stand alone
    _TorchRLScheme = None

STRATEGIES = ("tensordict", "state_dict")
_SLICE_S = 0.25

PolicyLag = namedtuple("PolicyLag", "versions_behind steps_behind seconds_behind age_s "
                                    "version latest_version")
PolicyLag.__doc__ = """How far a receiver's policy is behind the trainer.

versions_behind  versions published since the one applied (0: up to date)
steps_behind     sends between the applied version and the newest
seconds_behind   commit time of the newest version minus that of the applied
                 one, in seconds (0.0 when up to date)
age_s            seconds since the applied version was committed
version          the version applied (0: none yet)
latest_version   the newest version published (0: none yet)"""


# ---- weights: modules, flat and nested mappings, TensorDicts ----------------------

def _is_module(x):
    try:
        import torch
    except ImportError:
        return False
    return isinstance(x, torch.nn.Module)


def _is_tensordict(x):
    """A TensorDict (or anything shaped like one: nested keys flattened by
    flatten_keys), without importing tensordict."""
    return callable(getattr(x, "flatten_keys", None)) and callable(getattr(x, "items", None)) \
        and not isinstance(x, Mapping)


def _flatten(weights, prefix="", out=None):
    """{dotted name: tensor} of a flat or nested mapping or a TensorDict
    (nested keys joined with '.', as state_dict names them)."""
    if out is None:
        out = {}
    if _is_tensordict(weights):
        weights = weights.flatten_keys(".")
        for k, v in weights.items():
            k = ".".join(k) if isinstance(k, tuple) else str(k)
            out[prefix + k] = v
        return out
    for k, v in weights.items():
        k = ".".join(map(str, k)) if isinstance(k, tuple) else str(k)
        if isinstance(v, Mapping) or _is_tensordict(v):
            _flatten(v, prefix + k + ".", out)
        else:
            out[prefix + k] = v
    return out


def _unflatten(flat):
    """A nested dict of a {dotted name: tensor} mapping."""
    out = {}
    for name, v in flat.items():
        d = out
        parts = name.split(".")
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = v
    return out


def _check_target(model, what):
    """model must be something weights are written into: an nn.Module, a
    mapping of tensors, or a TensorDict. Anything else (a model's *name*)
    fails here, at once, not at the first update."""
    if _is_module(model) or isinstance(model, Mapping) or _is_tensordict(model):
        return model
    hint = ""
    if isinstance(model, str):
        hint = (": the model's name is not the model; pass the module (its weights are "
                "updated in place), and name the wsync model with "
                "WsyncWeightSyncScheme(name=%r)" % model)
    raise TypeError("wsync.rl: %s needs the policy (an nn.Module, a mapping of its tensors "
                    "or a TensorDict), not %s%s" % (what, type(model).__name__, hint))


def _module_tensors(module, names=None):
    """{name: tensor} written in place for a module: its state_dict
    (parameters, persistent buffers, tied weights under each name), plus the
    non-persistent buffers that names (the view's) has (TensorDict.from_module
    includes them)."""
    out = module.state_dict(keep_vars=True)
    if names is not None:
        for n, b in module.named_buffers():
            if n in names and n not in out:
                out[n] = b
    return out


def _destination(model, names=None):
    """{name: tensor} to copy a version into, for a receiver's model."""
    if _is_module(model):
        return _module_tensors(model, names)
    return _flatten(model)


_TD = []


def _tensordict_class():
    """tensordict.TensorDict, or None where it is not installed (looked up
    once: a failed import searches sys.path again every time)."""
    if not _TD:
        try:
            from tensordict import TensorDict
        except ImportError:
            TensorDict = None
        _TD.append(TensorDict)
    return _TD[0]


class WsyncWeightStrategy:
    """How weights are extracted on the sender and applied on receivers, for
    the "tensordict" and "state_dict" formats (TorchRL's WeightStrategy).
    Extraction gives a flat state_dict or a TensorDict (a nested dict where
    the tensordict package is missing); application copies in place, or
    puts the tensors in (inplace=False)."""

    def __init__(self, extract_as="tensordict"):
        if extract_as not in STRATEGIES:
            raise ValueError("wsync.rl: strategy must be 'tensordict' or 'state_dict', not %r"
                             % (extract_as,))
        self.extract_as = extract_as

    def extract_weights(self, source):
        """source (a module, a mapping, a TensorDict) in this format."""
        flat = _module_tensors(source) if _is_module(source) else _flatten(source)
        flat = {k: (v.detach() if hasattr(v, "detach") else v) for k, v in flat.items()}
        return self.format(flat)

    def format(self, flat):
        if self.extract_as == "state_dict":
            return dict(flat)
        TensorDict = _tensordict_class()
        if TensorDict is None:
            return _unflatten(flat)
        return TensorDict(dict(flat), batch_size=[]).unflatten_keys(".")

    def apply_weights(self, destination, weights, inplace=True, strict=True):
        """Applies weights (a mapping, a TensorDict, a module or a wsync
        View) to destination, as TorchRL's WeightStrategy does.

        inplace=True copies into destination's tensors (a tensor without
        storage, on the meta device, raises NoStorageError: such a copy
        would do nothing; a read-only tensor a swap put there is replaced
        by a writable copy). inplace=False puts the given tensors into a
        module instead (tensordict's to_module): a View's as read-only
        zero-copy tensors (swap_into; the caller keeps the view held), any
        other's as they are. A mapping or TensorDict destination is always
        written in place."""
        if weights is None:
            return
        if isinstance(weights, View):
            if not inplace and _is_module(destination):
                _module.swap_into(weights, destination, strict=strict)
            else:
                weights.load_into(_destination(destination, set(weights.tensors)),
                                  strict=strict)
            return
        if not (_is_module(weights) or isinstance(weights, Mapping) or
                _is_tensordict(weights)):
            raise TypeError("wsync.rl: weights to apply must be a module, a mapping of "
                            "tensors, a TensorDict or a wsync.View, not %s"
                            % type(weights).__name__)
        src = _flatten(weights) if not _is_module(weights) else _module_tensors(weights)
        if _is_module(destination):
            _put(destination, src, inplace)
            return
        _copy_into(_flatten(destination), src, "the destination")


def _check_fit(dst, src, where):
    missing = [k for k in src if k not in dst]
    if missing:
        raise KeyError("wsync.rl: weights %s are not in %s" % (", ".join(missing), where))
    for k, v in src.items():
        t = dst[k]
        if tuple(t.shape) != tuple(v.shape):
            raise ValueError("wsync.rl: %s: shape %s in the weights, %s in %s"
                             % (k, tuple(v.shape), tuple(t.shape), where))


def _copy_into(dst, src, where):
    """Copies src's tensors into dst's in place, after checking them all."""
    import torch
    _check_fit(dst, src, where)
    _module.refuse_storageless([k for k in src if not _module.has_storage(dst[k])],
                               "weights into %s" % where)
    with torch.no_grad():
        for k, v in src.items():
            dst[k].copy_(v)


def _put(module, src, inplace):
    """src's tensors into module: copied into its tensors (inplace), or put
    in their place (to_module). With inplace, a read-only tensor of a swap
    is replaced by a writable copy, and a tensor without storage raises."""
    import torch
    from ._torch import ReadOnlyTensor
    slots = _module.module_slots(module)
    _check_fit({k: s[3] for k, s in slots.items()}, src, "the model")
    if inplace:
        _module.refuse_storageless([k for k in src if not _module.has_storage(slots[k][3])],
                                   "weights into the model")
    with torch.no_grad():
        for k, v in src.items():
            m, attr, is_param, old = slots[k]
            if inplace and not isinstance(old, ReadOnlyTensor):
                old.copy_(v)
                continue
            t = v.detach()
            if inplace:
                t = t.clone()
            if is_param:
                m._parameters[attr] = torch.nn.Parameter(
                    t, requires_grad=bool(old.requires_grad and t.is_floating_point()
                                          and not isinstance(t, ReadOnlyTensor)))
            else:
                m._buffers[attr] = t


# ---- resolving a model_id against a collector --------------------------------------

_SUBSCRIPT = re.compile(r"\[([^\]]+)\]")
_NAME_BAD = re.compile(r"[^A-Za-z0-9._:/-]")


def resolve(context, path):
    """The object path names in context: "policy", "env.value_net",
    "nets[0]", "models['pi']" (TorchRL's model_id syntax)."""
    obj = context
    for part in path.split("."):
        head = part.split("[", 1)[0]
        if head:
            try:
                obj = getattr(obj, head)
            except AttributeError:
                raise AttributeError("wsync.rl: model_id %r: %s has no attribute %r"
                                     % (path, type(obj).__name__, head)) from None
        for key in _SUBSCRIPT.findall(part[len(head):]):
            key = key.strip()
            if key[:1] in "'\"" and key[-1:] == key[:1]:
                obj = obj[key[1:-1]]
            else:
                obj = obj[int(key)]
    return obj


def _model_of(context, model_id):
    get = getattr(context, "get_model", None)
    if callable(get):
        try:
            return get(model_id)
        except (AttributeError, KeyError):
            pass
    return resolve(context, model_id)


# ---- the two ends on the broker ------------------------------------------------------

class _SenderEnd:
    """The trainer's connection: one publisher serving every worker."""

    def __init__(self, endpoint, name, slots, client_name, workers=None, join_timeout=None):
        self.client = Client(endpoint, client_name)
        self.name = name
        self.workers = workers or 0    # how many the scheme registered, if it knows
        self.join_timeout = join_timeout
        self.joined = not self.workers   # every registered worker has applied a version
        self.slots = slots
        self.publisher = None
        self.version = 0
        self.step = 0
        self.lock = threading.Lock()
        self.readers = 0           # workers the last synchronous send waited for
        self.reconnects = 0        # the client's, at that send
        self.unconfirmed = False   # the last commit's confirmation is not collected

    def publish(self, flat, timeout, early=False):
        """Publishes flat as the next version. early: a wait for the
        workers follows, so the commit does not wait for the broker's
        confirmation (commit_async): the wait's request goes right behind
        it, and the broker answers both at one look (wait_applied collects
        the confirmation, already there by then)."""
        with self.lock:
            if self.publisher is None:
                self.publisher = self.client.publisher_like(self.name, flat, slots=self.slots,
                                                            replace=True)
            self.step += 1
            if early:
                self.version = self.publisher.publish_async(flat, self.step, timeout)
                self.unconfirmed = True
            else:
                self.version = self.publisher.publish(flat, self.step, timeout)
                self.unconfirmed = False
            if not self.joined:
                self._count_workers()
            return self.version

    def confirm(self, timeout):
        """Collects the broker's confirmation of an early publish, after the
        wait (raises what the broker refused). A broker that went away
        before confirming had the version visible (the workers applied it
        from the one that followed), and a later begin may have collected
        the confirmation already: neither is an error here."""
        with self.lock:
            if not self.unconfirmed:
                return
            self.unconfirmed = False
            try:
                self.publisher.wait_ack(timeout)
            except NotConnectedError:
                pass
            except WsyncError as e:
                if e.errno != errno.ENOENT:
                    raise

    def _count_workers(self):
        """Notes (once) that every registered worker has subscribed; the
        model's subscribers as the broker counts them now."""
        try:
            have = {m.name: m.subscribers for m in self.client.models()}.get(self.name, 0)
        except WsyncError:
            return "?"
        if have >= self.workers:
            self.joined = True
        return have

    def wait_applied(self, version, timeout):
        """Returns when every current subscriber (each worker's session)
        has acknowledged version or a newer one, which a worker does only
        once it applied it."""
        if self.publisher is None:
            return 0
        if not self.joined:
            n = self._await_workers(version, timeout)
        else:
            n = self._wait_applied(version, timeout)
        self.confirm(timeout)
        return n

    def _wait_applied(self, version, timeout):
        if not self.joined:
            return self._await_workers(version, timeout)
        # in slices, so that Ctrl-C and close() are noticed while waiting
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.client.reconnects != self.reconnects:
            self._await_returning(deadline)
        while True:
            left = _SLICE_S if deadline is None else \
                max(0.0, min(_SLICE_S, deadline - time.monotonic()))
            try:
                self.readers = self.publisher.wait_readers(version, left, 0)
                return self.readers
            except WsyncTimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    def _await_workers(self, version, timeout):
        """A synchronous send before every registered worker was seen
        subscribed (workers still starting): "every current subscriber"
        could be none at all, so this waits until as many as were
        registered (num_workers) subscribed, up to timeout (None: the join
        timeout, the scheme's connect_timeout), then for every current one
        as usual; a TimeoutError says how many came. Once all were seen, a
        worker that dies simply stops counting."""
        t = self.join_timeout if timeout is None else timeout
        deadline = None if t is None else time.monotonic() + t
        while True:
            have = self._count_workers()
            if self.joined:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                return self._wait_applied(version, left)
            left = _SLICE_S if deadline is None else \
                max(0.0, min(_SLICE_S, deadline - time.monotonic()))
            try:
                self.readers = self.publisher.wait_readers(version, left, self.workers)
                self.joined = True
                self.reconnects = self.client.reconnects
                return self.readers
            except WsyncTimeoutError as e:
                if deadline is not None and time.monotonic() >= deadline:
                    raise WsyncTimeoutError(
                        e.errno, e.strerror,
                        "wsync.rl: model '%s': %s of the %d registered workers subscribed "
                        "within %s of a synchronous send() (%s); is every worker started, "
                        "and connect()ed with this scheme?"
                        % (self.name, have, self.workers, _fmt(t), e.detail or e.strerror)
                    ) from None

    def _await_returning(self, deadline):
        """The broker restarted since the last synchronous send: "every
        current subscriber" of the new one is only the workers that have
        reconnected so far. Waits (until deadline, and at most the
        client's reconnect_timeout) for as many as the last send counted,
        or as the scheme registered; a worker that died meanwhile stops
        counting after that."""
        t = self.client.reconnect_timeout
        if t is not None:
            end = time.monotonic() + t
            deadline = end if deadline is None else min(deadline, end)
        while True:
            have = {m.name: m.subscribers for m in self.client.models()}.get(self.name, 0)
            if have >= max(self.readers, self.workers) or (deadline is not None and
                                        time.monotonic() >= deadline):
                break
            time.sleep(0.01)
        self.reconnects = self.client.reconnects

    def close(self):
        self.client.close()


class _ReceiverEnd:
    """A worker's connection: one subscription it loads versions from, which
    acknowledges them explicitly (Subscriber.set_ack): the broker counts a
    version for the sender's wait_readers only when ack() says the worker
    applied it, not when it was taken. So a synchronous send() returns
    exactly when every worker applied the version."""

    def __init__(self, endpoint, name, client_name):
        self.client = Client(endpoint, client_name)
        try:
            self.sub = self.client.subscriber(name)
            self.sub.set_ack(True)
        except BaseException:
            self.client.close()
            raise
        self.version = 0
        self.step = 0
        self.published_ns = 0
        self.received = 0
        self.acked_moves = 0       # sub.moves when the applied version was acked
        self.sub_lock = threading.Lock()   # resubscribe() against itself

    def resubscribe(self, old=None):
        """Subscribes again after the model was deleted or replaced (a new
        job's trainer with another layout): its versions go on above the
        old ones, so the version applied stays a valid floor. old is the
        subscription that raised RemovedError: if another thread already
        replaced it, nothing is done."""
        with self.sub_lock:
            if old is not None and self.sub is not old:
                return
            name = self.sub.model
            self.sub.close()
            sub = self.client.subscriber(name)
            sub.set_ack(True)
            self.sub = sub

    def acknowledge(self, version):
        """Says version is applied (a synchronous send() waiting for it, or
        an older one, may return)."""
        try:
            self.sub.ack(version)
            self.acked_moves = self.sub.moves
        except (WsyncError, ClosedError) as e:
            _log.debug("wsync.rl: acknowledging v%d: %s", version, e)

    def reacknowledge(self):
        """After the client followed a restarted broker, the new broker
        counts nothing of this worker yet: the version applied is
        acknowledged there again (the new broker has it, or a newer one)."""
        if self.version and self.sub.moves != self.acked_moves:
            self.acknowledge(self.version)

    def close(self):
        self.client.close()


class WsyncTransport:
    """A transport of the scheme (TorchRL's TransportBackend), made by
    create_transport: a sender's handle for one worker
    (scheme.sender_transports[i]), or a worker's receiving end
    (scheme.receiver_transport).

    One publication serves every worker, so a sender's transports share
    versions: the first of them to send given weights publishes a version,
    and each other transport that sends the same weights object, unchanged
    (no tensor of it written in place since, by torch's version counters),
    joins that version instead of publishing again. TorchRL's loop (every
    transport's send_weights_async with the same prepared weights, then
    every transport's wait_ack) so publishes once and waits once. A
    transport sending again, or sending other or changed weights, publishes
    a new version. A wait (send_weights with sync=True, wait_ack) is for
    the version the transport sent or joined, and returns once every
    worker applied it: the broker counts acknowledgements per model, not
    per worker, so the first wait of a round covers the others, which
    return at once."""

    def __init__(self, scheme, role, worker_idx=None):
        self._scheme = weakref.ref(scheme)
        self.role = role
        self.worker_idx = worker_idx
        self.version = 0           # sender: the version this transport sent or joined

    def _s(self, role):
        s = self._scheme()
        if s is None:
            raise ClosedError("wsync.rl: the scheme of this transport is gone")
        if role != self.role:
            raise RuntimeError("wsync.rl: %r is a %s's transport: it does not %s"
                               % (self, self.role,
                                  "send" if role == "sender" else "receive"))
        return s

    # sender side
    def send_weights(self, weights: Any) -> int:
        """Sends weights to this transport's worker (every worker gets the
        version) and, for a synchronous scheme, returns once they applied
        it (TimeoutError after the scheme's timeout, naming the late).
        Returns the version."""
        s = self._s("sender")
        v = self.send_weights_async(weights)
        if s.sync:
            s._end.wait_applied(v, s.timeout)
        return v

    def send_weights_async(self, weights: Any, model_id: Optional[str] = None) -> int:
        """Publishes weights (or joins the version another transport just
        published of the same, unchanged, weights) without waiting; returns
        the version."""
        s = self._s("sender")
        s._check_sender()
        self.version = s._publish_shared(weights, self)
        return self.version

    def wait_ack(self, timeout: Optional[float] = None) -> int:
        """Waits until the workers applied the version this transport sent
        (up to timeout, by default the scheme's); returns how many sessions
        have. Returns 0 at once if it sent none."""
        s = self._s("sender")
        t = s.timeout if timeout is None else _timeout_s(timeout)
        s._check_sender()
        if not self.version:
            return 0
        return s._end.wait_applied(self.version, t)

    def setup_connection_and_weights_on_sender(self) -> None:
        """Connects the sender and publishes the first weights, once for all
        transports (TorchRL calls it on each)."""
        s = self._s("sender")
        if not s._synchronized_on_sender:
            s._connect_sender(None)

    def check_connection(self) -> bool:
        s = self._scheme()
        return s is not None and s._end is not None and not s._end.client._closed

    # receiver side
    def receive_weights(self, timeout: Optional[float] = None, *, weights: Any = None,
                        model: Any = None, strategy: Any = None) -> Optional[tuple]:
        """Applies the newest weights if newer than the applied ones,
        waiting up to timeout seconds (None: until they come; 0: only
        look); returns (model_id, weights), or None if none came in time.
        As TorchRL's transports, it leaves the context's cascade and the
        acknowledgement to the caller (scheme.receive() does both; a
        synchronous send waits for send_ack()). weights, model and strategy
        are accepted for TorchRL's call and not used: the scheme's model is
        the one updated."""
        t = _timeout_s(timeout)
        s = self._s("receiver")
        s._check_receiver("receive_weights")
        if not s._synchronized_on_receiver:
            raise RuntimeError("wsync.rl: connect() before receive_weights()")
        got = s._receive(t, notify=False)
        return None if got is None else (s._model_id or "policy", got)

    def setup_connection_and_weights_on_receiver(self, *, worker_idx=None, weights=None,
                                                 model=None, strategy=None):
        """Connects the worker and applies the first weights (once);
        returns None (they are applied already)."""
        s = self._s("receiver")
        if not s._synchronized_on_receiver:
            s._connect_receiver(worker_idx)
        return None

    def send_ack(self, message: str = "updated") -> None:
        """Acknowledges the version applied: a synchronous send may return."""
        s = self._s("receiver")
        if s._end is not None:
            s._end.acknowledge(s._end.version)

    def __repr__(self):
        return "<wsync.rl.WsyncTransport %s%s>" % (
            self.role, "" if self.worker_idx is None else " worker %d" % self.worker_idx)


# ---- the scheme ------------------------------------------------------------------------

_Base = _TorchRLScheme if _TorchRLScheme is not None else object

# What never travels with a pickled scheme (connections, threads, references
# to the process's own objects).
_RUNTIME = ("_end", "_lock", "_thread", "_stop", "_context_ref", "_model_ref",
            "_sender_transports", "_receiver_transport", "_background_thread", "_stop_event",
            "_init_weights", "_shared", "_send_lock", "_held", "_retired", "_plan")


class WsyncWeightSyncScheme(_Base):
    """TorchRL's WeightSyncScheme on a wsync broker: synchronises one model
    (the policy) from a sender (the trainer's collector) to its workers.

    strategy    "tensordict" (TorchRL's default) or "state_dict": the format
                send() takes and receive() returns (weights travel flat
                either way; nested TensorDict or dict weights are flattened
                with '.', as state_dict names them)
    sync        send() returns once every worker applied the weights (True,
                TorchRL's default); else as soon as they are published
    name        the wsync model (default: the model_id and a random part made
                when the scheme is built, e.g. "policy-5f0c9a1e": unique to
                this sender, and carried to its workers by pickling or fork;
                two schemes, or two jobs on one broker, never collide). An
                explicit name wins: a worker started elsewhere finds it
    endpoint    the broker (default $WSYNC_ENDPOINT, else the default broker),
                resolved to its socket path on the sender so workers reach
                the same one
    timeout     how long a synchronous send() waits for the workers (None:
                as long as it takes; a worker that dies stops counting, a
                TimeoutError names the ones behind)
    connect_timeout  how long a worker's connect() waits for the first
                weights (TorchRL's workers block there too)
    background  workers apply new weights in a background thread after
                connect() (as TorchRL's multiprocess schemes do); False: only
                when the worker calls receive()
    strict      the weights must name exactly the model's tensors
    slots       the model's slabs on the broker (0: its default)
    zero_copy   workers put each version's read-only tensors into their
                module (a swap: nothing copied; parameters without storage,
                a TorchRL meta policy, are filled so) wherever the module is
                on the CPU or the meta device; a module on a GPU is copied
                into. False: always copy (a module on the meta device then
                raises NoStorageError)

    Hold scheme.lock around code that must not see the weights change
    (a rollout step): the background thread applies a version under it.
    """

    def __init__(self, strategy: str = "tensordict", sync: bool = True, *,
                 name: Optional[str] = None, endpoint: Optional[str] = None,
                 timeout: Optional[float] = None, connect_timeout: Optional[float] = 120.0,
                 background: bool = True, strict: bool = True, slots: int = 0,
                 zero_copy: bool = True) -> None:
        if strategy not in STRATEGIES:
            hint = ""
            if isinstance(strategy, str):
                hint = ("; the wsync model's name is WsyncWeightSyncScheme(name=%r) (wsync "
                        "0.2's first argument)" % strategy)
            raise ValueError("wsync.rl: strategy must be 'tensordict' or 'state_dict', not "
                             "%r%s" % (strategy, hint))
        for what, val in (("sync", sync), ("background", background), ("strict", strict),
                          ("zero_copy", zero_copy)):
            if not isinstance(val, bool):
                raise TypeError("wsync.rl: %s must be True or False, not %s"
                                % (what, type(val).__name__))
        if name is not None and not isinstance(name, str):
            raise TypeError("wsync.rl: name must be a str, not %s" % type(name).__name__)
        _enc(endpoint, "endpoint")          # a TypeError now, not in a worker later
        if _TorchRLScheme is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # its state_dict strategy "is experimental"
                super().__init__(strategy)
        self.strategy_str = strategy
        self._strategy = WsyncWeightStrategy(strategy)
        self.sync = sync
        self.name = name
        self.endpoint = endpoint
        self.timeout = _timeout_s(timeout)
        self.connect_timeout = _timeout_s(connect_timeout)
        self.background = background
        self.strict = strict
        self.slots = _uint(slots, "slots", 32)
        self.zero_copy = zero_copy
        # the default name's own part: made here, so that every copy of this
        # scheme (pickled to a worker, or inherited by fork) finds the same
        self._name_tag = secrets.token_hex(4)
        self._model_id = None
        self._worker_idx = None
        self.num_workers = None
        self._reset_runtime()

    def _reset_runtime(self):
        self._end = None
        self._lock = threading.RLock()
        self._thread = None
        self._stop = None
        self._context_ref = None
        self._model_ref = None
        self._sender_transports = None
        self._receiver_transport = None
        self._shared_transport = None
        self._background_thread = None
        self._stop_event = None
        self._init_weights = None
        self._shared = None        # (version, weights, fingerprint) transports may join
        self._send_lock = threading.Lock()
        self._held = None          # the view whose tensors a swap put in the model
        self._retired = None       # a weak reference to the one swapped out last
        self._swapped = None       # what the last swap put in (_weights_of)
        self._plan = _module.SwapPlan()    # how it did: the next swap follows it
        self._initialized_on_sender = False
        self._initialized_on_receiver = False
        self._synchronized_on_sender = False
        self._synchronized_on_receiver = False
        self.last_error = None

    # ---- TorchRL's properties ------------------------------------------------------

    @property
    def strategy(self):
        return self._strategy

    @strategy.setter
    def strategy(self, value):
        self._strategy = value

    @property
    def lock(self):
        """Held while a version is applied to the model: hold it around a
        rollout step that must see one version throughout."""
        return self._lock

    @property
    def initialized_on_sender(self):
        return self._initialized_on_sender

    @property
    def initialized_on_receiver(self):
        return self._initialized_on_receiver

    @property
    def synchronized_on_sender(self):
        return self._synchronized_on_sender

    @synchronized_on_sender.setter
    def synchronized_on_sender(self, value):
        self._synchronized_on_sender = value

    @property
    def synchronized_on_receiver(self):
        return self._synchronized_on_receiver

    @synchronized_on_receiver.setter
    def synchronized_on_receiver(self, value):
        self._synchronized_on_receiver = value

    @property
    def context(self):
        return self._context_ref() if self._context_ref is not None else None

    @context.setter
    def context(self, context):
        self._context_ref = weakref.ref(context) if context is not None else None

    @property
    def model_id(self):
        return self._model_id

    @model_id.setter
    def model_id(self, model_id):
        self._model_id = model_id

    @property
    def worker_idx(self):
        return self._worker_idx

    @worker_idx.setter
    def worker_idx(self, worker_idx):
        if self._initialized_on_sender and worker_idx is not None:
            raise RuntimeError("wsync.rl: a sender has no worker index")
        self._worker_idx = worker_idx

    @property
    def model(self):
        """The model weights are applied to (receiver) or taken from
        (sender): the one given, else model_id resolved in the context."""
        if self._model_ref is not None:
            m = self._model_ref()
            if m is not None:
                return m
        if self._model_id is not None and self.context is not None:
            m = _model_of(self.context, self._model_id)
            if m is None:
                raise AttributeError("wsync.rl: model %r is None in %r"
                                     % (self._model_id, self.context))
            self.model = m
            return m
        return None

    @model.setter
    def model(self, model):
        # held strongly: a model given to init_on_receiver(model=...) may have
        # no other reference (the model does not refer to the scheme: no cycle)
        old = self._model_ref() if self._model_ref is not None else None
        self._model_ref = None if model is None else (lambda m: (lambda: m))(model)
        if model is not None and model is not old and self._synchronized_on_receiver \
                and isinstance(self._end, _ReceiverEnd):
            # a connected worker's collector swapped its policy (TorchRL's
            # workers do, after connect, for a copy on the right device):
            # the new one gets the version applied so far at once
            _check_target(model, "the model")
            end = self._end
            sub = end.sub
            try:
                view = sub.acquire()
            except RemovedError:
                end.resubscribe(sub)
                view = end.sub.acquire()
            kept = False
            try:
                with self._lock:
                    kept = self._apply_view(model, view)
                    end.version, end.step = view.version, view.step
                    end.published_ns = view.published_ns
            finally:
                if not kept:
                    view.release()
            end.acknowledge(end.version)

    @property
    def weights(self):
        """The model's current weights in the strategy's format."""
        model = self.model
        if model is None:
            return self._init_weights
        return self._strategy.extract_weights(model)

    @weights.setter
    def weights(self, value):
        self._init_weights = value

    @property
    def sender_transports(self) -> Dict[int, WsyncTransport]:
        return self._sender_transports or {}

    @property
    def receiver_transport(self) -> Optional[WsyncTransport]:
        return self._receiver_transport

    @property
    def shared_transport(self):
        return None

    @property
    def wsync_name(self) -> str:
        """The wsync model the weights go through: name, else the model_id
        (its characters a model name cannot have as "_") and this scheme's
        own tag, e.g. "policy-5f0c9a1e"."""
        if self.name:
            return self.name
        fixed = getattr(self, "_sender_name", None)
        if fixed:                  # the sender's, whatever model_id a worker uses
            return fixed
        base = _NAME_BAD.sub("_", self._model_id or "policy").lstrip("./") or "policy"
        return "%s-%s" % (base[:96], getattr(self, "_name_tag", "0"))

    @property
    def version(self) -> int:
        """The last version sent (sender) or applied (receiver); 0: none."""
        return self._end.version if self._end is not None else 0

    @property
    def step(self) -> int:
        """How many sends the applied (or last sent) version is."""
        return self._end.step if self._end is not None else 0

    @property
    def received(self) -> int:
        """Versions this worker applied (its first weights included)."""
        return getattr(self._end, "received", 0)

    # ---- set-up ----------------------------------------------------------------------

    def init_on_sender(self, model_id: Optional[str] = None, context: Any = None, *,
                       weights: Any = None, model: Any = None, params_map: Any = None,
                       devices: Any = None, device_map_fn: Any = None,
                       num_workers: Optional[int] = None, ctx: Any = None, **kwargs) -> None:
        """The sender's side, in the process that sends (before the workers
        start). The weights come from model, weights, or model_id resolved
        in context (a collector: context.get_model(model_id), else the
        attribute path, "policy", "env.value_net", "nets[0]"). The workers
        are counted from num_workers, params_map, devices or
        context.num_workers, each with its transport. devices, params_map
        and device_map_fn are accepted for TorchRL's calls: every worker
        gets the host version and load_into copies it to its module's
        device. Nothing is connected yet: connect() does."""
        if self._initialized_on_receiver:
            raise RuntimeError("wsync.rl: this scheme is initialised on a receiver")
        self.model_id = model_id if model_id is not None else self._model_id
        self.context = context
        if model is not None:
            self.model = model
        if weights is not None:
            self._init_weights = weights
        n = num_workers
        if n is None and params_map is not None:
            n = len(params_map)
        if n is None and devices is not None:
            n = len(devices)
        if n is None and context is not None:
            n = getattr(context, "num_workers", None)
        self.num_workers = None if n is None else _uint(n, "num_workers", 32)
        if self.endpoint is None:
            self.endpoint = default_endpoint()   # the workers reach the same broker
        self._sender_name = None
        self._sender_name = self.wsync_name      # travels to the workers with the scheme
        self._sender_transports = {i: self.create_transport(worker_idx=i, role="sender")
                                   for i in range(self.num_workers or 0)}
        self._initialized_on_sender = True

    def init_on_receiver(self, *, model_id: str, context: Any = None, model: Any = None,
                         worker_idx: Optional[int] = None, **kwargs) -> None:
        """A worker's side, in the worker (after the scheme was pickled to
        it, or inherited through fork). The model is model, else
        context.get_model(model_id), else model_id resolved in context; it
        must be a module, a mapping of tensors or a TensorDict (a str fails
        here). worker_idx defaults to context.worker_idx."""
        if self._initialized_on_sender:
            # a forked worker holds the sender's state: start from what a
            # pickled copy would hold (the parent's connection stays the
            # parent's)
            self.__setstate__(self.__getstate__())
        self.model_id = model_id
        self.context = context
        if model is None and context is not None:
            model = _model_of(context, model_id)
        if model is None:
            raise ValueError("wsync.rl: init_on_receiver needs model= or a context holding "
                             "model_id %r" % (model_id,))
        self.model = _check_target(model, "init_on_receiver")
        if worker_idx is None and context is not None:
            worker_idx = getattr(context, "worker_idx", None)
        self.worker_idx = worker_idx
        self._receiver_transport = self.create_transport(worker_idx=worker_idx,
                                                         role="receiver")
        self._initialized_on_receiver = True

    def create_transport(self, *, worker_idx: Optional[int] = None,
                         role: Optional[str] = None, **kwargs) -> WsyncTransport:
        """A transport: a sender's handle for worker worker_idx, or a
        worker's receiving end (role "sender"/"receiver"; by default the
        side this scheme is initialised on)."""
        if role is None:
            role = "receiver" if self._initialized_on_receiver else "sender"
        if role not in ("sender", "receiver"):
            raise ValueError("wsync.rl: role must be 'sender' or 'receiver', not %r" % (role,))
        if worker_idx is not None:
            worker_idx = _uint(worker_idx, "worker_idx", 32)
        return WsyncTransport(self, role, worker_idx)

    def connect(self, *, worker_idx: Optional[int] = None, weights: Any = None) -> None:
        """After the workers started. On the sender: connects and publishes
        the first weights (weights, else the model's), without waiting for
        the workers. On a worker: connects, waits up to connect_timeout for
        the first weights, applies them, and starts the background thread
        (background=True)."""
        if self._synchronized_on_sender or self._synchronized_on_receiver:
            raise RuntimeError("wsync.rl: connect() was already called")
        if self._initialized_on_sender:
            if worker_idx is not None:
                raise RuntimeError("wsync.rl: a sender's connect() takes no worker_idx")
            self._connect_sender(weights)
        elif self._initialized_on_receiver:
            if weights is not None:
                raise RuntimeError("wsync.rl: a worker's connect() takes no weights; the "
                                   "sender's connect() publishes them")
            self._connect_receiver(worker_idx)
        else:
            raise RuntimeError("wsync.rl: call init_on_sender() or init_on_receiver() "
                               "before connect()")

    def _connect_sender(self, weights):
        if self._end is None:
            self._end = _SenderEnd(self.endpoint, self.wsync_name, self.slots,
                                   "torchrl-sender-%s" % self.wsync_name, self.num_workers,
                                   self.connect_timeout)
        self._synchronized_on_sender = True
        try:
            first = weights if weights is not None else self._init_weights
            self._publish(first)
        except BaseException:
            self._synchronized_on_sender = False
            raise

    def _connect_receiver(self, worker_idx):
        if worker_idx is not None:
            self._worker_idx = worker_idx
        who = "torchrl-worker-%s-%s" % (self.wsync_name,
                                        "?" if self._worker_idx is None else self._worker_idx)
        end = self._end = _ReceiverEnd(self.endpoint, self.wsync_name, who)
        self._synchronized_on_receiver = True
        try:
            try:
                self._receive(self.connect_timeout, initial=True)
            except WsyncTimeoutError as e:
                # the library's detail stays (e.g. "the model has never been
                # published ... is the name right?"); connect() adds its part
                raise WsyncTimeoutError(
                    e.errno, e.strerror,
                    "%s; wsync.rl: worker %s got no weights within %s of connect(): is "
                    "the sender connected, and the name right?"
                    % (e.detail or "model '%s'" % self.wsync_name,
                       "?" if self._worker_idx is None else self._worker_idx,
                       _fmt(self.connect_timeout))) from None
        except BaseException:
            self._synchronized_on_receiver = False
            self._end = None
            end.close()
            raise
        if self.background:
            self._start_background()

    # ---- sending ------------------------------------------------------------------------

    def prepare_weights(self, weights: Any, model_id: Optional[str] = None,
                        strategy: Any = None, context: Any = None) -> Any:
        """weights as the scheme sends them: None means the model's (given
        at init, or model_id resolved in the context); a module gives its
        weights; a str is a model_id resolved in the context; a mapping or a
        TensorDict goes as it is."""
        strategy = strategy or self._strategy
        context = context if context is not None else self.context
        if weights is None:
            model = self.model
            if model is None and self._init_weights is not None:
                return self._init_weights
            if model is None:
                raise ValueError("wsync.rl: no weights to send: give weights, or a model / "
                                 "context at init_on_sender")
            return strategy.extract_weights(model)
        if isinstance(weights, str):
            if context is None:
                raise ValueError("wsync.rl: weights %r name a model, but there is no "
                                 "context to find it in" % weights)
            return strategy.extract_weights(_model_of(context, weights))
        if _is_module(weights):
            return strategy.extract_weights(weights)
        return weights

    def _flat(self, weights):
        if weights is None:
            model = self.model
            if _is_module(model):
                # the module's tensors as they are: publishing copies them
                # anyway, so nothing is detached or formatted first
                return _module_tensors(model)
        w = self.prepare_weights(weights)
        if _is_module(w):
            return _module_tensors(w)
        if not (isinstance(w, Mapping) or _is_tensordict(w)):
            raise TypeError("wsync.rl: weights must be a module, a mapping of tensors or a "
                            "TensorDict, not %s" % type(w).__name__)
        return _flatten(w)

    def _publish(self, weights, early=False):
        if self._end is None or not isinstance(self._end, _SenderEnd):
            raise RuntimeError("wsync.rl: connect() the sender before sending")
        self._shared = None
        return self._end.publish(self._flat(weights), self.timeout, early)

    def _fingerprint(self, weights):
        """(the object weights come from, a fingerprint of its tensors: each
        one's identity and torch version counter, which an in-place write
        raises), or (obj, None) where that cannot be told (numpy arrays)."""
        src = weights
        if src is None:
            src = self.model if self.model is not None else self._init_weights
        elif isinstance(src, str) and self.context is not None:
            src = _model_of(self.context, src)
        if _is_module(src):
            tensors = _module_tensors(src)
        elif isinstance(src, Mapping) or _is_tensordict(src):
            tensors = _flatten(src)
        else:
            return src, None
        fp = []
        for name, t in tensors.items():
            ver = getattr(t, "_version", None)
            if not isinstance(ver, int):
                return src, None
            fp.append((name, id(t), ver))
        return src, tuple(fp)

    def _publish_shared(self, weights, transport):
        """A sender transport's send: joins the version the last transport
        published when it was of the same weights object, unchanged since,
        and this transport has not sent it yet; else publishes a version."""
        with self._send_lock:
            end = self._end
            key, fp = self._fingerprint(weights)
            last = self._shared
            if last is not None and fp is not None and last[1] is key and last[2] == fp \
                    and last[0] == end.version and transport.version < last[0]:
                v = last[0]
            else:
                v = self._publish(weights)
                if fp is not None:
                    self._shared = (v, key, fp)
            transport.version = v
            if self._shared is not None and all(
                    t.version >= v for t in (self._sender_transports or {}).values()):
                self._shared = None        # every worker's transport has it: let go
            return v

    def _check_workers(self, worker_ids):
        if worker_ids is None:
            return
        ids = [worker_ids] if isinstance(worker_ids, int) else list(worker_ids)
        for i in ids:
            if self._sender_transports and i not in self._sender_transports:
                raise ValueError("wsync.rl: worker %r is not registered (workers: 0 .. %d)"
                                 % (i, len(self._sender_transports) - 1))

    def _check_sender(self):
        if not self._initialized_on_sender:
            raise RuntimeError("wsync.rl: init_on_sender() before sending weights")
        if not self._synchronized_on_sender:
            raise RuntimeError("wsync.rl: connect() before sending weights")

    def send(self, weights: Any = None, worker_ids: Any = None) -> None:
        """Publishes weights (None: the model's) and, with sync=True, returns
        once every worker has applied them. One publication serves every
        worker: worker_ids is checked against the registered workers, and
        all of them get the version (a synchronous send waits for all).
        TimeoutError after the scheme's timeout names the workers behind."""
        self._check_sender()
        self._check_workers(worker_ids)
        v = self._publish(weights, early=self.sync)
        if self.sync:
            self._end.wait_applied(v, self.timeout)

    def send_async(self, weights: Any = None, worker_ids: Any = None) -> int:
        """Publishes weights and returns the version at once; wait_async()
        waits for the workers to apply it."""
        self._check_sender()
        self._check_workers(worker_ids)
        return self._publish(weights)

    def wait_async(self, timeout: Optional[float] = None) -> int:
        """Waits until every worker applied the last version sent (up to
        timeout, by default the scheme's); returns how many sessions have."""
        self._check_sender()
        t = self.timeout if timeout is None else _timeout_s(timeout)
        return self._end.wait_applied(self._end.version, t)

    # ---- receiving ------------------------------------------------------------------------

    def _check_receiver(self, what):
        if not self._initialized_on_receiver:
            if self._initialized_on_sender:
                raise RuntimeError("wsync.rl: %s() on the sender's side" % what)
            raise RuntimeError("wsync.rl: init_on_receiver() before %s()" % what)

    def receive(self, timeout: Optional[float] = None) -> Any:
        """Applies the newest weights if they are newer than the ones
        applied, waiting up to timeout seconds (None: until they come; 0:
        only look), and returns them (the model's weights, in the strategy's
        format), or None if none came in time. The context's
        update_policy_weights_ is told, as TorchRL's schemes do."""
        self._check_receiver("receive")
        if not self._synchronized_on_receiver:
            raise RuntimeError("wsync.rl: connect() before receive()")
        return self._receive(_timeout_s(timeout))

    def _receive(self, timeout, initial=False, notify=True):
        """Waits up to timeout (None: forever) for a version newer than the
        one applied, applies it and returns the weights, or None on time.
        The wait is made without scheme.lock: a rollout step holding it is
        never stalled by a receiver waiting on the broker; the lock is taken
        only to apply a version that came (and to note it as applied).
        notify: tell the context (update_policy_weights_) and acknowledge
        (TorchRL's scheme does both; its transports leave them to it).
        initial: connect()'s first wait, whose TimeoutError is raised."""
        end = self._end
        if end is None:
            raise ClosedError("wsync.rl: worker %s was shut down (shutdown()): nothing to "
                              "receive" % ("?" if self._worker_idx is None
                                           else self._worker_idx))
        model = self.model
        if model is None:
            raise ValueError("wsync.rl: no model registered")
        deadline = None if timeout is None else time.monotonic() + timeout
        end.reacknowledge()
        while True:
            sub = end.sub
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                view = sub.wait(after=end.version, timeout=left)
            except RemovedError:
                end.resubscribe(sub)
                continue
            except WsyncTimeoutError:
                if initial:
                    raise
                return None
            except ClosedError:
                if end.sub is not sub:      # another thread subscribed again
                    continue
                raise
            kept = False
            try:
                with self._lock:
                    # another thread (the background one, or a receive())
                    # may have applied this version or a newer one meanwhile
                    fresh = view.version > end.version
                    if fresh:
                        kept = self._apply_view(model, view)
                        put, self._swapped = self._swapped if kept else None, None
                        end.version, end.step = view.version, view.step
                        end.published_ns = view.published_ns
                        end.received += 1
                        version = end.version
            finally:
                if not kept:
                    view.release()
            if fresh:
                break
            if deadline is not None and time.monotonic() >= deadline:
                return None
        weights = self._weights_of(model, put)
        if not notify:
            return weights
        ctx = self.context
        if not initial and ctx is not None and callable(getattr(ctx, "update_policy_weights_",
                                                                None)):
            # TorchRL's cascade to the worker's collector, part of applying
            ctx.update_policy_weights_(model_id=self._model_id or "policy",
                                       policy_or_weights=weights)
        end.acknowledge(version)        # now a synchronous send() may return
        return weights

    def _weights_of(self, model, put):
        """model's weights in the strategy's format: after a swap that
        filled all of them, put, the tensors it put in (the ones
        extract_weights would find, without walking the module again)."""
        if put is None:
            return self._strategy.extract_weights(model)
        return self._strategy.format(put)

    def _swaps(self, model):
        """Whether a version goes into model by a zero-copy swap (see
        zero_copy) rather than a copy."""
        if not _is_module(model):
            return False
        if _module.is_swapped(model):
            return True            # its tensors are read-only: only a swap updates them
        return self.zero_copy and _module.can_swap(model)

    def _apply_view(self, model, view):
        """Applies view to model (under self._lock): a swap, after which
        the view stays held while its tensors are in the model (True), or a
        copy (False: the caller releases it). The view swapped out before
        is let go: released as soon as no code holds one of its tensors any
        more (at once, unless a forward pass running meanwhile still uses
        them: it finishes on the old version, never on a released one)."""
        put = {}
        # the module as the last swap left it takes the next version of the
        # same layout the same way, unchecked (SwapPlan); else all is looked at
        res = _module.swap_again(self._plan, view, model, self.strict, put)
        if res is None and self._swaps(model):
            res = _module.swap_into(view, model, strict=self.strict, put=put, plan=self._plan)
        if res is not None:
            # the module's weights now, for the cascade: every one the
            # module's state_dict names came from the view
            self._swapped = None if res.missing_keys else put
            prev, self._held = self._held, view
            # The view swapped out one update ago should be gone by now; if
            # it is not, its tensors are most likely kept by a reference
            # cycle (any code's) that only the collector frees, and its
            # held version would pin a slab until then: collect once. A
            # view still alive after that is in real use and stays held.
            gone = self._retired
            if gone is not None and gone() is not None:
                gc.collect()
            self._retired = None if prev is None else weakref.ref(prev)
            return True
        self._plan.forget()
        view.load_into(_destination(model, set(view.tensors)), strict=self.strict)
        return False

    def apply_weights(self, weights: Any, inplace: bool = True) -> None:
        """Applies weights (a mapping, a TensorDict, a module, or a wsync
        View) to the model, as TorchRL's apply_weights does: inplace=True
        copies into the model's tensors, inplace=False puts the weights'
        tensors into the module (a View's as read-only zero-copy tensors,
        held until the next is put in). A module that holds a swapped
        version takes a View by a swap either way. A copy into a tensor
        without storage (meta) raises NoStorageError."""
        self._check_receiver("apply_weights")
        model = self.model
        if model is None:
            raise ValueError("wsync.rl: no model registered")
        with self._lock:
            if isinstance(weights, View) and (not inplace or _module.is_swapped(model)):
                self._apply_view(model, weights)
                self._swapped = None
            else:
                self._strategy.apply_weights(model, weights, inplace=inplace,
                                             strict=self.strict)
            if isinstance(weights, View) and self._end is not None:
                self._end.version = max(self._end.version, weights.version)
                self._end.acknowledge(weights.version)

    def lag(self) -> PolicyLag:
        """How far the applied weights are behind the newest published
        (read from shared memory, no system call)."""
        self._check_receiver("lag")
        end = self._end
        if end is None:
            return PolicyLag(0, 0, 0.0, 0.0, 0, 0)
        return _lag(end.sub, end.version, end.step, end.published_ns)

    # ---- the background receiver ----------------------------------------------------------

    def _start_background(self):
        self._stop = self._stop_event = threading.Event()
        self._thread = self._background_thread = threading.Thread(
            target=self._background_loop, daemon=True,
            name="wsync-receiver-%s" % self._worker_idx)
        self._thread.start()

    def _background_loop(self):
        stop = self._stop
        while not stop.is_set():
            try:
                self._receive(0.25)
            except ClosedError:
                return
            except Exception as e:        # told (once per kind), then tried again
                if not stop.is_set():
                    if repr(e) != repr(self.last_error):
                        _log.warning("wsync.rl: worker %s: applying weights failed: %s: %s",
                                     self._worker_idx, type(e).__name__, e)
                    self.last_error = e
                    stop.wait(1.0)

    # ---- life ------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stops the background thread and closes the connections.
        Idempotent; the scheme can be pickled again afterwards."""
        stop, thread = getattr(self, "_stop", None), getattr(self, "_thread", None)
        if stop is not None:
            stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
        self._thread = self._background_thread = None
        end, self._end = getattr(self, "_end", None), None
        if end is not None:
            end.close()

    def __getstate__(self):
        state = self.__dict__.copy()
        for k in _RUNTIME:
            state.pop(k, None)
        for k in ("_initialized_on_sender", "_initialized_on_receiver",
                  "_synchronized_on_sender", "_synchronized_on_receiver"):
            state[k] = False
        state["last_error"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        keep = {k: v for k, v in state.items() if k not in _RUNTIME}
        self._reset_runtime()
        self.__dict__.update(keep)

    def __del__(self):
        try:
            self.shutdown()
        except Exception:
            pass

    @classmethod
    def from_ref(cls, ref, **kwargs):
        """A scheme for a wsync.ModelRef (endpoint, model)."""
        return cls(name=ref.model, endpoint=ref.endpoint, **kwargs)

    def ref(self):
        return ModelRef(self.endpoint, self.wsync_name)

    def __repr__(self):
        side = "sender" if self._initialized_on_sender else \
            "worker %s" % self._worker_idx if self._initialized_on_receiver else "not initialised"
        return "WsyncWeightSyncScheme(%r, sync=%r, name=%r, %s, v%d)" % (
            self.strategy_str, self.sync, self.wsync_name, side, self.version)

    # ---- wsync 0.2's helpers (deprecated) ------------------------------------------------

    def create_sender(self, weights: Any, client: Optional[Client] = None,
                      name: str = "wsync-trainer") -> "WeightSender":
        """Deprecated (wsync 0.2): use init_on_sender(model=...), connect(),
        send(). The trainer's end, publishing a model laid out like weights."""
        _deprecated("create_sender", "init_on_sender(model=policy); connect(); send()")
        return WeightSender(self, weights, client, name)

    def create_receiver(self, policy: Any, client: Optional[Client] = None,
                        name: str = "wsync-collector") -> "WeightReceiver":
        """Deprecated (wsync 0.2): use init_on_receiver(model_id=...,
        model=policy), connect(), receive(). A collector's end, updating
        policy in place; receive() returns True/False."""
        _check_target(policy, "create_receiver")
        _deprecated("create_receiver", "init_on_receiver(model_id='policy', model=policy); "
                    "connect(); receive(timeout)")
        return WeightReceiver(self, policy, client, name)

    # ---- a live policy for a worker (docs/LIVE.md) -------------------------------------

    def live_policy(self, module: Any = None, max_lag: Any = None, device: Any = None,
                    timeout: Optional[float] = None):
        """A wsync.LivePolicy for this worker, after connect(): module's (by
        default the registered model's) forward over the newest version in
        place, swapped only between two calls, instead of receive() copying
        versions in. max_lag, device and timeout are LivePolicy's. It reads
        through a subscription of its own on the worker's client, without
        explicit acknowledgement: a version it takes counts as applied for
        a synchronous send(). It ends with the scheme's shutdown()."""
        from ._live import LivePolicy
        self._check_receiver("live_policy")
        end = self._end
        if end is None:
            raise RuntimeError("wsync.rl: connect() before live_policy()")
        module = self.model if module is None else module
        return LivePolicy(end.client.subscriber(self.wsync_name), module, max_lag=max_lag,
                          device=device, timeout=timeout)


def _fmt(t):
    return "forever" if t is None else "%g s" % t


def _deprecated(what, instead):
    warnings.warn("wsync.rl: WsyncWeightSyncScheme.%s is deprecated (wsync 0.2's "
                  "interface); use TorchRL's: %s" % (what, instead), DeprecationWarning,
                  stacklevel=3)


def _lag(sub, version, step, published_ns):
    now = time.time_ns()
    try:
        # one try at a broker that went away, not the client's
        # reconnect_timeout: a rollout asks this every step
        latest = sub._latest(time.monotonic())
    except NoDataError:
        return PolicyLag(0, 0, 0.0, 0.0, version, 0)
    except NotConnectedError:
        # no broker now: nothing newer than what this worker holds can be
        # published until one is back
        return PolicyLag(0, 0, 0.0, max(0, now - published_ns) / 1e9 if version else math.inf,
                         version, version)
    if version == 0:
        return PolicyLag(latest.version, latest.step, math.inf, math.inf, 0, latest.version)
    behind = max(0, latest.version - version)
    return PolicyLag(behind, max(0, latest.step - step),
                     max(0, latest.published_ns - published_ns) / 1e9 if behind else 0.0,
                     max(0, now - published_ns) / 1e9, version, latest.version)


# ---- wsync 0.2's ends (deprecated) ---------------------------------------------------------

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
    """Deprecated (wsync 0.2): the trainer's end made by create_sender."""

    def __init__(self, scheme, weights, client=None, name="wsync-trainer"):
        self.scheme = scheme
        self._weights = weights
        self._connect(client, name)
        try:
            self.publisher = self.client.publisher_like(scheme.wsync_name, weights,
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
        """Publishes weights (default: those given at creation) stamped
        with step (default: the last + 1); with sync=True then waits for
        every receiver to take it. Returns the version."""
        weights, step = self._args(weights, step)
        v = self.publisher.publish(weights, step, timeout)
        self.step, self.version = step, v
        if self.scheme.sync:
            self.publisher.wait_readers(v, self.scheme.timeout, 0)
        return v

    send = send_weights

    def send_weights_async(self, weights: Any = None, step: Optional[int] = None,
                           timeout: Optional[float] = None) -> int:
        weights, step = self._args(weights, step)
        v = self.publisher.publish_async(weights, step, timeout)
        self.step, self.version = step, v
        return v

    send_async = send_weights_async

    def wait_ack(self, timeout: Optional[float] = None) -> int:
        t = _timeout_s(timeout)
        deadline = None if t is None else time.monotonic() + t
        v = self.publisher.wait_ack(t)
        if self.scheme.sync:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self.scheme.timeout is not None:
                left = self.scheme.timeout if left is None else min(left, self.scheme.timeout)
            self.publisher.wait_readers(v, left, 0)
        return v

    wait_async = wait_ack

    def __repr__(self):
        return "<wsync.rl.WeightSender %r v%d step %d>" % (self.scheme.wsync_name,
                                                           self.version, self.step)


class WeightReceiver(_End):
    """Deprecated (wsync 0.2): a collector's end made by create_receiver;
    receive() returns True when the policy was updated."""

    def __init__(self, scheme, policy, client=None, name="wsync-collector"):
        self.scheme = scheme
        self.policy = _check_target(policy, "WeightReceiver")
        self._connect(client, name)
        try:
            self.subscriber = self.client.subscriber(scheme.wsync_name)
        except BaseException:
            if self._own:
                self.client.close()
            raise
        self.version = 0
        self.step = 0
        self.published_ns = 0
        self.received = 0

    def _close_handle(self):
        self.subscriber.close()

    def receive(self, timeout: Optional[float] = 0.0) -> bool:
        """Loads the newest version into the policy if it is newer, waiting
        up to timeout seconds; True if the policy was updated."""
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
        return self.receive(timeout)

    def lag(self) -> PolicyLag:
        return _lag(self.subscriber, self.version, self.step, self.published_ns)

    def __repr__(self):
        return "<wsync.rl.WeightReceiver %r v%d step %d>" % (self.scheme.wsync_name,
                                                             self.version, self.step)
