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
