"""wsync-relay: carries the versions of one model from the broker of a source
node to the brokers of other nodes over torch.distributed.

One relay process runs per node. Rank 0 runs on the source node (where the
trainer publishes): it subscribes to the model in its local broker. Every
other rank publishes the model into its own node's local broker. Each new
version travels once per node, as one header broadcast and one broadcast of
the version's bytes (a flat uint8 tensor sent straight from the source's
shared memory), then is committed on every destination with the trainer's
step. Collectors on any node use the ordinary API.

Newest wins: the source always sends the newest version when the group is
ready for the next one; versions published meanwhile are skipped (counted),
never queued.

Destinations publish one extra tensor, ORIGIN_TENSOR ("__wsync_origin__",
int64[4]: source version, trainer step, source commit time in ns of
CLOCK_REALTIME, relay hops). origin(view) reads it on any node (on the
source node it falls back to the view's own fields); state_dict(view) is
view.state_dict() without it, for load_state_dict.

Run:  python3 -m wsync.relay --help      (see docs/MULTINODE.md)
"""
import argparse
import errno
import hashlib
import json
import os
import signal
import socket
import sys
import time
import warnings
from collections import namedtuple
from datetime import timedelta

import numpy as np

import wsync

ORIGIN_TENSOR = "__wsync_origin__"

Origin = namedtuple("Origin", "version step published_ns hops")
Origin.__doc__ = """Where a version comes from: the version number and commit
time (ns, CLOCK_REALTIME) in the trainer's broker, the trainer's step, and
how many relays carried it (0: this is the trainer's broker)."""

# Header: int64[HDR_LEN], broadcast from rank 0 before anything else.
_MAGIC = 0x77737931          # "wsy1"
_HDR_LEN = 12
(_H_MAGIC, _H_KIND, _H_SEQ, _H_VERSION, _H_STEP, _H_PUBNS, _H_HOPS, _H_NBYTES,
 _H_LAYOUT_FP, _H_LAYOUT_LEN, _H_SKIPPED, _H_SENT_NS) = range(_HDR_LEN)
_K_BEAT, _K_VERSION = 0, 1

EXIT_USAGE = 2


# ---- the collector's side ---------------------------------------------------


def origin(view):
    """The Origin of a View: from its ORIGIN_TENSOR on a node the relay
    publishes to, else the view's own version, step and commit time (hops
    0: the trainer's own broker)."""
    if ORIGIN_TENSOR in view.tensors:
        v, step, ns, hops = (int(x) for x in view.numpy(ORIGIN_TENSOR))
        return Origin(v, step, ns, hops)
    return Origin(view.version, view.step, view.published_ns, 0)


def lag_ns(view, now_ns=None):
    """Nanoseconds between the trainer's commit of this version and now
    (CLOCK_REALTIME: across nodes, as good as their clock synchronisation)."""
    return (time.time_ns() if now_ns is None else now_ns) - origin(view).published_ns


def state_dict(view, kind="numpy"):
    """view.state_dict(kind) without ORIGIN_TENSOR (what load_state_dict
    wants); zero copy, same lifetime as the view."""
    d = view.state_dict(kind)
    d.pop(ORIGIN_TENSOR, None)
    return d


# ---- options ----------------------------------------------------------------


class UsageError(Exception):
    pass


