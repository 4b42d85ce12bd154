"""make deb: the Debian packages build from debian/ with dpkg-buildpackage
(reusing this build) and pass lintian without errors (make deb fails
otherwise); each holds what it should; unpacked, the broker runs, the
tools find it, the library links through its pkg-config file with its
soname and the Python package uses the library beside it. Where systemd
runs (and we may install) the packages are installed, the system service
runs the broker as the wsync user, and they are purged again; elsewhere
that part says why it did not run."""
import glob
import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import ROOT, WAIT_S

BUILD = os.environ.get("BUILD") or "build"
DEB_DIR = os.path.join(ROOT, BUILD, "deb")
PKGS = ["wsync", "libwsync0", "libwsync-dev", "python3-wsync"]

# paths each package must hold (dpkg-deb -c, without the leading ".")
WANT = {
    "wsync": ["/usr/bin/wsyncd", "/usr/bin/wsyncctl", "/usr/bin/wsync-top",
              "/usr/bin/wsync-relay", "/usr/bin/wsync-demo", "/usr/bin/wsync-bench",
              "/lib/systemd/system/wsyncd.service", "/usr/lib/systemd/user/wsyncd.service",
              "/usr/lib/systemd/user/wsyncd@.service", "/usr/lib/sysusers.d/wsync.conf",
              "/usr/share/bash-completion/completions/wsyncctl",
              "/usr/share/bash-completion/completions/wsync-top",
              "/usr/share/man/man8/wsyncd.8.gz", "/usr/share/man/man1/wsyncctl.1.gz",
              "/usr/share/man/man1/wsync-top.1.gz", "/usr/share/doc/wsync/copyright"],
    "libwsync0": ["/usr/lib/libwsync.so.0", "/usr/lib/libwsync.so.0.2.0",
                  "/usr/lib/libwsync-delta.so.0"],
    "libwsync-dev": ["/usr/include/wsync.h", "/usr/lib/libwsync.so", "/usr/lib/libwsync.a",
                     "/usr/lib/pkgconfig/wsync.pc", "/usr/share/man/man3/libwsync.3.gz"],
    "python3-wsync": ["/usr/lib/python3/dist-packages/wsync/__init__.py",
                      "/usr/lib/python3/dist-packages/wsync/_paths.py",
                      "/usr/lib/python3/dist-packages/wsync/relay.py"],
}


def env_no_make():
    env = dict(os.environ)
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        env.pop(k, None)
    return env


@pytest.fixture(scope="module")
def debs():
    r = subprocess.run(["make", "-C", ROOT, "BUILD=" + BUILD, "deb"], capture_output=True,
                       text=True, env=env_no_make(), timeout=900)
    assert r.returncode == 0, "make deb failed:\n" + r.stdout[-4000:] + r.stderr[-4000:]
    assert "E: " not in r.stdout + r.stderr, "lintian errors:\n" + r.stdout
    out = {}
    for p in PKGS:
        (f,) = glob.glob(os.path.join(DEB_DIR, "%s_*.deb" % p))
        out[p] = f
    return out


def contents(deb):
    r = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True, text=True, check=True)
    return {line.split()[5][1:] for line in r.stdout.splitlines()}


def test_each_package_holds_its_files(debs):
    seen = {}
    for p, deb in debs.items():
        files = contents(deb)
        missing = [f for f in WANT[p] if f not in files]
        assert not missing, (p, missing)
        for f in files:
            if not f.endswith("/"):
                assert f not in seen, "%s in both %s and %s" % (f, seen[f], p)
                seen[f] = p
    r = subprocess.run(["dpkg-deb", "-f", debs["wsync"], "Depends"], capture_output=True,
                       text=True, check=True)
    assert "adduser" in r.stdout and "libjansson" in r.stdout, r.stdout
    r = subprocess.run(["dpkg-deb", "-f", debs["python3-wsync"], "Depends"],
                       capture_output=True, text=True, check=True)
    assert "libwsync0 (= 0.2.0)" in r.stdout, r.stdout
    # the system user: made by postinst (and sysusers.d)
    ctl = subprocess.run(["dpkg-deb", "-I", debs["wsync"], "postinst"], capture_output=True,
                         text=True, check=True).stdout
    assert "adduser --system" in ctl and "deb-systemd-helper" in ctl


