"""TorchRL's multi-process collector (the stand-in's, torchrl_standin/
torchrl/collectors, which behaves as TorchRL 0.14.0's does with a scheme)
driving wsync.rl.WsyncWeightSyncScheme: run by test_rl.py as a script, so
that wsync.rl is imported with the stand-in on sys.path and subclasses it,
as it would subclass TorchRL's.

    python3 torchrl_collector.py --endpoint SOCK --strategy tensordict --start spawn
        [--model-id ID] [--case main|mismatch|two|kill-swap]

As TorchRL: the parent checks that the scheme is a WeightSyncScheme, calls
init_on_sender(model_id=..., context=collector, ctx=mp_context), starts the
workers with the policy on the meta device (no weights), connect()s, and
update_policy_weights_() -> scheme.send(). Each worker: init_on_receiver
+ connect (the meta policy filled by a zero-copy swap), its inner
collector as the context (which copies the weights it is told of into its
policy), then serves the parent's requests. Cases:

  main       bit-exact on every return of send(), TorchRL's transport send,
             nested weights, worker ids, the cascade, a SIGKILLed worker
  mismatch   a worker whose policy has another layout: the parent sees
             wsync's MismatchError, rebuilt from the worker's message
  two        two collectors, each with its own scheme (default names), in
             one process at once
  kill-swap  a worker SIGKILLed while it swaps versions in: the others go
             on, and the version it held is given back (many sends after)

Prints one line per check and "OK" at the end; exits 1 on the first
failure, naming it.
"""
import argparse
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
from torchrl.collectors import MultiCollector  # noqa: E402  (the stand-in)
from torchrl.weight_update import WeightSyncScheme  # noqa: E402

import wsync  # noqa: E402
import wsync.rl  # noqa: E402

WAIT_S = 30.0


def check(cond, what):
    if not cond:
        print("FAILED: %s" % what, flush=True)
        sys.exit(1)
    print("ok: %s" % what, flush=True)


class SlowToLoad(nn.Sequential):
    """A policy whose weights take 0.2 s to reach (state_dict(keep_vars=True),
    what a worker's receive asks for before it acknowledges): a send() that
    returned before the workers applied the weights would be seen, not
    hidden by a fast swap."""

    def state_dict(self, *args, keep_vars=False, **kwargs):
        if keep_vars:
            time.sleep(0.2)
        return super().state_dict(*args, keep_vars=keep_vars, **kwargs)


def make_policy(seed, slow=False, width=32):
    torch.manual_seed(seed)
    return (SlowToLoad if slow else nn.Sequential)(
        nn.Linear(8, width), nn.BatchNorm1d(width), nn.Tanh(), nn.Linear(width, 4))


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


def all_same(collector, alive, policy):
    return all(same(collector.ask(i, "params"), policy.state_dict()) for i in alive)


def scheme_of(args, **kw):
    return wsync.rl.WsyncWeightSyncScheme(args.strategy, endpoint=args.endpoint,
                                          timeout=WAIT_S, **kw)


def case_main(args):
    scheme = scheme_of(args)
    check(isinstance(scheme, WeightSyncScheme) and
          type(scheme).__mro__[1] is WeightSyncScheme,
          "the scheme is a subclass of TorchRL's WeightSyncScheme (here: the stand-in)")
    policy = make_policy(0, slow=True)
    policy.eval()
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    collector = MultiCollector(policy, args.workers, {args.model_id: scheme}, args.start)
    collector.start()
    n = args.workers
    alive = list(range(n))
    check(scheme.wsync_name.startswith("policy-") or args.model_id != "policy",
          "the default model name is the scheme's own (%s)" % scheme.wsync_name)
    check(all_same(collector, alive, policy),
          "connect(): every worker's meta policy holds the trainer's first weights")
    sends = 0
    for rnd in range(5):
        train_step(policy, opt)
        t0 = time.monotonic()
        collector.update_policy_weights_()
        sends += 1
        dt = time.monotonic() - t0
        # no sleep, no retry: send() returned, so every worker has applied them
        check(all_same(collector, alive, policy),
              "send() %d returned after every worker applied it (%.1f ms)" % (rnd, dt * 1e3))
    # TorchRL's base class's send(): the same prepared weights through every
    # worker's transport, then every transport's wait_ack: one version
    train_step(policy, opt)
    v = scheme.version
    WeightSyncScheme.send(scheme)
    sends += 1
    check(scheme.version == v + 1 and all_same(collector, alive, policy),
          "TorchRL's send() over %d per-worker transports published one version (v%d), "
          "applied by every worker on return" % (n, scheme.version))
    x = torch.linspace(-1, 1, 16 * 8).reshape(16, 8)
    with torch.no_grad():
        want = policy(x)
    check(all(torch.allclose(collector.ask(i, "rollout", x), want) for i in alive),
          "the workers act with the trainer's policy")
    for kind, wrap in (("TensorDict-like", MiniTensorDict), ("nested dict", lambda d: d)):
        train_step(policy, opt)
        weights = wrap(nested({k: v.detach().clone() for k, v in policy.state_dict().items()}))
        collector.update_policy_weights_(weights)
        sends += 1
        check(all_same(collector, alive, policy), "nested weights (%s) are applied" % kind)
    collector.update_policy_weights_(worker_ids=[0])
    sends += 1
    try:
        collector.update_policy_weights_(worker_ids=[n + 4])
        check(False, "an unknown worker id is refused")
    except ValueError as e:
        check("not registered" in str(e), "an unknown worker id is refused: %s" % e)
    stats = [collector.ask(i, "stats") for i in alive]
    check(all(s["cascaded"] == sends and s["error"] is None for s in stats),
          "each version applied told the worker's collector once, which copied it onto "
          "itself without error (%s)" % [s["cascaded"] for s in stats])
    check(all(s["version"] == scheme.version for s in stats), "the workers are at v%d"
          % scheme.version)
    os.kill(collector.procs[1].pid, signal.SIGKILL)
    collector.procs[1].join(WAIT_S)
    alive.remove(1)
    train_step(policy, opt)
    t0 = time.monotonic()
    collector.update_policy_weights_()
    dt = time.monotonic() - t0
    check(dt < WAIT_S / 2 and all_same(collector, alive, policy),
          "a worker killed by SIGKILL never stalls send() (%.1f ms)" % (dt * 1e3))
    collector.shutdown(alive)


