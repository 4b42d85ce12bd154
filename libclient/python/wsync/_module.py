"""Loading a View into a torch nn.Module in place (View.load_into), and
what a trainer hands to Publisher.publish."""
from collections import namedtuple
from collections.abc import Mapping

from . import _dtypes

LoadResult = namedtuple("LoadResult", "missing_keys unexpected_keys")
LoadResult.__doc__ = """What View.load_into did not load, like the result of
torch's load_state_dict: names of the module absent from the view, and names
of the view absent from the module (both empty with strict=True)."""


class MismatchError(RuntimeError):
    """A view does not fit a module (View.load_into, or a zero-copy swap):
    raised before anything is changed, listing every mismatch.

    missing     names of the module's state_dict the view lacks (strict only)
    unexpected  names of the view the module lacks (strict only)
    mismatched  (name, what, module's, view's) for each tensor whose shape
                or dtype differs ("shape" / "dtype"), strict or not

    MismatchError(message) alone (what code that rebuilds an exception from
    its text builds, TorchRL's collectors for a worker's error) keeps the
    message, with the three lists empty. Pickling keeps every field.
    """

    def __init__(self, where, missing=None, unexpected=None, mismatched=None):
        self.missing = list(missing or ())
        self.unexpected = list(unexpected or ())
        self.mismatched = list(mismatched or ())
        if missing is None and unexpected is None and mismatched is None:
            super().__init__(where)
            return
        lines = []
        if self.missing:
            lines.append("missing in the view: %s" % ", ".join(self.missing))
        if self.unexpected:
            lines.append("not in the module: %s" % ", ".join(self.unexpected))
        for name, what, mod, view in self.mismatched:
            lines.append("%s: %s %s in the module, %s in the view" % (name, what, mod, view))
        super().__init__("wsync: %s does not fit (%d mismatch%s, nothing copied):\n  %s"
                         % (where, len(lines), "" if len(lines) == 1 else "es",
                            "\n  ".join(lines)))

    def __reduce__(self):
        return (_rebuild, (self.args[0], self.missing, self.unexpected, self.mismatched))


def _rebuild(msg, missing, unexpected, mismatched):
    e = MismatchError.__new__(MismatchError)
    RuntimeError.__init__(e, msg)
    e.missing, e.unexpected, e.mismatched = missing, unexpected, mismatched
    return e


class NoStorageError(RuntimeError):
    """A copy into a tensor that has no storage (a parameter on the "meta"
    device, as TorchRL sends a policy to its workers): such a copy would do
    nothing, so it is refused. Also a publish from such a tensor, which
    has no values to copy. Load the weights without copying (a zero-copy
    swap: WsyncWeightSyncScheme's receivers do, or swap_into), or give the
    module real tensors first (module.to_empty(device="cpu"))."""


def has_storage(t):
    """False for a tensor a copy into would not land anywhere: one on the
    "meta" device, or one with elements but no data (data_ptr 0)."""
    if t.device.type == "meta":
        return False
    try:
        return t.numel() == 0 or t.data_ptr() != 0
    except RuntimeError:          # a tensor type without data (fake, functional)
        return False


def refuse_storageless(names, where):
    if names:
        raise NoStorageError(
            "wsync: %s: %d tensor%s without storage (%s%s: on the meta device?): a copy "
            "into them would do nothing, so nothing was copied; load without copying "
            "(a zero-copy swap) or give the module real tensors first (to_empty)"
            % (where, len(names), "" if len(names) == 1 else "s", ", ".join(names[:8]),
               ", ..." if len(names) > 8 else ""))


def state_of(weights):
    """A {name: tensor} mapping from an nn.Module (its state_dict()) or a
    mapping."""
    if isinstance(weights, Mapping):
        return weights
    sd = getattr(weights, "state_dict", None)
    if callable(sd):
        return sd()
    raise TypeError("wsync: weights must be an nn.Module or a mapping of tensors, not %s"
                    % type(weights).__name__)


def targets_of(dest):
    """{name: tensor written in place} of an nn.Module (parameters and
    persistent buffers, as load_state_dict sees them; tied weights under
    each of their names) or of a mapping of torch tensors."""
    if isinstance(dest, Mapping):
        return dict(dest)
    sd = getattr(dest, "state_dict", None)
    if not callable(sd):
        raise TypeError("wsync: load_into needs an nn.Module or a mapping of torch tensors, "
                        "not %s" % type(dest).__name__)
    return sd(keep_vars=True)


