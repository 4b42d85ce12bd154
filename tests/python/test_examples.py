"""The Python examples (examples/python) in their short mode, against the
test's broker: a trainer, 4 collector processes, one killed with SIGKILL
midway and started again."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("torch", reason="python3-torch is not installed")


@pytest.mark.parametrize("example", ["collectors.py", "collectors_rl.py"])
def test_example_short_run(broker, example):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", example),
                        "--short", "--endpoint", broker.sock],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=300)
    assert p.returncode == 0, p.stdout
    out = p.stdout
    assert "killed collector 0" in out and out.rstrip().endswith("OK"), out
    for i in range(4):
        assert "collector %d: " % i in out, out


def test_serve_during_updates_short_run(broker):
    """serve_during_updates.py: workers act through LivePolicy while the
    trainer publishes; each reports its actions, lag and longest pause."""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python",
                                                     "serve_during_updates.py"),
                        "--short", "--endpoint", broker.sock],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=300)
    assert p.returncode == 0, p.stdout
    out = p.stdout
    assert out.rstrip().endswith("OK"), out
    for i in range(2):
        assert "worker %d: " % i in out and "longest pause" in out, out


def test_gpu_example(broker):
    """collectors_gpu.py: where torch has CUDA, the same short run on the
    GPUs; elsewhere it says what it needs and exits 3, starting nothing."""
    import torch
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python",
                                                     "collectors_gpu.py"),
                        "--short", "--endpoint", broker.sock],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=300)
    if torch.cuda.is_available():
        assert p.returncode == 0, p.stdout
        assert "killed collector 0" in p.stdout and p.stdout.rstrip().endswith("OK"), p.stdout
    else:
        assert p.returncode == 3, p.stdout
        assert "needs PyTorch with CUDA and a GPU" in p.stdout, p.stdout


def _which_wsync(env):
    """The wsync package examples/python/common.py imports under env."""
    p = subprocess.run([sys.executable, "-c", "import common; print(common.wsync.__file__)"],
                       cwd=os.path.join(ROOT, "examples", "python"), env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=120)
    assert p.returncode == 0, p.stdout
    return p.stdout.strip().splitlines()[-1]


def test_examples_prefer_the_installed_package(tmp_path):
    """An importable wsync (here a stand-in on PYTHONPATH, as a venv's
    wheel would be) wins over the source tree; the tree's package is only
    the fallback where the interpreter has none."""
    stub = tmp_path / "site" / "wsync"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("# stands in for an installed wsync\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WSYNC_LIBRARY")}
    got = _which_wsync(dict(env, PYTHONPATH=str(tmp_path / "site")))
    assert got == str(stub / "__init__.py"), got

    probe = subprocess.run([sys.executable, "-c", "import importlib.util as u; "
                            "print(u.find_spec('wsync') is not None)"], env=env,
                           cwd=str(tmp_path), stdout=subprocess.PIPE,
                           universal_newlines=True, timeout=60)
    if probe.stdout.strip() == "True":
        pytest.skip("this interpreter has a wsync installed: no fallback to test")
    got = _which_wsync(env)
    assert got == os.path.join(ROOT, "libclient", "python", "wsync", "__init__.py"), got
