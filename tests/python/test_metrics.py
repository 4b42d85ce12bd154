"""The broker's figures in the Prometheus text exposition format (0.0.4):
`wsyncctl metrics` on stdout and `wsyncctl serve-metrics` over HTTP, scraped
with a real HTTP client (urllib) and parsed strictly here: every line a
comment (HELP or TYPE, once per family, before its samples) or a sample of a
declared family; names and labels of the allowed characters, label values
quoted, values numbers, counters named _total, no series twice. Checked
against a broker whose state is known: commits, a held view with its lag,
a stopped broker (wsync_up 0), and no broker at all."""
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

import wsync
from conftest import ROOT, WAIT_S

BUILD = os.environ.get("BUILD") or "build"
CTL = os.path.join(ROOT, BUILD, "bin", "wsyncctl")

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\\\|\\"|\\n)*"'
SAMPLE = re.compile(r"^(%s)(\{(%s(?:,%s)*)?\})? (\S+)$" % (NAME, LABEL, LABEL))
LABELS = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\\\|\\"|\\n)*)"')
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse_exposition(text):
    """{(name, frozenset(labels)): value}, after checking every line."""
    assert text.endswith("\n"), "the exposition ends with a newline"
    helped, typed, samples, done = set(), {}, {}, set()
    current = None
    for n, line in enumerate(text.split("\n")[:-1], 1):
        assert line == line.strip() and line, "line %d: blank or padded: %r" % (n, line)
        if line.startswith("#"):
            parts = line.split(" ", 3)
            assert parts[0] == "#" and parts[1] in ("HELP", "TYPE"), "line %d: %r" % (n, line)
            name = parts[2]
            assert re.fullmatch(NAME, name), line
            if parts[1] == "HELP":
                assert name not in helped, "HELP twice for " + name
                helped.add(name)
            else:
                assert name not in typed and parts[3] in TYPES, line
                assert name not in samples_families(samples), "TYPE after samples: " + name
                typed[name] = parts[3]
            if current and current != name:
                done.add(current)
            assert name not in done, "family %s split in two" % name
            current = name
            continue
        m = SAMPLE.match(line)
        assert m, "line %d is not a sample: %r" % (n, line)
        name, labels, value = m.group(1), m.group(3) or "", m.group(4)
        assert name in typed, "sample of an undeclared family: " + line
        assert name == current, "sample outside its family: " + line
        if typed[name] == "counter":
            assert name.endswith("_total"), "a counter not named _total: " + name
        pairs = LABELS.findall(labels)
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), "a label twice: " + line
        v = float(value)                     # NaN/Inf would parse too; we never write them
        assert v == v and abs(v) != float("inf"), line
        key = (name, frozenset(pairs))
        assert key not in samples, "series twice: " + line
        samples[key] = v
    assert set(typed) == helped
    return samples


def samples_families(samples):
    return {k[0] for k in samples}


def get(samples, family, **labels):
    for (n, ls), v in samples.items():
        d = dict(ls)
        if n == family and all(d.get(k) == str(val) for k, val in labels.items()):
            return v
    raise KeyError("%s %s not in the exposition" % (family, labels))


def official_parse(text):
    """The same {(name, labels): value} through the Prometheus project's
    own Python parser (Debian's python3-prometheus-client), so the strict
    parser above is not the only judge of the format."""
    from prometheus_client.parser import text_string_to_metric_families
    return {(smp.name, frozenset(smp.labels.items())): smp.value
            for fam in text_string_to_metric_families(text) for smp in fam.samples}


def scrape(url, timeout=WAIT_S):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        return r.read().decode("utf-8")


@pytest.fixture
def server(broker):
    proc = subprocess.Popen([CTL, "serve-metrics", "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving metrics on http://127.0.0.1:"), \
            (line, proc.stderr.read() if proc.poll() is not None else "")
        yield line.split()[-1]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_S) == 0


def wait_mirrored(broker, pred):
    deadline = time.monotonic() + WAIT_S
    while True:
        s = parse_exposition(subprocess.run([CTL, "metrics"], capture_output=True,
                                            text=True, timeout=WAIT_S).stdout)
        if pred(s):
            return s
        assert time.monotonic() < deadline, "the broker never mirrored it"
        time.sleep(0.1)


