#!/usr/bin/python3
"""tools/bench/serving_bench.py — wsync-bench's "serving" scenario
(tools/bench/serving.c runs it): rollout workers that keep acting while a
trainer publishes, for each way of moving the weights, in the same run.

Collector processes (as many as the machine has cores, one torch thread
each) run forward passes of a transformer-shaped policy (>= 128 MiB of
float32 weights; --quick: a smaller one) back to back; the trainer (this
process) makes a new version every 200 ms. Each way runs twice, without
updates and then with them, the same loop and the same duration:

  live       wsync.LivePolicy: the pass runs over the newest version in
             place; the swap happens between two passes, no copy
  load_into  between two passes, View.load_into(module) when a newer
             version is there
  broadcast  torch.distributed broadcast (gloo) of every parameter from
             the trainer (rank 0) into each collector's live module: a
             collector joins the collective between two passes when an
             update is announced, and the trainer waits in it for all
  pause      pause-load-resume, as inference engines refit: the trainer
             writes the version into a shared CPU buffer and hands it over
             through a queue; each collector stops between two passes,
             copies it into its module, acknowledges, resumes; the trainer
             writes the buffer again only after every acknowledgement
  torn       TorchRL-style in-place shared tensors: one module in shared
             memory that the trainer copy_()s the new version into while
             the collectors keep running (no pause, no protection)
  reference  the machine's floor: the trainer publishes every version as
             for live, and the collectors run their own module, never
             updated; its gaps are what the trainer's publish alone costs
             the collectors on this machine
  live_paced, reference_paced
             live and reference with the trainer's publish paced
             (Publisher.publish(spread=...), SPREAD_S = 0.75 of the period):
             one thread copies a MiB at a time and sleeps between blocks
             instead of taking every core for a burst, and each version
             reaches the collectors about that much later
  live_gpu, load_into_gpu, reference_gpu
             the same scenario on GPU 0 (torch's cuda:0), with
             --gpu-collectors processes (default: one per core, at most 4:
             collectors on one GPU take turns on it, more only measure
             that): the trainer's module lives there and it publishes each
             version into the model's device slabs (a model published with
             devices=[0], Publisher.publish_gpu, device to device); the
             collectors run wsync.LivePolicy(sub, module, device=0) over the
             device views (live_gpu), their own cuda:0 module updated by
             DeviceView.load_into between two passes (load_into_gpu), or
             their own cuda:0 module never updated while the trainer
             publishes as for live_gpu (reference_gpu, the floor). A pass
             ends with torch.cuda.synchronize(), so its time is the GPU's
             work, not the launches'; the tags are copied on the GPU in
             the pass's stream order and read after it. These need torch
             with CUDA, a GPU 0 the CUDA driver shows, and a broker that
             serves it; else each is skipped with the reason, found before
             any process starts (gpu_why)

Then, where the machine has two cores or more, live, reference and
live_paced run again with one collector fewer than cores ("spare": a core
left to the trainer), as on a machine with more cores than collectors:
what the collectors pay for the updates themselves once the trainer's copy
does not take a core from them (--spare-ways; by default those of them
that --only asks for, "" for none).

Mixtures show: the first and last element of every weight matrix hold the
version (v / 1024, exact in float32), read by the forward pass just before
and just after that matrix is used; a pass whose tags are not all equal
read a mixture of two versions (or a tensor written under it).

Prints one JSON line per way:

  {"row": "serving_<way>", "pps_base": passes/s without updates (all
   collectors), "pps_upd": with updates, "fwd_ms": median forward pass
   without updates, "gap_max_ms" / "gap_p99_ms": the longest gap between
   two passes' ends of one collector with updates, and its p99,
   "gap_max_base_ms": the same without updates, "lag_mean" / "lag_max":
   versions the pass's weights were behind the trainer's newest when the
   pass began, "mixed": passes that read a mixture, "passes": with updates,
   "updates": versions the trainer made, "fwd_cpu_ms": median thread CPU
   time of a pass without updates, "swap_cpu_ms": the median CPU time a
   pass that first used a new version took over a pass with updates that
   did not (what the way costs the collector per update, whatever the
   scheduler did), "upd_cpu_ms": the median CPU time of those others,
   "pub_ms": the median time the trainer took to make a version available
   (the update call), "reach_mean_ms" / "reach_max_ms": from the moment
   the trainer had a version's weights to the start of each collector's
   first pass with it or a newer one (what pacing costs in freshness)}

and first {"row": "serving_setup", "mib": ..., "collectors": ..., ...}; the
spare pass prints {"row": "serving_spare_setup", "collectors": ...} and its
ways as "serving_spare_<way>".
A way that cannot run is {"row": "serving_<way>", "skipped": "why"}. --only
(default: WSYNC_BENCH_SERVING_WAYS, else every way) runs some of them.
Runs on its own too: without --endpoint it starts a private broker.
"""
import argparse
import errno
import json
import os
import queue
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
WAYS = ("live", "load_into", "broadcast", "pause", "torn", "reference", "live_paced",
        "reference_paced", "live_gpu", "load_into_gpu", "reference_gpu")
