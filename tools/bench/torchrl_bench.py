#!/usr/bin/python3
"""tools/bench/torchrl_bench.py — the Python side of wsync-bench's "torchrl"
scenario (tools/bench/torchrl.c runs it): weight updates in TorchRL's own
loop, wsync's scheme against TorchRL's two process schemes in the same run.

A trainer (an MLP of 1 or 64 MiB of float32, SGD-trained: a forward, a
backward and an optimiser step before each update) drives the source
tree's stand-in of TorchRL 0.14.0's multi-process collector
(tests/python/torchrl_standin: it sends each worker the policy on the meta
device, rebuilds a worker's error from its message, and its workers' inner
collector copies the weights it is told of into its policy, as TorchRL's
do) with 3 workers, started by fork or spawn, and times
collector.update_policy_weights_() (a synchronous send: it returns when
every worker has applied the weights) with each scheme:

  wsync         wsync.rl.WsyncWeightSyncScheme (zero-copy receivers: each
                version's read-only tensors swapped into the worker's policy)
  sharedmem     the stand-in's SharedMemWeightSyncScheme, written as
                TorchRL's: one copy into a shared buffer the workers' policies
                hold, an instruction and an ack per worker through queues
  multiprocess  the stand-in's MultiProcessWeightSyncScheme, as TorchRL's:
                the weights through each worker's queue, applied in place

Each scheme first makes 5 untimed updates (every one of wsync's 4 slabs
used once, pages touched, queues started); a 1 MiB model is then timed at
least 15 times (cheap, and its figures move most between samples), a
64 MiB one --repeats times (twice that without --quick).
After every timed update each worker's policy is compared with the trainer's
(crc32 of every tensor's bytes, outside the timing): "exact" says all were.
Prints one JSON line per figure:

  {"row": "update S START M", "scheme": S, "start": fork|spawn, "mib": M,
   "workers": 3, "ms": median, "min": ..., "max": ..., "n": ..., "exact": true}
  {"row": "wsync_split START M", "start": ..., "mib": M, "pub_ms": ...,
   "wait_ms": ..., "pub_idle_ms": ...}
      wsync's update in two parts (send_async: the trainer's publish; then
      wait_async: the workers' swaps and acks), and the publish alone with
      no backward pass just before it.

A figure that cannot be measured is {"row": ..., "skipped": "why"}.
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
STANDIN = os.path.join(ROOT, "tests", "python", "torchrl_standin")
WORKERS = 3
WARM = 5            # updates before the timed ones: each of a model's 4 slabs once
SMALL_MIN_N = 15    # samples at least, for a model of a few MiB (cheap to time)


def emit(**kw):
    print(json.dumps(kw), flush=True)


def policy_of(torch, mib):
    """An MLP of 4 square layers, mib MiB of float32 in all."""
    width = {1: 256, 64: 2048}.get(mib) or int((mib * (1 << 20) / 16) ** 0.5)
    torch.manual_seed(mib)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers), width


def digest(policy):
    crc = 0
    for k, t in policy.state_dict().items():
        crc = zlib.crc32(k.encode(), crc)
        crc = zlib.crc32(memoryview(t.detach().contiguous().numpy()).cast("B"), crc)
    return crc


def train_step(torch, policy, opt, width):
    loss = policy(torch.randn(32, width)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def make_scheme(kind, endpoint):
    if kind == "wsync":
        import wsync.rl
        return wsync.rl.WsyncWeightSyncScheme(endpoint=endpoint, timeout=120.0)
    from torchrl.weight_update import MultiProcessWeightSyncScheme, SharedMemWeightSyncScheme
    return {"sharedmem": SharedMemWeightSyncScheme,
            "multiprocess": MultiProcessWeightSyncScheme}[kind]()


def run_one(torch, kind, start, mib, endpoint, n):
    from torchrl.collectors import MultiCollector
    policy, width = policy_of(torch, mib)
    opt = torch.optim.SGD(policy.parameters(), lr=1e-4)
    scheme = make_scheme(kind, endpoint)
    col = MultiCollector(policy, WORKERS, {"policy": scheme}, start)
    try:
        col.start()
        for _ in range(WARM):                    # warm: every slab, pages, queues
            train_step(torch, policy, opt, width)
            col.update_policy_weights_()
        times, exact = [], True
        for _ in range(n):
            train_step(torch, policy, opt, width)
            t0 = time.perf_counter()
            col.update_policy_weights_()
            times.append((time.perf_counter() - t0) * 1e3)
            want = digest(policy)
            exact = exact and all(col.ask(i, "digest") == want for i in range(WORKERS))
        emit(row="update %s %s %d" % (kind, start, mib), scheme=kind, start=start,
             mib=mib, workers=WORKERS,
             ms=round(statistics.median(times), 3), min=round(min(times), 3),
             max=round(max(times), 3), n=n, exact=exact)
        if kind == "wsync":
            pub, wait, idle = [], [], []
            for _ in range(n):
                train_step(torch, policy, opt, width)
                t0 = time.perf_counter()
                scheme.send_async()
                t1 = time.perf_counter()
                scheme.wait_async()
                t2 = time.perf_counter()
                pub.append((t1 - t0) * 1e3)
                wait.append((t2 - t1) * 1e3)
                time.sleep(0.05)                 # no backward pass just before
                t0 = time.perf_counter()
                scheme.send_async()
                idle.append((time.perf_counter() - t0) * 1e3)
                scheme.wait_async()
            emit(row="wsync_split %s %d" % (start, mib), start=start, mib=mib,
                 pub_ms=round(statistics.median(pub), 3),
                 wait_ms=round(statistics.median(wait), 3),
                 pub_idle_ms=round(statistics.median(idle), 3))
    finally:
        col.shutdown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--starts", default="fork,spawn")
    ap.add_argument("--sizes", default="1,64")
    ap.add_argument("--schemes", default="wsync,sharedmem,multiprocess")
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(ROOT, "libclient", "python"))
    if not os.path.isdir(STANDIN):
        emit(row="update", skipped="the TorchRL stand-in (tests/python/torchrl_standin) is "
             "only in the source tree")
        return
    sys.path.insert(0, STANDIN)       # before wsync.rl: it subclasses the stand-in
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError as e:
        emit(row="update", skipped="no torch: %s" % e)
        return
    n = max(3, args.repeats * (1 if args.quick else 2))
    for start in args.starts.split(","):
        for mib in (int(x) for x in args.sizes.split(",")):
            for kind in args.schemes.split(","):
                try:
                    run_one(torch, kind, start, mib, args.endpoint,
                            max(n, SMALL_MIN_N) if mib <= 4 else n)
                except Exception as e:
                    traceback.print_exc()
                    first = (str(e).splitlines() or [""])[0][:120]
                    emit(row="update %s %s %d" % (kind, start, mib), scheme=kind,
                         start=start, mib=mib, skipped="%s: %s" % (type(e).__name__, first))


if __name__ == "__main__":
    main()
