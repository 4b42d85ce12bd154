#!/usr/bin/env python3
"""torch_peers.py: the ways PyTorch users move one weight update from a
trainer to N collector processes on one machine, timed the way wsync-bench
times wsync.

For each method and model size, a trainer process and N collector processes
(forked from this driver) repeat: all meet at a barrier, the trainer idles
1-2 ms (as the wsync side does), then takes CLOCK_MONOTONIC and distributes
the update it already holds in its own memory; each collector takes
CLOCK_MONOTONIC as soon as it holds the update. The figure is the median,
over repeats, of (last collector's time - trainer's start). The first repeat
is a warm-up and is not counted.

Methods (the model: a state_dict of 64 float32 tensors):
  gloo_flat     torch.distributed (gloo, TCP on 127.0.0.1) broadcast of one
                flat tensor; the trainer's tensors are views into it, so no
                flattening copy is counted (the most favourable case)
  gloo_tensors  the same, one broadcast per tensor, as most code does
  gloo_isend    torch.distributed isend of every tensor to each collector in
                turn (torchgfn's and RLinf's send/recv shape), received into
                the collector's own tensors
  rpc_async     torch RPC (TensorPipe): rpc_async of the state_dict to every
                collector at once, then wait for all
  rpc_sync      torch RPC: rpc_sync to each collector in turn
  rpc_fetch     torch RPC, the parameter-server shape (PyTorch's RPC
                parameter-server tutorial, TorchRL's RPC scheme): the trainer
                notifies each collector, which fetches the state_dict with
                rpc_sync
  mp_queue      torch.multiprocessing: copy the state_dict into new shared-
                memory tensors (new ones each update, so no collector ever
                sees a half-written one) and put it on one Queue per
                collector; each tensor travels as a file descriptor
  mp_queue_load the same, until each collector has copied the weights into
                its own tensors (its nn.Module's state_dict)
  torch_shm_copy  the trainer's part of mp_queue alone, in one process:
                copy_ into new shared-memory tensors
  torchrl_inplace_unsafe  TorchRL's SharedMemWeightSyncScheme shape: shared
                tensors made once, each collector's policy parameters alias
                them; the trainer copy_s each update into them in place and
                puts "receive" on each collector's Queue; the collector
                applies the shared weights to its policy in place, as
                TorchRL's receiver does (apply_weights(inplace=True): a copy_
                of each shared tensor onto the parameter over the same
                memory), and is done. UNSAFE: a collector reading while the
                trainer writes sees a torn mix of two versions (no other
                method here ever shows one)

The Python binding of wsync, against the broker of --wsync-endpoint (the
package of this source tree, libclient/python), default options:
  py_wsync_views   begin, slab.copy_from(state_dict), commit; each collector
                   is blocked in sub.wait() and takes view.state_dict("torch")
                   (zero-copy tensors)
  py_wsync_load    the same, until each collector has loaded the view into
                   its own nn.Module (view.load_into(module): names, shapes
                   and dtypes checked, one copy_ per tensor in place) and
                   released the view; in steady state: before the timed
                   rounds each collector has loaded every slab once (a
                   process's first read of a slab pays its page faults,
                   about 0.15 s per 256 MiB here, once per slab per process)
  py_wsync_publish the trainer's begin + copy_from + commit alone (from the
                   py_wsync_views rounds)
  py_wsync_publish_unguarded  the same with guard=False, in one process
  py_wsync_copy_from  slab.copy_from(state_dict) alone, in one process
  torch_copy_slab  torch copy_ of each tensor into slab.torch() views alone,
                   the same rounds, interleaved with py_wsync_copy_from
  py_wsync_rl_send wsync.rl.WsyncWeightSyncScheme (TorchRL's interface):
                   the trainer's send() with sync=True, which returns once
                   each collector's background thread has loaded the
                   version into its own nn.Module (load_into) and said so

Output: one JSON object per line on stdout, for wsync-bench to parse:
  {"method": "gloo_flat", "mib": 16, "ms": 12.3, "samples": 5}
  {"method": "rpc_sync", "mib": 256, "skipped": "why"}
A method that fails or times out prints skipped lines; the script itself
exits 0 unless its arguments are wrong.
"""

