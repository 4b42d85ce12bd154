"""The README's trainer and collector, in C and in Python, as printed
there: compiled against this build's libwsync and run together against a
broker, the collector reaches the trainer's last step."""
import os
import re
import subprocess
import sys

from conftest import ROOT, WAIT_S

BUILD = os.environ.get("BUILD") or "build"


def blocks(lang):
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    return re.findall(r"```%s\n(.*?)```" % lang, text, re.S)


def run_pair(trainer_cmd, collector_cmd, env):
    col = subprocess.Popen(collector_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env)
    tr = subprocess.run(trainer_cmd, capture_output=True, text=True, env=env, timeout=WAIT_S)
    out, err = col.communicate(timeout=WAIT_S)
    assert tr.returncode == 0, tr.stderr
    assert col.returncode == 0, err
    return out


def test_readme_c(broker, tmp_path):
    trainer, collector = blocks("c")
    exe = {}
    for name, src in (("trainer", trainer), ("collector", collector)):
        path = tmp_path / (name + ".c")
        path.write_text(src)
        exe[name] = str(tmp_path / name)
        subprocess.run(["cc", "-std=gnu11", "-Wall", "-Wextra", "-Werror",
                        "-I" + os.path.join(ROOT, "libclient"), "-o", exe[name], str(path),
                        "-L" + os.path.join(ROOT, BUILD, "lib"), "-lwsync"], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(ROOT, BUILD, "lib"))
    out = run_pair([exe["trainer"]], [exe["collector"]], env)
    assert out.strip().splitlines()[-1].endswith("step 100: w[0] = 100"), out


def test_readme_python(broker, tmp_path):
    trainer, collector = blocks("python")[:2]
    for name, src in (("trainer", trainer), ("collector", collector)):
        (tmp_path / (name + ".py")).write_text(src)
    out = run_pair([sys.executable, str(tmp_path / "trainer.py")],
                   [sys.executable, str(tmp_path / "collector.py")], dict(os.environ))
    assert out.strip().splitlines()[-1].split()[1:] == ["100", "100.0"], out
