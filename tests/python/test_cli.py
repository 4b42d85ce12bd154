"""Every program answers -h, --help and --version, names a bad option, and
exits 2 for it; the demo roles take --model (and --name, the broker
instance, as wsyncctl and wsync-top do) and refuse a model the demo trainer
did not publish instead of counting its bytes as failures."""
import os
import re
import signal
import subprocess
import time

import pytest

import wsync
from conftest import ROOT, WAIT_S

BUILD = os.environ.get("BUILD") or "build"
BIN = os.path.join(ROOT, BUILD, "bin")
PROGRAMS = ["wsyncd", "wsyncctl", "wsync-top", "wsync-demo", "wsync-bench"]
COMPLETION = os.path.join(ROOT, "tools", "completion", "wsync.bash")


def run(*args, timeout=WAIT_S):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("prog", PROGRAMS)
def test_help_version_bad_option(prog):
    path = os.path.join(BIN, prog)
    for flag in ("-h", "--help"):
        r = run(path, flag)
        assert r.returncode == 0 and r.stdout.lower().startswith("usage: "), (flag, r)
    r = run(path, "--version")
    assert r.returncode == 0 and r.stdout.split()[0] in (prog, "wsyncd"), r
    assert r.stdout.split()[1][0].isdigit(), r.stdout
    r = run(path, "--no-such-option")
    assert r.returncode == 2 and "'--no-such-option'" in r.stderr, r


def test_demo_roles_take_a_model(broker):
    demo = os.path.join(BIN, "wsync-demo")
    trainer = subprocess.Popen([demo, "trainer", "--endpoint", broker.sock, "--model",
                                "pi.v2", "--mib", "1", "--hz", "20", "--tensors", "3"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    collector = subprocess.Popen([demo, "collector", "--endpoint", broker.sock, "--model",
                                  "pi.v2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            with wsync.connect(broker.sock) as c:
                names = {m.name: m for m in c.models()}
            if "pi.v2" in names and names["pi.v2"].version > 10:
                break
            assert time.monotonic() < deadline, "the demo trainer did not publish pi.v2"
            time.sleep(0.1)
    finally:
        collector.send_signal(signal.SIGTERM)
        out, err = collector.communicate(timeout=WAIT_S)
        trainer.send_signal(signal.SIGTERM)
        trainer.communicate(timeout=WAIT_S)
    assert collector.returncode == 0, err
    result = [ln for ln in out.splitlines() if ln.startswith("result collector")][0]
    fields = dict(kv.split("=") for kv in result.split()[2:])
    assert int(fields["views"]) > 0 and fields["failures"] == "0", result
    assert "policy" not in names


def test_demo_collector_refuses_other_models(broker):
    with wsync.connect(broker.sock, "other") as c:
        pub = c.publisher("weights", [("w", "f32", (64,))])
        with pub.begin(timeout=WAIT_S) as slab:
            slab.commit(1)
        r = run(os.path.join(BIN, "wsync-demo"), "collector", "--endpoint", broker.sock,
                "--model", "weights", timeout=WAIT_S)
    assert r.returncode == 1, r
    assert "'weights' is not a demo model" in r.stderr and "failures=0" in r.stdout, r


def complete(func, *words):
    """What the bash completion offers for the words typed so far (the last
    is the word being completed), with this build's programs on PATH."""
    script = ("source %s; COMP_WORDS=(%s); COMP_CWORD=%d; %s; printf '%%s\\n' "
              "\"${COMPREPLY[@]}\"" % (COMPLETION, " ".join("'%s'" % w for w in words),
                                        len(words) - 1, func))
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"])
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env,
                       timeout=WAIT_S)
    assert r.returncode == 0, r.stderr
    return sorted(r.stdout.split())


def test_completion_agrees_with_the_programs():
    # wsync-bench --only: the scenarios the bench really has
    src = open(os.path.join(ROOT, "tools", "bench", "main.c")).read()
    table = src[src.index("} scenarios[] = {"):]
    names = re.findall(r'\{ "([a-z0-9]+)",\s+SC_', table[:table.index("};")])
    assert {"e2e", "hostile", "python"} <= set(names), names
    assert complete("_wsync_bench", "wsync-bench", "--only", "") == sorted(names)
    assert complete("_wsync_bench", "wsync-bench", "--only", "publish,ac") == ["publish,acquire"]
    # wsyncctl load: the options its help gives, --no-checksum (the default is on)
    help_text = run(os.path.join(BIN, "wsyncctl"), "--help").stdout
    assert "[--no-checksum]" in help_text and "[--checksum]" not in help_text, help_text
    load = run(os.path.join(BIN, "wsyncctl"), "load", "--help").stdout
    opts = set(re.findall(r"^  (--[a-z-]+)", load, re.M))
    assert opts >= {"--model", "--step", "--no-checksum", "--timeout"}, load
    assert opts <= set(complete("_wsyncctl", "wsyncctl", "load", "x", "--")), opts
    # wsync-relay, installed by make install: every option of its --help
    make = open(os.path.join(ROOT, "Makefile")).read()
    assert re.search(r"^COMPLETED\s*:=.*\bwsync-relay\b", make, re.M)
    from wsync import relay
    want = {o for a in relay.make_parser()._actions if a.help != "==SUPPRESS=="
            for o in a.option_strings if o.startswith("--")}
    got = set(complete("_wsync_relay", "wsync-relay", "--"))
    assert want <= got and got <= want, (want - got, got - want)
    assert complete("_wsync_relay", "wsync-relay", "--backend", "") == ["auto", "gloo", "nccl"]
