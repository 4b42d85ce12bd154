"""tests/suite.sh, make test's driver: every suite runs even after one
failed, and the last line sums them all (CI reads it)."""
import os
import re
import subprocess

from conftest import ROOT

SUITE = os.path.join(ROOT, "tests", "suite.sh")


def suite(*args):
    return subprocess.run(["sh", SUITE] + list(args), capture_output=True, text=True,
                          timeout=60)


def test_every_suite_runs_and_the_counts_add_up(tmp_path):
    ran = tmp_path / "ran"
    r = suite("layering", "echo cycle; exit 1",
              "c", "echo 'PASS x'; echo '5 passed, 2 failed, 1 skipped'; exit 1",
              "python", "echo '3 failed, 40 passed, 4 skipped, 1 error in 9.20s'; "
                        "touch %s; exit 1" % ran)
    assert r.returncode == 1, r
    assert ran.exists(), "a suite after a failed one did not run"
    lines = r.stdout.splitlines()
    assert lines[-1] == "45 passed, 7 failed, 5 skipped", r.stdout
    # each suite's count and wall time
    assert re.search(r"^== layering: 0 passed, 1 failed, 0 skipped \(\d+ s\); c: 5 passed",
                     lines[-2]), r.stdout


def test_all_green_exits_0_and_pytest_banner_is_read():
    r = suite("layering", "true",
              "python", "echo '==== 7 passed, 2 skipped, 1 xfailed in 1.00s ===='")
    assert r.returncode == 0, r
    assert r.stdout.splitlines()[-1] == "8 passed, 0 failed, 3 skipped"


def test_a_crash_without_a_count_is_a_failure():
    # pytest that dies before its summary, or a count of 0 failed with a
    # non-zero exit: one failure, never a green line
    r = suite("python", "echo '2 passed in 0.10s'; exit 2", "build", "exit 3")
    assert r.returncode == 1
    assert r.stdout.splitlines()[-1] == "2 passed, 2 failed, 0 skipped"


def test_usage():
    assert suite().returncode == 2
    assert suite("odd").returncode == 2
