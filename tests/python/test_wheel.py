"""The wheel: `pip wheel libclient/python` builds libwsync from the tree and
bundles it (and wsyncd) with nothing downloaded (pip's isolated build, no
index); installed into a fresh venv made with --system-site-packages (for
Debian's numpy and torch), `import wsync` works with nothing set, and the
trainer/collector example runs from a directory outside the tree. A Python
without numpy, or without the library, gets a message saying what to do."""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

import pytest

from conftest import ROOT

_STRIP = ("PYTHONPATH", "WSYNC_LIBRARY", "WSYNC_WSYNCD", "WSYNC_ENDPOINT", "LD_LIBRARY_PATH",
          "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL",
          "PIP_FIND_LINKS", "VIRTUAL_ENV")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in _STRIP}
    env.update(PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.update(extra)
    return env


def run(args, env, cwd, timeout=300, ok=True):
    p = subprocess.run(args, env=env, cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=timeout)
    if ok:
        assert p.returncode == 0, "%s failed (%d):\n%s" % (" ".join(args), p.returncode,
                                                           p.stdout[-4000:])
    return p


def _need(*modules):
    import importlib.util
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip("%s not installed for %s (make test-python installs python3-venv "
                    "and python3-pip)" % (", ".join(missing), sys.executable))


@pytest.fixture(scope="module")
def wheel():
    """Builds the wheel once: `pip wheel` with pip's build isolation, no
    index (so no download is possible), reusing the tree's BUILD directory."""
    _need("pip", "venv", "ensurepip")
    out = tempfile.mkdtemp(prefix="wsync-wheel-")
    try:
        build = os.environ.get("BUILD", "build")
        run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "-w", out,
             os.path.join(ROOT, "libclient", "python")],
            clean_env(WSYNC_BUILD=build), out)
        wheels = [f for f in os.listdir(out) if f.endswith(".whl")]
        assert len(wheels) == 1, wheels
        yield os.path.join(out, wheels[0])
    finally:
        shutil.rmtree(out, ignore_errors=True)


def venv(where, system_site):
    args = [sys.executable, "-m", "venv", where]
    if system_site:
        args.insert(3, "--system-site-packages")
    run(args, clean_env(), os.path.dirname(where))
    return os.path.join(where, "bin", "python")


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="wsync-venv-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_wheel_holds_the_package_the_library_and_the_broker(wheel):
    name = os.path.basename(wheel)
    assert name.startswith("wsync-0.2.0-py3-none-linux_"), name
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for f in ("wsync/__init__.py", "wsync/rl.py", "wsync/broker.py", "wsync/py.typed",
                  "wsync/_native/libwsync.so.0", "wsync/_native/wsyncd",
                  "wsync/_native/libwsync-delta.so.0", "wsync/_native/wsyncctl",
                  "wsync/_native/wsync-top", "wsync-0.2.0.data/scripts/wsyncd",
                  "wsync-0.2.0.data/scripts/wsyncctl", "wsync-0.2.0.data/scripts/wsync-top",
                  "wsync-0.2.0.dist-info/METADATA", "wsync-0.2.0.dist-info/RECORD",
                  "wsync-0.2.0.dist-info/WHEEL", "wsync-0.2.0.dist-info/LICENSE"):
            assert f in names, (f, sorted(names))
        assert not any(n.endswith("_paths.py") for n in names)
        for prog in ("wsyncd", "wsyncctl", "wsync-top"):
            mode = z.getinfo("wsync/_native/" + prog).external_attr >> 16
            assert mode & 0o111, (prog, oct(mode))
            mode = z.getinfo("wsync-0.2.0.data/scripts/" + prog).external_attr >> 16
            assert mode & 0o111, (prog, oct(mode))
        meta = z.read("wsync-0.2.0.dist-info/METADATA").decode()
        assert "Requires-Dist: numpy" in meta and "Requires-Python: >=3.8" in meta, meta
        assert "License: BSD-3-Clause" in meta and "License-File: LICENSE" in meta, meta
        with open(os.path.join(ROOT, "LICENSE"), "rb") as f:
            assert z.read("wsync-0.2.0.dist-info/LICENSE") == f.read()
        entry = z.read("wsync-0.2.0.dist-info/entry_points.txt").decode()
        assert "wsync-relay = wsync.relay:cli" in entry, entry
        record = z.read("wsync-0.2.0.dist-info/RECORD").decode()
        assert "wsync/_native/libwsync.so.0,sha256=" in record
        assert "wsync/_native/libwsync-delta.so.0,sha256=" in record