def _tp_dim(shape, full, tp_size):
    """The dim (0 or 1) along which shape is part of tp_size equal parts of
    full, or None."""
    if tp_size is None or len(shape) != len(full):
        return None
    diff = [d for d in range(len(shape)) if shape[d] != full[d]]
    if len(diff) == 1 and diff[0] in (0, 1) and shape[diff[0]] * tp_size == full[diff[0]]:
        return diff[0]
    return None


def load_into(view, dest, strict, plain_tensor, tp=None, read_part=None, src_addr=None,
              copy_many=None):
    """View.load_into: check everything, then copy each distinct target
    once from the view. With tp=(rank, size), a target whose shape is
    1/size of the view's along dim 0 or 1 gets part rank of size of it
    (read_part(spec, dim, dst)).

    Targets that are plain contiguous CPU tensors (parameters, buffers) are
    copied by copy_many([(dst address, src_addr(spec), nbytes), ...]) in
    one go (the library's copy, split across threads), then marked written
    as torch's copy_ marks them (an in-place op on an empty view of each:
    autograd's version counter moves); the others with copy_ from a
    zero-copy tensor of the view (plain_tensor(spec))."""
    import torch
    tp_rank, tp_size = tp if tp is not None else (None, None)
    targets = targets_of(dest)
    by_name = view._by_name
    missing = [k for k in targets if k not in by_name]
    unexpected = [k for k in by_name if k not in targets]
    mismatched = []
    plan = []                     # (tensor, spec, its shape) of every distinct target
    nostore = []                  # names of targets without storage (meta)
    seen = set()
    code_of = _torch_code
    for name, t in targets.items():
        spec = by_name.get(name)
        if spec is None:
            continue
        if not isinstance(t, torch.Tensor):
            mismatched.append((name, "type", type(t).__name__, "a tensor"))
            continue
        shape = tuple(t.shape)
        if shape != spec.shape and _tp_dim(shape, spec.shape, tp_size) is None:
            mismatched.append((name, "shape", shape, spec.shape))
        want = _dtypes.CODE[spec.dtype]
        if code_of(t.dtype) != want:
            mismatched.append((name, "dtype", str(t.dtype).replace("torch.", ""),
                               _dtypes.torch_name(want)))
        if not has_storage(t):
            nostore.append(name)
        if id(t) not in seen:     # tied weights: one tensor under two names
            seen.add(id(t))
            plan.append((t, spec, shape))
    where = "view v%d of model %r into %s" % (view.version, view.subscriber.model,
                                               type(dest).__name__)
    if mismatched or (strict and (missing or unexpected)):
        raise MismatchError(where, missing if strict else [], unexpected if strict else [],
                            mismatched)
    refuse_storageless(nostore, where)
    fast, slow = [], []
    plain = (torch.Tensor, torch.nn.Parameter)
    for t, spec, shape in plan:
        if shape != spec.shape:
            slow.append((t, spec, shape))
        elif (copy_many is not None and spec.nbytes and type(t) in plain and t.is_cpu and
              t.is_contiguous()):
            fast.append((t.data_ptr(), src_addr(spec), spec.nbytes, t))
        else:
            slow.append((t, spec, shape))
    if fast and _overlap(fast):   # aliased targets: in order, as copy_ would
        slow = [(t, spec, spec.shape) for t, spec, _ in plan]
        fast = []
    with torch.no_grad():
        if fast:
            copy_many([f[:3] for f in fast])
            for f in fast:
                f[3].view(-1)[:0].zero_()
        for t, spec, shape in slow:
            if shape == spec.shape:
                _copy_bits(t, plain_tensor(spec), _dtypes.CODE[spec.dtype])
            else:
                read_part(spec, _tp_dim(shape, spec.shape, tp_size), tp_rank, tp_size, t)
    return LoadResult(missing, unexpected)


_TORCH_CODES = {}


def _torch_code(dt):
    """The wsync code of torch dtype dt, None for one wsync lacks (cached)."""
    try:
        return _TORCH_CODES[dt]
    except KeyError:
        pass
    code = _dtypes.code_of(dt) if _known_dtype(dt) else None
    _TORCH_CODES[dt] = code
    return code


def _overlap(segs):
    """True if two destination ranges of segs overlap."""
    r = sorted((s[0], s[0] + s[2]) for s in segs)
    return any(r[i][1] > r[i + 1][0] for i in range(len(r) - 1))


