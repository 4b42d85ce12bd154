"""A TorchRL-style multi-process collector driving wsync.rl.WsyncWeightSyncScheme
the way TorchRL's multiprocess collectors drive their schemes, against the
stand-in TorchRL base class (tests/python/torchrl_standin): run by
test_rl.py as a script, so that wsync.rl is imported with the stand-in on
sys.path and subclasses it, as it would subclass TorchRL's.

    python3 torchrl_collector.py --endpoint SOCK --strategy tensordict --start spawn

The parent, as TorchRL's collectors do: checks that the scheme is a
WeightSyncScheme, init_on_sender(model_id="policy", context=collector,
ctx=mp_context) before starting the workers, connect() after, and
update_policy_weights_() -> scheme.send(weights=..., worker_ids=...). Each
worker: init_on_receiver(model_id=..., context=inner_collector,
worker_idx=i), connect(worker_idx=i), then serves the parent's requests
(its parameters, a rollout, its counters) while the scheme's background
thread applies new weights. Prints one line per check and "OK" at the end;
exits 1 on the first failure, naming it.
"""
import argparse
import math
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.normpath(os.path.join(HERE, "..", "..", "libclient", "python"))
for p in (PKG, os.path.join(HERE, "torchrl_standin")):
    if p not in sys.path:
        sys.path.insert(0, p)

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torchrl.weight_update import WeightSyncScheme  # noqa: E402  (the stand-in)

import wsync.rl  # noqa: E402

WAIT_S = 30.0


def check(cond, what):
    if not cond:
        print("FAILED: %s" % what, flush=True)
        sys.exit(1)
    print("ok: %s" % what, flush=True)


class SlowToLoad(nn.Sequential):
    """A policy whose weights take 0.2 s to reach (state_dict(keep_vars=True),
    what a load asks for first): a send() that returned before the workers
    applied the weights would be seen, not hidden by a fast copy."""

    def state_dict(self, *args, keep_vars=False, **kwargs):
        if keep_vars:
            time.sleep(0.2)
        return super().state_dict(*args, keep_vars=keep_vars, **kwargs)


def make_policy(seed, slow=False):
    torch.manual_seed(seed)
    return (SlowToLoad if slow else nn.Sequential)(
        nn.Linear(8, 32), nn.BatchNorm1d(32), nn.Tanh(), nn.Linear(32, 4))


class Nets:
    """A container the model_id "nets['pi']" resolves in."""

    def __init__(self, pi):
        self._d = {"pi": pi}

    def __getitem__(self, k):
        return self._d[k]


class InnerCollector:
    """What a worker's collector is to the scheme: the context its model is
    resolved in, with a worker_idx and update_policy_weights_ (TorchRL's
    cascade to sub-collectors; counted here)."""

    def __init__(self, policy, worker_idx, model_id):
        self.policy = policy
        self.nets = Nets(policy)
        self.worker_idx = worker_idx
        self.model_id = model_id
        self.cascaded = 0

    def update_policy_weights_(self, model_id=None, policy_or_weights=None):
        if policy_or_weights is None or model_id != self.model_id:
            raise ValueError("cascaded with model_id=%r and %s" % (model_id,
                                                                 type(policy_or_weights)))
        self.cascaded += 1


def worker_main(pipe, scheme, idx, model_id):
    policy = make_policy(100 + idx, slow=True)    # not the trainer's weights until synced
    policy.eval()
    inner = InnerCollector(policy, idx, model_id)
    scheme.init_on_receiver(model_id=model_id, context=inner, worker_idx=idx)
    scheme.connect(worker_idx=idx)
    pipe.send("instantiated")
    x = torch.linspace(-1, 1, 16 * 8).reshape(16, 8)
    while True:
        msg = pipe.recv()
        if msg == "params":
            pipe.send({k: v.detach().clone() for k, v in policy.state_dict().items()})
        elif msg == "rollout":
            with scheme.lock, torch.no_grad():
                pipe.send(policy(x))
        elif msg == "stats":
            pipe.send({"cascaded": inner.cascaded, "version": scheme.version,
                       "error": None if scheme.last_error is None else str(scheme.last_error)})
        elif msg == "close":
            scheme.shutdown()
            pipe.send("closed")
            return


class MultiCollector:
    """The parent side of a TorchRL multiprocess collector, reduced to what
    touches weight-sync schemes."""

    def __init__(self, policy, num_workers, weight_sync_schemes, start_method, model_id):
        import multiprocessing as mp
        self.policy = policy
        self.nets = Nets(policy)
        self.num_workers = num_workers
        self._weight_sync_schemes = weight_sync_schemes
        self.ctx = mp.get_context(start_method)
        self.model_id = model_id

    def start(self):
        for model_id, scheme in self._weight_sync_schemes.items():
            if not isinstance(scheme, WeightSyncScheme):
                raise TypeError("Expected WeightSyncScheme, got %r" % type(scheme))
            if not scheme.initialized_on_sender:
                scheme.init_on_sender(model_id=model_id, context=self, ctx=self.ctx)
        self.pipes, self.procs = [], []
        for i in range(self.num_workers):
            parent, child = self.ctx.Pipe()
            p = self.ctx.Process(target=worker_main,
                                 args=(child, self._weight_sync_schemes["policy"], i,
                                       self.model_id), daemon=True)
            p.start()
            child.close()
            self.pipes.append(parent)
            self.procs.append(p)
        for scheme in self._weight_sync_schemes.values():
            scheme.connect()
        for i, pipe in enumerate(self.pipes):
            if not pipe.poll(WAIT_S):
                raise RuntimeError("worker %d did not start" % i)
            assert pipe.recv() == "instantiated"

    def update_policy_weights_(self, policy_or_weights=None, *, worker_ids=None):
        for scheme in self._weight_sync_schemes.values():
            scheme.send(weights=policy_or_weights, worker_ids=worker_ids)

    def ask(self, i, msg):
        self.pipes[i].send(msg)
        if not self.pipes[i].poll(WAIT_S):
            raise RuntimeError("worker %d did not answer %r" % (i, msg))
        return self.pipes[i].recv()

    def shutdown(self, alive):
        for i in alive:
            assert self.ask(i, "close") == "closed"
        for p in self.procs:
            p.join(WAIT_S)
        for scheme in self._weight_sync_schemes.values():
            scheme.shutdown()


