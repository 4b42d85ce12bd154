"""python3 -m wsync --version | info [--endpoint E]: what this package
loaded and what the broker serves."""
import argparse
import sys
import time


def _info(endpoint):
    import wsync
    print("wsync package %s (%s)" % (wsync.__version__, wsync.__file__))
    print("libwsync %s: %s" % (wsync.library_version(), wsync.library_path()))
    from .broker import wsyncd_path
    print("wsyncd: %s" % (wsyncd_path() or "not found (python3 -m wsync.broker needs one)"))
    try:
        where = endpoint or wsync.default_endpoint()
    except wsync.WsyncError as e:
        where = "(no default endpoint: %s)" % e
    try:
        client = wsync.connect(endpoint, "wsync-info")
    except wsync.WsyncError as e:
        print("broker: not found at %s (%s)" % (where, e))
        return 1
    with client:
        models = client.models()
        print("broker: %s, %d model%s" % (where, len(models), "" if len(models) == 1 else "s"))
        now = time.time_ns()
        for m in models:
            if not m.published:
                print("  %-24s not published yet, %d subscriber(s)" % (m.name, m.subscribers))
                continue
            age = "%.1f s ago" % ((now - m.published_ns) / 1e9) if m.published_ns else "-"
            print("  %-24s v%d step %d (%s), %d tensors, %.1f MiB x %d slots, "
                  "%d publisher(s), %d subscriber(s)"
                  % (m.name, m.version, m.step, age, m.n_tensors, m.nbytes / 2**20,
                     m.n_slots, m.publishers, m.subscribers))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m wsync",
                                 description="The wsync Python package: version and status.")
    ap.add_argument("--version", action="store_true",
                    help="print the package's and the loaded libwsync's versions")
    sub = ap.add_subparsers(dest="cmd")
    info = sub.add_parser("info", help="library path, broker found or not, its models")
    info.add_argument("--endpoint", default=None,
                      help="a socket path or instance name (default: $WSYNC_ENDPOINT, "
                           "else the default broker)")
    args = ap.parse_args(argv)
    if args.version:
        import wsync
        print("wsync %s (libwsync %s)" % (wsync.__version__, wsync.library_version()))
        return 0
    if args.cmd == "info":
        return _info(args.endpoint)
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
