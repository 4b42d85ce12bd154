"""Stand-ins for TorchRL's own weight-sync schemes, written as TorchRL 0.14.0
writes them (torchrl/weight_update/_shared.py and _mp.py, read, not
copied), for the tests and the bench to put beside wsync's in the same run:

- SharedMemWeightSyncScheme: at init_on_sender the policy's weights are
  copied once into shared memory (share_memory_); connect() hands each
  worker that buffer through its own queue, and the worker puts its
  tensors into its module (apply_weights(inplace=False), tensordict's
  to_module). send() copies the new weights into the shared buffer
  (update_), puts "receive" on every worker's instruction queue and, in
  sync mode, takes one ack per worker from its ack queue. A worker's
  background thread, on "receive": apply_weights(model, buffer,
  inplace=True) (its module holds the buffer: a copy onto itself), the
  context's update_policy_weights_ (the cascade), then the ack.
- MultiProcessWeightSyncScheme: the weights themselves go through each
  worker's queue (pickled by multiprocessing: torch moves a CPU tensor's
  storage to shared memory on the first put and passes a handle); the
  worker applies them (inplace=False on connect, in place after), cascades
  and acks.

WeightStrategy here works on flat {name: tensor} dicts (tensordict is not
installed): extract gives state_dict(keep_vars) detached; apply with
inplace=False puts the tensors into the module (a parameter stays a
parameter), with inplace=True copies into the module's tensors.
"""
import queue as _queue
import threading

import torch
from torch import nn

from . import WeightSyncScheme

WEIGHT_SYNC_TIMEOUT = 60.0


def flat_weights(weights):
    """{dotted name: tensor} of a module, a flat or nested dict, or
    anything with flatten_keys (a TensorDict)."""
    if isinstance(weights, nn.Module):
        return {k: v.detach() for k, v in weights.state_dict(keep_vars=True).items()}
    if callable(getattr(weights, "flatten_keys", None)) and not isinstance(weights, dict):
        weights = dict(weights.flatten_keys(".").items())
    out = {}
    _walk(weights, "", out)
    return out


def _walk(d, pre, out):
    for k, v in d.items():
        k = ".".join(k) if isinstance(k, tuple) else str(k)
        if isinstance(v, dict) or (callable(getattr(v, "flatten_keys", None)) and
                                   not isinstance(v, torch.Tensor)):
            _walk(dict(v.items()), pre + k + ".", out)
        else:
            out[pre + k] = v


def module_slots(module):
    out = {}
    for prefix, m in module.named_modules(remove_duplicate=False):
        pre = prefix + "." if prefix else ""
        for n, p in m._parameters.items():
            if p is not None:
                out[pre + n] = (m, n, True, p)
        for n, b in m._buffers.items():
            if b is not None:
                out[pre + n] = (m, n, False, b)
    return out


class WeightStrategy:
    def __init__(self, extract_as="tensordict"):
        self.extract_as = extract_as

    def extract_weights(self, source):
        return flat_weights(source)

    def apply_weights(self, destination, weights, inplace=True):
        if weights is None:
            return
        src = flat_weights(weights)
        slots = module_slots(destination)
        with torch.no_grad():
            for k, v in src.items():
                m, attr, is_param, old = slots[k]
                if inplace:
                    old.data.copy_(v.data)
                elif is_param:
                    m._parameters[attr] = nn.Parameter(v, requires_grad=False)
                else:
                    m._buffers[attr] = v


class _QueueScheme(WeightSyncScheme):
    """What the two schemes share: per-worker instruction and ack queues,
    a background receiver, the cascade."""

    def __init__(self, strategy="tensordict", sync=True):
        super().__init__(strategy)
        self.sync = sync
        self._strategy = WeightStrategy(strategy)
        self._instruction_queues = {}
        self._ack_queues = {}
        self._stop_event = None
        self._background_thread = None
        self.num_workers = 0

    def _make_queues(self, ctx, n):
        self.num_workers = n
        self._instruction_queues = {i: ctx.Queue() for i in range(n)}
        self._ack_queues = {i: ctx.Queue() for i in range(n)}

    def _targets(self, worker_ids):
        if worker_ids is None:
            return list(range(self.num_workers))
        return [worker_ids] if isinstance(worker_ids, int) else list(worker_ids)

    def _send_instruction(self, worker_ids=None):
        for i in self._targets(worker_ids):
            self._instruction_queues[i].put("receive")

    def _wait_for_ack(self, worker_ids=None, timeout=WEIGHT_SYNC_TIMEOUT):
        for i in self._targets(worker_ids):
            self._ack_queues[i].get(timeout=timeout)

    def create_transport(self, **kwargs):
        return None

    def _cascade(self, weights):
        ctx = self.context
        if ctx is not None and hasattr(ctx, "update_policy_weights_"):
            ctx.update_policy_weights_(model_id=self._model_id or "policy",
                                       policy_or_weights=weights)

    def _start_background(self):
        self._stop_event = threading.Event()
        self._background_thread = threading.Thread(target=self._loop, daemon=True)
        self._background_thread.start()

    def _loop(self):
        q = self._instruction_queues[self._worker_idx]
        while not self._stop_event.is_set():
            try:
                msg = q.get(timeout=0.1)
            except _queue.Empty:
                continue
            if msg == "receive":
                self._on_receive()
                self._ack_queues[self._worker_idx].put("updated")
            elif msg == "stop":
                return

    def _init_on_receiver_impl(self, model_id, context=None, model=None, worker_idx=None,
                               **kwargs):
        self._model_id = model_id
        self.context = context
        if model is not None:
            self._model = model
        self._worker_idx = worker_idx

    @property
    def model(self):
        m = getattr(self, "_model", None)
        if m is not None:
            return m
        ctx = self.context
        return getattr(ctx, "policy", None) if ctx is not None else None

    @model.setter
    def model(self, m):
        self._model = m

    def shutdown(self):
        if self._stop_event is not None:
            self._stop_event.set()
        t = self._background_thread
        if t is not None and t is not threading.current_thread():
            t.join(5.0)
        self._background_thread = None

    def __getstate__(self):
        state = super().__getstate__()
        for k in ("_stop_event", "_background_thread", "_model"):
            state.pop(k, None)
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self._stop_event = None
        self._background_thread = None
        self._model = None