def same(sd, ref):
    return set(sd) == set(ref) and all(torch.equal(sd[k], ref[k].detach()) for k in ref)


def train_step(policy, opt):
    """An optimiser step and a BatchNorm forward in training mode, so that
    parameters, running statistics and num_batches_tracked all change."""
    policy.train()
    loss = policy(torch.randn(32, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    policy.eval()


class MiniTensorDict:
    """Shaped like a TensorDict where it matters here: nested, not a
    Mapping, with flatten_keys(sep) and items()."""

    def __init__(self, nested):
        self._n = nested

    def flatten_keys(self, sep="."):
        flat = {}

        def walk(d, pre):
            for k, v in d.items():
                if isinstance(v, dict):
                    walk(v, pre + k + sep)
                else:
                    flat[pre + k] = v
        walk(self._n, "")
        return MiniTensorDict(flat)

    def items(self):
        return self._n.items()


def nested(sd):
    out = {}
    for k, v in sd.items():
        d = out
        parts = k.split(".")
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = v
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--strategy", default="tensordict")
    ap.add_argument("--start", default="spawn")
    ap.add_argument("--model-id", default="policy")
    ap.add_argument("--workers", type=int, default=3)
    args = ap.parse_args()

    scheme = wsync.rl.WsyncWeightSyncScheme(args.strategy, name="policy-" + args.start,
                                            endpoint=args.endpoint, timeout=WAIT_S)
    check(isinstance(scheme, WeightSyncScheme) and
          type(scheme).__mro__[1] is WeightSyncScheme,
          "the scheme is a subclass of TorchRL's WeightSyncScheme (here: the stand-in)")
    policy = make_policy(0)
    policy.eval()
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    collector = MultiCollector(policy, args.workers, {"policy": scheme}, args.start,
                               args.model_id)
    collector.start()
    n = args.workers
    alive = list(range(n))
    check(all(same(collector.ask(i, "params"), policy.state_dict()) for i in alive),
          "connect(): every worker holds the trainer's first weights")

    sends = 0
    for rnd in range(5):
        train_step(policy, opt)
        t0 = time.monotonic()
        collector.update_policy_weights_()
        sends += 1
        dt = time.monotonic() - t0
        # no sleep, no retry: send() returned, so every worker has applied them
        check(all(same(collector.ask(i, "params"), policy.state_dict()) for i in alive),
              "send() %d returned after every worker applied it (%.1f ms)" % (rnd, dt * 1e3))
    # TorchRL's base class's send(): the same prepared weights through every
    # worker's transport, then every transport's wait_ack: one version
    train_step(policy, opt)
    v = scheme.version
    WeightSyncScheme.send(scheme)
    sends += 1
    check(scheme.version == v + 1 and
          all(same(collector.ask(i, "params"), policy.state_dict()) for i in alive),
          "TorchRL's send() over %d per-worker transports published one version (v%d), "
          "applied by every worker on return" % (n, scheme.version))
    x = torch.linspace(-1, 1, 16 * 8).reshape(16, 8)
    with torch.no_grad():
        want = policy(x)
    check(all(torch.allclose(collector.ask(i, "rollout"), want) for i in alive),
          "the workers act with the trainer's policy")

    # nested weights, as a TensorDict holds them (and as a nested dict)
    for kind, wrap in (("TensorDict-like", MiniTensorDict), ("nested dict", lambda d: d)):
        train_step(policy, opt)
        weights = wrap(nested({k: v.detach().clone() for k, v in policy.state_dict().items()}))
        collector.update_policy_weights_(weights)
        sends += 1
        check(all(same(collector.ask(i, "params"), policy.state_dict()) for i in alive),
              "nested weights (%s) are applied" % kind)

    collector.update_policy_weights_(worker_ids=[0])
    sends += 1
    try:
        collector.update_policy_weights_(worker_ids=[n + 4])
        check(False, "an unknown worker id is refused")
    except ValueError as e:
        check("not registered" in str(e), "an unknown worker id is refused: %s" % e)

    stats = [collector.ask(i, "stats") for i in alive]
    check(all(s["cascaded"] == sends and s["error"] is None for s in stats),
          "each version applied told the worker's collector once (%s)"
          % [s["cascaded"] for s in stats])
    check(all(s["version"] == scheme.version for s in stats), "the workers are at v%d"
          % scheme.version)

    # a worker killed with SIGKILL stops counting: the next send goes through
    os.kill(collector.procs[1].pid, signal.SIGKILL)
    collector.procs[1].join(WAIT_S)
    alive.remove(1)
    train_step(policy, opt)
    t0 = time.monotonic()
    collector.update_policy_weights_()
    dt = time.monotonic() - t0
    check(dt < WAIT_S / 2 and
          all(same(collector.ask(i, "params"), policy.state_dict()) for i in alive),
          "a worker killed by SIGKILL never stalls send() (%.1f ms)" % (dt * 1e3))
    collector.shutdown(alive)
    check(not math.isnan(dt), "shutdown")
    print("OK", flush=True)


if __name__ == "__main__":
    main()
