"""make install puts a package that finds its library by itself;
pip installs the package from libclient/python with its library; python3 -m wsync."""
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import wsync
from conftest import ROOT

CHECK = ("import wsync, sys; "
         "assert not wsync.__file__.startswith(sys.argv[1]), wsync.__file__; "
         "print(wsync.library_path())")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "WSYNC_LIBRARY", "LD_LIBRARY_PATH", "MAKEFLAGS",
                        "MAKELEVEL", "MFLAGS")}
    env.update(extra)
    return env


def run(args, env, cwd):
    p = subprocess.run(args, env=env, cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
    assert p.returncode == 0, "%s failed:\n%s" % (" ".join(args), p.stdout)
    return p.stdout


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="wsync-install-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_make_install_finds_its_library(tmp, broker):
    prefix = os.path.join(tmp, "prefix")
    build = os.environ.get("BUILD", "build")
    run(["make", "-s", "install", "PREFIX=" + prefix, "BUILD=" + build, "PYTHON=" + sys.executable],
        clean_env(), ROOT)
    ver = "%d.%d" % sys.version_info[:2]
    site = os.path.join(prefix, "lib", "python" + ver, "dist-packages")
    for f in ("__init__.py", "rl.py", "py.typed", "_paths.py", "__main__.py"):
        assert os.path.exists(os.path.join(site, "wsync", f)), f
    env = clean_env(PYTHONPATH=site, WSYNC_ENDPOINT=broker.sock)
    lib = os.path.join(prefix, "lib", "libwsync.so.0")
    assert run([sys.executable, "-c", CHECK, ROOT], env, tmp).strip() == lib
    assert "wsync 0.2.0 (libwsync 0.2.0)" in run([sys.executable, "-m", "wsync", "--version"],
                                                  env, tmp)
    with wsync.connect(broker.sock, "install-test") as c:
        pub = c.publisher("inst", [("w", "f32", (4,))])
        pub.publish({"w": [1, 2, 3, 4]}, 9)
        out = run([sys.executable, "-m", "wsync", "info"], env, tmp)
    assert lib in out and broker.sock in out, out
    assert "inst" in out and "step 9" in out, out
    # without _paths.py the package looks in <prefix>/lib beside its site dir
    os.unlink(os.path.join(site, "wsync", "_paths.py"))
    assert run([sys.executable, "-c", CHECK, ROOT], env, tmp).strip() == lib
    out = subprocess.run([sys.executable, "-m", "wsync", "info"],
                         env=clean_env(PYTHONPATH=site, WSYNC_ENDPOINT=os.path.join(tmp, "no.sock")),
                         cwd=tmp, stdout=subprocess.PIPE, universal_newlines=True)
    assert out.returncode == 1 and "broker: not found" in out.stdout
    run(["make", "-s", "uninstall", "PREFIX=" + prefix, "BUILD=" + build,
         "PYTHON=" + sys.executable], clean_env(), ROOT)
    assert not os.path.exists(os.path.join(site, "wsync"))


def test_pip_installs_the_package_with_its_library(tmp):
    """pip install --target (no index, the backend needs nothing): the
    package finds the library it bundles; WSYNC_LIBRARY still wins."""
    import importlib.util
    if importlib.util.find_spec("pip") is None:
        pytest.skip("pip not installed for %s" % sys.executable)
    target = os.path.join(tmp, "site")
    build = os.environ.get("BUILD", "build")
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         "--target", target, os.path.join(ROOT, "libclient", "python")],
        clean_env(PIP_NO_INPUT="1", WSYNC_BUILD=build), tmp)
    assert os.path.exists(os.path.join(target, "wsync", "py.typed"))
    bundled = os.path.join(target, "wsync", "_native", "libwsync.so.0")
    assert run([sys.executable, "-c", CHECK, ROOT], clean_env(PYTHONPATH=target),
               tmp).strip() == bundled
    lib = os.path.join(ROOT, build, "lib", "libwsync.so")
    env = clean_env(PYTHONPATH=target, WSYNC_LIBRARY=lib)
    assert run([sys.executable, "-c", CHECK, ROOT], env, tmp).strip() == lib