def case_mismatch(args):
    scheme = scheme_of(args, connect_timeout=WAIT_S)
    policy = make_policy(0)
    collector = MultiCollector(policy, args.workers, {"policy": scheme}, args.start,
                               worker_policy=make_policy(0, width=24))
    try:
        collector.start()
        check(False, "a worker whose layout differs fails start()")
    except wsync.MismatchError as e:
        msg = str(e)
        check("does not fit" in msg and "0.weight: shape (24, 8) in the module, (32, 8) in "
              "the view" in msg and "Worker traceback" in msg,
              "the parent sees wsync's MismatchError with the worker's message: %s"
              % msg.splitlines()[0])
    finally:
        for p in collector.procs:
            p.kill()
            p.join(WAIT_S)
        scheme.shutdown()


def case_two(args):
    policies = [make_policy(0), make_policy(1)]
    for p in policies:
        p.eval()
    schemes = [scheme_of(args), scheme_of(args)]
    cols = [MultiCollector(p, args.workers, {"policy": s}, args.start)
            for p, s in zip(policies, schemes)]
    for c in cols:
        c.start()
    check(schemes[0].wsync_name != schemes[1].wsync_name,
          "two schemes in one process publish two models (%s, %s)"
          % (schemes[0].wsync_name, schemes[1].wsync_name))
    opts = [torch.optim.SGD(p.parameters(), lr=0.1) for p in policies]
    for rnd in range(3):
        for p, o, c in zip(policies, opts, cols):
            train_step(p, o)
            c.update_policy_weights_()
        check(all(all_same(c, range(args.workers), p) for c, p in zip(cols, policies)),
              "round %d: each collector's workers hold their own trainer's weights" % rnd)
    for c in cols:
        c.shutdown()


def case_kill_swap(args):
    scheme = scheme_of(args)
    policy = make_policy(0)
    policy.eval()
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    collector = MultiCollector(policy, args.workers, {"policy": scheme}, args.start)
    collector.start()
    alive = list(range(args.workers))
    victim = alive.pop()
    train_step(policy, opt)
    scheme.send_async()                 # the workers start swapping it in
    os.kill(collector.procs[victim].pid, signal.SIGKILL)
    collector.procs[victim].join(WAIT_S)
    t0 = time.monotonic()
    scheme.wait_async()
    check(time.monotonic() - t0 < WAIT_S / 2 and all_same(collector, alive, policy),
          "a worker SIGKILLed during a swap: the send it was in returns, the others "
          "applied it")
    for rnd in range(20):                # more versions than the model has slabs
        train_step(policy, opt)
        collector.update_policy_weights_()
    check(all_same(collector, alive, policy),
          "20 sends later (the dead worker's held versions were given back): bit-exact")
    collector.shutdown(alive)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--strategy", default="tensordict")
    ap.add_argument("--start", default="spawn")
    ap.add_argument("--model-id", default="policy")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--case", default="main",
                    choices=("main", "mismatch", "two", "kill-swap"))
    args = ap.parse_args()
    {"main": case_main, "mismatch": case_mismatch, "two": case_two,
     "kill-swap": case_kill_swap}[args.case](args)
    print("OK", flush=True)


if __name__ == "__main__":
    main()
