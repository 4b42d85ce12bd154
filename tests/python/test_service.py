"""The systemd user units (tools/service/*.in): the sandbox they ask for, the
exposure systemd-analyze gives them, and a broker that serves under the
restrictions a unit puts on it that can be had without systemd here
(no_new_privs, a 077 umask, no memory that is both written and executed)."""
import ctypes
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import wsync
from conftest import ROOT, Broker

UNITS = ("wsyncd.service", "wsyncd@.service")

WANT = {"NoNewPrivileges": "yes", "UMask": "0077", "ProtectSystem": "strict",
        "PrivateTmp": "yes", "ProtectHome": "read-only", "PrivateUsers": "yes",
        "RestrictAddressFamilies": "AF_UNIX", "LockPersonality": "yes",
        "RestrictRealtime": "yes", "SystemCallArchitectures": "native",
        "MemoryDenyWriteExecute": "yes", "RuntimeDirectory": "wsync",
        "RuntimeDirectoryPreserve": "yes"}

# what the broker calls that a deny list must leave (io_uring: its loop;
# chown: --group; setrlimit: its fd limit; memfd_create: huge-page slabs)
NEEDED = ("io_uring_setup", "io_uring_enter", "io_uring_register", "chown", "fchown",
          "setrlimit", "prlimit64", "memfd_create", "futex", "mmap", "mprotect",
          "fallocate", "ftruncate", "getsockopt", "ioctl")


def unit(name):
    with open(os.path.join(ROOT, "tools", "service", name + ".in")) as f:
        keys = {}
        for ln in f.read().splitlines():
            if "=" in ln and not ln.startswith("#"):
                k, v = ln.split("=", 1)
                keys.setdefault(k, []).append(v)
    return keys


@pytest.mark.parametrize("name", UNITS)
def test_units_ask_for_the_sandbox(name):
    keys = unit(name)
    for k, v in WANT.items():
        assert keys.get(k) == [v], (name, k, keys.get(k))
    rw = " ".join(keys["ReadWritePaths"]).split()
    assert "/dev/shm" in rw and "%t/wsync" in rw, rw
    # GPUs: no device allow list, no private /dev
    for k in ("PrivateDevices", "DevicePolicy", "DeviceAllow", "ProtectClock"):
        assert k not in keys, (name, k)
    # a deny list only: an allow list would have to name io_uring_*
    filt = keys["SystemCallFilter"]
    assert all(f.startswith("~") for f in filt), filt


def _analyze():
    if not shutil.which("systemd-analyze"):
        pytest.skip("no systemd-analyze here")


@pytest.mark.parametrize("name", UNITS)
def test_exposure_is_ok(name, tmp_path):
    _analyze()
    path = tmp_path / name
    with open(os.path.join(ROOT, "tools", "service", name + ".in")) as f:
        path.write_text(f.read().replace("@PREFIX@", "/usr/local"))
    r = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(path)],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+) (\w+)", r.stdout + r.stderr)
    if m is None and "offline" in r.stderr:
        pytest.skip("systemd-analyze security has no --offline here: %s" % r.stderr.strip())
    assert m, r.stdout + r.stderr
    # 9.6 UNSAFE without the sandbox; what is left is running as the user
    # (root in an offline review of a system unit), /dev for GPUs, chown
    assert float(m.group(1)) <= 2.0, r.stdout


def test_the_deny_list_leaves_what_the_broker_calls():
    _analyze()
    groups = unit("wsyncd.service")["SystemCallFilter"][0].lstrip("~").split()
    r = subprocess.run(["systemd-analyze", "syscall-filter"] + groups, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    denied = {ln.strip() for ln in r.stdout.splitlines()
              if ln.strip() and not ln.strip().startswith(("#", "@"))}
    assert denied and not denied & set(NEEDED), sorted(denied & set(NEEDED))


PR_SET_NO_NEW_PRIVS = 38
PR_SET_MDWE = 65
PR_GET_MDWE = 66

WRAPPER = """#!%(py)s
# wsyncd as a unit runs it: no_new_privs, umask 077, no W+X memory
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(%(nnp)d, 1, 0, 0, 0) == 0
if libc.prctl(%(mdwe)d, 1, 0, 0, 0) != 0 or libc.prctl(%(get)d, 0, 0, 0, 0) != 1:
    sys.exit(77)
os.umask(0o077)
os.execv(%(wsyncd)r, [%(wsyncd)r] + sys.argv[1:])
"""


def test_broker_serves_without_write_execute_memory(tmp_path, monkeypatch):
    """MemoryDenyWriteExecute= is a seccomp filter under systemd; the
    kernel's own PR_SET_MDWE (Linux 6.3) refuses the same: mmap or mprotect
    of memory both writable and executable. jemalloc, io_uring and the
    broker's slabs (publish, read, a guarded publisher's mprotect) must not
    need it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_GET_MDWE, 0, 0, 0, 0) < 0:
        pytest.skip("this kernel has no PR_SET_MDWE (Linux 6.3+)")
    b = Broker()
    wrapper = tmp_path / "wsyncd-mdwe"
    wrapper.write_text(WRAPPER % dict(py=sys.executable, nnp=PR_SET_NO_NEW_PRIVS,
                                      mdwe=PR_SET_MDWE, get=PR_GET_MDWE, wsyncd=b.path))
    wrapper.chmod(0o755)
    b.path = str(wrapper)
    monkeypatch.setenv("XDG_RUNTIME_DIR", b.dir)
    try:
        b.start()
        with open("/proc/%d/status" % b.proc.pid) as f:
            status = f.read()
        assert re.search(r"^NoNewPrivs:\s+1$", status, re.M), status
        with wsync.connect(b.sock, "mdwe") as c:
            for flags in (0, wsync.PUB_GUARDED):
                name = "mdwe.%d" % flags
                pub = c.publisher(name, [("w", "f32", (1024,))], flags=flags)
                sub = c.subscriber(name)
                for step in range(1, 4):
                    want = np.full(1024, step, np.float32)
                    pub.publish({"w": want}, step)
                    with sub.wait(after=step - 1, timeout=10) as v:
                        assert np.array_equal(v.numpy("w"), want)
                pub.close()
                sub.close()
        assert b.running, b.log_tail()
        assert b.stop() == 0, b.log_tail()
    finally:
        b.cleanup()