def test_make_install_service_man_completion(tmp, broker):
    """make install puts the systemd user units (Type=notify, a watchdog,
    reload by SIGHUP, PREFIX/bin/wsyncd), the man pages, the bash completion
    and the peers script of wsync-bench; make uninstall takes all of it out."""
    prefix = os.path.join(tmp, "prefix")
    build = os.environ.get("BUILD", "build")
    args = ["PREFIX=" + prefix, "BUILD=" + build, "PYTHON=" + sys.executable]
    run(["make", "-s", "install"] + args, clean_env(), ROOT)
    units = os.path.join(prefix, "lib", "systemd", "user")
    for unit, name in (("wsyncd.service", "default"), ("wsyncd@.service", "%i")):
        text = open(os.path.join(units, unit)).read()
        keys = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln and
                    not ln.startswith("#"))
        assert keys["Type"] == "notify" and int(keys["WatchdogSec"]) > 1
        assert keys["ExecReload"] == "/bin/kill -HUP $MAINPID"
        assert keys["ExecStart"] == "%s/bin/wsyncd --name %s" % (prefix, name)
        assert os.access(keys["ExecStart"].split()[0], os.X_OK)
    if shutil.which("systemd-analyze"):
        r = subprocess.run(["systemd-analyze", "verify", os.path.join(units, "wsyncd.service")],
                           env=clean_env(MANPATH=os.path.join(prefix, "share", "man")),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
    man = os.path.join(prefix, "share", "man")
    for page in ("man8/wsyncd.8", "man1/wsyncctl.1", "man1/wsync-top.1", "man3/libwsync.3",
                 "man1/wsync-demo.1", "man1/wsync-bench.1", "man1/wsync-relay.1"):
        text = open(os.path.join(man, page)).read()
        assert text.startswith(".\\\"") or ".TH" in text, page
        assert ".SH NAME" in text or ".SH \"NAME\"" in text, page
    out = run(["man", "-l", os.path.join(man, "man1", "wsyncctl.1")],
              clean_env(MANPAGER="cat", PAGER="cat", MANWIDTH="80"), tmp)
    assert "serve-metrics" in out and "EXIT STATUS" in out
    comp = os.path.join(prefix, "share", "bash-completion", "completions")
    for prog in ("wsyncctl", "wsync-top", "wsyncd", "wsync-demo", "wsync-bench", "wsync-relay"):
        assert os.path.exists(os.path.join(comp, prog)), prog
    # completion of a command and of the broker's models
    with wsync.connect(broker.sock, "t") as c:
        pub = c.publisher("completed", [("w", "f32", (4,))])
        pub.publish({"w": [1, 2, 3, 4]}, 1)
        script = ("source %s; COMP_WORDS=(wsyncctl ve); COMP_CWORD=1; _wsyncctl; "
                  "echo ${COMPREPLY[@]}; COMP_WORDS=(wsyncctl rm co); COMP_CWORD=2; "
                  "_wsyncctl; echo ${COMPREPLY[@]}" % os.path.join(comp, "wsyncctl"))
        out = run(["bash", "-c", script], clean_env(
            PATH=os.path.join(prefix, "bin") + ":" + os.environ["PATH"],
            WSYNC_ENDPOINT=broker.sock, XDG_RUNTIME_DIR=broker.dir), tmp).splitlines()
    assert out == ["verify", "completed"], out
    assert os.path.exists(os.path.join(prefix, "share", "wsync", "torch_peers.py"))
    run(["make", "-s", "uninstall"] + args, clean_env(), ROOT)
    left = [os.path.join(d, f) for d, _, fs in os.walk(prefix) for f in fs]
    assert left == [], left
