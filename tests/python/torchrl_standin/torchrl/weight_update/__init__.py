"""Stand-in for torchrl.weight_update.WeightSyncScheme, from its documented
interface (TorchRL 0.11 to 0.15; checked against 0.14.0's source), and for
its SharedMemWeightSyncScheme and MultiProcessWeightSyncScheme
(_schemes.py):

- constructed with a strategy, "tensordict" (default) or "state_dict";
- init_on_sender(...) in the sending process and init_on_receiver(model_id=,
  context=, **kwargs) in each worker, each recording that it happened and
  delegating to _init_on_sender_impl / _init_on_receiver_impl; a scheme
  initialised on the sender and then on a receiver (a forked worker) is
  first reset as a pickled copy would be;
- connect(worker_idx=None, weights=None) once the workers run, once per
  side, delegating to the _setup_connection_and_weights_on_*_impl hooks;
- create_transport(**kwargs) is abstract; transports are per worker on the
  sender (_sender_transports) and one on a receiver;
- send(weights=None, worker_ids=None) prepares the weights once, sends them
  through each worker's transport (send_weights_async, else send_weights)
  and then waits on each transport's wait_ack: it returns once the workers
  applied the weights; receive(timeout=None) takes (model_id, weights) or
  None from the receiver transport's receive_weights, cascades to the
  context's update_policy_weights_, acknowledges with send_ack and returns
  the weights or None; apply_weights applies given weights to the model;
- context, model_id, worker_idx, model, weights, strategy properties;
  pickling drops references and resets the initialisation flags; shutdown()
  is idempotent and called by __del__.

The collectors of TorchRL check isinstance(scheme, WeightSyncScheme), call
init_on_sender(model_id=..., context=collector, ctx=mp_context) before
starting workers, connect() after, and in each worker
init_on_receiver(model_id=..., context=inner_collector, worker_idx=i) and
connect(worker_idx=i); update_policy_weights_ calls send(weights=...,
worker_ids=...). Nothing of this stand-in is wsync's.
"""
import abc
import weakref

__all__ = ["WeightSyncScheme", "TransportBackend", "SharedMemWeightSyncScheme",
           "MultiProcessWeightSyncScheme"]


class TransportBackend:
    """The documented transport protocol (duck-typed in TorchRL)."""

    def send_weights(self, weights):
        raise NotImplementedError

    def receive_weights(self, timeout=None, *, weights=None, model=None, strategy=None):
        raise NotImplementedError