import argparse
import json
import os
import queue
import random
import socket
import statistics
import sys
import time
import traceback

GROUPS = {
    "gloo": ["gloo_flat", "gloo_tensors", "gloo_isend"],
    "rpc": ["rpc_async", "rpc_sync", "rpc_fetch"],
    "mpq": ["mp_queue", "mp_queue_load", "torch_shm_copy", "torchrl_inplace_unsafe"],
    "pyws": ["py_wsync_views", "py_wsync_load", "py_wsync_publish",
             "py_wsync_publish_unguarded", "py_wsync_copy_from", "torch_copy_slab",
             "py_wsync_rl_send"],
}

PR_SET_PDEATHSIG = 1
SIGKILL = 9


def emit(obj):
    print(json.dumps(obj), flush=True)


def clean_reason(text):
    text = " ".join(str(text).split())
    return text.replace('"', "'").replace("\\", "/")[:200]


def emit_skipped(methods, sizes, reason):
    for method in methods:
        for mib in sizes:
            emit({"method": method, "mib": mib, "skipped": clean_reason(reason)})


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent():
    try:
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, SIGKILL)
    except (OSError, AttributeError):
        pass


# ---- the model ---------------------------------------------------------------


def make_flat(torch, mib, tensors):
    """One flat float32 buffer and 64 views into it (the state_dict)."""
    numel = mib * 1024 * 1024 // 4
    per = numel // tensors
    flat = torch.ones(per * tensors, dtype=torch.float32)
    views = {"layer%03d.weight" % i: flat[i * per:(i + 1) * per] for i in range(tensors)}
    return flat, views


def make_module(torch, mib, tensors):
    """An nn.Module whose state_dict has the names of make_state_dict."""
    per = mib * 1024 * 1024 // 4 // tensors
    m = torch.nn.Module()
    for i in range(tensors):
        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(torch.zeros(per, dtype=torch.float32))
        m.add_module("layer%03d" % i, layer)
    return m


def make_state_dict(torch, mib, tensors):
    per = mib * 1024 * 1024 // 4 // tensors
    return {"layer%03d.weight" % i: torch.ones(per, dtype=torch.float32) for i in range(tensors)}


# ---- the shared timing loop -------------------------------------------------------


class Ctx:
    def __init__(self, args, rank, world, stamps, barrier, results, queues):
        self.args = args
        self.rank = rank
        self.world = world
        self.stamps = stamps
        self.barrier = barrier
        self.results = results
        self.queues = queues

    @property
    def index(self):
        return self.rank - 1

    def stamp(self):
        self.stamps[self.index] = time.monotonic_ns()


def trainer_rounds(ctx, method, mib, distribute):
    """Runs warm-up + repeats rounds of distribute() and reports the median."""
    samples = []
    for rep in range(1 + ctx.args.repeats):
        ctx.barrier.wait()
        time.sleep(random.uniform(0.001, 0.002))
        t0 = time.monotonic_ns()
        keep = distribute()
        ctx.barrier.wait()
        last = max(ctx.stamps[i] for i in range(ctx.world - 1))
        del keep
        if rep:
            samples.append((last - t0) / 1e6)
    report(ctx, method, mib, samples)


def report(ctx, method, mib, samples):
    ctx.results.put({"method": method, "mib": mib, "ms": statistics.median(samples),
                     "min_ms": min(samples), "max_ms": max(samples), "samples": len(samples)})


def local_rounds(ctx, method, mib, work):
    """Rounds in step with the collectors (which do nothing), timing work()
    in the trainer alone."""
    samples = []
    for rep in range(1 + ctx.args.repeats):
        ctx.barrier.wait()
        t0 = time.monotonic_ns()
        keep = work()
        samples.append((time.monotonic_ns() - t0) / 1e6)
        ctx.barrier.wait()
        del keep
    report(ctx, method, mib, samples[1:])


