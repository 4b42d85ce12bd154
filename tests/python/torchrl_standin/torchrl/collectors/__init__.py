"""Stand-in for the parts of TorchRL's multi-process collectors that meet a
weight-sync scheme, written from TorchRL 0.14.0's behaviour
(torchrl/collectors/_multi_base.py, _runner.py, utils.py, _base.py; read,
not copied). What matters, as there:

- the parent calls scheme.init_on_sender(model_id=..., context=collector,
  ctx=mp_context) before starting the workers, connect() after (the
  "policy" scheme first), and update_policy_weights_() ->
  scheme.send(weights=..., worker_ids=...);
- each worker is sent the policy *stateless*: every parameter and buffer on
  the meta device, parameters without grad (_make_meta_policy_cm). TorchRL
  does it for fork always, and for spawn from torch 2.8, whose pickling of
  meta storages works; torch 1.13's does not, so the stand-in carries the
  meta policy to a spawned worker as pickle bytes: what torch >= 2.8 does;
- the worker: scheme.init_on_receiver(model=policy, model_id="policy",
  worker_idx=i) and connect(worker_idx=i) (_make_policy_factory), then
  its inner collector becomes the scheme's context (register_scheme_receiver)
  and the scheme's model is set to the collector's policy; then
  "instantiated". The inner collector's update_policy_weights_ (what a
  scheme's receiver cascades to) copies the weights it is told of into its
  policy in place (_maybe_fallback_update: from_module(policy).data.update_);
- a worker's start-up error goes to the parent as a dict (type name,
  module, str(e), traceback), and the parent raises
  exc_class(f"{msg}\\n\\nWorker traceback:\\n{tb}") (_multi_base.py ~1550),
  or a RuntimeError naming it when the class cannot be found.

The worker then serves the parent's requests of the tests and the bench
("params", "digest", "rollout", "stats", "close"), which TorchRL's workers
do not have.
"""
import contextlib
import importlib
import multiprocessing as mp
import pickle
import traceback
import zlib

import torch
import torch.multiprocessing
from torch import nn

INSTANTIATE_TIMEOUT = 120.0


def _meta_tensors(policy):
    """{(module, attr, is_param): meta tensor} for every parameter and
    buffer of policy."""
    out = {}
    for _, m in policy.named_modules(remove_duplicate=False):
        for n, p in m._parameters.items():
            if p is not None:
                out[(m, n, True)] = nn.Parameter(p.data.to("meta"), requires_grad=False)
        for n, b in m._buffers.items():
            if b is not None:
                out[(m, n, False)] = b.to("meta")
    return out


@contextlib.contextmanager
def _make_meta_policy_cm(policy, *, mp_start_method=None):
    """The policy's parameters and buffers on the meta device while the
    workers are started; the real ones back on exit."""
    meta = _meta_tensors(policy)
    saved = {}
    for (m, n, is_param), t in meta.items():
        d = m._parameters if is_param else m._buffers
        saved[(m, n, is_param)] = d[n]
        d[n] = t
    try:
        yield
    finally:
        for (m, n, is_param), t in saved.items():
            (m._parameters if is_param else m._buffers)[n] = t


class _Pickled:
    """An object that travels to a spawned worker as pickle bytes (torch
    1.13's multiprocessing pickler cannot share meta storages)."""

    def __init__(self, obj):
        self.data = pickle.dumps(obj)

    def get(self):
        return pickle.loads(self.data)


def _flat(weights):
    from torchrl.weight_update._schemes import flat_weights
    return flat_weights(weights)


class InnerCollector:
    """A worker's collector, where it meets the scheme."""

    def __init__(self, policy, worker_idx):
        self.policy = policy
        self.worker_idx = worker_idx
        self.cascaded = 0

    def get_model(self, model_id):
        if model_id == "policy":
            return self.policy
        raise AttributeError(model_id)

    def update_policy_weights_(self, policy_or_weights=None, *, model_id=None, **kwargs):
        # no sender scheme here: the fallback, an in-place copy into the policy
        if model_id is not None and model_id != "policy":
            raise KeyError("no local weight target for model_id=%r" % (model_id,))
        if policy_or_weights is None:
            raise RuntimeError("no weights")
        w = _flat(policy_or_weights)
        with torch.no_grad():
            for k, t in self.policy.state_dict(keep_vars=True).items():
                if k in w:
                    t.data.copy_(w[k].data)
        self.cascaded += 1


def _digest(policy):
    """crc32 of every tensor's bytes, in state_dict order."""
    crc = 0
    for k, t in policy.state_dict().items():
        a = t.detach().contiguous().numpy()
        crc = zlib.crc32(k.encode(), crc)
        crc = zlib.crc32(memoryview(a).cast("B"), crc)
    return crc