SPARE_WAYS = ("live", "reference", "live_paced")
PERIOD_S = 0.2
SPREAD_S = 0.75 * PERIOD_S        # the paced ways' Publisher.publish(spread=)
PACED = "_paced"
GPU = "_gpu"                      # the ways on GPU 0 (cuda:0)
GPU_COLLECTORS = 4                # the most collectors on the GPU by default
TAG_SCALE = 1.0 / 1024


def import_wsync():
    sys.path.insert(0, os.path.join(HERE, "..", "..", "libclient", "python"))
    import wsync
    return wsync


def emit(**kw):
    print(json.dumps(kw), flush=True)


# ---- the policy -------------------------------------------------------------------------


try:
    import torch
    _Module = torch.nn.Module
except ImportError as _e:        # reported as skipped rows by main()
    torch = None
    _Module = object
    _NO_TORCH = str(_e)


class Block(_Module):
    def __init__(self, d):
        super().__init__()
        nn = torch.nn
        self.d = d
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x, tags):
        q, k, v = use(self.qkv, self.ln1(x), tags).chunk(3, -1)
        att = torch.softmax(q @ k.transpose(-1, -2) / self.d ** 0.5, -1)
        x = x + use(self.proj, att @ v, tags)
        h = torch.nn.functional.gelu(use(self.up, self.ln2(x), tags))
        return x + use(self.down, h, tags)


class Policy(_Module):
    """A transformer-shaped policy: layers of attention and MLP blocks over
    a few tokens, a head of actions; returns (logits, tags)."""

    def __init__(self, d, layers, actions=16):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(layers))
        self.head = torch.nn.Linear(d, actions)

    def forward(self, x):
        tags = []
        for b in self.blocks:
            x = b(x, tags)
        return use(self.head, x[:, -1], tags), tags


def make_model(torch, d, layers):
    return Policy(d, layers)


def use(lin, x, tags):
    """lin(x), with its weight's tags read just before and just after."""
    w = lin.weight
    tags.append(TAG(w, 0))
    y = lin(x)
    tags.append(TAG(w, -1))
    return y


def tag_host(w, i):
    return float(w[i, i])


def tag_device(w, i):
    """A copy of the tag made on the GPU in the pass's stream order (where
    float() would wait for the GPU at every matrix); read after the pass."""
    return w[i, i].clone()


TAG = tag_host                    # tag_device in a collector on the GPU


def set_tags(torch, sd, version):
    t = version * TAG_SCALE
    with torch.no_grad():
        for k, w in sd.items():
            if w.dim() == 2:
                w[0, 0] = t
                w[-1, -1] = t


def tag_range(tags):
    lo, hi = min(tags), max(tags)
    return round(lo / TAG_SCALE), round(hi / TAG_SCALE)


# ---- a collector process ----------------------------------------------------------------


class Shared:
    """What the trainer and the collectors share: the phase (0 warm-up,
    1 without updates, 2 with updates, 3 done), the trainer's newest
    version, and for broadcast the version announced."""

    def __init__(self, ctx):
        self.phase = ctx.Value("i", 0, lock=False)
        self.newest = ctx.Value("q", 0, lock=False)
        self.announced = ctx.Value("q", 0, lock=False)
        self.warm = ctx.Array("i", 64, lock=False)   # passes made while warming up


