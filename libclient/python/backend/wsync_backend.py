"""The PEP 517 build backend of the wsync Python package: no setuptools, no
index, no network.

`pip install libclient/python` (or `pip wheel`) runs these hooks in an
isolated environment. That environment can install nothing here (no index),
so the backend needs nothing but the standard library: pyproject.toml says
`requires = []` and `backend-path = ["backend"]`, and this module builds the
wheel itself.

build_wheel runs `make python-lib python-broker python-tools` in the source
tree the package sits in (libclient/python -> ../..; or the tree an sdist of
this backend carries under _tree/), which builds libwsync.so, wsyncd, the
relay's codec libwsync-delta.so, wsyncctl and wsync-top with the tree's own
Makefile, and zips the package with them under wsync/_native/. The programs
are installed as commands (the wheel's scripts) that exec the bundled binary
without importing the package, so they run without numpy. The wheel is
tagged py3-none-<platform>: it holds no Python extension, only libraries
loaded through ctypes and programs, so any CPython 3.8+ on this platform can
use it.

Knobs (environment, or pip's --config-settings / -C):
  WSYNC_BUILD / build-dir    the make BUILD directory (default: the tree's
                             build/, so a wheel after `make` costs nothing)
  WSYNC_BROKER / broker      "no": do not bundle wsyncd (default: bundle it
                             when it builds, warn when it does not)
  WSYNC_TOOLS / tools        "no": do not bundle libwsync-delta, wsyncctl
                             and wsync-top (default: bundle them when they
                             build, warn when they do not)
"""
import base64
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)                       # libclient/python
PKG_DIR = os.path.join(PKG_ROOT, "wsync")

# What an sdist carries of the tree, to build the library and the broker.
TREE_PARTS = ["Makefile", ".ci/deps.sh", "shm", "libclient", "broker", "tools/common",
              "tools/ctl", "tools/top", "tools/relay", "README.md", "LICENSE"]
TREE_SKIP = ("python", "__pycache__")


# ---- metadata -----------------------------------------------------------------

def _project():
    """The [project] table of pyproject.toml (tomllib where Python has it,
    else a reader for the flat keys this file uses)."""
    path = os.path.join(PKG_ROOT, "pyproject.toml")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        import tomllib
        return tomllib.loads(raw.decode())["project"]
    except ImportError:
        pass
    text = raw.decode()
    section = re.search(r"^\[project\]\s*$(.*?)(?=^\[)", text, re.S | re.M).group(1)
    out = {}
    for key, val in re.findall(r'^([\w-]+)\s*=\s*(.+?)\s*$', section, re.M):
        if val.startswith('"'):
            out[key] = val.strip('"')
        elif val.startswith("["):
            out[key] = re.findall(r'"([^"]*)"', val)
        elif val.startswith("{"):
            out[key] = dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', val))
    return out


def _dist_name(proj):
    return re.sub(r"[-_.]+", "_", proj["name"])