def _main_worker(pipe, policy, schemes, idx):
    try:
        if isinstance(policy, _Pickled):
            policy = policy.get()
        scheme = schemes.get("policy")
        if scheme is not None:             # _make_policy_factory
            scheme.init_on_receiver(model=policy, model_id="policy", worker_idx=idx)
            scheme.connect(worker_idx=idx)
        inner = InnerCollector(policy, idx)
        for model_id, s in schemes.items():  # register_scheme_receiver
            if not s.initialized_on_receiver:
                s.init_on_receiver(model_id=model_id, context=inner, worker_idx=idx)
            elif s.context is None:
                s.context = inner
            if not s.synchronized_on_receiver:
                s.connect(worker_idx=idx)
            if s.model is not inner.get_model(model_id):
                s.model = inner.get_model(model_id)
        if any(p.device.type == "meta" for p in policy.parameters()):
            raise RuntimeError("the policy still has meta parameters after connect()")
        pipe.send("instantiated")
    except Exception as e:
        try:
            pipe.send({"error": True, "exception_type": type(e).__name__,
                       "exception_module": type(e).__module__, "exception_msg": str(e),
                       "traceback": traceback.format_exc()})
        except Exception:
            pass
        return
    while True:
        msg, arg = pipe.recv()
        if msg == "params":
            pipe.send({k: v.detach().clone() for k, v in policy.state_dict().items()})
        elif msg == "digest":
            pipe.send(_digest(policy))
        elif msg == "rollout":
            lock = getattr(scheme, "lock", None) or contextlib.nullcontext()
            with lock, torch.no_grad():
                pipe.send(policy(arg))
        elif msg == "stats":
            pipe.send({"cascaded": inner.cascaded, "version": getattr(scheme, "version", 0),
                       "error": None if getattr(scheme, "last_error", None) is None
                       else str(scheme.last_error)})
        elif msg == "close":
            for s in schemes.values():
                s.shutdown()
            pipe.send("closed")
            return


def _rebuild_error(i, msg):
    exc_class = None
    module = msg["exception_module"]
    try:
        if module == "builtins":
            import builtins
            exc_class = getattr(builtins, msg["exception_type"], None)
        else:
            exc_class = getattr(importlib.import_module(module), msg["exception_type"], None)
    except Exception:
        pass
    text = "%s\n\nWorker traceback:\n%s" % (msg["exception_msg"], msg["traceback"])
    if exc_class is not None:
        return exc_class(text)
    return RuntimeError("Worker %d raised %s: %s" % (i, msg["exception_type"], text))


class MultiCollector:
    """The parent side of a TorchRL multi-process collector."""

    def __init__(self, policy, num_workers, weight_sync_schemes, start_method="fork",
                 worker_policy=None):
        self.policy = policy
        self.num_workers = num_workers
        self._weight_sync_schemes = weight_sync_schemes
        self.ctx = mp.get_context(start_method)
        self.start_method = start_method
        self.worker_policy = worker_policy   # tests: a policy of another layout
        self.procs, self.pipes = [], []

    def get_model(self, model_id):
        if model_id == "policy":
            return self.policy
        raise AttributeError(model_id)

    def start(self):
        from torchrl.weight_update import WeightSyncScheme
        if self.start_method == "spawn" and torch.__version__ < "2.8":
            # TorchRL's _mp_sharing_strategy_for_spawn: file descriptors of
            # shared storages fail spawned workers on older torch
            torch.multiprocessing.set_sharing_strategy("file_system")
        for model_id, scheme in self._weight_sync_schemes.items():
            if not isinstance(scheme, WeightSyncScheme):
                raise TypeError("Expected WeightSyncScheme, got %r" % type(scheme))
            if not scheme.initialized_on_sender:
                scheme.init_on_sender(model_id=model_id, context=self, ctx=self.ctx)
        pairs = [self.ctx.Pipe() for _ in range(self.num_workers)]
        self.pipes = [p for p, _ in pairs]
        for i in range(self.num_workers):
            policy = self.policy if self.worker_policy is None else self.worker_policy
            with _make_meta_policy_cm(policy, mp_start_method=self.start_method):
                sent = _Pickled(policy) if self.start_method != "fork" else policy
                p = self.ctx.Process(target=_main_worker,
                                     args=(pairs[i][1], sent, self._weight_sync_schemes, i),
                                     daemon=True)
                p.start()
            pairs[i][1].close()
            self.procs.append(p)
        policy_scheme = self._weight_sync_schemes.get("policy")
        if policy_scheme is not None:
            policy_scheme.connect()
        for k, s in self._weight_sync_schemes.items():
            if k != "policy":
                s.connect()
        for i, pipe in enumerate(self.pipes):
            if not pipe.poll(INSTANTIATE_TIMEOUT):
                raise RuntimeError("worker %d did not start" % i)
            try:
                msg = pipe.recv()
            except EOFError as e:
                raise RuntimeError("Worker %d failed to initialize" % i) from e
            if msg != "instantiated":
                if isinstance(msg, dict) and msg.get("error"):
                    raise _rebuild_error(i, msg)
                raise RuntimeError(msg)

    def update_policy_weights_(self, policy_or_weights=None, *, worker_ids=None):
        if isinstance(policy_or_weights, nn.Module):
            policy_or_weights = _flat(policy_or_weights)
        for scheme in self._weight_sync_schemes.values():
            scheme.send(weights=policy_or_weights, worker_ids=worker_ids)

    def ask(self, i, msg, arg=None, timeout=60.0):
        self.pipes[i].send((msg, arg))
        if not self.pipes[i].poll(timeout):
            raise RuntimeError("worker %d did not answer %r" % (i, msg))
        return self.pipes[i].recv()

    def shutdown(self, alive=None):
        for i in (range(self.num_workers) if alive is None else alive):
            try:
                self.ask(i, "close", timeout=30.0)
            except (OSError, EOFError, RuntimeError):
                pass
        for p in self.procs:
            p.join(10.0)
            if p.is_alive():
                p.kill()
        for s in self._weight_sync_schemes.values():
            s.shutdown()
