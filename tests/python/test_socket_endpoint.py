"""The socket a client uses is enough for the tools: a broker given a
--socket whose name is not its instance's, in a directory of its own,
leaves "<socket>.wsync" naming its state file, and wsyncctl and wsync-top
find it from $WSYNC_ENDPOINT or --endpoint without a session (from another
run directory too). The pointer is trusted only as the state file is: a
symlink, one another uid owns or may write, one that names no state file,
or one beside a socket of another uid is refused. A clean stop takes it
away; a broker at its default socket needs none."""
import json
import os
import signal
import subprocess
import time

import pytest

import wsync
from conftest import ROOT, WAIT_S, wsyncd_path

BUILD = os.environ.get("BUILD") or "build"
CTL = os.path.join(ROOT, BUILD, "bin", "wsyncctl")
TOP = os.path.join(ROOT, BUILD, "bin", "wsync-top")


class Daemon:
    """A wsyncd with the run directory <tmp>/run and the given socket."""

    def __init__(self, tmp_path, sock=None):
        self.name = "lab%d" % os.getpid()
        self.run = str(tmp_path / "run")
        os.makedirs(self.run, mode=0o700, exist_ok=True)
        args = [wsyncd_path(), "--name", self.name, "--no-keep", "--huge-pages", "off"]
        if sock:
            args += ["--socket", sock]
        self.sock = sock or os.path.join(self.run, "wsync", self.name + ".sock")
        self.log = open(str(tmp_path / "wsyncd.log"), "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log,
                                     env=dict(os.environ, XDG_RUNTIME_DIR=self.run))
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                wsync.connect(self.sock, "probe").close()
                break
            except wsync.WsyncError:
                assert self.proc.poll() is None, "wsyncd ended at startup"
                assert time.monotonic() < deadline, "wsyncd did not start"
                time.sleep(0.02)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(WAIT_S) == 0
        self.log.close()


@pytest.fixture
def lab(tmp_path):
    d = str(tmp_path / "x")
    os.mkdir(d)
    b = Daemon(tmp_path, os.path.join(d, "train.sock"))
    yield b
    if b.proc.poll() is None:
        b.stop()


def tool(path, *args, endpoint=None, tmp_env=None):
    env = dict(os.environ)
    env.pop("WSYNC_ENDPOINT", None)
    if endpoint:
        env["WSYNC_ENDPOINT"] = endpoint
    # another run directory than the broker's: the pointer alone finds it
    env["XDG_RUNTIME_DIR"] = tmp_env or "/nonexistent-run-dir"
    return subprocess.run([path] + [str(a) for a in args], capture_output=True, text=True,
                          env=env, timeout=WAIT_S)


def test_tools_find_a_broker_by_its_socket(lab):
    ptr = lab.sock + ".wsync"
    st = os.lstat(ptr)
    assert st.st_mode & 0o777 == 0o644 and st.st_uid == os.getuid()
    with open(ptr) as f:
        assert f.read() == os.path.join(lab.run, "wsync", lab.name + ".state") + "\n"
    with wsync.connect(lab.sock, "trainer") as c:
        pub = c.publisher("pol", [("w", "f32", (4,))])
        with pub.begin(timeout=WAIT_S) as slab:
            slab.commit(1)
        for r in (tool(CTL, "--json", "status", endpoint=lab.sock),
                  tool(CTL, "--json", "--endpoint", lab.sock, "status")):
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout)["instance"] == lab.name
        r = tool(CTL, "--json", "sessions", endpoint=lab.sock)
        assert r.returncode == 0 and "trainer" in {s["name"] for s in
                                                   json.loads(r.stdout)["sessions"]}
        r = tool(CTL, "--json", "models", endpoint=lab.sock)
        assert [m["name"] for m in json.loads(r.stdout)["models"]] == ["pol"]
        for args in (["ping"], ["metrics"]):
            r = tool(CTL, *args, endpoint=lab.sock)
            assert r.returncode == 0, (args, r.stderr)
        r = tool(TOP, "--json", "-n", 1, endpoint=lab.sock)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout.splitlines()[0])["models"][0]["name"] == "pol"
        r = tool(TOP, "-b", "-n", 1, "--endpoint", lab.sock)
        assert r.returncode == 0 and lab.name in r.stdout, r.stderr
    lab.stop()
    assert not os.path.exists(ptr), "a clean stop removes the pointer"
    r = tool(CTL, "status", endpoint=lab.sock)
    assert r.returncode == 3 and "no broker at " + lab.sock in r.stderr, r.stderr


def refused(lab, what):
    r = tool(CTL, "--json", "status", endpoint=lab.sock)
    assert r.returncode != 0, (what, r.stdout)
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and "not reading" in doc["error"], (what, doc)
    return doc


def test_a_pointer_is_trusted_like_the_state_file(lab, tmp_path):
    ptr = lab.sock + ".wsync"
    with open(ptr) as f:
        good = f.read()

    def rewrite(text, mode=0o644):
        if os.path.lexists(ptr):
            os.unlink(ptr)
        with open(ptr, "w") as f:
            f.write(text)
        os.chmod(ptr, mode)

    rewrite(good, 0o666)                                   # anyone may write it
    refused(lab, "mode 0666")
    rewrite(good, 0o620)
    refused(lab, "group-writable")
    rewrite(os.path.join(str(tmp_path), "elsewhere.txt") + "\n")
    refused(lab, "names no state file")
    rewrite("relative/" + lab.name + ".state\n")
    refused(lab, "relative")
    os.unlink(ptr)                                         # a link to the real one
    real = str(tmp_path / "real.wsync")
    with open(real, "w") as f:
        f.write(good)
    os.symlink(real, ptr)
    r = tool(CTL, "status", endpoint=lab.sock)
    assert r.returncode != 0 and "symlink" in r.stderr, r.stderr
    os.unlink(ptr)
    rewrite(good)
    assert tool(CTL, "status", endpoint=lab.sock).returncode == 0
    if os.getuid() != 0:
        return
    # another uid's pointer, or our pointer beside another uid's socket
    os.chown(ptr, 65534, 65534)
    refused(lab, "owned by nobody")
    os.chown(ptr, 0, 0)
    os.chown(lab.sock, 65534, 65534)
    r = tool(CTL, "status", endpoint=lab.sock)
    assert r.returncode == 3 and "is not its socket now" in r.stderr, r.stderr
    os.chown(lab.sock, 0, 0)


def test_no_pointer_at_the_default_socket(tmp_path):
    b = Daemon(tmp_path)
    try:
        assert not os.path.exists(b.sock + ".wsync")
        r = tool(CTL, "--json", "status", endpoint=b.sock)
        assert r.returncode == 0 and json.loads(r.stdout)["instance"] == b.name, r.stderr
    finally:
        b.stop()
