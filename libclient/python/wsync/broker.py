"""The broker, wsyncd, from Python: find it, run it, or start a private one.

    python3 -m wsync.broker [wsyncd options]      # runs wsyncd in the foreground

A wheel built from the wsync tree (pip install libclient/python) bundles
wsyncd next to libwsync (wsync/_native/wsyncd); otherwise it is the one the
source tree built, or the wsyncd on PATH (make install). start() runs a
private broker for one job or test and stops it again::

    with wsync.broker.start() as b:            # own name, socket and directory
        client = wsync.connect(b.endpoint)
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional, Sequence

__all__ = ["wsyncd_path", "start", "Broker", "main"]

_HERE = os.path.dirname(os.path.abspath(__file__))


def wsyncd_path() -> Optional[str]:
    """The wsyncd this package would run: $WSYNC_WSYNCD, the one a wheel
    bundles, the source tree's build/bin/wsyncd, the one `make install`
    put in <prefix>/bin, else wsyncd on PATH; None if there is none."""
    env = os.environ.get("WSYNC_WSYNCD")
    if env:
        return env
    cands = [os.path.join(_HERE, "_native", "wsyncd"),
             os.path.normpath(os.path.join(_HERE, "..", "..", "..", "build", "bin", "wsyncd"))]
    try:                        # make install: <prefix>/bin beside <prefix>/lib
        from ._paths import LIBRARY
        cands.append(os.path.join(os.path.dirname(os.path.dirname(LIBRARY)), "bin", "wsyncd"))
    except ImportError:
        pass
    for cand in cands:
        if os.access(cand, os.X_OK):
            return cand
    return shutil.which("wsyncd")


def _need_wsyncd():
    path = wsyncd_path()
    if path is None:
        raise FileNotFoundError(
            "wsync: no wsyncd found: not bundled with this package (a wheel built from the "
            "wsync tree carries it), not in the source tree, not on PATH; install it "
            "(make install) or set WSYNC_WSYNCD to its path")
    return path


class Broker:
    """A private wsyncd started by start(): endpoint (its socket path),
    name, directory (its XDG_RUNTIME_DIR and log), proc. stop() ends it
    with SIGTERM and removes the directory; a context manager."""

    def __init__(self, proc, name, endpoint, directory, own_dir):
        self.proc = proc
        self.name = name
        self.endpoint = endpoint
        self.directory = directory
        self._own_dir = own_dir

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> Optional[int]:
        """SIGTERM, wait up to timeout (then SIGKILL); returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def __repr__(self):
        return "<wsync.broker.Broker %s %s>" % (self.endpoint,
                                               "running" if self.running else "stopped")


def start(name: Optional[str] = None, directory: Optional[str] = None,
          args: Sequence[str] = (), wait: float = 10.0,
          wsyncd: Optional[str] = None) -> Broker:
    """Starts a private wsyncd and returns once it answers: its own instance
    name (default wsync-py<pid>-<n>), a directory (default a new temporary
    one, removed by stop()) that is its XDG_RUNTIME_DIR and holds its socket
    and its log (wsyncd.log), and args for wsyncd. Raises RuntimeError
    naming the log if it does not answer within wait seconds."""
    from . import WsyncError, connect

    path = wsyncd or _need_wsyncd()
    args = list(args)
    # a private broker leaves nothing behind unless asked to
    if "--keep" not in args and "--no-keep" not in args:
        args.append("--no-keep")
    own = directory is None
    if own:
        directory = tempfile.mkdtemp(prefix="wsync-broker-")
    start.count += 1
    name = name or "wsync-py%d-%d" % (os.getpid(), start.count)
    sock = os.path.join(directory, name + ".sock")
    log = open(os.path.join(directory, "wsyncd.log"), "ab")
    try:
        proc = subprocess.Popen([path, "--name", name, "--socket", sock] + list(args),
                                env=dict(os.environ, XDG_RUNTIME_DIR=directory),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    finally:
        log.close()
    b = Broker(proc, name, sock, directory, own)
    deadline = time.monotonic() + wait
    while True:
        try:
            connect(sock, "wsync-broker-probe").close()
            return b
        except WsyncError:
            if proc.poll() is not None or time.monotonic() > deadline:
                code = proc.poll()
                b.stop()
                raise RuntimeError("wsync: %s did not start (%s); its log: %s"
                                   % (path, "exit %s" % code if code is not None
                                      else "no answer within %g s" % wait,
                                      _tail(os.path.join(directory, "wsyncd.log"))))
            time.sleep(0.02)


start.count = 0


def _tail(path, n=400):
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode("utf-8", "replace").strip() or "(empty)"
    except OSError:
        return "(none)"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """python3 -m wsync.broker [wsyncd options]: execs wsyncd (the broker
    runs in this process's place, in the foreground)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        path = _need_wsyncd()
    except FileNotFoundError as e:
        sys.stderr.write("%s\n" % e)
        return 127
    os.execv(path, [path] + argv)
    return 127          # not reached


if __name__ == "__main__":
    sys.exit(main())