def _metadata(proj):
    lines = ["Metadata-Version: 2.1",
             "Name: %s" % proj["name"],
             "Version: %s" % proj["version"]]
    if proj.get("description"):
        lines.append("Summary: %s" % proj["description"])
    if proj.get("requires-python"):
        lines.append("Requires-Python: %s" % proj["requires-python"])
    for dep in proj.get("dependencies", []):
        lines.append("Requires-Dist: %s" % dep)
    for extra, deps in sorted(proj.get("optional-dependencies", {}).items()):
        lines.append("Provides-Extra: %s" % extra)
        for dep in deps:
            lines.append('Requires-Dist: %s; extra == "%s"' % (dep, extra))
    lic = proj.get("license")
    if isinstance(lic, dict) and lic.get("text"):
        lines.append("License: %s" % lic["text"])
    if _license_file():
        lines.append("License-File: LICENSE")
    for c in proj.get("classifiers", []):
        lines.append("Classifier: %s" % c)
    lines.append("Description-Content-Type: text/markdown")
    readme = os.path.join(PKG_ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return ("\n".join(lines) + "\n\n" + body).encode()


def _tag():
    plat = re.sub(r"[-.]", "_", sysconfig.get_platform())
    return "py3-none-%s" % plat


def _wheel_file(tag):
    return ("Wheel-Version: 1.0\nGenerator: wsync_backend\nRoot-Is-Purelib: false\n"
            "Tag: %s\n" % tag).encode()


# wsync-relay needs the package (and numpy) anyway; the native programs get
# launchers instead (_launcher), which do not import it.
ENTRY_POINTS = b"[console_scripts]\nwsync-relay = wsync.relay:cli\n"

# the programs bundled in wsync/_native/ that the wheel installs as commands
PROGRAMS = ("wsyncd", "wsyncctl", "wsync-top")


def _license_file():
    """The tree's LICENSE (None where the tree has none)."""
    try:
        path = os.path.join(_tree(), "LICENSE")
    except RuntimeError:
        return None
    return path if os.path.exists(path) else None


def _dist_info_files(proj, tag):
    out = {"METADATA": _metadata(proj), "WHEEL": _wheel_file(tag),
           "top_level.txt": b"wsync\n", "entry_points.txt": ENTRY_POINTS}
    lic = _license_file()
    if lic:
        with open(lic, "rb") as f:
            out["LICENSE"] = f.read()
    return out


def _launcher(program):
    """The command the wheel installs for a bundled program: pip writes the
    environment's interpreter over "#!python". find_spec locates the
    package without running its __init__, which needs numpy; the program
    itself needs neither."""
    return ("""#!python
# %(p)s, bundled in the wsync wheel (wsync/_native/%(p)s): runs it in this
# process's place. The package is located, not imported (no numpy needed).
import importlib.util
import os
import sys

spec = importlib.util.find_spec("wsync")
if spec is None or not spec.submodule_search_locations:
    sys.exit("%(p)s: the wsync package of this command is not importable from %%s"
             %% sys.executable)
path = os.path.join(list(spec.submodule_search_locations)[0], "_native", "%(p)s")
try:
    os.execv(path, ["%(p)s"] + sys.argv[1:])
except OSError as e:
    sys.exit("%(p)s: cannot run %%s: %%s" %% (path, e.strerror))
""" % {"p": program}).encode()


# ---- building the native parts ---------------------------------------------------

def _setting(config_settings, key, env):
    if config_settings and config_settings.get(key):
        return str(config_settings[key])
    return os.environ.get(env)


def _tree():
    """The wsync source tree: libclient/python/../.. in a checkout, or the
    copy an sdist of this package carries."""
    for cand in (os.path.join(PKG_ROOT, "_tree"),
                 os.path.normpath(os.path.join(PKG_ROOT, "..", ".."))):
        if os.path.exists(os.path.join(cand, "Makefile")) and \
                os.path.isdir(os.path.join(cand, "libclient")):
            return cand
    raise RuntimeError(
        "wsync: building the wheel needs the wsync source tree around this package "
        "(libclient/python inside it, with its Makefile); found none above %s" % PKG_ROOT)


def _make(tree, build, target, what):
    jobs = max(1, min(os.cpu_count() or 1, 8))
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    cmd = ["make", "-C", tree, "-j%d" % jobs, "BUILD=" + build, target]
    sys.stderr.write("wsync: %s: %s\n" % (what, " ".join(cmd)))
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True)
    except FileNotFoundError:
        raise RuntimeError("wsync: building libwsync needs make and a C compiler "
                           "(Debian: apt-get install build-essential)") from None
    sys.stderr.write(p.stdout)
    return p.returncode