def collector_rounds(ctx, receive):
    for _ in range(1 + ctx.args.repeats):
        ctx.barrier.wait()
        held = receive()
        ctx.barrier.wait()
        del held


# ---- gloo ------------------------------------------------------------------------


def run_gloo(ctx, torch):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % ctx.args.port,
                            rank=ctx.rank, world_size=ctx.world)
    for mib in ctx.args.sizes:
        flat, views = make_flat(torch, mib, ctx.args.tensors)
        tensors = list(views.values())

        def flat_once():
            dist.broadcast(flat, src=0)
            if ctx.rank:
                ctx.stamp()

        def per_tensor_once():
            for t in tensors:
                dist.broadcast(t, src=0)
            if ctx.rank:
                ctx.stamp()

        # a collector receives into its own tensors, as into its module's
        own = tensors if ctx.rank == 0 else \
            list(make_state_dict(torch, mib, ctx.args.tensors).values())

        def isend_each():
            if ctx.rank == 0:
                reqs = [dist.isend(t, dst=r) for r in range(1, ctx.world) for t in tensors]
                for q in reqs:
                    q.wait()
            else:
                for t in own:
                    dist.recv(t, src=0)
                ctx.stamp()

        for method, once in (("gloo_flat", flat_once), ("gloo_tensors", per_tensor_once),
                             ("gloo_isend", isend_each)):
            if ctx.rank == 0:
                trainer_rounds(ctx, method, mib, once)
            else:
                collector_rounds(ctx, once)
        del flat, views, tensors, own
    dist.destroy_process_group()


# ---- RPC ---------------------------------------------------------------------------

_RPC_CTX = None


def _rpc_receive(state_dict):
    """Runs in a collector when the state_dict has arrived."""
    _RPC_CTX.stamp()
    return len(state_dict)


_RPC_SERVED = {"sd": None}        # the trainer's current weights, for fetches
_RPC_NEW = None                   # a collector's "there are new weights" event


def _rpc_notify():
    """Runs in a collector: the trainer has new weights."""
    _RPC_NEW.set()
    return True


def _rpc_fetch():
    """Runs in the trainer: a collector fetches the weights."""
    return _RPC_SERVED["sd"]


def run_rpc(ctx, torch):
    import torch.distributed.rpc as rpc

    import threading

    global _RPC_CTX, _RPC_NEW
    _RPC_CTX = ctx
    _RPC_NEW = threading.Event()
    opts = rpc.TensorPipeRpcBackendOptions(init_method="tcp://127.0.0.1:%d" % ctx.args.port,
                                           rpc_timeout=600)
    rpc.init_rpc("w%d" % ctx.rank, rank=ctx.rank, world_size=ctx.world,
                 rpc_backend_options=opts)
    names = ["w%d" % r for r in range(1, ctx.world)]
    for mib in ctx.args.sizes:
        sd = make_state_dict(torch, mib, ctx.args.tensors) if ctx.rank == 0 else None

        def send_async():
            futs = [rpc.rpc_async(n, _rpc_receive, args=(sd,)) for n in names]
            torch.futures.wait_all(futs)

        def send_sync():
            for n in names:
                rpc.rpc_sync(n, _rpc_receive, args=(sd,))

        def notify():
            _RPC_SERVED["sd"] = sd
            torch.futures.wait_all([rpc.rpc_async(n, _rpc_notify) for n in names])

        def fetch():
            _RPC_NEW.wait()
            _RPC_NEW.clear()
            got = rpc.rpc_sync("w0", _rpc_fetch)
            ctx.stamp()
            return got

        for method, send, recv in (("rpc_async", send_async, lambda: None),
                                   ("rpc_sync", send_sync, lambda: None),
                                   ("rpc_fetch", notify, fetch)):
            if ctx.rank == 0:
                trainer_rounds(ctx, method, mib, send)
            else:
                collector_rounds(ctx, recv)
        _RPC_SERVED["sd"] = None
        del sd
    rpc.shutdown()


