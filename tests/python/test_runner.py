"""tests/run.sh, the runner of the unit and integration tests: two tests at a
time, the timing-sensitive ones alone afterwards, one line per test and the
closing count (tests/suite.sh and CI read it)."""
import os
import subprocess
import textwrap

from conftest import ROOT

RUN = os.path.join(ROOT, "tests", "run.sh")


def script(path, body):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


def run(tmp_path, tests, jobs=None, solo=None, timeout_s=None):
    env = dict(os.environ, BUILD=str(tmp_path / "build"))
    for k, v in (("WSYNC_TEST_JOBS", jobs), ("WSYNC_TEST_SOLO", solo),
                 ("WSYNC_TEST_TIMEOUT", timeout_s)):
        env.pop(k, None)
        if v is not None:
            env[k] = str(v)
    return subprocess.run(["sh", RUN] + tests, capture_output=True, text=True, env=env,
                          cwd=str(tmp_path), timeout=60)


def test_each_outcome_is_counted_and_any_failure_fails(tmp_path):
    t = tmp_path / "tests" / "integ"
    tests = [script(t / "ok", "exit 0\n"),
             script(t / "skips", "echo 'SKIP: not here'; exit 77\n"),
             script(t / "fails", "echo the reason; exit 3\n"),
             script(t / "hangs", "exec sleep 30\n"),
             str(t / "absent")]
    r = run(tmp_path, tests, timeout_s=1)
    assert r.returncode == 1, r
    lines = r.stdout.splitlines()
    assert lines[-1] == "1 passed, 3 failed, 1 skipped", r.stdout
    assert any(l.startswith("PASS     integ/ok ") and l.endswith("s") for l in lines), r.stdout
    fail = lines.index(next(l for l in lines if l.startswith("FAIL     integ/fails ")))
    assert "(exit 3)" in lines[fail] and lines[fail + 1] == "    the reason", r.stdout
    assert any(l.startswith("TIMEOUT  integ/hangs ") and "(limit 1s)" in l for l in lines)
    assert any(l.startswith("FAIL     integ/absent ") and "(exit 127)" in l for l in lines)
    assert "    SKIP: not here" in lines, r.stdout
    # the log of each test, under $BUILD/tests/logs/<kind>/<name>.log
    assert (tmp_path / "build/tests/logs/integ/fails.log").read_text() == "the reason\n"

    r = run(tmp_path, tests[:2], timeout_s=1)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "1 passed, 0 failed, 1 skipped"


def rendezvous(t, name, other):
    """A test that passes only if `other` runs at the same time as it."""
    return script(t / name, """\
        touch "{d}/{me}.started"
        i=0
        while [ ! -e "{d}/{other}.started" ]; do
            i=$((i + 1)); [ $i -gt 200 ] && exit 1
            sleep 0.01
        done
        exit 0
        """.format(d=t, me=name, other=other))


def test_two_tests_run_at_a_time_by_default(tmp_path):
    t = tmp_path / "tests" / "integ"
    tests = [rendezvous(t, "a", "b"), rendezvous(t, "b", "a")]
    r = run(tmp_path, tests)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "2 passed, 0 failed, 0 skipped", r
    for f in t.glob("*.started"):
        f.unlink()
    # one at a time: the first waits for the second in vain
    r = run(tmp_path, tests, jobs=1)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("FAIL     integ/a ") and lines[1].startswith("PASS     integ/b ")
    assert r.returncode == 1 and lines[-1] == "1 passed, 1 failed, 0 skipped", r


def test_solo_tests_run_alone_after_the_others(tmp_path):
    t = tmp_path / "tests" / "integ"
    busy = """\
        touch "{d}/$(basename "$0").running"
        sleep 0.3
        rm "{d}/$(basename "$0").running"
        echo "$(basename "$0")" >>"{d}/order"
        """.format(d=t)
    alone = """\
        ls "{d}" | grep -q '\\.running$' && exit 1
        echo "$(basename "$0")" >>"{d}/order"
        sleep 0.3
        ls "{d}" | grep -q '\\.running$' && exit 1
        exit 0
        """.format(d=t)
    tests = [script(t / "timed_one", alone), script(t / "p1", busy), script(t / "p2", busy),
             script(t / "timed_two", alone), script(t / "p3", busy)]
    r = run(tmp_path, tests, solo="integ/timed_*")
    assert r.returncode == 0, r
    order = (t / "order").read_text().split()
    assert sorted(order[:3]) == ["p1", "p2", "p3"] and order[3:] == ["timed_one", "timed_two"]
    # the default list names the tests that measure time: a budget test is one
    (t / "order").unlink()
    tests = [script(t / "budget_x", alone), script(t / "p1", busy), script(t / "p2", busy)]
    r = run(tmp_path, tests)
    assert r.returncode == 0, r
    assert (t / "order").read_text().split()[-1] == "budget_x"


def test_segments_a_test_leaves_are_named(tmp_path):
    t = tmp_path / "tests" / "integ"
    seg = "wsync.%d.t$$-1.runner-test" % os.getuid()
    tests = [script(t / "leaks", 'touch "/dev/shm/%s"\n' % seg),
             script(t / "clean", "sleep 0.2\n")]
    try:
        r = run(tmp_path, tests)
        assert r.returncode == 0, r
        lines = r.stdout.splitlines()
        at = lines.index(next(l for l in lines if l.startswith("PASS     integ/leaks ")))
        assert lines[at + 1].startswith("    leftover in /dev/shm: wsync.%d.t" % os.getuid())
        assert lines[at + 1].endswith("-1.runner-test"), r.stdout
        assert sum("leftover" in l for l in lines) == 1, r.stdout
    finally:
        for n in os.listdir("/dev/shm"):
            if n.endswith(".runner-test"):
                os.unlink(os.path.join("/dev/shm", n))


def test_usage_and_bad_settings(tmp_path):
    r = run(tmp_path, [])
    assert r.returncode == 2 and "usage" in r.stderr
    ok = script(tmp_path / "tests" / "integ" / "ok", "exit 0\n")
    for jobs in ("0", "two", "-1"):
        r = run(tmp_path, [ok], jobs=jobs)
        assert r.returncode == 2 and "WSYNC_TEST_JOBS" in r.stderr, (jobs, r)