def _env_int(name):
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise UsageError("$%s must be an integer, not %r" % (name, v)) from None


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python3 -m wsync.relay",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="wsync-relay: carries the versions of a model from the wsync broker "
                    "of the source node (rank 0) to the brokers of the other nodes "
                    "over torch.distributed. Run one per node.",
        epilog="""
Where the group is: each of --master-addr, --master-port, --rank and
--world-size falls back to the torchrun variable MASTER_ADDR, MASTER_PORT,
RANK and WORLD_SIZE. Rank 0 subscribes to --model in its local broker and
listens on --master-port (a TCPStore for the rendezvous); ranks 1.. publish
into theirs. Every rank must be able to reach MASTER_ADDR:MASTER_PORT, and
the ranks reach each other on ports the backend picks (gloo: the interface
of $GLOO_SOCKET_IFNAME, or --iface).

Exit status: 0 on SIGTERM/SIGINT, 2 on a bad option or address (said on
stderr), 1 on another error. A member that dies or hangs makes the others'
collectives fail within --timeout; the group is rebuilt when it is back,
and every broker keeps serving the last version it had meanwhile.
""")
    p.add_argument("--model", required=True, help="the model's name (same on every node)")
    p.add_argument("--endpoint", default=None,
                   help="the local broker: socket path or instance name "
                        "(default $WSYNC_ENDPOINT, else the default broker)")
    p.add_argument("--master-addr", default=os.environ.get("MASTER_ADDR"),
                   help="host of rank 0 (default $MASTER_ADDR)")
    p.add_argument("--master-port", type=int, default=None,
                   help="rendezvous port on rank 0 (default $MASTER_PORT)")
    p.add_argument("--rank", type=int, default=None, help="this node's rank (default $RANK)")
    p.add_argument("--world-size", type=int, default=None,
                   help="number of nodes, source included (default $WORLD_SIZE)")
    p.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"),
                   help="auto: nccl if CUDA and NCCL are available, else gloo")
    p.add_argument("--device", default=None,
                   help="with nccl: the CUDA device (default cuda:$LOCAL_RANK, else cuda:0)")
    p.add_argument("--iface", default=None,
                   help="network interface for gloo (sets GLOO_SOCKET_IFNAME)")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds any collective or rendezvous may take before the group "
                        "is rebuilt (default 30)")
    p.add_argument("--heartbeat", type=float, default=None,
                   help="seconds between headers when no version is new "
                        "(default timeout/4, at most 2)")
    p.add_argument("--connect-timeout", type=float, default=60.0,
                   help="ranks > 0: seconds to wait for rank 0 at the first start before "
                        "failing (default 60); once joined they wait forever")
    p.add_argument("--slots", type=int, default=0,
                   help="destinations: slabs of the model in the local broker (0: default)")
    p.add_argument("--name", default=None, help="client name shown by the broker")
    p.add_argument("--log", default=None,
                   help="append one JSON line per event to this file (default: stderr)")
    p.add_argument("--quiet", action="store_true", help="log only errors and rebuilds")
    p.add_argument("--staging", action="store_true",
                   help="send from and receive into private memory, copied from the view "
                        "and into the slab (default: straight from and into the shared "
                        "memory)")
    p.add_argument("--throttle", type=float, default=0.0,
                   help=argparse.SUPPRESS)   # tests: sleep this long after each received version
    a = p.parse_args(argv)
    try:
        if a.master_port is None:
            a.master_port = _env_int("MASTER_PORT")
        if a.rank is None:
            a.rank = _env_int("RANK")
        if a.world_size is None:
            a.world_size = _env_int("WORLD_SIZE")
        missing = [n for n, v in (("--master-addr/MASTER_ADDR", a.master_addr),
                                  ("--master-port/MASTER_PORT", a.master_port),
                                  ("--rank/RANK", a.rank),
                                  ("--world-size/WORLD_SIZE", a.world_size)) if v is None]
        if missing:
            raise UsageError("missing %s" % ", ".join(missing))
        if not 0 < a.master_port < 65536:
            raise UsageError("master port %d is not a TCP port (1..65535)" % a.master_port)
        if a.world_size < 2:
            raise UsageError("world size %d: a relay group needs the source and at least "
                             "one destination" % a.world_size)
        if not 0 <= a.rank < a.world_size:
            raise UsageError("rank %d is not in 0..%d" % (a.rank, a.world_size - 1))
        if not a.timeout > 0:
            raise UsageError("--timeout must be > 0")
        if a.heartbeat is None:
            a.heartbeat = min(2.0, a.timeout / 4)
        if not 0 < a.heartbeat < a.timeout:
            raise UsageError("--heartbeat must be > 0 and shorter than --timeout")
    except UsageError as e:
        p.error(str(e))
    return a