# ---- torch.multiprocessing queues -------------------------------------------------------


def run_mpq(ctx, torch):
    for mib in ctx.args.sizes:
        if ctx.rank == 0:
            sd = make_state_dict(torch, mib, ctx.args.tensors)

            def put_all():
                shared = {k: torch.empty_like(v).share_memory_().copy_(v)
                          for k, v in sd.items()}
                for q in ctx.queues:
                    q.put(shared)
                return shared

            trainer_rounds(ctx, "mp_queue", mib, put_all)
            trainer_rounds(ctx, "mp_queue_load", mib, put_all)
            local_rounds(ctx, "torch_shm_copy", mib,
                         lambda: {k: torch.empty_like(v).share_memory_().copy_(v)
                                  for k, v in sd.items()})
            # TorchRL's shared-memory scheme: shared tensors made once, the
            # collectors' policies alias them, every update written in place
            shared = {k: torch.empty_like(v).share_memory_().copy_(v) for k, v in sd.items()}
            for q in ctx.queues:
                q.put(shared)
            ctx.barrier.wait()

            def write_in_place():
                with torch.no_grad():
                    for k, t in shared.items():
                        t.copy_(sd[k])
                for q in ctx.queues:
                    q.put("receive")

            trainer_rounds(ctx, "torchrl_inplace_unsafe", mib, write_in_place)
            del sd, shared
        else:
            q = ctx.queues[ctx.index]
            own = make_state_dict(torch, mib, ctx.args.tensors)

            def get_one():
                held = q.get()
                ctx.stamp()
                return held

            def get_and_load():
                held = q.get()
                with torch.no_grad():
                    for k, t in own.items():
                        t.copy_(held[k])
                ctx.stamp()

            collector_rounds(ctx, get_one)
            collector_rounds(ctx, get_and_load)
            collector_rounds(ctx, lambda: None)
            shared = q.get()
            # the policy's parameters over the shared memory (TorchRL's
            # connect: weights.to_module(policy), as Parameters)
            policy = {k: torch.nn.Parameter(t, requires_grad=False) for k, t in shared.items()}
            ctx.barrier.wait()

            def told():
                assert q.get() == "receive"
                with torch.no_grad():          # TorchRL's apply_weights(inplace=True)
                    for k, p in policy.items():
                        p.copy_(shared[k])
                ctx.stamp()

            collector_rounds(ctx, told)
            del own, policy, shared


# ---- the Python binding of wsync ----------------------------------------------------------


def import_wsync():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "libclient", "python"))
    import wsync

    return wsync


def run_pyws(ctx, torch):
    wsync = import_wsync()
    with wsync.connect(ctx.args.wsync_endpoint, "peers-%d" % ctx.rank) as client:
        for mib in ctx.args.sizes:
            model = "pyws-%d-%d" % (os.getppid(), mib)    # the driver: same for all
            if ctx.rank == 0:
                pyws_trainer(ctx, torch, client, model, mib)
            else:
                pyws_collector(ctx, torch, client, model, mib)


# The broker's default slabs per model, + 1: loads that have touched each.
WARM_SLABS = 5


def pyws_trainer(ctx, torch, client, model, mib):
    sd = make_state_dict(torch, mib, ctx.args.tensors)
    pubs = [client.publisher_like(model, sd),
            client.publisher_like(model + "-unguarded", sd, guard=False)]
    step = [0]

    def publish(pub, times=None):
        step[0] += 1
        t0 = time.monotonic_ns()
        with pub.begin(timeout=60) as slab:
            slab.copy_from(sd)
            slab.commit(step[0])
        if times is not None:
            times.append((time.monotonic_ns() - t0) / 1e6)

    for pub in pubs:                # every slab written once: no first-touch
        for _ in range(5):          # page faults in the measured rounds
            publish(pub)
    ctx.barrier.wait()              # the collectors take the latest version
    times = []
    trainer_rounds(ctx, "py_wsync_views", mib, lambda: publish(pubs[0], times))
    report(ctx, "py_wsync_publish", mib, times[1:])
    for _ in range(WARM_SLABS):     # each collector reads every slab once
        ctx.barrier.wait()
        publish(pubs[0])
        ctx.barrier.wait()
    trainer_rounds(ctx, "py_wsync_load", mib, lambda: publish(pubs[0]))
    local_rounds(ctx, "py_wsync_publish_unguarded", mib, lambda: publish(pubs[1]))
    copy_rounds(ctx, torch, pubs[0], sd, mib, step)
    for p in pubs:
        p.close()
    rl_trainer(ctx, model, mib, sd)


