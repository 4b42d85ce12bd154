"""wsync-relay: carries the versions of one model from the broker of a source
node to the brokers of other nodes over torch.distributed.

One relay process runs per node. Rank 0 runs on the source node (where the
trainer publishes): it subscribes to the model in its local broker. Every
other rank publishes the model into its own node's local broker. Each new
version travels once per node: a header, then either the version's bytes
(one broadcast straight from the source's shared memory) or a delta against
the last version every destination confirmed (XOR with it, zstd per chunk,
encoded by libwsync-delta on all cores and sent in frames while it is
encoded), whichever the last versions say is faster. A destination
publishes a version with the trainer's step only if its whole-version
checksum equals the source's; a delta it cannot apply is sent again whole.
Collectors on any node use the ordinary API.

Newest wins: the source always sends the newest version when the group is
ready for the next one; versions published meanwhile are skipped (counted),
never queued.

Only peers that know the job's secret join (rank 0's store checks it, on the
one address it is given); see docs/MULTINODE.md for what is exposed.

Destinations publish one extra tensor, ORIGIN_TENSOR ("__wsync_origin__",
int64[4]: source version, trainer step, source commit time in ns of
CLOCK_REALTIME, relay hops). origin(view) reads it on any node (on the
source node it falls back to the view's own fields); state_dict(view) is
view.state_dict() without it, for load_state_dict.

Run:  wsync-relay --help   (or python3 -m wsync.relay; see docs/MULTINODE.md)
"""
import argparse
import errno
import json
import os
import signal
import socket
import stat
import sys
import time
from collections import namedtuple

import wsync

from ._relay_common import EXIT_USAGE, ORIGIN_TENSOR, GroupFailed, Log, Stop, UsageError

__all__ = ["ORIGIN_TENSOR", "Origin", "origin", "lag_ns", "state_dict", "main"]

Origin = namedtuple("Origin", "version step published_ns hops")
Origin.__doc__ = """Where a version comes from: the version number and commit
time (ns, CLOCK_REALTIME) in the trainer's broker, the trainer's step, and
how many relays carried it (0: this is the trainer's broker)."""

SECRET_ENV = "WSYNC_RELAY_SECRET"


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


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _env_int(name):
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise UsageError("$%s must be an integer, not %r" % (name, v)) from None


def make_parser():
    p = _Parser(
        prog="wsync-relay",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="wsync-relay: carries the versions of a model from the wsync broker "
                    "of the source node (rank 0) to the brokers of the other nodes "
                    "over torch.distributed, whole or as deltas. Run one per node.",
        epilog="""
Where the group is: each of --master-addr, --master-port, --rank and
--world-size falls back to the torchrun variable MASTER_ADDR, MASTER_PORT,
RANK and WORLD_SIZE. Rank 0 subscribes to --model in its local broker and
listens on MASTER_ADDR:MASTER_PORT only (or --bind); ranks 1.. publish into
theirs. The backend's own connections use each rank's --bind address (by
default the one facing MASTER_ADDR) or --iface.

The job's secret: the same bytes on every node, from --secret-file or
$WSYNC_RELAY_SECRET; rank 0 refuses a peer that cannot prove it has them,
and the others refuse a rank 0 that cannot. --insecure admits anyone who
reaches the port. See docs/MULTINODE.md for what is exposed.

Exit status, as every wsync tool: 0 on SIGTERM/SIGINT, 2 on a bad option,
address or secret, 3 on another error (no local broker, a broker gone, the
codec library missing); an error is one line on stderr. With --json, also
one JSON object on stdout at the end: {"ok": true, ...counters} or
{"ok": false, "error": ..., "reason": KEYWORD, "exit": N}.
""")
    p.add_argument("--version", action="store_true",
                   help="print the relay's, libwsync's and the codec's versions")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on stdout when done (success or error)")
    p.add_argument("--model", help="the model's name (same on every node)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--endpoint", default=None,
                       help="the local broker: socket path or instance name "
                            "(default $WSYNC_ENDPOINT, else the default broker)")
    where.add_argument("--name", default=None, metavar="INSTANCE",
                       help="the local broker's instance name (as wsyncd --name)")
    p.add_argument("--client-name", default=None, metavar="LABEL",
                   help="this relay's client name, shown by wsyncctl sessions "
                        "(default wsync-relay-src / wsync-relay-dst)")
    p.add_argument("--master-addr", default=os.environ.get("MASTER_ADDR"),
                   help="host of rank 0 (default $MASTER_ADDR)")
    p.add_argument("--master-port", type=int, default=None,
                   help="rendezvous port on rank 0 (default $MASTER_PORT)")
    p.add_argument("--rank", type=int, default=None, help="this node's rank (default $RANK)")
    p.add_argument("--world-size", type=int, default=None,
                   help="number of nodes, source included (default $WORLD_SIZE)")
    p.add_argument("--bind", default=None, metavar="ADDR",
                   help="this rank's address: rank 0's store listens there, the backend's "
                        "connections use it (default: rank 0 MASTER_ADDR, others the "
                        "address facing it)")
    p.add_argument("--secret-file", default=None, metavar="FILE",
                   help="the job's secret (default $WSYNC_RELAY_SECRET)")
    p.add_argument("--insecure", action="store_true",
                   help="no secret: admit any peer that reaches the port")
    p.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"),
                   help="auto: nccl if CUDA and NCCL are available, else gloo")
    p.add_argument("--device", default=None,
                   help="with nccl: the CUDA device (default cuda:$LOCAL_RANK, else cuda:0)")
    p.add_argument("--iface", default=None,
                   help="network interface for gloo (instead of --bind's address)")
    p.add_argument("--delta", default="auto", choices=("auto", "on", "off"),
                   help="send deltas: auto (when the last versions say it is faster; "
                        "default), on (always when possible), off (always whole)")
    p.add_argument("--level", type=int, default=1,
                   help="zstd level of deltas (default 1; negative: faster, larger)")
    p.add_argument("--threads", type=int, default=0,
                   help="codec threads (default 0: one per CPU this process may use)")
    p.add_argument("--metrics", default=None, metavar="FILE",
                   help="after every version, write the relay's counters to FILE in the "
                        "Prometheus text format (node_exporter's textfile collector)")
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
    p.add_argument("--log", default=None,
                   help="append one JSON line per event to this file (default: stderr)")
    p.add_argument("--quiet", action="store_true", help="log only errors and rebuilds")
    p.add_argument("--staging", action="store_true",
                   help="whole versions: send from and receive into private memory, copied "
                        "from the view and into the slab (default: straight from and into "
                        "the shared memory)")
    p.add_argument("--throttle", type=float, default=0.0,
                   help=argparse.SUPPRESS)   # tests: sleep this long after each received version
    p.add_argument("--inject", default=None,
                   help=argparse.SUPPRESS)   # tests: flip:N / truncate:N (the N-th delta
                                             # received), wholeflip:N, oversize:N (the
                                             # source's N-th whole version too long)
    p.add_argument("--alternate", action="store_true",
                   help=argparse.SUPPRESS)   # bench: delta and whole versions in turn
    return p


