"""LivePolicy: a module whose forward runs over the newest version in place.

Design (docs/LIVE.md):

- The policy holds one version at a time (a _Held: the View, its read-only
  tensors, a replica of the module with them bound, and how many calls run
  over it). A call looks at the newest version (Subscriber.latest: no
  system call); if it is newer than the held one, the call acquires it,
  makes it the held one and retires the previous. A retired _Held is
  released when its last call ends, so a version stays held exactly while
  some call reads it, and the policy holds at most one view no call uses.
  The swap is under the policy's lock; the forward pass is not, so calls on
  several threads run at once.
- A call reads one _Held from its start to its end: every tensor of its
  forward comes from that version (they are the version's read-only
  mapping, which the broker never rewrites while it is held), so a call
  never mixes versions, and it never waits for the trainer: acquire takes
  the newest committed version without waiting.
- Binding happens once per version, at the swap: a replica of the module (a
  copy of its structure whose parameters and buffers are the module's own
  objects, made from a template copied when the policy is made) gets the
  version's tensors in its submodules' _parameters and _buffers, and a
  call is that replica's plain forward. Calls over one version share its
  replica, as threads calling one plain module do (nothing of it changes
  while a call runs). When the version is released its replica gets the
  module's own tensors back and waits, unused, for a later version: a
  policy keeps a replica per version held, two while calls drain an old
  one.
- The tensors are _LiveTensors: ReadOnlyTensors (writes raise
  ReadOnlyError, use after release raises ClosedError) whose dispatch takes
  a short path for the operations that only read (a forward pass's
  linear, norm, matmul): the release check, the call, the wrap of a result
  that aliases the version. Everything else goes through ReadOnlyTensor's
  own checks.
- A module whose names are not all plain parameters or buffers of a
  submodule runs through functional_call per call, and one that cannot be
  deep-copied (weight_norm's computed weight) binds per call on the module
  itself, its calls taking turns. torch 1.13's
  stateless.functional_call costs about 1 ms per call for 16 tensors here
  (it makes a class per call, which only the garbage collector frees).
- Names of the module not in the model (buffers: running stats, caches)
  keep the module's own tensors; a parameter missing from the model, a
  tensor of the model the module lacks, or a shape or dtype that differs
  is a MismatchError when the version is first taken.
"""
import collections
import collections.abc
import copy
import math
import operator
import sys
import threading
import time

from ._errors import ClosedError, RemovedError, WsyncError, WsyncTimeoutError
from ._module import MismatchError, _torch_code
from . import _dtypes

_training = operator.attrgetter("training")

Lag = collections.namedtuple("Lag", "versions seconds")
Lag.__doc__ = """How far behind the newest committed version the last call
acted: versions (newest - the version it used) and seconds (how much older
its version's commit is than the newest's; 0.0 when it used the newest)."""


class LagError(WsyncTimeoutError):
    """A LivePolicy call found no version within its max_lag bound by its
    timeout; the message names the trainer's last commit. Also a
    TimeoutError."""


class _Held:
    __slots__ = ("view", "tensors", "replica", "version", "step", "published_ns", "calls",
                 "retired")

    def __init__(self, view, tensors, replica):
        self.view = view
        self.tensors = tensors
        self.replica = replica          # (module, slots, submodules) bound to tensors, or None
        self.version = view.version
        self.step = view.step
        self.published_ns = view.published_ns
        self.calls = 0
        self.retired = False


def _functional_call():
    import torch
    f = getattr(getattr(torch, "func", None), "functional_call", None)
    if f is not None:
        # every name of the model gets its own tensor (tied weights were
        # published under each of their names)
        return lambda m, t, a, k: f(m, t, a, k, tie_weights=False, strict=False)
    from torch.nn.utils import stateless
    return stateless.functional_call


_LIVE = []          # _LiveTensor, made on first use (it needs torch)