def check_address(a):
    """Fails fast (UsageError with a clear message) on an address that cannot
    work: an unresolvable MASTER_ADDR, or on rank 0 a port it cannot listen
    on."""
    try:
        infos = socket.getaddrinfo(a.master_addr, a.master_port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise UsageError("cannot resolve master address %r: %s" % (a.master_addr, e.strerror))
    if a.rank == 0:
        # The TCPStore listens on every interface; try the port first so
        # that "in use" is said plainly, not as a c10d stack trace.
        fam = socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET
        for family in (fam, socket.AF_INET):
            try:
                s = socket.socket(family, socket.SOCK_STREAM)
            except OSError:
                continue
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("", a.master_port))
                s.listen(1)
            except OSError as e:
                raise UsageError("rank 0 cannot listen on port %d: %s"
                                 % (a.master_port, e.strerror)) from None
            finally:
                s.close()
            break
    return infos


def probe_rank0(a, log, stop, end):
    """Waits until something listens at MASTER_ADDR:MASTER_PORT; raises
    UsageError at the monotonic time end (None: waits forever)."""
    said = False
    while True:
        stop()
        try:
            socket.create_connection((a.master_addr, a.master_port),
                                     timeout=min(2.0, a.timeout)).close()
            return
        except OSError as e:
            if end is not None and time.monotonic() > end:
                raise UsageError("no relay rank 0 at %s:%d after %g s (%s)"
                                 % (a.master_addr, a.master_port, a.connect_timeout,
                                    e.strerror or e)) from None
            if not said:
                log("waiting_for_rank0", important=True, error=str(e)[:200])
                said = True
            time.sleep(0.2)


# ---- logging ----------------------------------------------------------------


class Log:
    def __init__(self, path, rank, quiet):
        self.f = open(path, "a", buffering=1) if path else sys.stderr
        self.rank = rank
        self.quiet = quiet

    def __call__(self, event, important=False, **kw):
        if self.quiet and not important:
            return
        kw = dict(t=round(time.time(), 3), rank=self.rank, event=event, **kw)
        try:
            self.f.write(json.dumps(kw) + "\n")
            self.f.flush()
        except (OSError, ValueError):
            pass


# ---- the group --------------------------------------------------------------


class Stop(BaseException):
    """SIGTERM or SIGINT."""


class GroupFailed(Exception):
    pass


def _layout_doc(layout):
    return [[s.name, s.dtype, list(s.shape), s.offset, s.nbytes] for s in layout]


def _fingerprint(doc):
    h = hashlib.sha256(json.dumps(doc).encode()).digest()
    return int.from_bytes(h[:8], "little") & (2**63 - 1)