def test_metrics_known_state(broker, server):
    with wsync.connect(broker.sock, "trainer") as tc, wsync.connect(broker.sock, "c:1/x") as cc:
        pub = tc.publisher("pol", [("w", "f32", (256,))])
        for step in (1, 2, 3):
            with pub.begin(timeout=WAIT_S) as slab:
                slab.commit(step)
        view = cc.subscriber("pol").acquire()
        for step in (4, 5):
            with pub.begin(timeout=WAIT_S) as slab:
                latest = slab.commit(step)
        s = wait_mirrored(broker, lambda s: ("wsync_collector_lag_commits" in
                                             samples_families(s)))
        # the same figures over HTTP, scraped by a real client
        text = scrape(server)
        h = parse_exposition(text)
        assert official_parse(text) == h
        for got in (s, h):
            b = broker.name
            assert get(got, "wsync_up", broker=b) == 1
            assert get(got, "wsync_model_version", broker=b, model="pol") == latest
            assert get(got, "wsync_model_commits_total", broker=b, model="pol") == 5
            assert get(got, "wsync_model_step", broker=b, model="pol") == 5
            assert get(got, "wsync_model_slab_bytes", broker=b, model="pol") >= 1024
            assert get(got, "wsync_model_slots", model="pol") == 4
            assert get(got, "wsync_model_slots_pinned", model="pol") == 1
            assert get(got, "wsync_model_collectors", model="pol") == 1
            assert get(got, "wsync_model_worst_lag_commits", model="pol") == 2
            assert get(got, "wsync_model_checksum_failures_total", model="pol") == 0
            assert get(got, "wsync_collector_lag_commits", name="c:1/x") == 2
            assert get(got, "wsync_collector_lag_seconds", name="c:1/x") > 0
            assert get(got, "wsync_collector_acquires_total", name="c:1/x") == 1
            assert get(got, "wsync_broker_sessions", broker=b) == 2
            assert get(got, "wsync_broker_cpu_seconds_total", broker=b) >= 0
            assert get(got, "wsync_broker_work_pauses_total", broker=b) == 0
            assert get(got, "wsync_broker_sessions_paused", broker=b) == 0
            assert 0 <= get(got, "wsync_broker_heartbeat_age_seconds", broker=b) < 3
        view.release()
    # other paths and methods
    base = server.rsplit("/", 1)[0]
    with pytest.raises(urllib.error.HTTPError) as ei:
        urllib.request.urlopen(base + "/nothing", timeout=WAIT_S)
    assert ei.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as ei:
        urllib.request.urlopen(urllib.request.Request(server, data=b"x", method="POST"),
                               timeout=WAIT_S)
    assert ei.value.code == 405


def test_metrics_stopped_and_absent(broker, server):
    broker.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(3.5)
        t0 = time.monotonic()
        h = parse_exposition(scrape(server))
        assert time.monotonic() - t0 < 5, "a scrape waited for the stopped broker"
        assert get(h, "wsync_up", broker=broker.name) == 0
        assert get(h, "wsync_broker_heartbeat_age_seconds") > 3
    finally:
        broker.proc.send_signal(signal.SIGCONT)
    assert broker.stop() == 0
    h = parse_exposition(scrape(server))
    assert get(h, "wsync_up") == 0 and len(h) == 1
    r = subprocess.run([CTL, "metrics"], capture_output=True, text=True, timeout=WAIT_S)
    assert r.returncode == 0 and get(parse_exposition(r.stdout), "wsync_up") == 0
    broker.restart()                          # the exporter follows a new broker
    deadline = time.monotonic() + WAIT_S
    while get(parse_exposition(scrape(server)), "wsync_up") != 1:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_metrics_usage():
    for args, what in ((["serve-metrics", "--listen", "nowhere"], "'nowhere'"),
                       (["metrics", "--bogus"], "'--bogus'"),
                       (["metrics", "extra"], "'extra'"),
                       (["--json", "metrics"], "--json")):
        r = subprocess.run([CTL] + args, capture_output=True, text=True, timeout=WAIT_S)
        assert r.returncode == 2 and what in r.stderr, (args, r)
    r = subprocess.run([CTL, "--json", "metrics"], capture_output=True, text=True,
                       timeout=WAIT_S)
    assert json.loads(r.stdout)["reason"] == "usage"
