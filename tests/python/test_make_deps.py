"""The Makefile installs the Debian packages before it compiles anything, in
a parallel build too: a copy of the tree whose .ci/deps.sh takes a while and
then leaves a mark, built with -j2 by a compiler that fails without the mark
(and only touches its output, so this costs no compile). NODEPS=1 and the
wheel backend's goals leave apt alone."""
import os
import shutil
import subprocess

from conftest import ROOT

FAKE_DEPS = """#!/bin/sh
sleep 0.5
touch "$WSYNC_DEPS_MARK"
"""

FAKE_CC = """#!/bin/sh
[ -e "$WSYNC_DEPS_MARK" ] || { echo "fakecc: compiling before deps: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
	[ "$1" = -o ] && : > "$2"
	shift
done
exit 0
"""


def tree_copy(dst):
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\n")
    for f in files:
        src = os.path.join(ROOT, f)
        if not f or not os.path.isfile(src):
            continue
        os.makedirs(os.path.join(dst, os.path.dirname(f)), exist_ok=True)
        shutil.copy2(src, os.path.join(dst, f))
    with open(os.path.join(dst, ".ci", "deps.sh"), "w") as fp:
        fp.write(FAKE_DEPS)
    cc = os.path.join(dst, "fakecc")
    with open(cc, "w") as fp:
        fp.write(FAKE_CC)
    os.chmod(cc, 0o755)
    return cc


def make(tree, cc, mark, *args):
    env = dict(os.environ, WSYNC_DEPS_MARK=mark)
    env.pop("MAKEFLAGS", None)
    env.pop("MFLAGS", None)
    return subprocess.run(["make", "-C", tree, "-j2", "CC=" + cc, "BUILD=b"] + list(args),
                          capture_output=True, text=True, env=env, timeout=120)


def test_parallel_build_waits_for_deps(tmp_path):
    tree = str(tmp_path / "tree")
    cc = tree_copy(tree)
    mark = str(tmp_path / "deps-done")
    # every object and the man pages: the first compiles run alongside deps
    # unless they wait for it
    r = make(tree, cc, mark, "all")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "compiling before deps" not in r.stderr
    assert os.path.exists(os.path.join(tree, "b", "bin", "wsyncd"))
    # a goal that is one object still installs the packages first
    os.unlink(mark)
    shutil.rmtree(os.path.join(tree, "b"))
    r = make(tree, cc, mark, "b/obj/libclient/checksum.o", "b/obj/broker/main.o")
    assert r.returncode == 0 and os.path.exists(mark), r.stdout + r.stderr


def test_nodeps_leaves_apt_alone(tmp_path):
    tree = str(tmp_path / "tree")
    cc = tree_copy(tree)
    for args in (["NODEPS=1", "all"], ["python-lib"]):
        r = make(tree, cc, str(tmp_path / "mark"), "-n", *args)
        assert r.returncode == 0, r.stderr
        assert "deps.sh" not in r.stdout, args
    r = make(tree, cc, str(tmp_path / "mark"), "-n", "all")
    assert "sh .ci/deps.sh" in r.stdout