def rl_scheme(ctx, model):
    import wsync.rl
    return wsync.rl.WsyncWeightSyncScheme("state_dict", name=model + "-rl",
                                          endpoint=ctx.args.wsync_endpoint, timeout=60)


def rl_trainer(ctx, model, mib, sd):
    """TorchRL's interface: send() returns once every collector applied."""
    scheme = rl_scheme(ctx, model)
    scheme.init_on_sender(model_id="policy", weights=sd, num_workers=ctx.world - 1)
    scheme.connect()                # the first weights; the collectors wait for them
    ctx.barrier.wait()
    for _ in range(WARM_SLABS):     # each collector has read every slab once
        ctx.barrier.wait()
        scheme.send(sd)
        ctx.barrier.wait()
    local_rounds(ctx, "py_wsync_rl_send", mib, lambda: scheme.send(sd))
    scheme.shutdown()


def rl_collector(ctx, torch, model, mib):
    scheme = rl_scheme(ctx, model)
    own = make_module(torch, mib, ctx.args.tensors)
    scheme.init_on_receiver(model_id="policy", model=own, worker_idx=ctx.index)
    scheme.connect()                # applies the first weights; then a thread applies
    ctx.barrier.wait()
    for _ in range(WARM_SLABS):
        ctx.barrier.wait()
        ctx.barrier.wait()
    collector_rounds(ctx, lambda: None)
    scheme.shutdown()


def copy_rounds(ctx, torch, pub, sd, mib, step):
    """The copy into a begun slab alone, copy_from and torch's copy_ in turn
    within each round (the collectors wait at the barrier)."""
    def torch_copy(slab):
        views = slab.state_dict("torch")
        with torch.no_grad():
            for k, t in sd.items():
                views[k].copy_(t)

    samples = {"torch_copy_slab": [], "py_wsync_copy_from": []}
    fns = {"torch_copy_slab": torch_copy, "py_wsync_copy_from": lambda s: s.copy_from(sd)}
    for rep in range(1 + ctx.args.repeats):
        ctx.barrier.wait()
        for method, fn in fns.items():
            step[0] += 1
            with pub.begin(timeout=60) as slab:
                t0 = time.monotonic_ns()
                fn(slab)
                samples[method].append((time.monotonic_ns() - t0) / 1e6)
                slab.commit(step[0])
        ctx.barrier.wait()
    for method, xs in samples.items():
        report(ctx, method, mib, xs[1:])


def pyws_collector(ctx, torch, client, model, mib):
    sub = client.subscriber(model)
    own = make_module(torch, mib, ctx.args.tensors)
    ctx.barrier.wait()
    seen = [sub.wait(timeout=60).version]   # released at once: the refcount

    def take_views():
        view = sub.wait(after=seen[0], timeout=60)
        held = view.state_dict("torch")
        ctx.stamp()
        seen[0] = view.version
        return view, held

    def take_and_load():
        with sub.wait(after=seen[0], timeout=60) as view:
            view.load_into(own)
            seen[0] = view.version
        ctx.stamp()

    collector_rounds(ctx, take_views)
    for _ in range(WARM_SLABS):
        ctx.barrier.wait()
        take_and_load()
        ctx.barrier.wait()
    collector_rounds(ctx, take_and_load)
    collector_rounds(ctx, lambda: None)
    collector_rounds(ctx, lambda: None)
    sub.close()
    del own
    rl_collector(ctx, torch, model, mib)


