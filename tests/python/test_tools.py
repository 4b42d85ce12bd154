"""wsyncctl against a real broker: its tables and JSON, exit codes, wait,
safetensors dump/load (files built byte by byte per the format here, since
Debian has no python3-safetensors), hostile files refused with nothing
published, and checksums catching a changed slab."""
import ctypes
import errno
import json
import os
import struct
import subprocess
import time

import numpy as np
import pytest

import wsync
from conftest import ROOT, WAIT_S

BUILD = os.environ.get("BUILD") or "build"
CTL = os.path.join(ROOT, BUILD, "bin", "wsyncctl")

# safetensors dtype -> numpy dtype for test data (raw bits where numpy has none)
DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
          "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
          "U8": np.uint8, "BOOL": np.bool_, "U16": np.uint16, "U32": np.uint32,
          "U64": np.uint64, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8}


def ctl(*args, timeout=WAIT_S):
    return subprocess.run([CTL] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout)


def ctl_json(*args):
    r = ctl("--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def model_version(name):
    for m in ctl_json("models")["models"]:
        if m["name"] == name:
            return m["version"]
    return None


def st_bytes(tensors, metadata=None, header=None, pad=True):
    """A safetensors file per the format: tensors is a list of (name, dtype,
    shape, raw bytes), laid out back to back in that order."""
    hdr, data, at = {}, b"", 0
    if metadata is not None:
        hdr["__metadata__"] = metadata
    for name, dt, shape, raw in tensors:
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [at, at + len(raw)]}
        data += raw
        at += len(raw)
    js = (header if header is not None else json.dumps(hdr, separators=(",", ":"))).encode()
    if pad:
        js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js + data


def every_dtype(seed):
    rng = np.random.default_rng(seed)
    out = []
    for i, (dt, np_dt) in enumerate(DTYPES.items()):
        shape = [(2, 3), (5,), (), (0, 4), (3, 1, 2)][i % 5]
        if np_dt is np.bool_:
            a = rng.integers(0, 2, shape).astype(np.bool_)
        elif np.issubdtype(np_dt, np.integer):
            a = rng.integers(np.iinfo(np_dt).min, np.iinfo(np_dt).max, shape, dtype=np_dt,
                             endpoint=True)
        else:
            a = rng.standard_normal(shape).astype(np_dt)
        out.append(("t_" + dt.lower(), dt, shape, a.tobytes()))
    return out


@pytest.fixture
def files(tmp_path):
    def write(name, blob):
        p = tmp_path / name
        p.write_bytes(blob)
        return str(p)
    return write


# ---- usage, no broker, no model ------------------------------------------------


def test_help_and_usage_errors():
    r = ctl("--help")
    assert r.returncode == 0 and "usage: wsyncctl" in r.stdout and "exit codes" in r.stdout
    for cmd in ("status", "models", "sessions", "wait", "dump", "load", "verify"):
        r = ctl(cmd, "--help")
        assert r.returncode == 0, cmd
        assert r.stdout.startswith("usage: wsyncctl " + cmd), r.stdout
        assert "--endpoint" in r.stdout
    for args, names in (([], "no command"), (["frobnicate"], "'frobnicate'"),
                        (["status", "--bogus"], "'--bogus'"), (["status", "extra"], "'extra'"),
                        (["wait"], "no MODEL"), (["wait", "m", "--timeout", "soon"], "'soon'"),
                        (["wait", "m", "--timeout"], "'--timeout' needs a value"),
                        (["dump", "m"], "-o FILE"), (["load", "f"], "--model"),
                        (["verify", "m", "--version", "x"], "'x'"),
                        (["models", "-z"], "'-z'"),
                        # a name no broker can hold is a usage error, before any broker
                        (["load", "f", "--model", "bad name!"], "model name 'bad name!'"),
                        (["wait", "bad!"], "model name 'bad!'"),
                        (["dump", ".m", "-o", "x"], "model name '.m'"),
                        (["verify", "/m"], "model name '/m'"),
                        (["rm", "ok", "bad!"], "model name 'bad!'")):
        r = ctl(*args)
        assert r.returncode == 2, (args, r)
        assert r.stderr.startswith("wsyncctl: "), r.stderr
        assert "--help" in r.stderr and names in r.stderr, (args, r.stderr)
        # the same error as one JSON object on stdout
        r = ctl("--json", *args)
        doc = json.loads(r.stdout)
        assert r.returncode == 2 and doc["ok"] is False and doc["reason"] == "usage"
        assert doc["exit"] == 2 and names in doc["error"], (args, doc)
    r = ctl("--version")
    assert r.returncode == 0 and r.stdout.startswith("wsyncctl ")