class SharedMemWeightSyncScheme(_QueueScheme):
    def _init_on_sender_impl(self, model_id=None, context=None, ctx=None, **kwargs):
        import multiprocessing as mp
        ctx = ctx or mp.get_context()
        self._model_id = model_id
        self.context = context
        policy = context.get_model(model_id)
        # the shared buffer: the weights, copied once into shared memory
        self._shared = {k: v.detach().clone().share_memory_()
                        for k, v in flat_weights(policy).items()}
        self._make_queues(ctx, context.num_workers)
        self._init_queues = {i: ctx.Queue() for i in range(self.num_workers)}

    def _setup_connection_and_weights_on_sender_impl(self, *, worker_idx=None, weights=None):
        for i, q in self._init_queues.items():
            q.put(self._shared)

    def _setup_connection_and_weights_on_receiver_impl(self, *, worker_idx=None):
        if worker_idx is not None:
            self._worker_idx = worker_idx
        self._shared = self._init_queues[self._worker_idx].get(timeout=WEIGHT_SYNC_TIMEOUT)
        self._strategy.apply_weights(self.model, self._shared, inplace=False)
        self._start_background()

    def _on_receive(self):
        self._strategy.apply_weights(self.model, self._shared, inplace=True)
        self._cascade(self._shared)

    def send(self, weights=None, worker_ids=None):
        if weights is None:
            weights = self.context.get_model(self._model_id)
        fresh = flat_weights(weights)
        with torch.no_grad():
            for k, t in self._shared.items():       # the buffer's update_
                t.copy_(fresh[k])
        self._send_instruction(worker_ids)
        if self.sync:
            self._wait_for_ack(worker_ids)

    def __getstate__(self):
        return super().__getstate__()


def _snapshot(weights):
    """The weights as the queues take them: the tensors themselves (no
    copy), their storage moved into shared memory once, in place, as
    torch's pickler does on the first put. Done here, in the caller's
    thread: the pickler would do it from each queue's feeder thread, and
    several threads moving one storage at once crash torch 1.13."""
    w = flat_weights(weights)
    for v in w.values():
        v.share_memory_()
    return w


class MultiProcessWeightSyncScheme(_QueueScheme):
    def _init_on_sender_impl(self, model_id=None, context=None, ctx=None, **kwargs):
        import multiprocessing as mp
        ctx = ctx or mp.get_context()
        self._model_id = model_id
        self.context = context
        self._make_queues(ctx, context.num_workers)
        self._weight_queues = {i: ctx.Queue() for i in range(self.num_workers)}

    def _setup_connection_and_weights_on_sender_impl(self, *, worker_idx=None, weights=None):
        w = _snapshot(self.context.get_model(self._model_id))
        for i, q in self._weight_queues.items():
            q.put(((self._model_id, w), "update_weights"))

    def _get(self):
        (_, w), msg = self._weight_queues[self._worker_idx].get(timeout=WEIGHT_SYNC_TIMEOUT)
        if msg != "update_weights":
            raise ValueError("expected 'update_weights', got %r" % (msg,))
        return w

    def _setup_connection_and_weights_on_receiver_impl(self, *, worker_idx=None):
        if worker_idx is not None:
            self._worker_idx = worker_idx
        self._strategy.apply_weights(self.model, self._get(), inplace=False)
        self._start_background()

    def _on_receive(self):
        w = self._get()
        self._strategy.apply_weights(self.model, w, inplace=True)
        self._cascade(w)

    def send(self, weights=None, worker_ids=None):
        if weights is None:
            weights = self.context.get_model(self._model_id)
        w = _snapshot(weights)
        for i in self._targets(worker_ids):
            self._weight_queues[i].put(((self._model_id, w), "update_weights"))
        self._send_instruction(worker_ids)
        if self.sync:
            self._wait_for_ack(worker_ids)