def test_venv_runs_the_example_outside_the_tree(wheel, tmp):
    py = venv(os.path.join(tmp, "venv"), system_site=True)
    env = clean_env()
    run([py, "-m", "pip", "install", "-q", "--no-index", wheel], env, tmp)
    site = run([py, "-c", "import wsync, os; print(os.path.dirname(wsync.__file__))"],
               env, tmp).stdout.strip()
    assert site.startswith(os.path.join(tmp, "venv")), site
    out = run([py, "-m", "wsync", "--version"], env, tmp).stdout
    assert "wsync 0.2.0 (libwsync 0.2.0)" in out, out
    out = run([py, "-c", "import wsync; print(wsync.library_path())"], env, tmp).stdout
    assert out.strip() == os.path.join(site, "_native", "libwsync.so.0"), out
    out = run([py, "-m", "wsync.broker", "--version"], env, tmp).stdout
    assert "wsyncd 0.2.0" in out, out
    assert os.access(os.path.join(tmp, "venv", "bin", "wsyncd"), os.X_OK)
    # the tools and the relay, from the environment's bin/; the relay finds
    # the bundled codec
    bindir = os.path.join(tmp, "venv", "bin")
    for prog, want in (("wsyncctl", "wsyncctl 0.2.0"), ("wsync-top", "wsync-top 0.2.0"),
                       ("wsync-relay", "libwsync-delta 1 (")):
        out = run([os.path.join(bindir, prog), "--version"], env, tmp).stdout
        assert want in out, (prog, out)

    # the example, copied where no source tree is near, starts the bundled
    # broker, a trainer and 4 collector processes, kills one midway
    work = os.path.join(tmp, "work")
    os.mkdir(work)
    for f in ("collectors.py", "common.py"):
        shutil.copy(os.path.join(ROOT, "examples", "python", f), work)
    p = run([py, "collectors.py", "--short"], env, work, timeout=300)
    out = p.stdout
    assert "wsync 0.2.0 from %s" % site in out, out
    assert "libwsync %s" % os.path.join(site, "_native", "libwsync.so.0") in out, out
    assert "killed collector 0" in out and out.rstrip().endswith("OK"), out


def test_a_venv_without_numpy_is_told_what_to_do(wheel, tmp):
    py = venv(os.path.join(tmp, "bare"), system_site=False)
    env = clean_env()
    run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", wheel], env, tmp)
    p = run([py, "-c", "import wsync"], env, tmp, ok=False)
    assert p.returncode == 1
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("ImportError: wsync needs numpy"), p.stdout
    assert "--system-site-packages" in last and "python3-numpy" in last, last
    # the native programs need no numpy: the broker starts and answers the tools
    bindir = os.path.join(tmp, "bare", "bin")
    out = run([os.path.join(bindir, "wsyncd"), "--version"], env, tmp).stdout
    assert "wsyncd 0.2.0" in out, out
    name = "wheel-bare-%d" % os.getpid()
    env = dict(env, XDG_RUNTIME_DIR=tmp)
    broker = subprocess.Popen([os.path.join(bindir, "wsyncd"), "--name", name, "--no-keep"],
                              env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            p = run([os.path.join(bindir, "wsyncctl"), "--name", name, "status"], env, tmp,
                    ok=False)
            # exit 0 also for a broker still starting (no heartbeat yet)
            if (p.returncode == 0 and "health      running" in p.stdout) or \
                    time.monotonic() > deadline or broker.poll() is not None:
                break
            time.sleep(0.1)
        assert p.returncode == 0 and "health      running" in p.stdout, p.stdout
    finally:
        broker.terminate()
        broker.wait(20)
    # pip, asked to satisfy the dependency with no index, names it
    p = run([py, "-m", "pip", "install", "--no-index", wheel], env, tmp, ok=False)
    assert p.returncode != 0 and "numpy" in p.stdout, p.stdout


def test_no_library_is_a_message_that_says_how_to_get_one(tmp):
    import ctypes.util
    if ctypes.util.find_library("wsync"):
        pytest.skip("a libwsync is installed on this machine (%s)"
                    % ctypes.util.find_library("wsync"))
    pkg = os.path.join(tmp, "pkg")
    shutil.copytree(os.path.join(ROOT, "libclient", "python", "wsync"),
                    os.path.join(pkg, "wsync"),
                    ignore=shutil.ignore_patterns("__pycache__", "_paths.py", "_native"))
    # the package away from any tree and with no library anywhere it looks
    p = run([sys.executable, "-c", "import wsync"],
            clean_env(PYTHONPATH=pkg, LD_LIBRARY_PATH=tmp), tmp, ok=False)
    last = p.stdout.strip().splitlines()
    assert p.returncode == 1, p.stdout
    text = "\n".join(last[-6:])
    assert "LibraryNotFoundError: wsync: cannot load libwsync" in text, p.stdout
    assert "pip install" in text and "make install" in text and "WSYNC_LIBRARY" in text, text
    p = run([sys.executable, "-c", "import wsync"],
            clean_env(PYTHONPATH=pkg, WSYNC_LIBRARY=os.path.join(tmp, "nope.so")), tmp,
            ok=False)
    assert p.returncode == 1 and "WSYNC_LIBRARY is set" in p.stdout, p.stdout