def test_no_broker(tmp_path, files):
    sock = str(tmp_path / "nobody.sock")
    good = files("g.safetensors", st_bytes(every_dtype(1)))
    for args in (["status"], ["models"], ["sessions"], ["wait", "m", "--timeout", "1"],
                 ["dump", "m", "-o", str(tmp_path / "x")], ["load", good, "--model", "m"],
                 ["verify", "m"]):
        r = ctl("--endpoint", sock, *args)
        assert r.returncode == 3, (args, r)
        assert "no broker at " + sock in r.stderr, r.stderr
        doc = json.loads(ctl("--json", "--endpoint", sock, *args).stdout)
        assert doc["ok"] is False and doc["reason"] == "no_broker" and doc["exit"] == 3
    r = ctl("status", "--name", "no-such-instance-%d" % os.getpid())
    assert r.returncode == 3 and "no broker" in r.stderr


def test_missing_model(broker, tmp_path):
    for args in (["dump", "ghost", "-o", str(tmp_path / "x")], ["verify", "ghost"]):
        r = ctl(*args)
        assert r.returncode == 3, r
        assert "model 'ghost': no such model" in r.stderr
        doc = json.loads(ctl("--json", *args).stdout)
        assert doc["reason"] == "not_found" and "no such model" in doc["error"]
    assert not (tmp_path / "x").exists()
    # the library's hint for a name nobody published, said once
    r = ctl("wait", "ghost", "--timeout", "0.2")
    assert r.returncode == 1 and "never been published" in r.stderr, r.stderr
    assert "is the name right?" in r.stderr and r.stderr.count("\n") == 1
    doc = json.loads(ctl("--json", "wait", "ghost", "--timeout", "0.2").stdout)
    assert doc["ok"] is False and doc["reason"] == "timeout" and doc["exit"] == 1
    assert "is the name right?" in doc["error"]


# ---- tables ----------------------------------------------------------------------


