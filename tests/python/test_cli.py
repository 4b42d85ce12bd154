"""Every program answers -h, --help and --version, names a bad option, and
exits 2 for it; the demo roles take --model (and --name, the broker
instance, as wsyncctl and wsync-top do) and refuse a model the demo trainer
did not publish instead of counting its bytes as failures."""
import json
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
    if prog in ("wsyncctl", "wsync-top"):         # the tools' --json contract
        for args in (("--json", "--version"), ("--version", "--json")):
            r = run(path, *args)
            doc = json.loads(r.stdout)
            assert r.returncode == 0 and doc == {"ok": True, "program": prog,
                                                 "version": doc["version"]}, r
            assert doc["version"][0].isdigit(), doc
    if prog == "wsync-bench":                    # --json takes a FILE, never an option
        r = run(path, "--json", "--version", timeout=10)
        assert r.returncode == 2 and "--json wants the FILE" in r.stderr, r


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


def test_multinode_torchrun_recipe_starts_the_relay(tmp_path):
    """docs/MULTINODE.md's torchrun line, as one node of one, launches
    wsync.relay with the torchrun installed here (Debian's torch 1.13:
    underscore flags only)."""
    import shutil
    if not shutil.which("torchrun"):
        pytest.skip("no torchrun (python3-torch) installed")
    doc = open(os.path.join(ROOT, "docs", "MULTINODE.md")).read()
    m = re.search(r"^torchrun .*?-m wsync\.relay --model policy$", doc, re.M | re.S)
    assert m, "no torchrun recipe in docs/MULTINODE.md"
    args = m.group(0).replace("\\\n", " ").split()
    assert args[-2:] == ["--model", "policy"]
    args = [a for a in args[:-2]] + ["--version"]
    subst = {"3": "1", "$NODE": "0", "10.0.0.1": "127.0.0.1",
             "29500": str(29600 + os.getpid() % 300)}
    for i, a in enumerate(args):
        if args[i - 1] in ("--nnodes", "--node_rank", "--master_addr", "--master_port"):
            args[i] = subst.get(a, a)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "libclient", "python"),
               WSYNC_DELTA_LIBRARY=os.path.join(ROOT, BUILD, "lib", "libwsync-delta.so"))
    if "WSYNC_LIBRARY" in env:
        env["WSYNC_LIBRARY"] = os.path.abspath(env["WSYNC_LIBRARY"])
    at = args.index("-m")
    args[at:at] = ["--log_dir", str(tmp_path)]
    r = subprocess.run(args, capture_output=True, text=True, env=env, cwd=str(tmp_path),
                       timeout=120)
    assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
    assert "wsync-relay 0.2.0" in r.stdout, r.stdout


@pytest.mark.parametrize("prog,func", [("wsyncd", "_wsyncd"), ("wsync-top", "_wsync_top"),
                                       ("wsync-bench", "_wsync_bench")])
def test_completion_offers_every_option_of_the_help(prog, func):
    """`PROG --<TAB>` offers every long option PROG --help lists, and
    nothing it does not know (wsyncd --keep: accepted, the default)."""
    help_text = run(os.path.join(BIN, prog), "--help").stdout
    want = set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z-]*)", help_text, re.M))
    if "--version" in help_text:                 # some list it after --help
        want.add("--version")
    assert "--help" in want and len(want) > 3, help_text
    got = set(complete(func, prog, "--"))
    extra = got - want - {"--keep"}
    assert want <= got and not extra, (sorted(want - got), sorted(extra))


def test_demo_collector_says_what_it_waits_for(broker):
    """A mistyped --model is said within a couple of seconds, naming the
    models that are published, instead of a silent wait."""
    import select
    with wsync.connect(broker.sock, "trainer") as c:
        pub = c.publisher("policy", [("w", "f32", (64,))])
        with pub.begin(timeout=WAIT_S) as slab:
            slab.commit(1)
        t0 = time.monotonic()
        p = subprocess.Popen([os.path.join(BIN, "wsync-demo"), "collector", "--endpoint",
                              broker.sock, "--model", "polcy"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = ""
            while "waiting" not in line and time.monotonic() - t0 < WAIT_S:
                ready, _, _ = select.select([p.stderr], [], [], 0.2)
                if ready:
                    line = p.stderr.readline()
            took = time.monotonic() - t0
        finally:
            p.send_signal(signal.SIGTERM)
            p.communicate(timeout=WAIT_S)
    assert "waiting for model 'polcy'" in line and "published here: policy" in line, line
    assert "is the name right?" in line and took < 5, (took, line)