class Group:
    """The torch.distributed side: a TCPStore on rank 0 for the rendezvous,
    and one process group per generation (prefix g<N>/ in the store).

    Rank 0 numbers generations: it sets "gen", waits until every other rank
    wrote g<N>/ready/<rank>, then all init the group. A failure anywhere
    ends the generation: rank 0 destroys its group and starts g<N+1>; the
    others destroy theirs and wait for a generation newer than the one that
    failed (or any generation of a rank 0 that was restarted: "epoch")."""

    def __init__(self, a, log):
        import torch
        import torch.distributed as dist
        self.torch, self.dist = torch, dist
        self.a, self.log = a, log
        self.rank, self.world = a.rank, a.world_size
        self.td = timedelta(seconds=a.timeout)
        self.store = None
        self.epoch = None
        self.gen = 0
        self.failed_gen = None      # (epoch, gen) that failed here
        self.joined_once = False
        self.backend = self._backend()
        self.device = None
        if self.backend == "nccl":
            os.environ.setdefault("NCCL_ASYNC_ERROR_HANDLING", "1")   # timeouts apply
            dev = a.device or "cuda:%s" % os.environ.get("LOCAL_RANK", "0")
            self.device = torch.device(dev)
            torch.cuda.set_device(self.device)
        if a.iface:
            os.environ["GLOO_SOCKET_IFNAME"] = a.iface

    def _backend(self):
        b = self.a.backend
        if b == "auto":
            ok = self.torch.cuda.is_available() and self.dist.is_nccl_available()
            return "nccl" if ok else "gloo"
        if b == "nccl" and not (self.torch.cuda.is_available() and self.dist.is_nccl_available()):
            raise UsageError("--backend nccl: this torch has no CUDA device or no NCCL")
        return b

    # -- store --

    def _store_master(self):
        if self.store is None:
            self.store = self.dist.TCPStore(self.a.master_addr, self.a.master_port, None, True,
                                            self.td, wait_for_workers=False)
            self.epoch = os.urandom(8).hex()
            self.store.set("epoch", self.epoch)

    def _store_client(self, stop):
        """Connects to rank 0's store; the first time, gives up after
        --connect-timeout with a clear message."""
        if self.store is not None:
            return
        deadline = None if self.joined_once else time.monotonic() + self.a.connect_timeout
        said = False
        while True:
            # Probe with a plain socket first: a refused connection is
            # retried there, with our deadline and Ctrl-C, not in c10d.
            probe_rank0(self.a, self.log, stop, deadline)
            try:
                self.store = self.dist.TCPStore(self.a.master_addr, self.a.master_port, None,
                                                False, self.td)
                self.store.wait(["epoch"], self.td)
                self.epoch = self.store.get("epoch").decode()
                return
            except (OSError, RuntimeError) as e:
                self.store = None
                if deadline is not None and time.monotonic() > deadline:
                    raise UsageError("no relay rank 0 at %s:%d after %g s (%s)"
                                     % (self.a.master_addr, self.a.master_port,
                                        self.a.connect_timeout, e)) from None
                if not said:
                    self.log("waiting_for_rank0", important=True, error=str(e)[:200])
                    said = True
                time.sleep(0.2)

    def drop_store(self):
        self.store = None

    # -- generations --

    def _has(self, key):
        # Keys that are counters: add(key, 0) reads one without waiting
        # (TCPStore.get waits for a missing key; this torch has no check()).
        return self.store.add(key, 0) > 0

    def _keys(self, gen):
        return ["g%d/ready/%d" % (gen, r) for r in range(1, self.world)]

    def join(self, stop):
        """Joins the next generation (blocks until every rank is there);
        returns the generation number."""
        if self.rank == 0:
            self._store_master()
            self.gen += 1
            self.store.set("gen", str(self.gen))
            keys = self._keys(self.gen)
            t0 = time.monotonic()
            while True:
                stop()
                missing = [k.rsplit("/", 1)[1] for k in keys if not self._has(k)]
                if not missing:
                    break
                if time.monotonic() - t0 > self.a.timeout:
                    self.log("waiting_for_ranks", important=True, gen=self.gen,
                             missing=missing)
                    t0 = time.monotonic()
                time.sleep(0.05)
        else:
            while True:
                self._store_client(stop)
                try:
                    gen = self._next_gen(stop)
                    self.store.add("g%d/ready/%d" % (gen, self.rank), 1)
                    break
                except RuntimeError as e:       # the store went away: rank 0 died
                    self.log("store_lost", important=True, error=str(e)[:200])
                    self.store = None
                    time.sleep(0.2)
            self.gen = gen
        self._init_pg()
        self.joined_once = True
        return self.gen

    def _next_gen(self, stop):
        while True:
            stop()
            gen = self.store.add("gen", 0)       # 0: rank 0 has not set it yet
            if gen:
                stale = (self.failed_gen is not None and self.failed_gen[0] == self.epoch
                         and self.failed_gen[1] >= gen)
                taken = self._has("g%d/ready/%d" % (gen, self.rank))
                if not stale and not taken:
                    return gen
            time.sleep(0.05)

    def _init_pg(self):
        prefix = self.dist.PrefixStore("g%d/pg/" % self.gen, self.store)
        try:
            self.dist.init_process_group(self.backend, store=prefix, rank=self.rank,
                                         world_size=self.world, timeout=self.td)
        except Exception as e:         # a rank missing or gone: a timeout or a reset
            raise GroupFailed("rendezvous of generation %d: %s"
                              % (self.gen, str(e).splitlines()[0][:300] if str(e) else repr(e)))

    def fail(self):
        """Ends the current generation after an error."""
        self.failed_gen = (self.epoch, self.gen)
        self.destroy()

    def destroy(self):
        try:
            if self.dist.is_initialized():
                self.dist.destroy_process_group()
        except Exception:
            pass

    # -- collectives --

    def bcast(self, t):
        """Broadcasts t from rank 0 (in place elsewhere); GroupFailed on any
        error or timeout."""
        try:
            work = self.dist.broadcast(t, 0, async_op=True)
            work.wait(self.td) if self.backend == "nccl" else work.wait()
        except Exception as e:        # gloo/nccl raise RuntimeError, timeouts included
            raise GroupFailed(str(e).splitlines()[0][:300] if str(e) else repr(e)) from None

    def ack(self, ok):
        """The end of a version: every rank says whether it committed it
        (1) or not (0); returns the minimum. Rank 0 waits here for the
        slowest destination, so nothing queues in the network behind it."""
        t = self.header()[:1]
        t.fill_(int(ok))
        try:
            work = self.dist.all_reduce(t, op=self.dist.ReduceOp.MIN, async_op=True)
            work.wait(self.td) if self.backend == "nccl" else work.wait()
        except Exception as e:
            raise GroupFailed(str(e).splitlines()[0][:300] if str(e) else repr(e)) from None
        return int(t.item())

    def header(self):
        t = self.torch.zeros(_HDR_LEN, dtype=self.torch.int64)
        return t.to(self.device) if self.device is not None else t

    def bcast_header(self, h):
        self.bcast(h)
        return [int(x) for x in (h.cpu() if self.device is not None else h)]