def _native(config_settings):
    """Builds libwsync.so (and wsyncd unless told not to) with the tree's
    Makefile; returns {name in wsync/_native: path}."""
    tree = _tree()
    build = _setting(config_settings, "build-dir", "WSYNC_BUILD") or "build"
    build_abs = build if os.path.isabs(build) else os.path.join(tree, build)
    if _make(tree, build, "python-lib", "building libwsync") != 0:
        raise RuntimeError(
            "wsync: building libwsync failed (the output is above). It needs a C "
            "compiler and libxxhash: on Debian, `make deps` in %s installs them "
            "(build-essential, libxxhash-dev, ...)" % tree)
    out = {"libwsync.so.0": _one(os.path.join(build_abs, "lib"), r"libwsync\.so\.\d+\.\d+\.\d+$")}
    broker = (_setting(config_settings, "broker", "WSYNC_BROKER") or "yes").lower()
    if broker not in ("no", "0", "false", "off"):
        if _make(tree, build, "python-broker", "building wsyncd") == 0:
            out["wsyncd"] = os.path.join(build_abs, "bin", "wsyncd")
        else:
            sys.stderr.write("wsync: WARNING: wsyncd did not build (it needs liburing-dev "
                             "and libjemalloc-dev; `make deps`); the wheel is made "
                             "without it: python3 -m wsync.broker will look on PATH\n")
    tools = (_setting(config_settings, "tools", "WSYNC_TOOLS") or "yes").lower()
    if tools not in ("no", "0", "false", "off"):
        if _make(tree, build, "python-tools", "building libwsync-delta, wsyncctl, "
                 "wsync-top") == 0:
            out["libwsync-delta.so.0"] = _one(os.path.join(build_abs, "lib"),
                                              r"libwsync-delta\.so\.\d+\.\d+\.\d+$")
            out["wsyncctl"] = os.path.join(build_abs, "bin", "wsyncctl")
            out["wsync-top"] = os.path.join(build_abs, "bin", "wsync-top")
        else:
            sys.stderr.write("wsync: WARNING: libwsync-delta, wsyncctl and wsync-top did "
                             "not build (they need libzstd-dev, libjansson-dev, "
                             "libncurses-dev, libmicrohttpd-dev, libjemalloc-dev; `make "
                             "deps`); the wheel is made without them: wsync-relay will "
                             "not start\n")
    return out


def _one(d, pattern):
    names = sorted(n for n in os.listdir(d) if re.match(pattern, n))
    if not names:
        raise RuntimeError("wsync: make built no %s in %s" % (pattern, d))
    return os.path.join(d, names[-1])