def _copy_bits(dst, src, code):
    """dst.copy_(src) of the same dtype. The dtypes only a newer torch has
    (float8, uint16/32/64) go through a signed integer view of their size:
    the same bits, with no need for a copy kernel of their own, which
    torch does not have for every such dtype."""
    if code in _dtypes.NEWER_TORCH:
        import torch
        bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        bits = bits[_dtypes.ITEMSIZE[code]]
        dst, src = dst.view(bits), src.view(bits)
    dst.copy_(src)


def _known_dtype(dt):
    try:
        _dtypes.code_of(dt)
    except TypeError:
        return False
    return True


# ---- a zero-copy swap: the view's read-only tensors put into a module ----------------

def module_slots(module):
    """{dotted name: (owner module, attribute, is a parameter, tensor)} of
    every parameter and buffer of module (non-persistent buffers and tied
    weights under each of their names)."""
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


def _persistent(slots):
    """Names of slots load_state_dict would ask for (parameters, persistent
    buffers)."""
    return [k for k, (m, n, is_param, _) in slots.items()
            if is_param or n not in m._non_persistent_buffers_set]


def can_swap(module):
    """True if every parameter and buffer of module is on the CPU or has no
    storage (meta): a host view's tensors can take their place. A module on
    a GPU needs a copy."""
    for _, _, _, t in module_slots(module).values():
        if t.device.type not in ("cpu", "meta"):
            return False
    return True


def _as_parameter(t, Parameter):
    """nn.Parameter(t, requires_grad=False) of a fresh ReadOnlyTensor t
    (no grad): torch makes a Parameter of a tensor subclass by marking
    t.detach().requires_grad_(False) _is_param (torch/nn/parameter.py);
    marking t itself is the same tensor for the module, without the two
    torch-function dispatches per tensor (a third of a small model's swap).
    Where torch does not know the mark, Parameter() as usual."""
    t._is_param = True
    if _MARK_WORKS:
        return t
    if isinstance(t, Parameter):
        _MARK_WORKS.append(True)   # the same for every read-only tensor after
        return t
    return Parameter(t, requires_grad=False)


_MARK_WORKS = []     # [True] once a marked tensor was seen to be a Parameter


def swap_into(view, module, strict=True, put=None, plan=None):
    """Puts view's tensors into module, without copying: each parameter and
    buffer the view names becomes a read-only zero-copy tensor over the
    view (a ReadOnlyTensor; a parameter stays a parameter, without grad),
    as TorchRL's apply_weights(inplace=False) puts received tensors in
    (tensordict's to_module). Works on a module whose tensors have no
    storage (a policy on the "meta" device) as on a real one.

    Names, shapes and dtypes are checked first, as load_into does
    (MismatchError, nothing changed); a tensor without storage the view does
    not fill (strict=False) raises NoStorageError. The caller keeps the view
    held while its tensors are in the module (they raise ClosedError once
    it is released) and lets it go when the next one is swapped in.
    put (a dict), if given, gets {name: tensor put in} for the names
    load_state_dict would ask for, in the module's order. plan (a SwapPlan),
    if given, is filled for swap_again.
    Returns LoadResult(missing_keys, unexpected_keys)."""
    import torch
    slots = module_slots(module)
    by_name = view._by_name
    wanted = _persistent(slots)
    missing = [k for k in wanted if k not in by_name]
    unexpected = [k for k in by_name if k not in slots]
    mismatched = []
    # shape and dtype read without the torch-function dispatch of the
    # read-only tensors a swap put in before (they only read)
    with torch._C.DisableTorchFunction():
        for name, (_, _, _, t) in slots.items():
            spec = by_name.get(name)
            if spec is None:
                continue
            shape, dtype = tuple(t.shape), t.dtype
            if shape != spec.shape:
                mismatched.append((name, "shape", shape, spec.shape))
            want = _dtypes.CODE[spec.dtype]
            if _torch_code(dtype) != want:
                mismatched.append((name, "dtype", str(dtype).replace("torch.", ""),
                                   _dtypes.torch_name(want)))
    where = "view v%d of model %r into %s" % (view.version, view.subscriber.model,
                                               type(module).__name__)
    if mismatched or (strict and (missing or unexpected)):
        raise MismatchError(where, missing if strict else [], unexpected if strict else [],
                            mismatched)
    refuse_storageless([k for k, s in slots.items() if k not in by_name and
                        not has_storage(s[3])], where + " (not in the view)")
    from . import _views
    ro = _views.ro_tensors(view, [by_name[k] for k in slots if k in by_name])
    Parameter = torch.nn.Parameter
    for name, (m, attr, is_param, _) in slots.items():
        t = ro.get(name)
        if t is None:
            continue
        if is_param:
            t = m._parameters[attr] = _as_parameter(t, Parameter)
        else:
            m._buffers[attr] = t
        if put is not None and (is_param or attr not in m._non_persistent_buffers_set):
            put[name] = t
    res = LoadResult(missing, unexpected)
    if plan is not None:
        plan.fill(view, module, slots, res, strict)
    return res