# ---- source -----------------------------------------------------------------


def _as_uint8(torch, mv, n):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # read-only buffer: gloo only reads it on rank 0
        return torch.frombuffer(mv, dtype=torch.uint8, count=n) if n else \
            torch.zeros(0, dtype=torch.uint8)


class Source:
    def __init__(self, a, group, log, stop):
        self.a, self.g, self.log, self.stop = a, group, log, stop
        self.client = wsync.connect(a.endpoint, a.name or "wsync-relay-src")
        self.sub = self.client.subscriber(a.model)
        self.seq = 0
        self.last = 0               # source version last sent
        self.skipped = 0
        self.sent = 0
        self.staging = None

    def run_generation(self):
        torch, g = self.g.torch, self.g
        layout_sent = None
        resend = True               # a new group: the newest version again
        last_beat = time.monotonic()
        while True:
            self.stop()
            view = None
            try:
                if resend:
                    try:
                        view = self.sub.acquire()
                    except wsync.NoDataError:
                        view = None
                    resend = False
                else:
                    left = max(0.0, self.a.heartbeat - (time.monotonic() - last_beat))
                    view = self.sub.wait(after=self.last, timeout=left)
            except TimeoutError:
                view = None
            h = g.header()
            if view is None:
                if time.monotonic() - last_beat >= self.a.heartbeat:
                    h[_H_MAGIC], h[_H_KIND] = _MAGIC, _K_BEAT
                    g.bcast(h)
                    last_beat = time.monotonic()
                continue
            with view:
                self._send(view, h, layout_sent)
                layout_sent = self._layout_fp
            last_beat = time.monotonic()

    def _send(self, view, h, layout_sent):
        torch, g = self.g.torch, self.g
        layout = [s for s in view.layout if s.name != ORIGIN_TENSOR]
        doc = _layout_doc(layout)
        fp = _fingerprint(doc)
        self._layout_fp = fp
        end = max((s.offset + s.nbytes for s in layout), default=0)
        o = origin(view)
        if self.last and view.version > self.last:
            self.skipped += view.version - self.last - 1
        self.seq += 1
        lay = json.dumps(doc).encode() if fp != layout_sent else b""
        vals = {_H_MAGIC: _MAGIC, _H_KIND: _K_VERSION, _H_SEQ: self.seq,
                _H_VERSION: o.version, _H_STEP: o.step, _H_PUBNS: o.published_ns,
                _H_HOPS: o.hops + 1, _H_NBYTES: end, _H_LAYOUT_FP: fp,
                _H_LAYOUT_LEN: len(lay), _H_SKIPPED: self.skipped,
                _H_SENT_NS: time.time_ns()}
        for k, v in vals.items():
            h[k] = v
        t0 = time.monotonic()
        g.bcast(h)
        if lay:
            lt = torch.frombuffer(bytearray(lay), dtype=torch.uint8)
            g.bcast(lt.to(g.device) if g.device is not None else lt)
        payload = _as_uint8(torch, view.buffer(), end)
        if g.device is not None:
            payload = payload.to(g.device)
        elif self.a.staging:
            if self.staging is None or self.staging.numel() < end:
                self.staging = torch.empty(end, dtype=torch.uint8)
            self.staging[:end].copy_(payload)
            payload = self.staging[:end]
        t1 = time.monotonic()
        g.bcast(payload)
        t2 = time.monotonic()
        del payload
        self.last = view.version
        everywhere = g.ack(1)
        self.sent += 1
        self.log("sent", seq=self.seq, version=view.version, step=view.step,
                 nbytes=end, skipped=self.skipped, committed_everywhere=bool(everywhere),
                 ms=round((time.monotonic() - t0) * 1e3, 2),
                 payload_ms=round((t2 - t1) * 1e3, 2), ack_ms=round((time.monotonic() - t2) * 1e3, 2))

    def close(self):
        self.client.close()