def parse_args(argv=None):
    """The options, checked; UsageError (exit 2) with the reason."""
    p = make_parser()
    a = p.parse_args(argv)
    if a.version:
        return a
    if a.name is not None:
        a.endpoint = a.name
    if not a.model:
        raise UsageError("--model is required")
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
    if not 0 <= a.threads <= 1024:
        raise UsageError("--threads must be 0 .. 1024")
    if not -7 <= a.level <= 19:
        raise UsageError("--level must be -7 .. 19")
    for fault in (a.inject or "").split(",") if a.inject else ():
        kind, _, n = fault.partition(":")
        if kind not in ("flip", "truncate", "wholeflip", "oversize") or not n.isdigit():
            raise UsageError("--inject must be flip:N, truncate:N, wholeflip:N or "
                             "oversize:N, comma-separated")
    return a


def read_secret(a):
    """The job's secret (bytes); b"" with --insecure."""
    if a.insecure:
        if a.secret_file:
            raise UsageError("--insecure and --secret-file: choose one")
        return b""
    if a.secret_file:
        try:
            st = os.stat(a.secret_file)
            with open(a.secret_file, "rb") as f:
                secret = f.read().strip()
        except OSError as e:
            raise UsageError("cannot read the secret file %s: %s"
                             % (a.secret_file, e.strerror)) from None
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise UsageError("the secret file %s can be read by other users (chmod 600 it)"
                             % a.secret_file)
    else:
        secret = os.environ.get(SECRET_ENV, "").encode()
    if not secret:
        raise UsageError("no secret: set $%s or --secret-file to the same secret on every "
                         "node (or --insecure to admit anyone who reaches the port)"
                         % SECRET_ENV)
    if len(secret) < 16:
        raise UsageError("the secret is %d bytes: use at least 16" % len(secret))
    return secret


def resolve_addresses(a):
    """Fails fast (UsageError with a clear message) on an address that cannot
    work; sets a.bind_addr (this rank's numeric address) and a.listen_addr
    (rank 0: where its store listens)."""
    try:
        socket.getaddrinfo(a.master_addr, a.master_port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise UsageError("cannot resolve master address %r: %s" % (a.master_addr, e.strerror))
    from ._relay_group import local_address_towards
    if a.bind:
        host = a.bind
    elif a.rank == 0:
        host = a.master_addr
    else:
        try:
            host = local_address_towards(a.master_addr, a.master_port)
        except OSError as e:
            raise UsageError("no route to master address %r: %s"
                             % (a.master_addr, e.strerror)) from None
    try:
        a.bind_addr = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
    except socket.gaierror as e:
        raise UsageError("cannot resolve --bind address %r: %s" % (host, e.strerror))
    a.listen_addr = a.bind_addr


def version_text():
    from . import _relay_codec
    try:
        lib = _relay_codec.library()
        codec, path = lib.wsync_delta_version().decode(), lib._path
    except ImportError as e:
        codec, path = "missing (%s)" % e, None
    return {"relay": wsync.__version__, "libwsync": wsync.library_version(),
            "codec": codec, "codec_library": path, "library": wsync.library_path()}


# ---- main -------------------------------------------------------------------


def run(a, result):
    log = Log(a.log, a.rank, a.quiet)       # UsageError if it cannot be opened
    stopping = []

    def on_signal(signum, frame):
        stopping.append(signum)
        raise Stop()

    def stop():
        if stopping:
            raise Stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return _serve(a, result, log, stop, stopping)
    except BaseException:
        if stopping:                   # a signal while starting (torch's import wraps it)
            return 0
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)