class SwapPlan:
    """Where a swap into a module put each tensor of a layout, and how the
    module looked right after: its tree of submodules (each one's children
    and how many parameters, buffers and non-persistent buffers it has)
    and every tensor in it. A module that still looks exactly so when the
    next view of the same layout comes (the same subscription: the same
    names, shapes and dtypes) takes that view by swap_again: the new
    tensors go into the same places with nothing walked or checked again,
    since nothing that was checked can have changed. Anything else (a
    tensor replaced, a submodule or buffer added, another layout) and
    swap_again declines: the caller runs swap_into, which checks everything
    and fills the plan anew.

    The plan refers to the module and its submodules and to the tensors
    last put in (no more than the module itself does while they are in
    it); never to a view."""

    __slots__ = ("by_name", "module", "strict", "tree", "places", "specs", "others",
                 "result")

    def __init__(self):
        self.by_name = None       # the layout (a subscription's by_name) it is for
        self.module = None

    def fill(self, view, module, slots, result, strict):
        self.by_name = None
        tree = []
        for _, m in module.named_modules(remove_duplicate=False):
            tree.append((m, tuple(m._modules.values()), len(m._parameters), len(m._buffers),
                         len(m._non_persistent_buffers_set)))
        by_name = view._by_name
        places, specs, others = [], [], []
        for name, (m, attr, is_param, _) in slots.items():
            d = m._parameters if is_param else m._buffers
            if name in by_name:
                persistent = is_param or attr not in m._non_persistent_buffers_set
                places.append([m, attr, is_param, name if persistent else None, d[attr]])
                specs.append(by_name[name])
            else:
                others.append((m, attr, is_param, d[attr]))
        self.tree, self.places, self.specs, self.others = tree, places, specs, others
        self.result, self.strict = result, strict
        self.module, self.by_name = module, by_name

    def _unchanged(self, view, module, strict):
        if (view._by_name is not self.by_name or module is not self.module or
                strict != self.strict):
            return False
        for m, kids, n_params, n_buffers, n_np in self.tree:
            if (len(m._parameters) != n_params or len(m._buffers) != n_buffers or
                    len(m._non_persistent_buffers_set) != n_np or
                    len(m._modules) != len(kids)):
                return False
            for a, b in zip(m._modules.values(), kids):
                if a is not b:
                    return False
        for m, attr, is_param, _, t in self.places:
            if (m._parameters if is_param else m._buffers).get(attr) is not t:
                return False
        for m, attr, is_param, t in self.others:
            if (m._parameters if is_param else m._buffers).get(attr) is not t:
                return False
        return True

    def forget(self):
        self.by_name = self.module = None
        self.tree = self.places = self.specs = self.others = ()


def swap_again(plan, view, module, strict=True, put=None):
    """swap_into(view, module, strict, put) by plan, if module still looks
    as plan saw it after the last swap (see SwapPlan): returns its
    LoadResult, or None, having changed nothing, when it does not (run
    swap_into)."""
    if plan is None or plan.by_name is None or not plan._unchanged(view, module, strict):
        return None
    import torch
    from . import _views
    ro = _views.ro_tensor_list(view, plan.specs)
    Parameter = torch.nn.Parameter
    for place, t in zip(plan.places, ro):
        m, attr, is_param, name, _ = place
        if is_param:
            t = m._parameters[attr] = _as_parameter(t, Parameter)
        else:
            m._buffers[attr] = t
        place[4] = t
        if put is not None and name is not None:
            put[name] = t
    return plan.result


def is_swapped(module):
    """True if a tensor of module is a view's read-only tensor (a swap put
    it there): such a module takes new versions by a swap, never a copy."""
    from ._torch import ReadOnlyTensor
    return any(isinstance(s[3], ReadOnlyTensor) for s in module_slots(module).values())