# ---- destination ------------------------------------------------------------


class Destination:
    def __init__(self, a, group, log, stop):
        self.a, self.g, self.log, self.stop = a, group, log, stop
        self.client = wsync.connect(a.endpoint, a.name or "wsync-relay-dst")
        self.pub = None
        self.pub_fp = None
        self.layouts = {}           # fingerprint -> layout doc
        self.committed = 0
        self.dropped = 0
        self.staging = None
        self.have = self._local_origin()   # (version, published_ns) of the newest here

    def _local_origin(self):
        try:
            with self.client.subscriber(self.a.model) as sub:
                with sub.acquire() as v:
                    o = origin(v)
                    return (o.version, o.published_ns)
        except wsync.NoDataError:
            return None

    def run_generation(self):
        g = self.g
        while True:
            self.stop()
            h = g.bcast_header(g.header())
            if h[_H_MAGIC] != _MAGIC:
                raise GroupFailed("bad header magic %#x" % h[_H_MAGIC])
            if h[_H_KIND] == _K_BEAT:
                continue
            if h[_H_LAYOUT_LEN]:
                lt = g.header().new_zeros(h[_H_LAYOUT_LEN], dtype=g.torch.uint8)
                g.bcast(lt)
                self.layouts[h[_H_LAYOUT_FP]] = json.loads(bytes(lt.cpu().numpy()).decode())
            ok = self._receive(h)
            if self.a.throttle:
                time.sleep(self.a.throttle)
            g.ack(ok)

    def _publisher(self, fp):
        if self.pub is not None and self.pub_fp == fp:
            return self.pub
        doc = self.layouts.get(fp)
        if doc is None:
            raise GroupFailed("version with an unknown layout %x" % fp)
        if self.pub is not None:
            self.pub.close()
            self.pub = None
        tensors = [(n, d, tuple(shape)) for n, d, shape, _, _ in doc]
        if not any(n == ORIGIN_TENSOR for n, _, _ in tensors):
            tensors.append((ORIGIN_TENSOR, "i64", (4,)))
        try:
            self.pub = self.client.publisher(self.a.model, tensors, self.a.slots)
        except wsync.LayoutError as e:
            self.log("layout_error", important=True, error=str(e)[:300])
            self.pub_fp = None
            return None
        self.pub_fp = fp
        return self.pub

    def _staging(self, n):
        torch = self.g.torch
        if self.staging is None or self.staging.numel() < n:
            self.staging = torch.empty(n, dtype=torch.uint8, device=self.g.device or "cpu")
        return self.staging[:n]

    def _receive(self, h):
        torch, g = self.g.torch, self.g
        n, fp = h[_H_NBYTES], h[_H_LAYOUT_FP]
        ident = (h[_H_VERSION], h[_H_PUBNS])
        pub = self._publisher(fp)
        slab = None
        if pub is not None and ident != self.have:
            try:
                slab = pub.begin(timeout=self.a.timeout / 4)
            except wsync.BusyError as e:
                self.log("busy", important=True, error=str(e)[:300])
        if slab is None:                 # nowhere to put it: take it off the wire, drop it
            g.bcast(self._staging(n))
            if ident != self.have:
                self.dropped += 1
            return ident == self.have
        try:
            direct = self._direct(slab, fp, n) if g.device is None and not self.a.staging \
                else None
            if direct is not None:
                g.bcast(direct)          # straight into the slab's memory
                del direct
            else:
                buf = self._staging(n)
                g.bcast(buf)
                self._copy_in(slab, fp, buf.cpu() if g.device is not None else buf)
            slab.numpy(ORIGIN_TENSOR)[:] = (h[_H_VERSION], h[_H_STEP], h[_H_PUBNS],
                                            h[_H_HOPS])
            version = slab.commit(h[_H_STEP])
        except BaseException:
            if slab.active:
                slab.abort()
            raise
        self.have = ident
        self.committed += 1
        self.log("committed", seq=h[_H_SEQ], version=version, origin_version=h[_H_VERSION],
                 step=h[_H_STEP], skipped_at_source=h[_H_SKIPPED],
                 lag_ms=round((time.time_ns() - h[_H_PUBNS]) / 1e6, 2))
        return True

    def _direct(self, slab, fp, n):
        """A writable uint8 tensor over the slab's first n bytes, if the
        local layout puts every tensor where the source's does (it does
        when the layouts match: the origin tensor comes last)."""
        doc = self.layouts[fp]
        mine = {s.name: s for s in slab.layout}
        if any(mine[name].offset != off for name, _, _, off, _ in doc):
            return None
        big = max(slab.layout, key=lambda s: s.nbytes)
        if big.nbytes == 0:
            return None
        a = slab.numpy(big.name)
        base = a.__array_interface__["data"][0] - big.offset
        import ctypes
        raw = (ctypes.c_char * n).from_address(base)
        t = self.g.torch.frombuffer(raw, dtype=self.g.torch.uint8) if n else \
            self.g.torch.zeros(0, dtype=self.g.torch.uint8)
        t._wsync_keep = (a, raw)         # the slab stays mapped while t lives
        return t

    def _copy_in(self, slab, fp, buf):
        arr = buf.numpy()
        src = {}
        for name, dtype, shape, off, nbytes in self.layouts[fp]:
            if name == ORIGIN_TENSOR:
                continue
            spec = next(s for s in slab.layout if s.name == name)
            dt = slab.numpy(name).dtype
            src[name] = np.frombuffer(arr, dtype=dt, count=nbytes // dt.itemsize,
                                      offset=off).reshape(spec.shape)
        src[ORIGIN_TENSOR] = np.zeros(4, dtype=np.int64)
        slab.copy_from(src)

    def close(self):
        self.client.close()