def _stripped(path, tmp):
    """A copy of path without debug sections, where strip exists (the
    wheel carries the code, not the -g of a development build)."""
    dst = os.path.join(tmp, os.path.basename(path))
    shutil.copyfile(path, dst)
    if shutil.which("strip"):
        subprocess.run(["strip", "--strip-debug", dst], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return dst


# ---- writing a wheel --------------------------------------------------------------

def _epoch():
    try:
        return max(315532800, int(os.environ["SOURCE_DATE_EPOCH"]))
    except (KeyError, ValueError):
        return 315532800            # 1980-01-01, the earliest a zip can say


class _Wheel:
    def __init__(self, path):
        self.zf = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.records = []
        import time
        self.date = time.gmtime(_epoch())[:6]

    def add(self, arcname, data, mode=0o644):
        info = zipfile.ZipInfo(arcname, self.date)
        info.external_attr = (stat.S_IFREG | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zf.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        self.records.append("%s,sha256=%s,%d" % (arcname, digest.decode(), len(data)))

    def add_file(self, arcname, path, mode=None):
        with open(path, "rb") as f:
            data = f.read()
        if mode is None:
            mode = 0o755 if os.stat(path).st_mode & 0o111 else 0o644
        self.add(arcname, data, mode)

    def close(self, record_name):
        self.records.append("%s,," % record_name)
        info = zipfile.ZipInfo(record_name, self.date)
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        self.zf.writestr(info, "\n".join(self.records) + "\n")
        self.zf.close()


def _package_files():
    """wsync/*.py and py.typed, as the source holds them (never a _paths.py
    or a _native/ that a make install or an editable build left)."""
    out = []
    for name in sorted(os.listdir(PKG_DIR)):
        if name == "_paths.py":
            continue
        if name.endswith(".py") or name == "py.typed":
            out.append(name)
    return out


def _write_dist_info(metadata_directory, proj, tag):
    name = "%s-%s.dist-info" % (_dist_name(proj), proj["version"])
    d = os.path.join(metadata_directory, name)
    os.makedirs(d, exist_ok=True)
    for fname, data in _dist_info_files(proj, tag).items():
        with open(os.path.join(d, fname), "wb") as f:
            f.write(data)
    return name


# ---- PEP 517 hooks ---------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _write_dist_info(metadata_directory, _project(), _tag())


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _write_dist_info(metadata_directory, _project(), _tag())


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel of the package with libwsync (and wsyncd) in wsync/_native/."""
    proj = _project()
    tag = _tag()
    native = _native(config_settings)
    dist = "%s-%s" % (_dist_name(proj), proj["version"])
    fname = "%s-%s.whl" % (dist, tag)
    os.makedirs(wheel_directory, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="wsync-wheel-")
    try:
        w = _Wheel(os.path.join(wheel_directory, fname))
        for name in _package_files():
            w.add_file("wsync/" + name, os.path.join(PKG_DIR, name), 0o644)
        for name, path in sorted(native.items()):
            w.add_file("wsync/_native/" + name, _stripped(path, tmp),
                       0o755 if name in PROGRAMS else 0o644)
        for name in PROGRAMS:
            if name in native:
                w.add("%s.data/scripts/%s" % (dist, name), _launcher(name), 0o755)
        for fn, data in _dist_info_files(proj, tag).items():
            w.add("%s.dist-info/%s" % (dist, fn), data)
        w.close("%s.dist-info/RECORD" % dist)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return fname


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """An editable install (PEP 660): a .pth naming libclient/python, and
    libwsync built into the tree's build directory, where a package in the
    source tree finds it."""
    proj = _project()
    tag = _tag()
    _native(dict(config_settings or {}, broker="no"))
    dist = "%s-%s" % (_dist_name(proj), proj["version"])
    fname = "%s-%s.whl" % (dist, tag)
    os.makedirs(wheel_directory, exist_ok=True)
    w = _Wheel(os.path.join(wheel_directory, fname))
    w.add("__editable__.wsync.pth", (PKG_ROOT + "\n").encode())
    for fn, data in _dist_info_files(proj, tag).items():
        w.add("%s.dist-info/%s" % (dist, fn), data)
    w.close("%s.dist-info/RECORD" % dist)
    return fname


def build_sdist(sdist_directory, config_settings=None):
    """A source archive that builds the wheel anywhere: the package, this
    backend, and under _tree/ what of the wsync tree the libraries and the
    programs need (Makefile, shm/, libclient/, broker/, tools/...)."""
    proj = _project()
    dist = "%s-%s" % (_dist_name(proj), proj["version"])
    fname = dist + ".tar.gz"
    tree = _tree()
    os.makedirs(sdist_directory, exist_ok=True)
    mtime = _epoch()

    def add(tf, path, arcname):
        info = tf.gettarinfo(path, arcname)
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = mtime
        if info.isfile():
            with open(path, "rb") as f:
                tf.addfile(info, f)
        else:
            tf.addfile(info)

    def walk(tf, src, arc):
        if os.path.isfile(src):
            add(tf, src, arc)
            return
        for root, dirs, files in os.walk(src):
            dirs[:] = sorted(d for d in dirs if d not in TREE_SKIP and not d.startswith("."))
            for f in sorted(files):
                if f.endswith((".o", ".d", ".pyc")) or f == "_paths.py":
                    continue
                p = os.path.join(root, f)
                add(tf, p, os.path.join(arc, os.path.relpath(p, src)))

    with tarfile.open(os.path.join(sdist_directory, fname), "w:gz") as tf:
        for part in ("pyproject.toml", "README.md", "backend", "wsync"):
            walk(tf, os.path.join(PKG_ROOT, part), os.path.join(dist, part))
        for part in TREE_PARTS:
            src = os.path.join(tree, part)
            if os.path.exists(src):
                walk(tf, src, os.path.join(dist, "_tree", part))
        pkg_info = io.BytesIO(_metadata(proj))
        info = tarfile.TarInfo(os.path.join(dist, "PKG-INFO"))
        info.size = len(pkg_info.getvalue())
        info.mtime = mtime
        tf.addfile(info, pkg_info)
    return fname
