#!/usr/bin/python3
"""tools/bench/python_bench.py — the Python side of wsync-bench's "python"
scenario (tools/bench/python.c runs it and sets the C reference of each
row in the same run). Prints one JSON line per figure:

  {"row": "views", "mib": 16, "tensors": 64, "collectors": 4, "ms": ...}
      A Python trainer publishes (Publisher.publish: begin, copy_from,
      commit) a model of 64 float32 tensors held in its own torch tensors;
      4 Python collector processes blocked in Subscriber.wait take the
      version and every tensor of it as a zero-copy torch tensor
      (View.state_dict("torch")). Median over samples of the time from
      just before publish() until the last collector holds all of them.
      The protocol of the C reference (python.c): before each sample the
      trainer waits until every collector has armed its wait, stays idle
      1-2 ms and checks in /proc that the collectors sleep.
  {"row": "views_call", "us": ...}
      One collector's acquire() + state_dict("torch") + release() of that
      model, in a loop in one process: the fixed cost of a zero-copy view
      from Python, without the wake-up.
  {"row": "load_into", "mib": 256, "tensors": 64, "ms": ...}
      View.load_into(module) of a 256 MiB model of 64 float32 tensors into
      an nn.Module's parameters (in place, checked first), in a collector
      process of its own (a trainer publishes each version first), the
      module and every slab warm; median.
  {"row": "after_step", "mib": 64, "publish_ms": ..., "copy_ms": ...}
      A trainer's publish right after its optimizer step: an MLP of four
      2048x2048 linear layers (64 MiB of float32) takes an SGD step on a
      batch of 32 with torch's intra-op threads at one per CPU, then
      Publisher.publish(state_dict) (copy helper, threads 0) is timed; then
      another step and a plain torch copy_ of the same tensors into warm
      ones of its own. Alternated, median of each. The same rounds also
      time, each after a step of its own, what tells the causes apart:
      publish_1t_ms (the copy helper on the caller alone, threads 1),
      nosum_ms (a publisher with checksum=False: no fused hash) and
      torch_slab_ms (begin, slab.torch(name).copy_(t) per tensor on torch's
      own pool, commit: the checksum pending, formed by the hashing thread)
      and copy_rot_ms (the torch copy_ into 4 sets of tensors in turn, as
      many as a model's default slots: each version's destination is memory
      the previous three versions did not write, as a publish's slot is).

A figure that cannot be measured is {"row": ..., "skipped": "why"}.
"""
import argparse
import ctypes
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


def import_wsync():
    sys.path.insert(0, os.path.join(HERE, "..", "..", "libclient", "python"))
    import wsync
    return wsync


def emit(**kw):
    print(json.dumps(kw), flush=True)


def state_dict(torch, mib, n):
    per = mib * (1 << 20) // 4 // n
    g = torch.Generator().manual_seed(mib)
    return {"layer%d.weight" % i: torch.randn(per, generator=g) for i in range(n)}


# ---- views: 4 collectors hold zero-copy views ------------------------------------------


def collector(endpoint, model, idx, n_coll, total, armed, held, errors):
    try:
        wsync = import_wsync()
        import torch  # noqa: F401  (imported before the timed rounds)
        with wsync.connect(endpoint, "py-bench-collector-%d" % idx) as c:
            sub = c.subscriber(model)
            after = sub.latest().version     # the trainer's warm-up versions
            for s in range(total):
                armed[idx] = s + 1
                with sub.wait(after=after, timeout=60) as v:
                    sd = v.state_dict("torch")
                    held[s * n_coll + idx] = time.monotonic_ns()
                    after = v.version
                    del sd
    except BaseException:
        errors[idx] = 1
        traceback.print_exc()


def asleep(pids):
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state != "S":
            return False
    return True


def run_views(args, wsync, torch, client):
    n_coll, warmup = args.collectors, 5
    samples = 2 * args.repeats + 1
    total = warmup + samples
    model = "pybench-views-%d" % os.getpid()
    weights = state_dict(torch, args.views_mib, args.tensors)
    pub = client.publisher_like(model, weights)
    for step in range(1, 6):                 # every slab written once
        pub.publish(weights, step)
    ctx = mp.get_context("spawn")
    armed = ctx.RawArray(ctypes.c_int, n_coll)
    errors = ctx.RawArray(ctypes.c_int, n_coll)
    held = ctx.RawArray(ctypes.c_int64, total * n_coll)
    procs = [ctx.Process(target=collector, daemon=True,
                         args=(args.endpoint, model, i, n_coll, total, armed, held, errors))
             for i in range(n_coll)]
    for p in procs:
        p.start()
    pids = [p.pid for p in procs]
    begins = []
    try:
        for s in range(total):
            deadline = time.monotonic() + 120
            while any(armed[i] < s + 1 for i in range(n_coll)):
                if any(errors) or not all(p.is_alive() for p in procs):
                    raise RuntimeError("a collector failed")
                if time.monotonic() > deadline:
                    raise RuntimeError("a collector did not arm its wait")
                time.sleep(0.0002)
            time.sleep(random.uniform(0.001, 0.002))
            until = time.monotonic() + 0.005
            while not asleep(pids) and time.monotonic() < until:
                time.sleep(0.0002)
            t0 = time.monotonic_ns()
            pub.publish(weights, 100 + s)
            begins.append(t0)
        for p in procs:
            p.join(60)
        if any(errors) or any(p.exitcode for p in procs):
            raise RuntimeError("a collector failed")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        pub.close()
    lat = [(max(held[s * n_coll:(s + 1) * n_coll]) - begins[s]) / 1e6
           for s in range(warmup, total)]
    emit(row="views", mib=args.views_mib, tensors=args.tensors, collectors=n_coll,
         ms=statistics.median(lat), samples=len(lat))

    # the same fixed cost without the wake-up, in this process
    with client.subscriber(model) as sub:
        def call():
            with sub.acquire() as v:
                v.state_dict("torch")
        for _ in range(20):
            call()
        times = []
        for _ in range(5):
            t0 = time.perf_counter_ns()
            for _ in range(200):
                call()
            times.append((time.perf_counter_ns() - t0) / 200 / 1e3)
    emit(row="views_call", tensors=args.tensors, us=statistics.median(times))