def collector(way, idx, n, cfg, sh, ready, results, extra):
    global TAG
    cpu = time.thread_time        # torch runs on this thread (one thread each)
    try:
        torch.set_num_threads(1)
        wsync = import_wsync()
        gpu = cfg["gpu"]
        model = make_model(torch, cfg["d"], cfg["layers"]).eval()
        x = torch.randn(1, cfg["tokens"], cfg["d"], generator=torch.Generator().manual_seed(7))
        if gpu:
            dev = torch.device("cuda", 0)
            torch.cuda.set_device(dev)
            model, x = model.to(dev), x.to(dev)   # torch's context, current on this thread
            TAG = tag_device
        step = None
        mine = [0]
        if way in ("live", "load_into"):
            client = wsync.connect(cfg["endpoint"], "serving-%s%s-%d" % (way, GPU if gpu else "",
                                                                       idx))
            sub = client.subscriber(cfg["model"])
            if way == "live":
                policy = wsync.LivePolicy(sub, model, device=0 if gpu else None)
                step = policy
            else:
                if gpu:
                    first, acquire = sub.wait_gpu(0, 0, timeout=60), lambda: sub.acquire_gpu(0)
                else:
                    first, acquire = sub.wait(0, timeout=60), sub.acquire
                with first as v:
                    v.load_into(model)      # a DeviceView's waits for its copies
                    mine[0] = v.version

                def step(x):
                    newest = sub.latest().version
                    if newest > mine[0]:
                        with acquire() as v:
                            v.load_into(model)
                            mine[0] = v.version
                    return model(x)
        elif way == "broadcast":
            import torch.distributed as dist
            dist.init_process_group("gloo", init_method=cfg["init"], rank=idx + 1,
                                    world_size=n + 1)
            params = [p.data for p in model.state_dict().values()]

            def pull(v):
                for p in params:
                    dist.broadcast(p, 0)
                mine[0] = v
            pull(1)

            def step(x):
                v = sh.announced.value        # announced before its broadcasts
                if v > mine[0]:
                    pull(v)
                return model(x)
        elif way == "pause":
            q, acks, buf = extra
            targets = list(model.state_dict().values())

            def load(v):
                off = 0
                with torch.no_grad():
                    for t in targets:
                        k = t.numel()
                        t.view(-1).copy_(buf[off:off + k])
                        off += k
                mine[0] = v
            load(q.get(timeout=60))
            acks.put(idx)

            def step(x):
                try:
                    v = q.get_nowait()
                except queue.Empty:
                    return model(x)
                load(v)
                acks.put(idx)
                return model(x)
        elif way == "torn":
            model = extra

            def step(x):
                return model(x)
        elif way == "reference":
            sd = {k: t.detach() for k, t in model.state_dict().items()}
            set_tags(torch, sd, 1)

            def step(x):
                return model(x)
        ready.put(idx)
        rec = {1: [], 2: []}
        with torch.no_grad():
            while True:
                ph = sh.phase.value
                if ph == 3:
                    break
                newest = sh.newest.value
                c0 = cpu()
                t0 = time.monotonic()
                _, tags = step(x)
                if gpu:
                    torch.cuda.synchronize(dev)     # the pass is the GPU's work, done
                t1 = time.monotonic()
                c1 = cpu()
                if gpu:
                    tags = torch.stack(tags).tolist()
                lo, hi = tag_range(tags)
                if ph == 0:
                    sh.warm[idx] += 1
                if ph in rec:
                    rec[ph].append((t0, t1, lo, hi, newest, c1 - c0))
        if way == "broadcast":
            dist.destroy_process_group()
        results.put((idx, rec, None))
    except Exception:
        results.put((idx, None, traceback.format_exc()))


# ---- the trainer, per way ---------------------------------------------------------------