def _live_class():
    if _LIVE:
        return _LIVE[0]
    import torch
    from ._torch import ReadOnlyTensor, _DISABLED, _plain, _wrap_result
    full = ReadOnlyTensor.__torch_function__.__func__
    plain_t = torch.Tensor

    class _LiveTensor(ReadOnlyTensor):
        """A ReadOnlyTensor of a live policy's version (host views), with a
        short dispatch for operations that only read."""

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            # _plain: no in-place name, no inplace parameter, no way out of
            # the tensor (numpy, DLPack, storage), none that writes another
            # argument under a flag: it writes nothing it is given but an
            # out= (or, where its signature is unknown, inplace=) argument,
            # which takes the long path
            if _plain(func) and not (kwargs and ("out" in kwargs or "inplace" in kwargs)):
                live = None
                for a in args:
                    if type(a) is cls:
                        live = a
                        break
                else:
                    if kwargs:
                        for a in kwargs.values():
                            if type(a) is cls:
                                live = a
                                break
                if live is not None:
                    keep = live._wsync_keep
                    view = keep._wsync_owner
                    if not view._released:
                        with _DISABLED():
                            r = func(*args, **kwargs) if kwargs else func(*args)
                        if type(r) is plain_t:
                            lo, hi = view._range
                            if lo <= r.data_ptr() < hi and r.numel():
                                w = plain_t.as_subclass(r, cls)
                                w._wsync_keep = keep
                                return w
                            return r
                        if type(r) is tuple:
                            return _wrap_result(r, live)
                        return r
            return full(cls, func, types, args, kwargs)

    _LIVE.append(_LiveTensor)
    return _LiveTensor


class _Gone:
    """What an idle cached _LiveTensor names as its memory: a released
    view (never used: nothing else holds such a tensor)."""
    _released = True
    version = 0
    _range = (0, 0)


_GONE = type("_GoneKeep", (), {"_wsync_owner": _Gone()})()


def _slot_key(view):
    c = view._c
    return (id(view._cell), c.priv_slot, c.base, c.bytes, id(view._layout))


def _live_tensors(view, cache):
    """{name: _LiveTensor} of every tensor of host view view, each holding
    the view's raw memory (so the version stays held while one lives, and
    ClosedError after release). A set that a released version of the same
    slot left unused (cache, see _park) is taken again, one attribute store
    per tensor; else aliases of the slot's plain tensors (kept by the
    subscription), one as_subclass each."""
    import torch
    from . import _views
    view._check()
    keep = view._buf()
    out = cache.pop(_slot_key(view), None)
    if out is not None and view._cell.slots is not None:
        for t in out.values():
            t._wsync_keep = keep
        return out
    cls = _live_class()
    sc = view._slot_cache()
    alias = torch.Tensor.as_subclass
    out = {}
    for spec in view._layout:
        p = sc.tensor(spec) if sc is not None else _views.torch_view(_views.rw(keep), spec)
        w = alias(p, cls)
        w._wsync_keep = keep
        out[spec.name] = w
    return out


def _unshared():
    """What sys.getrefcount says, in _park's loop, of an object only its
    dict holds (3 on CPython: the dict, the loop variable, the argument)."""
    getrefcount = sys.getrefcount
    for t in {0: object()}.values():
        return getrefcount(t)


_UNSHARED = _unshared()


def _park(view, tensors, cache):
    """Keeps tensors for the next version of view's slot if no reference to
    any of them is left outside the dict (a module that kept one must get
    ClosedError from it, never a later version): each then names no view,
    so the release is not held up."""
    getrefcount = sys.getrefcount
    for t in tensors.values():
        if getrefcount(t) > _UNSHARED:
            return
    for t in tensors.values():
        t._wsync_keep = _GONE
    key = _slot_key(view)
    for k in [k for k in cache if k[0] != key[0]]:
        del cache[k]              # of a subscription left behind (a broker restart)
    cache[key] = tensors


_MAX_VERSIONS = 2 ** 32          # what wsync_sub_declare_max_lag takes
_MAX_SECONDS = 2 ** 63 / 1e9


def _bound(max_lag):
    """(versions, seconds) of a max_lag, each None or in what the monitors'
    declaration (Subscriber.declare_max_lag) takes."""
    if max_lag is None:
        return None, None
    try:
        if isinstance(max_lag, (str, bytes, collections.abc.Mapping)):
            raise TypeError
        versions, seconds = max_lag
    except (TypeError, ValueError):
        raise TypeError("wsync: max_lag must be (versions, seconds), either None, not %r"
                        % (max_lag,)) from None
    if versions is not None and (isinstance(versions, bool) or not isinstance(versions, int)
                                 or not 0 <= versions < _MAX_VERSIONS):
        raise ValueError("wsync: max_lag versions must be an int in [0, 2**32) or None, "
                         "not %r" % (versions,))
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or \
                not 0 < seconds < _MAX_SECONDS:
            raise ValueError("wsync: max_lag seconds must be a finite number > 0 or None, "
                             "not %r" % (seconds,))
        seconds = float(seconds)
    return versions, seconds