def _serve(a, result, log, stop, stopping):
    from ._relay_group import Group, probe_rank0, start_store_server

    secret = read_secret(a)
    resolve_addresses(a)
    server = None
    if a.rank == 0:                # before importing torch: a busy port fails fast
        server = start_store_server(a, secret, log)
    else:
        probe_rank0(a, log, stop, time.monotonic() + a.connect_timeout)
    if a.insecure:
        log("insecure", important=True,
            note="--insecure: any peer that reaches %s:%d is admitted"
                 % (a.master_addr, a.master_port))
    group = Group(a, log, secret, server)
    if a.rank == 0:
        from ._relay_source import Source as Role
    else:
        from ._relay_dest import Destination as Role
    role = Role(a, group, log, stop)
    log("start", important=True, role="source" if a.rank == 0 else "destination",
        model=a.model, world=a.world_size, backend=group.backend, pid=os.getpid(),
        bind=a.bind_addr, delta=a.delta, codec_threads=role.codec.threads)
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
        if server is not None:
            role.counters.refused = server.refused
        summary = dict({"sent": role.sent, "skipped": role.skipped} if a.rank == 0 else
                       {"committed": role.committed, "dropped": role.dropped},
                       **role.counters.summary())
        log("stop", important=True, **summary)
        result.update(summary, role="source" if a.rank == 0 else "destination",
                      model=a.model, rank=a.rank)
        stopping.append("done")
        return 0
    finally:
        # On a stop the process is about to exit: tearing down a gloo group
        # that a signal interrupted mid-collective can abort the process
        # (std::terminate in its C++ destructors), so it is left to the
        # kernel; the local broker's handles are closed properly.
        if not stopping:
            group.destroy()
        role.close()
        if server is not None:
            server.close()


# The tools' exit codes and error keywords (tools/common/report.h): 2 usage,
# 3 another error (no broker, a broker gone, the codec missing, ...).
EXIT_FAILED = 3

_REASONS = {errno.ENOENT: "no_broker", errno.ECONNREFUSED: "no_broker",
            errno.ENOTCONN: "broker_gone", errno.EPIPE: "broker_gone",
            errno.ECONNRESET: "broker_gone", errno.ETIMEDOUT: "timeout",
            errno.EPERM: "refused", errno.EACCES: "refused", errno.EBUSY: "busy",
            errno.EEXIST: "layout_clash", errno.EINVAL: "invalid", errno.ENOSPC: "no_space",
            errno.EBADMSG: "mismatch", errno.ENODATA: "no_data", errno.EPROTO: "protocol",
            errno.EIDRM: "deleted"}


def _usage_text(msg):
    """argparse's message in the tools' words: the option named, --help pointed at."""
    if msg.startswith("unrecognized arguments: "):
        msg = "unknown option '%s'" % msg.split(": ", 1)[1].split()[0]
    return "%s (try 'wsync-relay --help')" % msg


def _wsync_text(e):
    """The library's detail when it has one, else the error's name: said once."""
    return e.detail or e.strerror or str(e)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    as_json = "--json" in argv
    result = {}

    def fail(code, reason, msg):
        # one line on stderr always; with --json also the error object on stdout
        print("wsync-relay: %s" % msg, file=sys.stderr, flush=True)
        if as_json:
            print(json.dumps({"ok": False, "error": msg, "reason": reason, "exit": code}),
                  flush=True)
        return code

    try:
        a = parse_args(argv)
    except UsageError as e:
        return fail(EXIT_USAGE, "usage", _usage_text(str(e)))
    if a.version:
        v = version_text()
        if as_json:
            print(json.dumps(dict(ok=True, **v)))
        else:
            print("wsync-relay %s (libwsync %s, libwsync-delta %s)"
                  % (v["relay"], v["libwsync"], v["codec"]))
        return 0
    try:
        code = run(a, result)
    except UsageError as e:
        return fail(EXIT_USAGE, "usage", str(e))
    except wsync.WsyncError as e:
        return fail(EXIT_FAILED, _REASONS.get(e.errno, "error"),
                    "local broker: %s" % _wsync_text(e))
    except ImportError as e:
        return fail(EXIT_FAILED, "error", str(e))
    if as_json:
        print(json.dumps(dict(ok=True, **result)))
    return code


def _exit(code):
    # Skip the interpreter's teardown: torch.distributed's C++ objects of a
    # group broken by a dead peer can abort in their destructors, turning a
    # clean stop into SIGABRT. Everything of ours is closed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 1)


def cli():
    """The installed wsync-relay command."""
    _exit(main())


if __name__ == "__main__":
    cli()