def run_way(way, cfg, ctx, torch, wsync, n):
    spread = SPREAD_S if way.endswith(PACED) else None
    way = way[:-len(PACED)] if spread else way
    gpu = way.endswith(GPU)
    way = way[:-len(GPU)] if gpu else way
    # the device model is another model: the host ways' keeps its layout
    cfg = dict(cfg, gpu=gpu, model="serving.gpu" if gpu else "serving")
    sh = Shared(ctx)
    ready, results = ctx.Queue(), ctx.Queue()
    trainer = make_model(torch, cfg["d"], cfg["layers"])
    if gpu:
        torch.cuda.set_device(0)
        trainer = trainer.to(torch.device("cuda", 0))
    sd = {k: t.detach() for k, t in trainer.state_dict().items()}
    version = [1]
    set_tags(torch, sd, 1)
    extra = [None] * n
    pub = client = None
    cleanup = []
    if way in ("live", "load_into", "reference") and gpu:
        client = wsync.connect(cfg["endpoint"], "serving-trainer")
        cleanup.append(client.close)
        pub = client.publisher_like(cfg["model"], sd, replace=True, devices=[0])
        pub.publish_gpu(sd, 1)

        def update():
            set_tags(torch, sd, version[0])
            pub.publish_gpu(sd, version[0])     # device to device, then commit
    elif way in ("live", "load_into", "reference"):
        client = wsync.connect(cfg["endpoint"], "serving-trainer")
        pub = client.publisher_like(cfg["model"], sd, replace=True)
        pub.publish(sd, 1)
        cleanup.append(client.close)

        def update():
            set_tags(torch, sd, version[0])
            pub.publish(sd, version[0], spread=spread)
    elif way == "broadcast":
        import torch.distributed as dist
        cfg = dict(cfg, init="file://%s" % os.path.join(cfg["tmp"], "gloo-%d" % os.getpid()))
        try:
            os.unlink(cfg["init"][7:])
        except OSError:
            pass
        params = list(sd.values())

        def update():
            set_tags(torch, sd, version[0])
            sh.announced.value = version[0]
            for p in params:
                dist.broadcast(p, 0)
    elif way == "pause":
        total = sum(t.numel() for t in sd.values())
        buf = torch.empty(total).share_memory_()
        qs = [ctx.Queue() for _ in range(n)]
        acks = ctx.Queue()
        extra = [(qs[i], acks, buf) for i in range(n)]

        def fill():
            off = 0
            for t in sd.values():
                k = t.numel()
                buf[off:off + k].copy_(t.view(-1))
                off += k

        def update():
            set_tags(torch, sd, version[0])
            fill()
            for q in qs:
                q.put(version[0])
            for _ in range(n):
                acks.get(timeout=60)
        fill()
        for q in qs:
            q.put(1)
    elif way == "torn":
        shared = make_model(torch, cfg["d"], cfg["layers"]).eval()
        shared.load_state_dict(sd)
        shared.share_memory()
        extra = [shared] * n
        targets = list(shared.state_dict().values())

        def update():
            set_tags(torch, sd, version[0])
            with torch.no_grad():
                for dst, src in zip(targets, sd.values()):
                    dst.copy_(src)
    procs = [ctx.Process(target=collector, args=(way, i, n, cfg, sh, ready, results,
                                                 extra[i]), daemon=True)
             for i in range(n)]
    for p in procs:
        p.start()
    try:
        if way == "broadcast":
            dist.init_process_group("gloo", init_method=cfg["init"], rank=0, world_size=n + 1)
            for p in params:
                dist.broadcast(p, 0)
            sh.announced.value = 1
        if way == "pause":
            for _ in range(n):
                acks.get(timeout=120)
        for _ in range(n):
            ready.get(timeout=120)
        sh.newest.value = 1
        deadline = time.monotonic() + 60
        while min(sh.warm[:n]) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(cfg["warmup"])
        sh.phase.value = 1
        time.sleep(cfg["seconds"])
        sh.phase.value = 2
        t_end = time.monotonic() + cfg["seconds"]
        nxt = time.monotonic()
        updates = 0
        made, pub_s = {}, []
        while time.monotonic() < t_end:
            nxt += PERIOD_S
            version[0] += 1
            made[version[0]] = t_made = time.monotonic()
            update()
            pub_s.append(time.monotonic() - t_made)
            sh.newest.value = version[0]
            updates += 1
            time.sleep(max(0.0, nxt - time.monotonic()))
        sh.phase.value = 3
        got = {}
        for _ in range(n):
            idx, rec, err = results.get(timeout=120)
            if err:
                raise RuntimeError("collector %d: %s" % (idx, err.strip().splitlines()[-1]))
            got[idx] = rec
        for p in procs:
            p.join(30)
        if way == "broadcast":
            dist.destroy_process_group()
        out = summarize(got, cfg["seconds"], updates)
        out.update(reach(got, made, pub_s))
        return out
    finally:
        sh.phase.value = 3
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        for f in cleanup:
            f()


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return 0.0
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summarize(got, seconds, updates):
    out = {}
    for ph, name in ((1, "base"), (2, "upd")):
        passes = [r for rec in got.values() for r in rec[ph]]
        gaps = []
        for rec in got.values():
            ends = [r[1] for r in rec[ph]]
            gaps += [b - a for a, b in zip(ends, ends[1:])]
        out["pps_" + name] = len(passes) / seconds
        out["gap_max_%sms" % ("base_" if ph == 1 else "")] = 1e3 * max(gaps, default=0.0)
        if ph == 1:
            out["fwd_ms"] = 1e3 * statistics.median(r[1] - r[0] for r in passes) \
                if passes else 0.0
        else:
            out["fwd_upd_ms"] = 1e3 * statistics.median(r[1] - r[0] for r in passes) \
                if passes else 0.0
            out["gap_p99_ms"] = 1e3 * pct(gaps, 0.99)
            lags = [max(0, r[4] - r[2]) for r in passes]
            out["lag_mean"] = statistics.mean(lags) if lags else 0.0
            out["lag_max"] = max(lags, default=0)
            out["mixed"] = sum(1 for r in passes if r[2] != r[3])
            out["passes"] = len(passes)
            out.update(swap_cpu(got))
    base = [r[5] for rec in got.values() for r in rec[1]]
    out["fwd_cpu_ms"] = 1e3 * statistics.median(base) if base else 0.0
    out["updates"] = updates
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}


