"""The relay's torch.distributed side: rank 0's authenticated store (one
address, the job's secret, _relay_store.py) and one process group per
generation, bound to this rank's address.

Rank 0 numbers generations: it sets "gen", waits until every other rank
wrote g<N>/ready/<rank>, then all make a process group on the prefix
g<N>/pg/. A failure anywhere ends the generation: rank 0 drops its group
and starts g<N+1>; the others drop theirs and wait for a generation newer
than the one that failed (or any generation of a rank 0 that was
restarted: "epoch").

The process group is made directly (ProcessGroupGloo with a device bound
to the given address; ProcessGroupNCCL), not through init_process_group:
nothing global, and dropping a broken group is dropping the object.
"""
import os
import socket
import time
from datetime import timedelta

from ._relay_common import GroupFailed, UsageError, short
from ._relay_store import AuthStore, RefusedError, StoreServer


def local_address_towards(host, port):
    """The address this host would use to reach host:port (no packet is
    sent: a UDP socket is connected and asked)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    s = socket.socket(family[0], socket.SOCK_DGRAM)
    try:
        s.connect(family[4])
        return s.getsockname()[0]
    finally:
        s.close()


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


def start_store_server(a, secret, log):
    """Rank 0: the store, listening on a.listen_addr:a.master_port only.
    UsageError with the plain reason if it cannot."""
    try:
        return StoreServer(a.listen_addr, a.master_port, secret, log)
    except OSError as e:
        raise UsageError("rank 0 cannot listen on port %d at %s: %s"
                         % (a.master_port, a.listen_addr, e.strerror or e)) from None


class Group:
    def __init__(self, a, log, secret, server=None):
        import torch
        import torch.distributed as dist
        self.torch, self.dist = torch, dist
        self.a, self.log, self.secret = a, log, secret
        self.rank, self.world = a.rank, a.world_size
        self.td = timedelta(seconds=a.timeout)
        self.server = server
        self.store = None
        self.pg = None
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

    def _connect_store(self, timeout):
        try:
            return AuthStore.connect(self.a.master_addr, self.a.master_port, self.secret,
                                     self.td, connect_timeout=timeout)
        except RefusedError as e:
            raise UsageError(str(e)) from None

    def _store_master(self):
        if self.store is None:
            self.store = self._connect_store(self.a.timeout)
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
            # retried here, with our deadline and Ctrl-C.
            probe_rank0(self.a, self.log, stop, deadline)
            try:
                self.store = self._connect_store(min(self.a.timeout, 10.0))
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
        if self.store is not None:
            self.store.close()
        self.store = None

    # -- generations --

    def _has(self, key):
        return self.store.check([key])

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
                    self.drop_store()
                    time.sleep(0.2)
            self.gen = gen
        self._make_pg()
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

    def _make_pg(self):
        dist = self.dist
        prefix = dist.PrefixStore("g%d/pg/" % self.gen, self.store)
        try:
            if self.backend == "nccl":
                self.pg = dist.ProcessGroupNCCL(prefix, self.rank, self.world, self.td)
            else:
                opts = dist.ProcessGroupGloo._Options()
                opts._timeout = self.td
                if self.a.iface:
                    dev = dist.ProcessGroupGloo.create_device(interface=self.a.iface)
                else:
                    dev = dist.ProcessGroupGloo.create_device(hostname=self.a.bind_addr)
                opts._devices = [dev]
                self.pg = dist.ProcessGroupGloo(prefix, self.rank, self.world, opts)
        except Exception as e:         # a rank missing or gone: a timeout or a reset
            self.pg = None
            raise GroupFailed("rendezvous of generation %d: %s" % (self.gen, short(e)))

    def fail(self):
        """Ends the current generation after an error."""
        self.failed_gen = (self.epoch, self.gen)
        self.pg = None

    def destroy(self):
        self.pg = None

    # -- collectives --

    def _wait(self, work):
        try:
            work.wait(self.td) if self.backend == "nccl" else work.wait()
        except Exception as e:        # gloo/nccl raise RuntimeError, timeouts included
            raise GroupFailed(short(e)) from None

    def bcast(self, t):
        """Broadcasts t from rank 0 (in place elsewhere); GroupFailed on any
        error or timeout."""
        if self.pg is None:
            raise GroupFailed("no process group")
        o = self.dist.BroadcastOptions()
        o.rootRank, o.rootTensor = 0, 0
        o.timeout = self.td
        try:
            work = self.pg.broadcast([t], o)
        except Exception as e:
            raise GroupFailed(short(e)) from None
        self._wait(work)

    def ack(self, code):
        """The end of a version: every rank says what became of it (ACK_*);
        returns the minimum. Rank 0 waits here for the slowest destination,
        so nothing queues in the network behind it."""
        if self.pg is None:
            raise GroupFailed("no process group")
        t = self.header()[:1]
        t.fill_(int(code))
        o = self.dist.AllreduceOptions()
        o.reduceOp = self.dist.ReduceOp.MIN
        o.timeout = self.td
        try:
            work = self.pg.allreduce([t], o)
        except Exception as e:
            raise GroupFailed(short(e)) from None
        self._wait(work)
        return int(t.item())

    def header(self):
        from ._relay_common import HDR_LEN
        t = self.torch.zeros(HDR_LEN, dtype=self.torch.int64)
        return t.to(self.device) if self.device is not None else t

    def bcast_header(self, h):
        self.bcast(h)
        return [int(x) for x in (h.cpu() if self.device is not None else h)]