# ---- main -------------------------------------------------------------------


def run(a):
    log = Log(a.log, a.rank, a.quiet)
    stopping = []

    def on_signal(signum, frame):
        stopping.append(signum)
        raise Stop()

    def stop():
        if stopping:
            raise Stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    check_address(a)
    if a.rank != 0:                # before importing torch: a wrong port fails fast
        probe_rank0(a, log, stop, time.monotonic() + a.connect_timeout)
    group = Group(a, log)
    role = (Source if a.rank == 0 else Destination)(a, group, log, stop)
    log("start", important=True, role="source" if a.rank == 0 else "destination",
        model=a.model, world=a.world_size, backend=group.backend, pid=os.getpid())
    try:
        while True:
            try:
                gen = group.join(stop)
                log("group", important=True, gen=gen, epoch=group.epoch)
                role.run_generation()
            except GroupFailed as e:
                log("group_failed", important=True, gen=group.gen, error=str(e))
                group.fail()
                if a.rank != 0:
                    group.drop_store()     # reconnect: rank 0 may be a new process
    except Stop:
        log("stop", important=True, **({"sent": role.sent, "skipped": role.skipped}
                                       if a.rank == 0 else
                                       {"committed": role.committed, "dropped": role.dropped}))
        stopping.append("done")
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        # On a stop the process is about to exit: tearing down a gloo group
        # that a signal interrupted mid-collective can abort the process
        # (std::terminate in its C++ destructors), so it is left to the
        # kernel; the local broker's handles are closed properly.
        if not stopping:
            group.destroy()
        role.close()


def main(argv=None):
    a = parse_args(argv)
    try:
        return run(a)
    except UsageError as e:
        print("wsync-relay: %s" % e, file=sys.stderr)
        return EXIT_USAGE
    except wsync.WsyncError as e:
        print("wsync-relay: local broker: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    code = main()
    # Skip the interpreter's teardown: torch.distributed's C++ objects of a
    # group broken by a dead peer can abort in their destructors, turning a
    # clean stop into SIGABRT. Everything of ours is closed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 1)