RUNNERS = {"gloo": run_gloo, "rpc": run_rpc, "mpq": run_mpq, "pyws": run_pyws}


def role_main(group, args, rank, world, stamps, barrier, results, queues):
    die_with_parent()
    ctx = Ctx(args, rank, world, stamps, barrier, results, queues)
    try:
        import torch

        RUNNERS[group](ctx, torch)
        if rank == 0:
            results.put({"done": True})
    except BaseException as e:  # reported to the driver, which skips the rows
        results.put({"error": "%s: %s" % (type(e).__name__, e),
                     "trace": traceback.format_exc()[-2000:]})
        barrier.abort()
        raise SystemExit(1)


# ---- the driver ----------------------------------------------------------------------------


def stop_all(procs):
    for p in procs:
        p.join(timeout=10)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(timeout=5)


def collect(group, procs, results, deadline):
    """Emits the group's result lines; returns (sizes reported per method, reason)."""
    reported = {m: set() for m in GROUPS[group]}
    reason = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return reported, "timed out"
        try:
            msg = results.get(timeout=min(left, 0.5))
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                codes = [p.exitcode for p in procs]
                return reported, reason or "a process exited with %s" % codes
            if all(p.exitcode == 0 for p in procs):
                return reported, reason or "no result"
            continue
        if msg.get("done"):
            return reported, None
        if "error" in msg:
            sys.stderr.write(msg.get("trace", "") + "\n")
            reason = reason or msg["error"]
            continue
        emit(msg)
        reported[msg["method"]].add(msg["mib"])


def run_group(mp, group, args, timeout):
    ctx = mp.get_context("fork")
    world = args.collectors + 1
    args.port = free_port()
    stamps = ctx.Array("q", args.collectors, lock=False)
    barrier = ctx.Barrier(world)
    results = ctx.Queue()
    queues = [ctx.Queue() for _ in range(args.collectors)] if group == "mpq" else None
    procs = [ctx.Process(target=role_main,
                         args=(group, args, rank, world, stamps, barrier, results, queues))
             for rank in range(world)]
    for p in procs:
        p.start()
    reported, reason = collect(group, procs, results, time.monotonic() + timeout)
    if reason:
        barrier.abort()
        for p in procs:
            if p.is_alive():
                p.kill()
    stop_all(procs)
    for method in GROUPS[group]:
        missing = [m for m in args.sizes if m not in reported[method]]
        emit_skipped([method], missing, reason or "no result")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="16,256", help="model sizes in MiB, comma-separated")
    ap.add_argument("--collectors", type=int, default=4)
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=300, help="seconds for all methods")
    ap.add_argument("--groups", default="gloo,rpc,mpq,pyws")
    ap.add_argument("--wsync-endpoint", help="the broker for the pyws group (without "
                    "it, its rows are skipped)")
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    args.groups = [g for g in args.groups.split(",") if g]
    for g in args.groups:
        if g not in GROUPS:
            ap.error("unknown group %r" % g)
    return args


def main():
    args = parse_args()
    methods = [m for g in args.groups for m in GROUPS[g]]
    try:
        import torch.multiprocessing as mp
    except Exception as e:  # no torch: every row is skipped, not failed
        emit_skipped(methods, args.sizes, "torch not importable: %s" % e)
        return 0
    # Linux's default, named: each tensor travels as a file descriptor
    mp.set_sharing_strategy("file_descriptor")
    if "pyws" in args.groups and not args.wsync_endpoint:
        emit_skipped(GROUPS["pyws"], args.sizes, "no --wsync-endpoint")
        args.groups.remove("pyws")
    start = time.monotonic()
    for i, group in enumerate(args.groups):
        left = args.timeout - (time.monotonic() - start)
        share = left / (len(args.groups) - i)
        if share < 5:
            emit_skipped(GROUPS[group], args.sizes, "no time left")
            continue
        try:
            run_group(mp, group, args, share)
        except Exception as e:
            emit_skipped(GROUPS[group], args.sizes, "%s: %s" % (type(e).__name__, e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