# ---- load_into -------------------------------------------------------------------------


def loader(endpoint, model, mib, n, rounds, go, done, out, errors):
    """A collector process: loads every version the trainer publishes into
    its own nn.Module and times View.load_into."""
    try:
        wsync = import_wsync()
        import torch
        torch.set_num_threads(1)
        weights = state_dict(torch, mib, n)        # the names and shapes
        module = torch.nn.Module()
        for i, t in enumerate(weights.values()):
            module.register_parameter("p%d" % i, torch.nn.Parameter(torch.zeros_like(t)))
        dest = dict(zip(weights, module.parameters()))
        with wsync.connect(endpoint, "py-bench-loader") as c:
            sub = c.subscriber(model)
            after = 0
            for r in range(rounds):
                go.wait(60)
                go.clear()
                with sub.wait(after=after, timeout=60) as v:
                    t0 = time.perf_counter_ns()
                    v.load_into(dest)
                    out[r] = (time.perf_counter_ns() - t0) / 1e6
                    after = v.version
                done.set()
            if not all(torch.equal(dest[k], weights[k]) for k in weights):
                raise AssertionError("the loaded weights differ from the trainer's")
    except BaseException:
        errors[0] = 1
        traceback.print_exc()
        done.set()


def run_load(args, wsync, torch, client):
    model = "pybench-load-%d" % os.getpid()
    weights = state_dict(torch, args.load_mib, args.tensors)
    pub = client.publisher_like(model, weights)
    warm = 5                                 # every slab read once before
    rounds = warm + 2 * args.repeats
    ctx = mp.get_context("spawn")
    go, done = ctx.Event(), ctx.Event()
    out = ctx.RawArray(ctypes.c_double, rounds)
    errors = ctx.RawArray(ctypes.c_int, 1)
    p = ctx.Process(target=loader, daemon=True,
                    args=(args.endpoint, model, args.load_mib, args.tensors, rounds, go,
                          done, out, errors))
    p.start()
    try:
        for r in range(rounds):
            pub.publish(weights, r + 1)
            go.set()
            if not done.wait(120) or errors[0]:
                raise RuntimeError("the loading process failed")
            done.clear()
        p.join(60)
        if errors[0] or p.exitcode:
            raise RuntimeError("the loading process failed")
    finally:
        if p.is_alive():
            p.kill()
        pub.close()
    times = list(out[warm:])
    emit(row="load_into", mib=args.load_mib, tensors=args.tensors,
         ms=statistics.median(times), samples=len(times))


# ---- after_step: a publish right after an optimizer step ------------------------------


def run_after_step(args, wsync, torch, client):
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    try:
        torch.manual_seed(0)
        net = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(4)])
        opt = torch.optim.SGD(net.parameters(), lr=1e-4)
        x = torch.randn(32, 2048)
        sd = net.state_dict()
        mirror = {k: v.clone() for k, v in sd.items()}
        rotating = [{k: v.clone() for k, v in sd.items()} for _ in range(4)]
        model = "pybench-step-%d" % os.getpid()
        pub = client.publisher_like(model, sd)
        nosum = client.publisher_like(model + "-nosum", sd, checksum=False)

        def step():
            opt.zero_grad()
            net(x).sum().backward()
            opt.step()
        def torch_slab(r):
            with pub.begin() as slab:
                for k, v in sd.items():
                    slab.torch(k).copy_(v)
                slab.commit(r)

        def copy(dst):
            for k, v in sd.items():
                dst[k].copy_(v)
        ways = {"publish_ms": lambda r: pub.publish(sd, r),
                "copy_ms": lambda r: copy(mirror),
                "copy_rot_ms": lambda r: copy(rotating[r % 4]),
                "publish_1t_ms": lambda r: pub.publish(sd, r, threads=1),
                "nosum_ms": lambda r: nosum.publish(sd, r),
                "torch_slab_ms": torch_slab}
        try:
            for r in range(4):                      # every slot written, copies tuned
                for way in ways.values():
                    way(r + 1)
            times = {name: [] for name in ways}
            for r in range(2 * args.repeats + 1):
                for name, way in ways.items():
                    step()
                    t = time.perf_counter()
                    way(100 + r)
                    times[name].append(time.perf_counter() - t)
        finally:
            pub.close()
            nosum.close()
    finally:
        torch.set_num_threads(threads)
    emit(row="after_step", mib=64, samples=2 * args.repeats + 1,
         **{name: round(1e3 * statistics.median(t), 3) for name, t in times.items()})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--collectors", type=int, default=4)
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--views-mib", type=int, default=16)
    ap.add_argument("--load-mib", type=int, default=256)
    args = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        for row in ("views", "views_call", "load_into", "after_step"):
            emit(row=row, skipped="no torch in %s: %s" % (sys.executable, e))
        return 0
    torch.set_num_threads(1)
    wsync = import_wsync()
    with wsync.connect(args.endpoint, "py-bench-trainer") as client:
        for run, rows in ((run_views, ("views", "views_call")), (run_load, ("load_into",)),
                          (run_after_step, ("after_step",))):
            try:
                run(args, wsync, torch, client)
            except Exception as e:
                traceback.print_exc()
                for row in rows:
                    emit(row=row, skipped="%s: %s" % (type(e).__name__, e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