def swap_cpu(got):
    """The CPU time per update a way costs a collector: of the passes with
    updates, those that first used a newer version than the pass before
    against the median of the others (thread CPU time: a pass the
    scheduler stopped costs no more)."""
    first, other = [], []
    for rec in got.values():
        prev = None
        for r in rec[2]:
            (first if prev is not None and r[2] > prev else other).append(r[5])
            prev = r[3]
    if not first or not other:
        return {"swap_cpu_ms": 0.0, "upd_cpu_ms": 0.0}
    med = statistics.median(other)
    return {"swap_cpu_ms": 1e3 * (statistics.median(first) - med), "upd_cpu_ms": 1e3 * med}


def reach(got, made, pub_s):
    """How long after the trainer had a version's weights (made: version ->
    time) each collector began its first pass with that version or a newer
    one, over every version and collector that got there; and the trainer's
    median time per update."""
    waits = []
    for rec in got.values():
        passes = sorted(rec[2])
        i = 0
        for v in sorted(made):
            while i < len(passes) and passes[i][2] < v:
                i += 1
            if i == len(passes):
                break
            waits.append(max(0.0, passes[i][0] - made[v]))
    return {"pub_ms": round(1e3 * statistics.median(pub_s), 3) if pub_s else 0.0,
            "reach_mean_ms": round(1e3 * statistics.mean(waits), 3) if waits else 0.0,
            "reach_max_ms": round(1e3 * max(waits), 3) if waits else 0.0}


def gpu_why(torch, wsync, endpoint):
    """Why the ways on GPU 0 cannot run here, or None, found in this process
    before any collector starts, cheapest first: torch's CUDA, GPU 0 as
    the CUDA driver libwsync loads shows it, a small device model opened on
    GPU 0 by the broker (and deleted), and not the tests' fake driver."""
    if not torch.cuda.is_available():
        return "torch %s has no CUDA here (torch.cuda.is_available() is False): the GPU " \
               "ways need a CUDA build of torch and a GPU" % torch.__version__
    try:
        wsync.gpu_uuid(0)
    except wsync.WsyncError as e:
        return "no GPU 0 for libwsync: %s" % (e.detail or e)
    try:
        with wsync.connect(endpoint, "serving-gpu-probe") as c:
            c.publisher(PROBE, [("x", "f32", (1,))], replace=True, devices=[0]).close()
            try:
                c.delete(PROBE)
            except wsync.WsyncError as e:
                if e.errno != errno.ENOENT:     # gone with its publisher, never published
                    raise
    except wsync.NoDeviceError as e:
        return "the broker serves no GPU 0: %s" % (e.detail or e)
    path = os.environ.get("WSYNC_LIBCUDA")
    if path:
        import ctypes
        if hasattr(ctypes.CDLL(path), "fakecuda_live"):
            return "no GPU: the driver is the tests' fake (WSYNC_LIBCUDA)"
    return None


PROBE = "serving.gpu.probe"


