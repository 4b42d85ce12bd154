"""Fixtures for the Python tests: a private wsyncd per test, and child
processes (multiprocessing, spawn context).

The broker is started the way tests/lib/harness.c does it: a unique instance
name (py<pid>-<n>), a fresh mkdtemp directory that is XDG_RUNTIME_DIR for the
broker and the test, its socket there (--socket), its stderr in
<dir>/wsyncd.log, and a connect loop until it answers. At the end of a test it
gets SIGTERM and must exit 0 leaving nothing of its instance in /dev/shm. A
broker the test killed (SIGKILL) is only cleaned up: its segments and
directory are removed.

Environment: WSYNC_WSYNCD (the broker binary; default build/bin/wsyncd of
the repository), WSYNC_LIBRARY (see the wsync package).
"""
import ctypes
import itertools
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
_PKG = os.path.join(ROOT, "libclient", "python")
if _PKG not in sys.path:
    sys.path.insert(0, _PKG)
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import wsync  # noqa: E402
from wsync_procs import child_main  # noqa: E402

# How long a handshake or child may take before the test calls it hung:
# generous, a loaded 2-core machine is slow. Not a performance bound.
WAIT_S = 15.0

_counter = itertools.count(1)


def wsyncd_path():
    env = os.environ.get("WSYNC_WSYNCD")
    if env:
        return env
    build = os.environ.get("BUILD") or "build"
    return os.path.join(ROOT, build, "bin", "wsyncd")


def _pdeathsig():
    # The broker must not outlive a test run that is killed.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class Broker:
    def __init__(self, args=()):
        self.path = wsyncd_path()
        self.name = "py%d-%d" % (os.getpid(), next(_counter))
        self.dir = tempfile.mkdtemp(prefix="wsync-test-")
        self.sock = os.path.join(self.dir, self.name + ".sock")
        self.log = os.path.join(self.dir, "wsyncd.log")
        self.prefix = "wsync.%d.%s." % (os.getuid(), self.name)
        self.args = list(args)
        # the same pages on every machine: huge-page slabs are not adopted
        # across a restart, which tests of adoption count on
        if "--huge-pages" not in self.args:
            self.args += ["--huge-pages", "off"]
        # a clean stop keeps the latest weights by default: tests leave nothing
        if "--keep" not in self.args and "--no-keep" not in self.args:
            self.args += ["--no-keep"]
        self.proc = None

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def start(self):
        assert not self.running, "broker %s already runs" % self.name
        if not os.access(self.path, os.X_OK):
            pytest.fail("no wsyncd at %s (run make, or set WSYNC_WSYNCD)" % self.path)
        env = dict(os.environ, XDG_RUNTIME_DIR=self.dir)
        with open(self.log, "ab") as log, open(os.devnull, "rb") as devnull:
            self.proc = subprocess.Popen(
                [self.path, "--name", self.name, "--socket", self.sock] + self.args,
                stdin=devnull, stdout=log, stderr=log, env=env, close_fds=True,
                preexec_fn=_pdeathsig)
        deadline = time.monotonic() + 5.0
        last = None
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self.proc = None
                pytest.fail("wsyncd %s ended during startup with %s\n%s"
                            % (self.name, rc, self.log_tail()))
            try:
                wsync.connect(self.sock, "harness-probe").close()
                return self
            except wsync.WsyncError as e:
                last = e
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail("wsyncd %s did not accept a client within 5 s (last: %s)\n%s"
                            % (self.name, last, self.log_tail()))
            time.sleep(0.01)

    def restart(self):
        with open(self.log, "a") as f:
            f.write("---- restarting %s ----\n" % self.name)
        return self.start()

    def stop(self):
        """SIGTERM; returns the exit status (None if it did not exit in 10 s,
        then it is killed)."""
        assert self.running, "broker %s is not running" % self.name
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self.proc = None
        return rc

    def kill(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None

    def leftovers(self):
        try:
            return sorted(n for n in os.listdir("/dev/shm") if n.startswith(self.prefix))
        except FileNotFoundError:
            return []

    def log_tail(self, lines=40):
        try:
            with open(self.log, errors="replace") as f:
                tail = f.readlines()[-lines:]
        except OSError:
            return "(no broker log)"
        return "---- last lines of %s ----\n%s----" % (self.log, "".join(tail))

    def cleanup(self):
        self.kill()
        for n in self.leftovers():
            path = os.path.join("/dev/shm", n)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)   # a private directory
                continue
            try:
                os.unlink(path)
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def broker(monkeypatch):
    """A running private wsyncd; yields its Broker (.sock is its socket).
    At the end: SIGTERM must give exit 0 and no /dev/shm leftovers."""
    yield from running_broker(monkeypatch)


@pytest.fixture
def client(broker):
    """A client of the test's broker (session name "test"), closed at the
    end of the test."""
    with wsync.connect(broker.sock, "test") as c:
        yield c


def running_broker(monkeypatch, args=()):
    """The broker fixture's body, for fixtures that start one with args or
    in another environment: yields a started Broker, checks its clean stop."""
    b = Broker(args)
    monkeypatch.setenv("XDG_RUNTIME_DIR", b.dir)
    monkeypatch.setenv("WSYNC_ENDPOINT", b.sock)
    try:
        b.start()
        yield b
        if b.running:
            rc = b.stop()
            if rc != 0:
                pytest.fail("wsyncd %s ended with %s after SIGTERM (want exit 0)\n%s"
                            % (b.name, rc, b.log_tail()))
            left = b.leftovers()
            if left:
                pytest.fail("left in /dev/shm after a clean stop: %s" % ", ".join(left))
    finally:
        b.cleanup()


# ---- child processes ----------------------------------------------------------


class Child:
    def __init__(self, ctx, fn, args):
        self._rd, wr = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=child_main, args=(wr, fn, args), daemon=True)
        self.proc.start()
        wr.close()

    def result(self, timeout=WAIT_S):
        """The child function's return value; fails the test if it raised,
        died or took longer than timeout."""
        if not self._rd.poll(timeout):
            self.proc.kill()
            pytest.fail("child %s gave no result within %.0f s" % (self.proc.pid, timeout))
        try:
            kind, val = self._rd.recv()
        except EOFError:
            self.proc.join(WAIT_S)
            pytest.fail("child %s died without a result (exit code %s)"
                        % (self.proc.pid, self.proc.exitcode))
        self.proc.join(WAIT_S)
        if kind == "err":
            pytest.fail("child %s failed:\n%s" % (self.proc.pid, val))
        assert self.proc.exitcode == 0, "child exit code %s" % self.proc.exitcode
        return val


class Children:
    def __init__(self):
        self.ctx = multiprocessing.get_context("spawn")
        self.started = []

    def start(self, fn, *args):
        c = Child(self.ctx, fn, args)
        self.started.append(c)
        return c

    def event(self):
        return self.ctx.Event()

    def close(self):
        for c in self.started:
            if c.proc.is_alive():
                c.proc.kill()
            c.proc.join(WAIT_S)


@pytest.fixture
def children():
    """Starts functions of tests/python/wsync_procs.py in spawned processes;
    kills whatever is left at the end of the test."""
    ch = Children()
    try:
        yield ch
    finally:
        ch.close()