def test_unpacked_packages_work(debs, tmp_path):
    root = str(tmp_path / "root")
    for deb in debs.values():
        subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
    usr = os.path.join(root, "usr")
    so = os.path.join(usr, "lib", "libwsync.so.0.2.0")
    r = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, check=True)
    assert "[libwsync.so.0]" in r.stdout
    # a C client through pkg-config, against the unpacked header and library
    src = tmp_path / "c.c"
    src.write_text('#include <stdio.h>\n#include <wsync.h>\n'
                   'int main(void) { puts(wsync_version_string()); return 0; }\n')
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(usr, "lib", "pkgconfig"),
               PKG_CONFIG_SYSROOT_DIR=root)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "wsync"], capture_output=True,
                           text=True, env=env, check=True).stdout.split()
    exe = str(tmp_path / "c")
    subprocess.run(["cc", "-o", exe, str(src)] + flags, check=True)
    r = subprocess.run([exe], capture_output=True, text=True,
                       env=dict(os.environ, LD_LIBRARY_PATH=os.path.join(usr, "lib")))
    assert r.returncode == 0 and r.stdout.strip() == "0.2.0", r
    # the broker, a tool and the Python package, as unpacked
    run = str(tmp_path / "run")
    os.mkdir(run, 0o700)
    name = "deb%d" % os.getpid()
    env = dict(os.environ, XDG_RUNTIME_DIR=run)
    env.pop("WSYNC_ENDPOINT", None)
    env.pop("WSYNC_LIBRARY", None)
    d = subprocess.Popen([os.path.join(usr, "bin", "wsyncd"), "--name", name, "--no-keep",
                          "--huge-pages", "off"], env=env, stderr=subprocess.PIPE)
    try:
        sock = os.path.join(run, "wsync", name + ".sock")
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(sock):
            assert d.poll() is None and time.monotonic() < deadline, "wsyncd did not start"
            time.sleep(0.05)
        py = ("import sys, wsync; sys.path[0] != '' or sys.path.pop(0);\n"
              "assert wsync.__file__.startswith(%r), wsync.__file__\n"
              "with wsync.connect(%r, 'deb-test') as c:\n"
              "    pub = c.publisher('m', [('w', 'f32', (4,))])\n"
              "    with pub.begin(timeout=5) as s:\n"
              "        s.commit(7)\n"
              "    with c.subscriber('m').acquire() as v:\n"
              "        assert v.step == 7\n" % (usr, sock))
        pyenv = dict(env, PYTHONPATH=os.path.join(usr, "lib", "python3", "dist-packages"),
                     WSYNC_LIBRARY=os.path.join(usr, "lib", "libwsync.so.0"))
        r = subprocess.run(["/usr/bin/python3", "-c", py], capture_output=True, text=True,
                           env=pyenv, cwd=str(tmp_path), timeout=WAIT_S)
        assert r.returncode == 0, r.stderr
        r = subprocess.run([os.path.join(usr, "bin", "wsyncctl"), "--name", name, "models"],
                           capture_output=True, text=True, env=env, timeout=WAIT_S)
        assert r.returncode == 0 and " m " in " %s " % r.stdout.replace("\n", " "), r
    finally:
        d.send_signal(signal.SIGTERM)
        assert d.wait(WAIT_S) == 0


def systemd_why_not():
    if not os.path.isdir("/run/systemd/system"):
        return "systemd is not running here (no /run/systemd/system)"
    if os.getuid() != 0 and subprocess.run(["sudo", "-n", "true"],
                                           capture_output=True).returncode != 0:
        return "installing needs root or sudo without a password"
    if subprocess.run(["dpkg-query", "-W", "wsync"], capture_output=True).returncode == 0:
        return "a wsync package is installed already: not replacing it"
    return None


def test_installed_service_runs_the_broker(debs):
    why = systemd_why_not()
    if why:
        pytest.skip("the installed-service check did not run: " + why)
    sudo = [] if os.getuid() == 0 else ["sudo", "-n"]
    env = dict(env_no_make(), DEBIAN_FRONTEND="noninteractive")
    subprocess.run(sudo + ["apt-get", "install", "-y", "-qq"] + list(debs.values()),
                   check=True, env=env, timeout=600)
    try:
        subprocess.run(sudo + ["systemctl", "restart", "wsyncd"], check=True, timeout=60)
        sock = "/run/wsync/default.group/default.sock"
        r = subprocess.run(sudo + ["systemctl", "is-active", "wsyncd"], capture_output=True,
                           text=True, timeout=30)
        assert r.stdout.strip() == "active", r
        r = subprocess.run(sudo + ["runuser", "-u", "wsync", "--", "wsyncctl", "--endpoint",
                                   sock, "status"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and "running" in r.stdout, r
        r = subprocess.run(["stat", "-c", "%U %G", sock], capture_output=True, text=True)
        assert r.stdout.split() == ["wsync", "wsync"], r
    finally:
        subprocess.run(sudo + ["apt-get", "purge", "-y", "-qq"] + PKGS, env=env, timeout=600)
    assert shutil.which("wsyncd") is None or not shutil.which("wsyncd").startswith("/usr/bin")