def blas_info():
    """torch's BLAS as its build says (Debian's is the generic one)."""
    import re
    m = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return m.group(1) if m else "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint")
    ap.add_argument("--repeats", type=int, default=5, help="(accepted, not used)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--collectors", type=int, default=0, help="default: one per core")
    ap.add_argument("--gpu-collectors", type=int, default=0,
                    help="collectors of the GPU ways (default: one per core, at most %d)"
                    % GPU_COLLECTORS)
    ap.add_argument("--seconds", type=float, default=0)
    # WSYNC_BENCH_SERVING_WAYS: the ways wsync-bench's scenario runs (the tests' short run)
    ap.add_argument("--only", default=os.environ.get("WSYNC_BENCH_SERVING_WAYS") or
                    ",".join(WAYS))
    ap.add_argument("--spare-ways", default=None,
                    help="ways run again with a core left to the trainer (default: those of "
                    "%s that --only asks for; \"\" for none)" % ",".join(SPARE_WAYS))
    a = ap.parse_args()
    ways = [w for w in a.only.split(",") if w]
    spare = ([w for w in SPARE_WAYS if w in ways] if a.spare_ways is None
             else [w for w in a.spare_ways.split(",") if w])
    bad = [w for w in ways if w not in WAYS] + [w for w in spare if w not in SPARE_WAYS]
    if bad:
        ap.error("unknown way %s (ways: %s; with a core left to the trainer: %s)"
                 % (", ".join(bad), ", ".join(WAYS), ", ".join(SPARE_WAYS)))
    if torch is None:
        for w in WAYS:
            emit(row="serving_" + w, skipped="no torch: %s" % _NO_TORCH)
        for w in spare:
            emit(row="serving_spare_" + w, skipped="no torch: %s" % _NO_TORCH)
        return 0
    wsync = import_wsync()
    broker = None
    if not a.endpoint:
        import wsync.broker
        wd = os.path.join(HERE, "..", "..", os.environ.get("BUILD", "build"), "bin", "wsyncd")
        broker = wsync.broker.start(wsyncd=wd if os.path.exists(wd) else None)
        a.endpoint = broker.endpoint
    n = min(64, a.collectors or len(os.sched_getaffinity(0)))
    n_gpu = min(64, a.gpu_collectors or min(GPU_COLLECTORS, len(os.sched_getaffinity(0))))
    d, layers = (512, 2) if a.quick else (1024, 3)
    cfg = {"endpoint": a.endpoint, "d": d, "layers": layers, "tokens": 1,
           "seconds": a.seconds or (3.0 if a.quick else 10.0), "warmup": 0.5,
           "tmp": os.environ.get("TMPDIR", "/tmp")}
    nbytes = sum(t.numel() * 4 for t in make_model(torch, d, layers).state_dict().values())
    why_gpu = gpu_name = None
    if any(w.endswith(GPU) for w in ways):
        try:
            why_gpu = gpu_why(torch, wsync, a.endpoint)
            gpu_name = None if why_gpu else torch.cuda.get_device_name(0)
        except Exception as e:
            why_gpu = "%s: %s" % (type(e).__name__, e)
        why_gpu = why_gpu and why_gpu.replace('"', "'")[:200]
    emit(row="serving_setup", mib=round(nbytes / 2**20, 1), collectors=n, d=d, layers=layers,
         tokens=cfg["tokens"], seconds=cfg["seconds"], period_ms=PERIOD_S * 1e3,
         spread_ms=round(SPREAD_S * 1e3, 3),
         torch=torch.__version__, blas=blas_info(), gpu_collectors=n_gpu, gpu=gpu_name)
    import torch.multiprocessing as tmp     # shares tensors' memory with the children
    ctx = tmp.get_context("spawn")
    for way in WAYS:
        if way not in ways:
            emit(row="serving_" + way, skipped="not asked for (--only %s)" % ",".join(ways))
    for way in SPARE_WAYS:
        if way not in spare:
            emit(row="serving_spare_" + way, skipped="not asked for (--spare-ways %s)"
                 % ",".join(spare))
    passes = [("serving_", ways, n), ("serving_spare_", spare, n - 1)]
    try:
        for prefix, run, k in passes:
            if prefix != "serving_" and run and k >= 1:
                emit(row=prefix + "setup", collectors=k)
            for way in run:
                gpu = way.endswith(GPU)
                if gpu and why_gpu:
                    emit(row=prefix + way, skipped=why_gpu)
                    continue
                if k < 1:
                    emit(row=prefix + way, skipped="one core: none to leave to the trainer")
                    continue
                try:
                    emit(row=prefix + way, **run_way(way, cfg, ctx, torch, wsync,
                                                     n_gpu if gpu else k))
                except Exception as e:
                    traceback.print_exc()
                    emit(row=prefix + way, skipped=("%s: %s" % (type(e).__name__, e))
                         .replace('"', "'")[:200])
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