class LivePolicy:
    """module's forward over the newest version of subscriber's model, zero
    copy, swapping versions only between calls.

    policy(*args, **kwargs) runs module(*args, **kwargs) with every tensor
    of the model replaced by the newest committed version's read-only
    tensor for the length of the call (as functional_call does). A call
    never mixes two versions and never waits for the trainer; calls may
    run on several threads at once.
    After a call, policy.version / policy.step say which weights produced
    its output and policy.lag how far behind the newest they were.

    max_lag=(versions, seconds), either None: a call whose newest available
    version is more than `seconds` old (its commit's wall-clock time) or
    more than `versions` behind the newest committed one waits for a newer
    version up to `timeout` seconds (default: the seconds bound, else 1 s),
    then raises LagError naming the trainer's last commit. timeout:
    seconds, math.inf for no limit.

    device=: the GPU (ordinal, "cuda:N", UUID or torch.device) whose device
    views to run over, for a model published with devices; None runs over
    the host version (a CPU module).

    Before the first version is published a call raises NoDataError, as
    Subscriber.acquire does; MismatchError if the model does not fit the
    module (checked once per layout, nothing runs). While the broker is
    away a call runs over the version held, without waiting for one.
    subscriber must be a wsync.Subscriber and module an nn.Module
    (TypeError); max_lag and timeout are checked here.
    """

    def __init__(self, subscriber, module, max_lag=None, device=None, timeout=None):
        import torch
        from ._core import Subscriber, _timeout_s
        if not isinstance(subscriber, Subscriber):
            raise TypeError("wsync: LivePolicy needs a wsync.Subscriber (client.subscriber("
                            "model)), not %s" % type(subscriber).__name__)
        if not isinstance(module, torch.nn.Module):
            raise TypeError("wsync: LivePolicy needs a torch.nn.Module, not %s"
                            % type(module).__name__)
        if device is not None:
            from ._gpu import _parse_device
            _parse_device(device)         # its form, now: the GPU is looked up per swap
        self.subscriber = subscriber
        self.module = module
        self.device = device
        self._max_versions, self._max_seconds = _bound(max_lag)
        if timeout is None:
            timeout = self._max_seconds if self._max_seconds is not None else 1.0
        timeout = _timeout_s(timeout)
        self.timeout = math.inf if timeout is None else timeout
        # shown by wsync-top and wsyncctl beside this collector's lag
        # (docs/LIVE.md); the policy enforces the bound itself
        self._declared = max_lag is not None
        if self._declared:
            subscriber.declare_max_lag(self._max_versions, self._max_seconds)
        self._lock = threading.Lock()
        self._held = None                 # the newest _Held taken
        self._draining = set()            # retired _Helds that calls still read
        self._checked = None              # the layout checked against the module
        self._pool = [module]             # modules no call uses now
        self._fcall = _functional_call()
        sd = module.state_dict(keep_vars=True)
        self._params = {n for n, _ in module.named_parameters()}
        self._targets = {n: t for n, t in sd.items() if isinstance(t, torch.Tensor)}
        self._shared = {id(t): t for t in list(module.parameters()) + list(module.buffers())}
        # replicas are copied from a template no call ever runs on: a module
        # inside functional_call carries that call's tensors (torch 1.13
        # changes its class), which a copy made then would keep
        try:
            self._template = copy.deepcopy(module, dict(self._shared))
        except Exception:                 # e.g. weight_norm's computed weight
            self._template = None         # then calls take turns on the module
        self._template_lock = threading.Lock()
        self._free = threading.Condition(self._lock)   # a module back in the pool
        self._slots = {id(module): self._slots_of(module)}   # per replica, see _run
        # bound once per version (see the module's docstring) where replicas
        # can be made and every name is a plain parameter or buffer; two
        # made now, so that the first swaps make none
        self._parked = {}                 # slot -> a released version's tensors, unused
        self._subs = list(module.modules())   # whose train/eval modes replicas follow
        self._spare = []                  # (replica, slots, submodules) bound to no version
        if self._template is not None and self._slots[id(module)] is not None:
            self._spare = [self._new_replica() for _ in range(2)]
        self._per_version = bool(self._spare)
        self._last = (0, 0, 0)            # (version, step, published_ns) of the last call
        self._local = threading.local()   # the same, of this thread's last call
        self._closed = False

    def __repr__(self):
        return "<wsync.LivePolicy %r v%d %s>" % (self.subscriber.model, self.version,
                                                type(self.module).__name__)

    def _mine(self):
        return getattr(self._local, "last", None) or self._last

    @property
    def version(self):
        """The version the last call of this thread ran over (of any
        thread if this one made none yet; 0 before the first call)."""
        return self._mine()[0]

    @property
    def step(self):
        """The trainer's step of that version."""
        return self._mine()[1]

    @property
    def published_ns(self):
        """CLOCK_REALTIME ns of that version's commit."""
        return self._mine()[2]

    @property
    def lag(self):
        """Lag(versions, seconds) of the last call against the newest
        version committed now (versions, seconds: see Lag)."""
        held, _, ns = self._mine()
        if not held:
            return Lag(0, 0.0)
        try:
            newest = self.subscriber._latest(time.monotonic())
        except WsyncError:
            return Lag(0, 0.0)
        if newest.version <= held:
            return Lag(0, 0.0)
        return Lag(newest.version - held, max(0.0, (newest.published_ns - ns) / 1e9))

    @property
    def held_versions(self):
        """The versions the policy holds views of now (the newest taken, and
        older ones that calls still run over)."""
        with self._lock:
            held = [d.version for d in self._draining]
            if self._held is not None:
                held.append(self._held.version)
            return sorted(held)

    # ---- the swap ---------------------------------------------------------------

    def _acquire(self):
        if self.device is None:
            return self.subscriber.acquire()
        return self.subscriber.acquire_gpu(self.device)

    def _check_layout(self, view):
        layout = view._layout
        if layout is self._checked:
            return
        by_name = {s.name: s for s in layout}
        missing = [n for n in self._params if n not in by_name]
        unexpected = [n for n in by_name if n not in self._targets]
        mismatched = []
        for name, spec in by_name.items():
            t = self._targets.get(name)
            if t is None:
                continue
            if tuple(t.shape) != tuple(spec.shape):
                mismatched.append((name, "shape", tuple(t.shape), tuple(spec.shape)))
            want = _dtypes.CODE[spec.dtype]
            if _torch_code(t.dtype) != want:
                mismatched.append((name, "dtype", str(t.dtype).replace("torch.", ""),
                                   _dtypes.torch_name(want)))
        if missing or unexpected or mismatched:
            raise MismatchError("model %r for LivePolicy of %s" % (
                self.subscriber.model, type(self.module).__name__), missing, unexpected,
                mismatched)
        self._checked = layout

    def _take(self):
        """The _Held a call runs over (its count raised): the newest version,
        taken now if it is newer than the held one."""
        deadline = None
        while True:
            with self._lock:
                if self._closed:
                    raise ClosedError("wsync: the LivePolicy is closed")
                h = self._held
                newest = self._newest() if h is not None else None
                if h is None or (newest is not None and newest.version > h.version):
                    h = self._swap(h)
                if self._within(h, newest):
                    h.calls += 1
                    return h
            if deadline is None:
                deadline = time.monotonic() + self.timeout
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._lag_error(h)
            try:
                v = self.subscriber.wait(after=h.version, timeout=min(left, 0.05))
                v.release()
            except (ClosedError, RemovedError):
                raise
            except WsyncError:          # none yet, or no broker: look again
                time.sleep(min(0.01, max(0.0, left)))

    def _newest(self):
        """The newest committed version, or None while it cannot be known
        (the broker went away and no other answers at once: one try, not
        the client's reconnect_timeout, which every call would wait): the
        call then runs over the held version rather than fail."""
        try:
            return self.subscriber._latest(time.monotonic())
        except (ClosedError, RemovedError):
            raise
        except WsyncError:
            return None

    def _swap(self, old):
        view = self._acquire()
        try:
            self._check_layout(view)
            tensors = view.state_dict("torch") if self.device is not None else \
                _live_tensors(view, self._parked)
            replica = self._bind(tensors) if self._per_version else None
        except BaseException:
            view.release()
            raise
        h = _Held(view, tensors, replica)
        self._held = h
        if old is not None:
            self._retire(old)
        return h

    def _retire(self, h):
        h.retired = True
        if h.calls == 0:
            self._release(h)
        else:
            self._draining.add(h)

    def _release(self, h):
        if h.replica is not None:
            self._unbind(h.replica)
            h.replica = None
        tensors, h.tensors = h.tensors, None
        if self.device is None and not self._closed:
            _park(h.view, tensors, self._parked)
        del tensors
        h.view.release()

    # ---- replicas bound per version ----------------------------------------------

    def _new_replica(self):
        with self._template_lock:
            m = copy.deepcopy(self._template, dict(self._shared))
        return (m, [(d, key, name, d[key]) for d, key, name in self._slots_of(m)],
                list(m.modules()))

    def _bind(self, tensors):
        """A replica with tensors in place of the module's (a spare one, or
        one made now), in the module's train/eval modes; under the lock,
        no call uses it."""
        rep = self._spare.pop() if self._spare else self._new_replica()
        for d, key, name, _ in rep[1]:
            t = tensors.get(name)
            if t is not None:             # else a buffer the model lacks: the module's
                d[key] = t
        self._modes(rep)
        return rep

    def _modes(self, rep):
        """The replica's submodules in the module's train/eval modes, as
        they are now (model.eval() after the policy was made is followed)."""
        for mine, theirs in zip(self._subs, rep[2]):
            if theirs.training != mine.training:
                theirs.training = mine.training

    def _unbind(self, rep):
        for d, key, _, orig in rep[1]:
            d[key] = orig
        self._spare.append(rep)

    def _within(self, h, newest):
        if self._max_seconds is not None and \
                time.time() - h.published_ns / 1e9 > self._max_seconds:
            return False
        if self._max_versions is not None and newest is not None and \
                newest.version - h.version > self._max_versions:
            return False
        return True

    def _lag_error(self, h):
        import errno
        age = time.time() - h.published_ns / 1e9
        return LagError(errno.ETIMEDOUT, "timed out",
                        "model '%s': no version within max_lag (versions %s, seconds %s) "
                        "after waiting %.3g s: the trainer's last commit is v%d (step %d), "
                        "%.3f s ago" % (self.subscriber.model, self._max_versions,
                                        self._max_seconds, self.timeout, h.version, h.step,
                                        age))

    def _done(self, h):
        with self._lock:
            h.calls -= 1
            if h.retired and h.calls == 0 and h.tensors is not None:
                self._draining.discard(h)
                self._release(h)

    # ---- calls ------------------------------------------------------------------

    def _replica(self):
        with self._lock:
            while not self._pool and self._template is None:
                self._free.wait()
            if self._pool:
                return self._pool.pop()
        with self._template_lock:
            m = copy.deepcopy(self._template, dict(self._shared))
        slots = self._slots_of(m)
        with self._lock:
            self._slots[id(m)] = slots
        return m

    def _slots_of(self, m):
        """[(dict, key, name)] of replica m: where each tensor name of the
        module lives (its submodule's _parameters or _buffers); None if one
        lives elsewhere (functional_call then)."""
        out = []
        for name in self._targets:
            path, _, key = name.rpartition(".")
            try:
                sub = m.get_submodule(path) if path else m
            except AttributeError:
                return None
            d = sub._parameters if key in sub._parameters else \
                sub._buffers if key in sub._buffers else None
            if d is None:
                return None
            out.append((d, key, name))
        return out

    def _run(self, m, tensors, args, kwargs):
        slots = self._slots[id(m)]
        if slots is None:
            mapping = dict(tensors)
            try:
                return self._fcall(m, mapping, args, kwargs)
            finally:
                # torch 1.13 keeps the mapping in a class it makes per call,
                # which only the garbage collector frees: emptied, it holds
                # no tensor, so the version is released when the call ends
                mapping.clear()
        bound = []
        try:
            for d, key, name in slots:
                t = tensors.get(name)
                if t is not None:         # else a buffer the model lacks: the module's
                    bound.append((d, key, d[key]))
                    d[key] = t
            return m(*args, **kwargs)
        finally:
            for d, key, orig in bound:
                d[key] = orig

    def __call__(self, *args, **kwargs):
        h = self._take()
        try:
            rep = h.replica
            if rep is not None:           # bound at the swap: the module's own call
                if list(map(_training, self._subs)) != list(map(_training, rep[2])):
                    with self._lock:
                        self._modes(rep)
                out = rep[0](*args, **kwargs)
                self._last = self._local.last = (h.version, h.step, h.published_ns)
                return out
            m = self._replica()
            try:
                out = self._run(m, h.tensors, args, kwargs)
            finally:
                with self._lock:
                    self._pool.append(m)
                    self._free.notify()
            self._last = self._local.last = (h.version, h.step, h.published_ns)
            return out
        finally:
            self._done(h)

    def close(self):
        """Releases the held version (calls running keep theirs until they
        end); calls after this raise ClosedError. Idempotent."""
        with self._lock:
            self._closed = True
            self._parked.clear()
            h, self._held = self._held, None
            if h is not None:
                self._retire(h)
        if self._declared:
            self._declared = False
            try:
                self.subscriber.declare_max_lag(None, None)
            except Exception:             # a closed subscriber shows no bound anyway
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