def test_status_models_sessions(broker):
    st = ctl_json("status")
    assert st["instance"] == broker.name and st["broker_pid"] == broker.proc.pid
    assert st["state"] == "running" and st["generation"] >= 1 and st["models"] == 0
    r = ctl("status")
    assert r.returncode == 0 and "instance    %s" % broker.name in r.stdout

    with wsync.connect(broker.sock, "trainer") as tc, wsync.connect(broker.sock, "reader") as rc:
        pub = tc.publisher("pol", [("w", "f32", (64, 64)), ("b", "i8", (3,))])
        for step in (10, 11, 12):
            with pub.begin(timeout=WAIT_S) as slab:
                slab.commit(step)
        sub = rc.subscriber("pol")
        view = sub.acquire()                 # holds the latest version
        with pub.begin(timeout=WAIT_S) as slab:
            slab.commit(13)                  # the reader is now one behind
        deadline = time.monotonic() + WAIT_S
        while True:                          # the broker mirrors once a second
            sess = {s["name"]: s for s in ctl_json("sessions")["sessions"]}
            if sess["reader"]["held"] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        rd = sess["reader"]
        assert rd["held"] and rd["version"] == view.version and rd["lag"] == 1
        assert rd["role"] == "sub" and rd["models"] == ["pol"] and rd["acquires"] == 1
        assert rd["slot"] is not None and rd["lag_ms"] >= 0
        # monitors take no session
        assert sess["trainer"]["role"] == "pub" and set(sess) == {"trainer", "reader"}
        models = ctl_json("models")["models"]
        assert len(models) == 1
        m = models[0]
        assert m["name"] == "pol" and m["state"] == "ready" and m["step"] == 13
        assert m["version"] == view.version + 1 and m["commits"] == 4
        assert m["collectors"] == 1 and m["worst_lag"] == 1
        # every host model carries a checksum unless its publisher says not to
        assert len(m["checksum"]) == 16 and m["checksum_failures"] == 0
        assert m["publisher_pid"] == os.getpid()
        assert m["slots"] == 4 and m["slots_used"] >= 2 and m["bytes"] >= 64 * 64 * 4
        assert m["slots_pinned"] == 1        # the reader's view pins one slot
        assert m["pages"] == "4k"            # test brokers run --huge-pages off
        r = ctl("models")
        lines = r.stdout.splitlines()
        assert lines[0].split()[:4] == ["MODEL", "STATE", "VERSION", "STEP"]
        assert lines[1].split()[:4] == ["pol", "ready", str(m["version"]), "13"]
        col = lines[0].split().index("PINNED")
        assert lines[1].split()[col] == "1/4"
        r = ctl("sessions")
        row = [ln for ln in r.stdout.splitlines() if " reader " in ln][0].split()
        assert row[3:7] == ["sub", "pol", "%d*" % view.version, "1"]
        view.release()
        st = ctl_json("status")
        assert st["models"] == 1 and st["publishers"] == 1 and st["subscribers"] == 1
        assert st["sessions"] == 2 and st["health"] == "ok" and st["ok"] is True
        # idle: versions fill the slots, but nobody pins one
        deadline = time.monotonic() + WAIT_S
        while True:
            m = ctl_json("models")["models"][0]
            if m["slots_pinned"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert m["slots_pinned"] == 0 and m["slots_used"] >= 2


def test_wait(broker):
    with wsync.connect(broker.sock, "trainer") as tc:
        r = ctl("wait", "later", "--timeout", "0.2")
        assert r.returncode == 1
        proc = subprocess.Popen([CTL, "--json", "wait", "later", "--after", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pub = tc.publisher("later", [("w", "u8", (8,))])
        with pub.begin(timeout=WAIT_S) as slab:
            v = slab.commit(42)
        out, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 0, err
        doc = json.loads(out)
        assert doc["model"] == "later" and doc["version"] == v and doc["step"] == 42
        r = ctl("wait", "later", "--after", v, "--timeout", "0.1")
        assert r.returncode == 1
        r = ctl("wait", "later", "--after", v - 1)
        assert r.returncode == 0 and r.stdout.startswith("later version %d step 42" % v)


# ---- safetensors --------------------------------------------------------------


def parse_st(blob):
    n = struct.unpack("<Q", blob[:8])[0]
    return json.loads(blob[8:8 + n]), blob[8 + n:], n


def test_roundtrip_every_dtype(broker, files, tmp_path):
    tensors = every_dtype(7)
    src = files("in.safetensors", st_bytes(tensors, {"origin": "test"}))
    r = ctl("load", src, "--model", "rt", "--step", "99")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("rt version ")
    version = int(r.stdout.split()[2])

    # the slab holds the file's bytes
    with wsync.connect(broker.sock) as c:
        with c.subscriber("rt").acquire() as view:
            assert view.version == version and view.step == 99
            got = view.state_dict("numpy")
            kinds = {s.name: s.dtype for s in view.subscriber.layout}
            for name, dt, shape, raw in tensors:
                assert got[name].tobytes() == raw, name
                assert tuple(got[name].shape) == tuple(shape)
                assert kinds[name] == {"F8_E4M3": "f8_e4m3fn"}.get(dt, dt.lower())
            published_ns = view.published_ns

    out = str(tmp_path / "out.safetensors")
    r = ctl("dump", "rt", "-o", out)
    assert r.returncode == 0, r.stderr
    blob = open(out, "rb").read()
    meta = {"wsync_model": "rt", "wsync_version": str(version), "wsync_step": "99",
            "wsync_published_ns": str(published_ns)}
    assert blob == st_bytes(tensors, meta)   # byte for byte, header included
    hdr, data, n = parse_st(blob)
    assert n % 8 == 0 and list(hdr)[0] == "__metadata__"

    # and back again: the step comes from the metadata, the bytes are the same
    r = ctl("load", out, "--model", "rt")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("rt version %d step 99" % (version + 1)) or \
        int(r.stdout.split()[2]) > version
    r = ctl("dump", "rt", "-o", out, "--version", int(r.stdout.split()[2]))
    assert r.returncode == 0, r.stderr
    assert parse_st(open(out, "rb").read())[1] == parse_st(blob)[1]
    r = ctl("dump", "rt", "-o", out, "--version", version)
    assert r.returncode == 3 and "not the latest" in r.stderr


def hostile_files():
    good = [("a", "F32", (2, 2), b"\x01" * 16), ("b", "U8", (3,), b"abc")]
    ok = st_bytes(good)
    hdr_a = '"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}'
    hdr_b = '"b":{"dtype":"U8","shape":[3],"data_offsets":[16,19]}'
    data = b"\x01" * 16 + b"abc"

    def raw(header, d=data):
        return st_bytes([], header=header) + d

    return {
        "empty file": (b"", "too short"),
        "truncated data": (ok[:-1], "truncated"),
        "trailing data": (ok + b"x", "cover"),
        "header past the file": (struct.pack("<Q", 1000) + b"{}", "runs past the end"),
        "huge header": (struct.pack("<Q", 200 * 1024 * 1024) + b"{}", "more than the"),
        "bad json": (raw("{" + hdr_a + "," + hdr_b), "not valid JSON"),
        "not an object": (raw("[1,2]"), "not a JSON object"),
        "entry not an object": (raw('{"a":[1,2]}', b""), "not an object"),
        "duplicate names": (raw("{" + hdr_a + "," + hdr_a.replace("[0,16]", "[16,32]") + "}",
                                data[:16] * 2), "duplicate"),
        "unknown dtype": (raw('{"a":{"dtype":"C64","shape":[2],"data_offsets":[0,16]}}',
                              b"x" * 16), "not supported"),
        "fp8 scale dtype": (raw('{"a":{"dtype":"F8_E8M0","shape":[2],"data_offsets":[0,2]}}',
                                b"12"), "not supported"),
        "shape and size disagree": (raw('{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}',
                                        b"x" * 8), "make 12 bytes"),
        "overlapping offsets": (raw("{" + hdr_a + "," + hdr_b.replace("[16,19]", "[15,18]")
                                    + "}", data[:18]), "overlap"),
        "gap between tensors": (raw("{" + hdr_a + "," + hdr_b.replace("[16,19]", "[17,20]")
                                    + "}", data + b"z"), "gap"),
        "end before begin": (raw('{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}', b""),
                             "end before begin"),
        "negative size": (raw('{"a":{"dtype":"U8","shape":[-3],"data_offsets":[0,3]}}', b"abc"),
                          "not a size"),
        "too many dims": (raw('{"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],'
                              '"data_offsets":[0,1]}}', b"a"), "dimensions"),
        "metadata not strings": (raw('{"__metadata__":{"k":1},' + hdr_a[:0] +
                                     '"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
                                     b"a"), "not a string"),
        "no tensors": (raw('{"__metadata__":{}}', b""), "no tensors"),
        "extra entry field": (raw('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],'
                                  '"x":1}}', b"a"), "exactly"),
        "offsets not integers": (raw('{"a":{"dtype":"U8","shape":[1],"data_offsets":'
                                     '["0","1"]}}', b"a"), "data_offsets"),
    }


def test_hostile_files_publish_nothing(broker, files):
    good = [("a", "F32", (2, 2), b"\x01" * 16), ("b", "U8", (3,), b"abc")]
    r = ctl("load", files("ok.safetensors", st_bytes(good)), "--model", "m", "--step", "5")
    assert r.returncode == 0, r.stderr
    before = model_version("m")
    for name, (blob, why) in hostile_files().items():
        path = files(name.replace(" ", "_") + ".safetensors", blob)
        r = ctl("load", path, "--model", "m")
        assert r.returncode == 3, (name, r)
        assert "refused, nothing published" in r.stderr and why in r.stderr, (name, r.stderr)
        r = ctl("load", path, "--model", "fresh")
        assert r.returncode == 3, name
    assert model_version("m") == before
    assert model_version("fresh") is None
    with wsync.connect(broker.sock) as c:
        with c.subscriber("m").acquire() as view:
            assert view.step == 5 and bytes(view.state_dict("numpy")["b"]) == b"abc"
    # a file whose layout differs from the model's is a clash, also refused
    r = ctl("load", files("other.safetensors", st_bytes([("a", "U8", (1,), b"x")])),
            "--model", "m")
    assert r.returncode == 3 and "layout" in r.stderr
    assert model_version("m") == before


# ---- checksums -----------------------------------------------------------------


def test_verify(broker, files):
    path = files("c.safetensors", st_bytes(every_dtype(3)))
    r = ctl("load", path, "--model", "summed", "--checksum")
    assert r.returncode == 0, r.stderr
    r = ctl("verify", "summed")
    assert r.returncode == 0 and " ok" in r.stdout, r
    doc = ctl_json("verify", "summed")
    assert doc["result"] == "ok" and len(doc["checksum"]) == 16
    deadline = time.monotonic() + WAIT_S
    while True:                              # the broker mirrors it at its next tick
        m = [m for m in ctl_json("models")["models"] if m["name"] == "summed"][0]
        if m["checksum"] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert m["checksum"] == doc["checksum"]
    r = ctl("load", path, "--model", "plain", "--no-checksum")
    assert r.returncode == 0, r.stderr
    r = ctl("verify", "plain")
    assert r.returncode == 3 and "without a checksum" in r.stderr

    # A publisher without the write guard flips a byte after its commit.
    with wsync.connect(broker.sock, "scribbler") as c:
        pub = c.publisher("flip", [("w", "f32", (1024,))], checksum=True, unguarded=True)
        with pub.begin(timeout=WAIT_S) as slab:
            slab.copy_from({"w": np.arange(1024, dtype=np.float32)})
            base = slab._c.base
            slab.commit(1)
        assert ctl("verify", "flip").returncode == 0
        b = ctypes.c_uint8.from_address(base + 100)
        b.value ^= 0x10
        with c.subscriber("flip").acquire() as view:
            with pytest.raises(wsync.WsyncError) as ei:
                view.verify()
            assert ei.value.errno == errno.EBADMSG
        r = ctl("verify", "flip")
        assert r.returncode == 1, r
        assert "changed after its publisher hashed it" in r.stderr
        r = ctl("--json", "verify", "flip")
        assert r.returncode == 1 and json.loads(r.stdout)["result"] == "mismatch"
        b.value ^= 0x10
        assert ctl("verify", "flip").returncode == 0
        with c.subscriber("flip").acquire() as view:
            view.verify()
        with c.subscriber("plain").acquire() as view:
            with pytest.raises(wsync.NoDataError):
                view.verify()
    # the three mismatches found (the view, verify, verify --json) are counted
    deadline = time.monotonic() + WAIT_S
    while True:                              # the broker sums them at its tick
        m = [m for m in ctl_json("models")["models"] if m["name"] == "flip"][0]
        if m["checksum_failures"] >= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert m["checksum_failures"] == 3
    r = ctl("models")
    title = r.stdout.splitlines()[0].split()
    row = dict(zip(title, [ln for ln in r.stdout.splitlines() if ln.startswith("flip ")][0].split()))
    assert row["SUMFAIL"] == "3"


# ---- wsync-top -------------------------------------------------------------------

TOP = os.path.join(ROOT, BUILD, "bin", "wsync-top")


def top(*args, timeout=WAIT_S):
    return subprocess.run([TOP] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def busy_model(broker):
    """Model 'pol' at a known state: steps 1..4 committed, a reader holding
    the version of step 3 (lag 1), mirrored by the broker."""
    with wsync.connect(broker.sock, "trainer") as tc, wsync.connect(broker.sock, "reader") as rc:
        pub = tc.publisher("pol", [("w", "f32", (256,))])
        for step in (1, 2, 3):
            with pub.begin(timeout=WAIT_S) as slab:
                slab.commit(step)
        sub = rc.subscriber("pol")
        view = sub.acquire()
        with pub.begin(timeout=WAIT_S) as slab:
            latest = slab.commit(4)
        deadline = time.monotonic() + WAIT_S
        while not {s["name"]: s for s in ctl_json("sessions")["sessions"]}["reader"]["held"]:
            assert time.monotonic() < deadline, "the broker did not mirror the reader"
            time.sleep(0.1)
        yield {"pub": pub, "view": view, "latest": latest}
        view.release()


def test_top_batch_text(broker, busy_model):
    r = top("-b", "-n", 2, "-d", 0.2)
    assert r.returncode == 0, r.stderr
    frames = r.stdout.split("wsync-top - ")[1:]
    assert len(frames) == 2
    for f in frames:
        lines = f.splitlines()
        assert lines[0].startswith("%s  pid %d  gen " % (broker.name, broker.proc.pid))
        title = [ln for ln in lines if ln.startswith("MODEL ")][0].split()
        row = dict(zip(title, [ln for ln in lines if ln.startswith("pol ")][0].split()))
        assert row["VERSION"] == str(busy_model["latest"]) and row["STEP"] == "4"
        assert (row["COLL"], row["LAG"]) == ("1", "1") and row["CHECKSUM"] != "-"
        title = [ln for ln in lines if ln.split()[:2] == ["ID", "PID"]][0].split()
        # the session's row (the slot map names the reader too)
        rd = dict(zip(title, [ln for ln in lines if " reader " in ln and " sub " in ln][0]
                      .split()))
        assert (rd["ROLE"], rd["MODELS"], rd["VERSION"], rd["LAG"]) == \
            ("sub", "pol", "%d*" % busy_model["view"].version, "1")
        assert "\x1b" not in f                       # no escape codes in batch mode
    # the CPU needs two samples; an idle broker then reads 0.0%, never "-"
    assert "cpu -" in frames[0] and "cpu -" not in frames[1]


def test_top_json(broker, busy_model):
    with busy_model["pub"].begin(timeout=WAIT_S) as slab:
        slab.commit(5)                               # between the two refreshes, or before
    r = top("--json", "-n", 2, "-d", 0.3)
    assert r.returncode == 0, r.stderr
    docs = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert len(docs) == 2 and all(d["attached"] and d["ok"] for d in docs)
    for d in docs:
        assert d["status"]["instance"] == broker.name
        assert d["status"]["subscribers"] == 1 and d["status"]["publishers"] == 1
        m = d["models"][0]
        assert m["name"] == "pol" and m["step"] == 5 and m["collectors"] == 1
        assert m["version"] > busy_model["latest"] and m["worst_lag"] >= 1
        rd = [s for s in d["sessions"] if s["name"] == "reader"][0]
        assert rd["version"] == busy_model["view"].version and rd["held"]
    assert docs[0]["models"][0]["rate_hz"] is None and docs[0]["interval_s"] is None
    m = docs[1]["models"][0]
    assert m["rate_hz"] == 0.0 and m["bandwidth_bps"] == 0.0   # nothing committed meanwhile
    assert docs[1]["interval_s"] > 0 and docs[1]["status"]["broker_cpu_pct"] >= 0


def test_top_no_broker_and_usage(tmp_path):
    r = top("-b", "-n", 1, "--endpoint", str(tmp_path / "nobody.sock"))
    assert r.returncode == 3 and "no broker at" in r.stderr
    r = top("--json", "-n", 1, "--endpoint", str(tmp_path / "nobody.sock"))
    doc = json.loads(r.stdout)
    assert r.returncode == 3 and doc["ok"] is False and doc["reason"] == "no_broker"
    assert top("--help").returncode == 0
    assert top("--version").stdout.startswith("wsync-top ")
    for args, names in ((["-n", "0"], "'0'"), (["-d", "fast"], "'fast'"),
                        (["--bogus"], "'--bogus'"), (["extra"], "'extra'"), (["-d"], "'-d'")):
        r = top(*args)
        assert r.returncode == 2 and "--help" in r.stderr and names in r.stderr, (args, r)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_top_follows_a_restart(broker, how):
    with wsync.connect(broker.sock, "t") as c:
        pub = c.publisher("pol", [("w", "u8", (8,))])
        with pub.begin(timeout=WAIT_S) as slab:
            slab.commit(1)
    proc = subprocess.Popen([TOP, "--json", "-d", "0.2"], stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline())
        assert first["attached"]
        started = first["status"]["started_ns"]
        gen = first["status"]["generation"]
        if how == "sigterm":
            assert broker.stop() == 0
        else:
            broker.kill()                    # its segments stay, to be adopted
        while True:                          # until it notices: gone, or dead
            d = json.loads(proc.stdout.readline())
            if not d["attached"] or d["status"]["health"] != "ok":
                break
        if how == "sigkill":
            assert d["attached"] and d["status"]["health"] == "dead", d
        broker.restart()
        while True:                          # the new broker, not the dead one's segment
            d = json.loads(proc.stdout.readline())
            if d["attached"] and d["status"]["health"] == "ok":
                break
        # a new broker (a clean stop leaves no segment to adopt, so the
        # generation may start again at 1): another pid, a later start
        assert d["status"]["broker_pid"] == broker.proc.pid
        assert d["status"]["started_ns"] > started
        if how == "sigkill":
            assert d["status"]["generation"] > gen
            assert d["models"][0]["name"] == "pol" and d["models"][0]["step"] == 1
    finally:
        proc.kill()
        proc.wait()


def tmux(*args):
    return subprocess.run(["tmux", "-L", "wsync-test-%d" % os.getpid()] + list(args),
                          capture_output=True, text=True, timeout=WAIT_S)


def wait_screen(pred):
    deadline = time.monotonic() + WAIT_S
    while True:
        screen = tmux("capture-pane", "-p", "-t", "top").stdout
        if pred(screen):
            return screen
        assert time.monotonic() < deadline, "screen never matched:\n" + screen
        time.sleep(0.1)


def test_top_interactive_in_tmux(broker, busy_model):
    if subprocess.run(["which", "tmux"], capture_output=True).returncode:
        pytest.skip("no tmux")
    r = tmux("new-session", "-d", "-s", "top", "-x", "130", "-y", "30",
             "env", "WSYNC_ENDPOINT=" + broker.sock, "TERM=xterm", TOP, "-d", "0.3")
    assert r.returncode == 0, r.stderr
    try:
        s = wait_screen(lambda s: "reader" in s and "pol " in s)
        assert "wsync-top - %s " % broker.name in s and "model: all" in s
        assert "sort: LAG desc" in s
        tmux("send-keys", "-t", "top", "m")
        wait_screen(lambda s: "model: pol" in s and "PINNED BY" in s)
        tmux("send-keys", "-t", "top", "s")
        wait_screen(lambda s: "sort: BEHIND desc" in s)
        tmux("send-keys", "-t", "top", "h")
        wait_screen(lambda s: "wsync-top keys" in s)
        tmux("send-keys", "-t", "top", "x")
        tmux("send-keys", "-t", "top", "p")
        wait_screen(lambda s: "[paused]" in s)
        tmux("resize-window", "-t", "top", "-x", "60", "-y", "12")
        s = wait_screen(lambda s: len(s.splitlines()[0]) <= 60 and "[paused]" in s)
        assert all(len(ln) <= 60 for ln in s.splitlines())
        tmux("send-keys", "-t", "top", "q")
        deadline = time.monotonic() + WAIT_S
        while tmux("has-session", "-t", "top").returncode == 0:
            assert time.monotonic() < deadline, "q did not quit"
            time.sleep(0.1)
    finally:
        tmux("kill-server")


@pytest.fixture
def group_in_progress(broker):
    """Model 'grp' of a publisher group of 3 ranks: step 1 complete, step 2
    committed by ranks 0 and 2 while rank 1 has not (their commits wait);
    yields finish(), which commits rank 1."""
    import threading
    layout, world = [("w", "f32", (6, 4))], 3
    clients = [wsync.connect(broker.sock, "rank%d" % r) for r in range(world)]
    pubs = [c.publisher_shard("grp", layout, r, world, [("w", 0, 2 * r, 2 * r + 2)])
            for r, c in enumerate(clients)]
    errors = []

    def commit(r, step):
        try:
            with pubs[r].begin(timeout=WAIT_S) as slab:
                slab.copy_parts([np.full((2, 4), step, np.float32)])
                slab.commit(step)
        except BaseException as e:
            errors.append(e)

    def run(ranks, step):
        ths = [threading.Thread(target=commit, args=(r, step)) for r in ranks]
        for t in ths:
            t.start()
        return ths

    def finish():
        if waiting:
            for t in run([1], 2) + waiting:
                t.join(WAIT_S)
            waiting.clear()
        assert not errors

    try:
        for t in run(range(world), 1):
            t.join(WAIT_S)
        waiting = run([0, 2], 2)
        deadline = time.monotonic() + WAIT_S
        while {m["name"]: m for m in ctl_json("models")["models"]}["grp"]["group"]["committed"] != [0, 2]:
            assert time.monotonic() < deadline and not errors, "ranks 0 and 2 never committed"
            time.sleep(0.05)
        yield finish
        finish()
    finally:
        for c in clients:
            c.close()


def test_top_group_progress(broker, group_in_progress):
    """wsync-top shows which ranks of a group committed the version being
    written, since when, and how long the last version took; its JSON is
    wsyncctl's."""
    r = top("-b", "-n", 1)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[lines.index([ln for ln in lines if ln.startswith("GROUP ")][0]) + 1] \
        .startswith("grp ")
    g = [ln for ln in lines if ln.startswith("grp ") and "[" in ln][0]
    assert "[#.#] 2/3 committed: 0,2; waiting " in g and " for 1; last version: " in g, g
    assert g.endswith(" ms from first to last commit"), g
    d = json.loads(top("--json", "-n", 1).stdout)
    grp = {m["name"]: m for m in d["models"]}["grp"]["group"]
    ctl_grp = {m["name"]: m for m in ctl_json("models")["models"]}["grp"]["group"]
    assert grp["ranks"] == 3 and grp["committed"] == [0, 2] and grp["waiting_s"] >= 0
    assert grp["last_version_ms"] >= 0 and set(grp) == set(ctl_grp)
    assert ctl_grp["committed"] == [0, 2] and ctl_grp["last_version_ms"] == grp["last_version_ms"]
    if subprocess.run(["which", "tmux"], capture_output=True).returncode == 0:
        tmux("new-session", "-d", "-s", "top", "-x", "160", "-y", "30", "env",
             "WSYNC_ENDPOINT=" + broker.sock, "TERM=xterm", TOP, "-d", "0.2")
        try:
            wait_screen(lambda s: "[#.#] 2/3 committed: 0,2; waiting" in s and "GROUP " in s)
            group_in_progress()
            wait_screen(lambda s: "[...] no version being written; last version: " in s)
        finally:
            tmux("kill-server")
    else:
        group_in_progress()
    g = [ln for ln in top("-b", "-n", 1).stdout.splitlines()
         if ln.startswith("grp ") and "[" in ln][0]
    assert "[...] no version being written; last version: " in g, g


def test_rm_and_unpublished_waiters(broker):
    with wsync.connect(broker.sock, "trainer") as tc, wsync.connect(broker.sock, "reader") as rc:
        pub = tc.publisher("gone", [("w", "f32", (16,))])
        with pub.begin(timeout=WAIT_S) as slab:
            slab.commit(1)
        typo = rc.subscriber("gnoe")            # a name nobody publishes
        models = {m["name"]: m for m in ctl_json("models")["models"]}
        assert models["gnoe"]["state"] != "ready"   # shown: a waiter on nothing
        r = ctl("rm", "gone")
        assert r.returncode == 3 and "publish" in r.stderr    # it has a publisher
        pub.close()
        deadline = time.monotonic() + WAIT_S
        while True:
            r = ctl("rm", "gone")
            if r.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)                     # the publisher's CLOSE is on its way
        assert r.returncode == 0 and "deleted gone" in r.stdout
        assert "gone" not in {m["name"] for m in ctl_json("models")["models"]}
        r = ctl("rm", "never-was")
        assert r.returncode == 3 and "never-was" in r.stderr
        assert ctl("rm").returncode == 2
        typo.close()