class WeightSyncScheme(metaclass=abc.ABCMeta):
    def __init__(self, strategy="tensordict"):
        if strategy not in ("tensordict", "state_dict"):
            raise ValueError("strategy must be 'tensordict' or 'state_dict'")
        self.strategy_str = strategy
        self._strategy = strategy
        self._initialized_on_sender = False
        self._initialized_on_receiver = False
        self._sender_transports = None
        self._receiver_transport = None
        self._shared_transport = None
        self._context_ref = None
        self._model_ref = None
        self._worker_idx = None
        self._model_id = None

    # ---- initialisation ----
    def init_on_sender(self, *args, **kwargs):
        self._initialized_on_sender = True
        try:
            return self._init_on_sender_impl(*args, **kwargs)
        except Exception:
            self._initialized_on_sender = False
            raise

    def _init_on_sender_impl(self, *args, **kwargs):
        raise NotImplementedError

    def init_on_receiver(self, *, model_id, context=None, **kwargs):
        if self.initialized_on_sender:
            self.__setstate__(self.__getstate__())
        self._initialized_on_receiver = True
        try:
            return self._init_on_receiver_impl(model_id=model_id, context=context, **kwargs)
        except Exception:
            self._initialized_on_receiver = False
            raise

    def _init_on_receiver_impl(self, model_id, context=None, **kwargs):
        raise NotImplementedError

    @property
    def initialized_on_sender(self):
        return getattr(self, "_initialized_on_sender", False)

    @property
    def initialized_on_receiver(self):
        return getattr(self, "_initialized_on_receiver", False)

    @property
    def synchronized_on_sender(self):
        return getattr(self, "_synchronized_on_sender", False)

    @synchronized_on_sender.setter
    def synchronized_on_sender(self, value):
        self._synchronized_on_sender = value

    @property
    def synchronized_on_receiver(self):
        return getattr(self, "_synchronized_on_receiver", False)

    @synchronized_on_receiver.setter
    def synchronized_on_receiver(self, value):
        self._synchronized_on_receiver = value

    # ---- context and model ----
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
    def model_id(self, value):
        self._model_id = value

    @property
    def worker_idx(self):
        return self._worker_idx

    @worker_idx.setter
    def worker_idx(self, value):
        if self.initialized_on_sender and value is not None:
            raise RuntimeError("Worker index cannot be set after initialization on sender")
        self._worker_idx = value

    @property
    def model(self):
        return self._model_ref() if self._model_ref is not None else None

    @model.setter
    def model(self, model):
        self._model_ref = weakref.ref(model) if model is not None else None

    @property
    def strategy(self):
        return self._strategy

    # ---- transports ----
    @abc.abstractmethod
    def create_transport(self, **kwargs):
        ...

    @property
    def sender_transports(self):
        return self._sender_transports

    @property
    def receiver_transport(self):
        return self._receiver_transport

    # ---- the data plane ----
    def connect(self, *, worker_idx=None, weights=None):
        if self.synchronized_on_sender or self.synchronized_on_receiver:
            raise RuntimeError("Cannot synchronize weights twice.")
        if self.initialized_on_sender:
            self.synchronized_on_sender = True
            self._setup_connection_and_weights_on_sender_impl(weights=weights)
        elif self.initialized_on_receiver:
            self.synchronized_on_receiver = True
            self._setup_connection_and_weights_on_receiver_impl(worker_idx=worker_idx)
        else:
            raise RuntimeError("Neither init_on_sender nor init_on_receiver have been called.")

    def _setup_connection_and_weights_on_sender_impl(self, *, worker_idx=None, weights=None):
        for t in (self._sender_transports or {}).values():
            t.setup_connection_and_weights_on_sender()

    def _setup_connection_and_weights_on_receiver_impl(self, *, worker_idx=None):
        if self._receiver_transport is not None:
            self._receiver_transport.setup_connection_and_weights_on_receiver(
                worker_idx=worker_idx)

    def _iterate_transports(self, worker_ids=None):
        transports = self.sender_transports or {}
        if worker_ids is None:
            return [transports[k] for k in sorted(transports)]
        ids = [worker_ids] if isinstance(worker_ids, int) else list(worker_ids)
        for i in ids:
            if i not in transports:
                raise ValueError("Worker %s not registered" % i)
        return [transports[i] for i in ids]

    def send(self, weights=None, worker_ids=None):
        # the weights prepared once, sent through every worker's transport
        # (asynchronously where it can), then every transport's ack awaited
        if not self.initialized_on_sender:
            raise RuntimeError("Must be initialized on sender before sending weights")
        if not self.synchronized_on_sender:
            raise RuntimeError("Must be synchronized on sender before sending weights")
        prepared = self.prepare_weights(weights=weights, model_id=self._model_id,
                                        strategy=self._strategy, context=self.context)
        transports = self._iterate_transports(worker_ids)
        if not transports:
            raise RuntimeError("No transports available.")
        for t in transports:
            if hasattr(t, "send_weights_async"):
                t.send_weights_async(prepared)
            else:
                t.send_weights(prepared)
        for t in transports:
            if hasattr(t, "wait_ack"):
                t.wait_ack()

    def receive(self, timeout=None):
        # the transport applies and returns (model_id, weights) or None;
        # the scheme cascades to the context, then acknowledges
        if self._receiver_transport is None:
            return None
        result = self._receiver_transport.receive_weights(
            timeout=timeout, weights=self.weights, model=self.model, strategy=self._strategy)
        if result is None:
            return None
        model_id, weights = result
        if self.context is not None and hasattr(self.context, "update_policy_weights_"):
            self.context.update_policy_weights_(model_id=model_id, policy_or_weights=weights)
        if hasattr(self._receiver_transport, "send_ack"):
            self._receiver_transport.send_ack("updated")
        return weights

    def apply_weights(self, weights, inplace=True):
        raise NotImplementedError

    # ---- life ----
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_context_ref"] = None
        state["_model_ref"] = None
        state["_initialized_on_sender"] = False
        state["_initialized_on_receiver"] = False
        state["_synchronized_on_sender"] = False
        state["_synchronized_on_receiver"] = False
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)

    def shutdown(self):
        pass

    def __del__(self):
        try:
            self.shutdown()
        except Exception:
            pass


from ._schemes import MultiProcessWeightSyncScheme, SharedMemWeightSyncScheme  # noqa: E402
