"""Monitoring a broker as an operator does, through wsyncctl and wsync-top:
they read its control segment without a session (never counted as clients),
answer within --timeout when the broker is stopped (SIGSTOP), dead (SIGKILL)
or gone, and say which; ping's exit code tells them apart; lag is counted in
commits the collector did not take (not version numbers, which skip) and in
milliseconds since the version it reads was superseded, checked against a
scripted trainer whose truth is known; wsync-top's screen fits 80x24 and
160x45 with 60 sessions, scrolls, sorts both ways and says when there is no
terminal."""
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
CTL = os.path.join(ROOT, BUILD, "bin", "wsyncctl")
TOP = os.path.join(ROOT, BUILD, "bin", "wsync-top")
DEMO = os.path.join(ROOT, BUILD, "bin", "wsync-demo")
LAYOUT = [("w", "f32", (16,))]


def run(tool, *args, timeout=WAIT_S, env=None):
    t0 = time.monotonic()
    r = subprocess.run([tool] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=timeout, env=env)
    r.seconds = time.monotonic() - t0
    return r


def ctl_json(*args):
    r = run(CTL, "--json", *args)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] is True
    return doc


def status():
    return ctl_json("status")


def wait_tick(after_ns):
    """Until the broker computed its session figures after after_ns."""
    deadline = time.monotonic() + WAIT_S
    while True:
        st = status()
        if st["stats_ns"] > after_ns:
            return st
        assert time.monotonic() < deadline, "the broker computed no figures"
        time.sleep(0.05)


def publish(pub, step):
    with pub.begin(timeout=WAIT_S) as slab:
        return slab.commit(step)


# ---- health: ok, stopped, dead, gone -------------------------------------------


def test_ping_and_status_say_which(broker):
    r = run(CTL, "ping")
    assert r.returncode == 0 and r.stdout.startswith("running"), r
    assert json.loads(run(CTL, "--json", "ping").stdout)["health"] == "ok"

    broker.proc.send_signal(signal.SIGSTOP)
    try:
        # a heartbeat older than 1.5 s of a process stopped by a signal: it
        # cannot beat, so "not responding" at once, whatever --timeout
        time.sleep(1.6)
        r = run(CTL, "ping", "--timeout", "8")
        assert r.returncode == 1, r
        assert "not responding: heartbeat" in r.stdout and "SIGSTOP" in r.stdout
        assert r.seconds < 3, r.seconds       # not the 8 s: slack for a loaded machine
        doc = json.loads(run(CTL, "--json", "ping", "--timeout", "0.5").stdout)
        assert doc["ok"] is False and doc["health"] == "not_responding" and doc["exit"] == 1
        time.sleep(1.5)                      # past 3 s: status says so at once
        for args in (["status"], ["--json", "status"], ["--json", "models"],
                     ["--json", "sessions"], ["models"], ["sessions"]):
            r = run(CTL, *args)
            # shown at once (never waits for it), and exit 3: no broker serves
            assert r.returncode == 3 and r.seconds < 5, (args, r)
            if "--json" in args:
                doc = json.loads(r.stdout)
                assert doc["ok"] is False and doc["exit"] == 3, doc
                assert doc["reason"] == "not_responding" and "heartbeat" in doc["error"]
            else:
                assert r.stdout and "not responding: heartbeat" in r.stderr, (args, r)
        st = json.loads(run(CTL, "--json", "status").stdout)
        assert st["health"] == "not_responding" and st["heartbeat_age_s"] > 3
        assert "not responding: heartbeat" in run(CTL, "status").stdout
        r = run(TOP, "-b", "-n", 1)
        assert r.returncode == 3 and "not responding: heartbeat" in r.stdout, r
        r = run(TOP, "-b", "-n", 1, "--timeout", "1")  # the tools' common flag
        assert r.returncode == 3 and "not responding: heartbeat" in r.stdout, r
        # the demo roles give up within their --timeout, saying why
        for role in (["trainer", "--mib", "1"], ["collector"]):
            r = run(DEMO, *role, "--endpoint", broker.sock, "--timeout", "1")
            assert r.returncode == 1 and r.seconds < 1 + 4, (role, r.seconds, r)
            assert "no answer from %s within 1 s: it is not responding" % broker.sock \
                in r.stderr, (role, r.stderr)
        # commands that need the broker fail fast, saying why
        for args in (["rm", "x"], ["wait", "x"], ["verify", "x"]):
            r = run(CTL, "--timeout", "1", *args)
            assert r.returncode == 3 and "not responding" in r.stderr, (args, r)
            assert r.seconds < 1 + 4, (args, r.seconds)
            doc = json.loads(run(CTL, "--json", "--timeout", "0.3", *args).stdout)
            assert doc["reason"] == "not_responding", doc
    finally:
        broker.proc.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + WAIT_S
    while run(CTL, "ping").returncode != 0:
        assert time.monotonic() < deadline, "ping never healthy again"
        time.sleep(0.1)
    # Resumed, the broker answers the demo roles' HELLOs: they are gone, the
    # send fails (EPIPE/ECONNRESET). A client that exited is the usual end,
    # logged at debug: nothing at info says "Connection reset by peer".
    while True:
        st = status()
        if st["sessions_total"] >= 2 and st["sessions"] == 0:
            break
        assert time.monotonic() < deadline, st
        time.sleep(0.05)
    time.sleep(0.2)
    with open(broker.log, errors="replace") as f:
        noisy = [ln for ln in f if " info: " in ln and
                 ("Connection reset" in ln or "Broken pipe" in ln or "disconnected" in ln)]
    assert noisy == [], noisy

    broker.kill()                            # its segment stays, its process goes
    r = run(CTL, "ping")
    assert r.returncode == 2 and "died" in r.stdout, r
    r = run(CTL, "--json", "status")
    assert r.returncode == 3 and json.loads(r.stdout)["health"] == "dead", r
    r = run(CTL, "status")
    assert r.returncode == 3 and "died" in r.stdout and "died" in r.stderr, r
    r = run(CTL, "rm", "x")
    assert r.returncode == 3 and "died" in r.stderr, r
    broker.restart()
    assert run(CTL, "ping").returncode == 0
    assert broker.stop() == 0                # a clean stop leaves nothing
    r = run(CTL, "ping")
    assert r.returncode == 2 and "no broker" in r.stdout, r
    r = run(CTL, "status")
    assert r.returncode == 3 and "no broker" in r.stderr, r
    broker.restart()                         # for the fixture's clean stop


def test_monitors_take_no_session(broker):
    with wsync.connect(broker.sock, "trainer") as tc, wsync.connect(broker.sock, "c") as cc:
        pub = tc.publisher("pol", LAYOUT)
        publish(pub, 1)
        sub = cc.subscriber("pol")
        sub.acquire().release()
        before = status()["sessions_total"]
        for args in (["status"], ["models"], ["sessions"], ["ping"], ["metrics"]):
            assert run(CTL, *args).returncode == 0, args
        r = run(TOP, "--json", "-n", 2, "-d", 0.2)
        assert r.returncode == 0
        for line in r.stdout.splitlines():
            d = json.loads(line)
            assert d["models"][0]["collectors"] == 1
            assert {s["name"] for s in d["sessions"]} == {"trainer", "c"}
        st = status()
        assert st["sessions_total"] == before and st["sessions"] == 2


# ---- lag: commits not taken, time since superseded ---------------------------------


def test_lag_is_counted_in_commits_and_time(broker):
    with wsync.connect(broker.sock, "trainer") as tc, \
            wsync.connect(broker.sock, "keeper") as kc, \
            wsync.connect(broker.sock, "holder") as hc:
        pub = tc.publisher("pol", LAYOUT)
        for step in (1, 2, 3):
            publish(pub, step)
        keeper = kc.subscriber("pol")
        held = hc.subscriber("pol").acquire()         # the holder keeps this one
        t = wait_tick(status()["stats_ns"])["stats_ns"]
        publish(pub, 4)                               # its successor
        with keeper.acquire() as v:
            superseded_ns = v.published_ns
        t = wait_tick(t)["stats_ns"]
        # grants never committed skip version numbers: not commits missed
        for _ in range(3):
            slab = pub.begin(timeout=WAIT_S)
            slab.abort()
        publish(pub, 5)
        latest = publish(pub, 6)
        with keeper.acquire() as v:
            assert v.version == latest
        st = wait_tick(t)
        sess = {s["name"]: s for s in ctl_json("sessions")["sessions"]}
        read_ns = time.time_ns()
        h, k = sess["holder"], sess["keeper"]
        assert latest - held.version > 3, "no version number was skipped"
        assert h["version"] == held.version and h["held"] and h["slot"] is not None
        assert h["lag"] == 3 and not h["lag_estimated"], h          # steps 4, 5, 6
        # as of the reading: from its value at the tick to the one after it
        want_ms = (st["stats_ns"] - superseded_ns) // 1000000
        upto_ms = (read_ns - superseded_ns) / 1e6
        assert want_ms - 1 <= h["lag_ms"] <= upto_ms + 1, (h, want_ms, upto_ms)
        assert h["since_s"] >= h["lag_ms"] / 1000
        assert k["lag"] == 0 and k["lag_ms"] == 0 and not k["held"], k
        m = ctl_json("models")["models"][0]
        upto_ms = (time.time_ns() - superseded_ns) / 1e6
        assert m["worst_lag"] == 3 and want_ms - 1 <= m["worst_lag_ms"] <= upto_ms + 1
        assert m["publisher_pid"] == os.getpid() and m["collectors"] == 2
        # the same figures on wsync-top's screen lines and wsyncctl's table
        r = run(CTL, "sessions")
        row = [ln for ln in r.stdout.splitlines() if " holder " in ln][0].split()
        assert row[5:7] == ["%d*" % held.version, "3"], row
        held.release()


# ---- one contract ---------------------------------------------------------------------


def test_partial_rm_reports_each(broker):
    with wsync.connect(broker.sock, "t") as c:
        for name in ("a", "b"):
            pub = c.publisher(name, LAYOUT)
            publish(pub, 1)
            pub.close()
    r = run(CTL, "--json", "rm", "a", "ghost", "b")
    assert r.returncode == 3
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["reason"] == "partial" and doc["exit"] == 3
    items = {i["model"]: i for i in doc["models"]}
    assert items["a"]["ok"] and items["b"]["ok"] and not items["ghost"]["ok"]
    assert items["ghost"]["reason"] == "not_found"
    # one specific message, no generic text glued before it
    assert r.stderr.strip() == "wsyncctl: rm ghost: " + items["ghost"]["error"]
    assert "not found (" not in r.stderr
    assert [m["name"] for m in ctl_json("models")["models"]] == []


# ---- wsync-top's screen ------------------------------------------------------------------


def test_top_needs_a_terminal(broker):
    r = run(TOP, "-n", 1)                    # stdout is a pipe here
    assert r.returncode == 3 and "no terminal (try -b)" in r.stderr
    assert r.stdout == ""                    # not one escape code


def tmux(sock, *args):
    return subprocess.run(["tmux", "-L", sock] + list(args), capture_output=True, text=True,
                          timeout=WAIT_S)


def top_in_tmux(broker, tag, cols=80, rows=24):
    """wsync-top on broker, refreshing every 0.3 s, in a tmux server of its
    own (the socket name returned; the test kills it) of cols x rows."""
    if subprocess.run(["which", "tmux"], capture_output=True).returncode:
        pytest.skip("no tmux")
    sock = "wsync-mon-%s-%d" % (tag, os.getpid())
    r = tmux(sock, "new-session", "-d", "-s", "top", "-x", str(cols), "-y", str(rows),
             "env", "WSYNC_ENDPOINT=" + broker.sock, "TERM=xterm", TOP, "-d", "0.3")
    assert r.returncode == 0, r.stderr
    return sock


def screen_of(sock):
    return tmux(sock, "capture-pane", "-p", "-t", "top").stdout


def wait_screen(sock, pred, what):
    deadline = time.monotonic() + WAIT_S
    while True:
        s = screen_of(sock)
        if pred(s):
            return s
        assert time.monotonic() < deadline, "screen never showed %s:\n%s" % (what, s)
        time.sleep(0.1)


@pytest.fixture
def sixty(broker):
    """60 sessions: a trainer, 58 collectors (one holding an old version),
    all mirrored by the broker."""
    clients = [wsync.connect(broker.sock, "trainer")]
    pub = clients[0].publisher("policy", LAYOUT)
    publish(pub, 1)
    subs = []
    for i in range(58):
        c = wsync.connect(broker.sock, "collector-with-a-long-name-%02d" % i)
        clients.append(c)
        subs.append(c.subscriber("policy"))
    held = subs[7].acquire()
    for step in (2, 3):
        publish(pub, step)
    for s in subs[8:]:
        s.acquire().release()
    clients.append(wsync.connect(broker.sock, "idle"))
    wait_tick(status()["stats_ns"])
    yield held
    held.release()
    for c in clients:
        c.close()


@pytest.mark.parametrize("cols,rows", [(80, 24), (160, 45)])
def test_top_screen_fits_scrolls_sorts(broker, sixty, cols, rows):
    sock = top_in_tmux(broker, "fit", cols, rows)
    try:
        s = wait_screen(sock, lambda s: "more below" in s, "the 'more' line")
        lines = s.splitlines()
        assert len(lines) <= rows and all(len(ln) <= cols for ln in lines)
        title = [ln for ln in lines if ln.lstrip().startswith("MODEL")][0].split()
        for col in ("VERSION", "RATE", "PINNED", "COLL", "LAG", "BEHIND"):
            assert col in title, (col, title)
        stitle = [ln for ln in lines if "PID" in ln and "NAME" in ln][0]
        assert "LAG v" in stitle                  # the sort column, descending
        rows_shown = [ln for ln in lines if "collector-with" in ln]
        assert 0 < len(rows_shown) < 58
        # the first row is the one most behind: the holder
        assert "collector-with-a-long-name-07" in rows_shown[0] or \
            "collector-with-a-long-na" in rows_shown[0]
        more = [ln for ln in lines if "more below" in ln][0]
        below = int(more.split("-- ")[1].split()[0])
        assert below == 60 - len([ln for ln in lines[:-1] if "collector-with" in ln or
                                  " trainer" in ln or " idle" in ln]), more
        # full names of the cursor's session on the last line
        assert "'collector-with-a-long-name-07'" in lines[-1]
        if cols >= 160:
            assert "collector-with-a-long-name-07 " in rows_shown[0]   # whole
        # reverse the sort: the least behind (no version) first
        tmux(sock, "send-keys", "-t", "top", "r")
        s = wait_screen(sock, lambda s: "LAG ^" in s, "the reversed sort")
        assert "sort: LAG asc" in s
        # scroll to the end: nothing more below
        tmux(sock, "send-keys", "-t", "top", "G")
        wait_screen(sock, lambda s: "0 more below" in s, "the end of the list")
        # the slot map of the selected model: who pins what
        tmux(sock, "send-keys", "-t", "top", "m")
        s = wait_screen(sock, lambda s: "PINNED BY" in s, "the slot map")
        assert "collector-with-a-long-name-07 (" in s or rows < 30
        tmux(sock, "send-keys", "-t", "top", "q")
        deadline = time.monotonic() + WAIT_S
        while tmux(sock, "has-session", "-t", "top").returncode == 0:
            assert time.monotonic() < deadline, "q did not quit"
            time.sleep(0.1)
    finally:
        tmux(sock, "kill-server")


def test_top_n_and_no_term_in_tmux(broker):
    if subprocess.run(["which", "tmux"], capture_output=True).returncode:
        pytest.skip("no tmux")
    sock = "wsync-mon2-%d" % os.getpid()
    out = os.path.join(broker.dir, "top.rc")
    # -n ends the screen by itself; TERM unset is "no terminal", exit 3
    r = tmux(sock, "new-session", "-d", "-s", "top", "-x", "80", "-y", "24",
             "sh", "-c", "env WSYNC_ENDPOINT=%s TERM=xterm %s -n 2 -d 0.2; echo $? > %s;"
             "env -u TERM WSYNC_ENDPOINT=%s %s 2>>%s.err; echo $? >> %s; sleep 30"
             % (broker.sock, TOP, out, broker.sock, TOP, out, out))
    assert r.returncode == 0, r.stderr
    try:
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(out) or len(open(out).read().split()) < 2:
            assert time.monotonic() < deadline, "wsync-top -n 2 did not end"
            time.sleep(0.1)
        assert open(out).read().split() == ["0", "3"]
        assert "no terminal" in open(out + ".err").read()
    finally:
        tmux(sock, "kill-server")


def test_top_says_how_many_groups_do_not_fit(broker):
    """At 80x24 with 14 publisher groups the groups section cannot show
    them all: it ends in a line saying how many more there are, within the
    screen, instead of dropping them."""
    layout = [("w", "f32", (8, 6))]
    parts = [[("w", 0, 0, 4)], [("w", 0, 4, 8)]]
    with wsync.connect(broker.sock, "rank0") as r0, wsync.connect(broker.sock, "rank1") as r1:
        pubs = [c.publisher_shard("g%02d" % i, layout, r, 2, parts[r])
                for i in range(14) for r, c in enumerate((r0, r1))]
        sock = top_in_tmux(broker, "grp")
        try:
            s = wait_screen(sock, lambda s: "more groups" in s, "the 'more groups' line")
            lines = s.splitlines()
            assert len(lines) <= 24 and all(len(ln) <= 80 for ln in lines)
            shown = [ln for ln in lines if re.match(r"g\d\d\s+\[", ln)]
            more = [ln for ln in lines if "more groups" in ln]
            assert len(more) == 1, s
            assert int(more[0].split("... ")[1].split()[0]) == 14 - len(shown), (shown, more)
        finally:
            tmux(sock, "kill-server")
        del pubs


def test_top_selected_model_past_the_cut_and_slot_map_cut(broker):
    """At 80x24 with 12 models only some fit: selecting the last one brings
    it on screen, highlighted, with a line saying how many are above and
    below; its 8-slot map, cut short, ends in a line saying how many slots
    are not shown."""
    with wsync.connect(broker.sock, "trainer") as c:
        pubs = [c.publisher("m%02d" % i, LAYOUT, slots=8 if i == 11 else 0)
                for i in range(12)]
        for p in pubs:
            publish(p, 1)
        sock = top_in_tmux(broker, "sel")
        try:
            s = wait_screen(sock, lambda s: "more models" in s, "the 'more models' line")
            assert " m11 " not in s, s                # past the cut before it is selected
            tmux(sock, "send-keys", "-t", "top", "M")     # the last model
            s = wait_screen(sock, lambda s: "PINNED BY" in s, "the slot map")
            lines = s.splitlines()
            assert len(lines) <= 24 and all(len(ln) <= 80 for ln in lines)
            assert "model: m11" in s, s
            rows = [ln for ln in lines if ln.startswith("m11 ")]
            assert len(rows) == 1, s
            more = [ln for ln in lines if "more models" in ln][0]
            assert "above, 0 below" in more, more
            # highlighted: its row is drawn bold (and underlined)
            esc = tmux(sock, "capture-pane", "-p", "-e", "-t", "top").stdout
            row = [ln for ln in esc.splitlines() if "m11 " in ln and "model:" not in ln][0]
            assert "\x1b[1m" in row or "\x1b[1;" in row or ";1m" in row, repr(row)
            # the slot map, cut short, says how much is not shown
            slots = [ln for ln in lines if re.match(r"\s+\d+ (free|old|latest|writing) ", ln)]
            cut = [ln for ln in lines if "more slots" in ln]
            assert len(cut) == 1 and len(slots) < 8, s
            assert int(cut[0].split("... ")[1].split()[0]) == 8 - len(slots), cut
        finally:
            tmux(sock, "kill-server")


def test_a_stopped_broker_shows_its_uptime_and_exits_3(monkeypatch):
    """A broker that shut down keeping its weights (--keep) leaves its
    segment: status shows it, with the uptime it had (frozen, not growing),
    and exits 3 like models, sessions and wsync-top -b -n."""
    from conftest import Broker
    b = Broker(["--keep"])
    monkeypatch.setenv("XDG_RUNTIME_DIR", b.dir)
    monkeypatch.setenv("WSYNC_ENDPOINT", b.sock)
    try:
        b.start()
        time.sleep(1.2)
        assert b.stop() == 0, b.log_tail()
        r = run(CTL, "--json", "status")
        doc = json.loads(r.stdout)
        assert r.returncode == 3 and doc["health"] == "stopped" and doc["reason"] == "stopped"
        up = doc["uptime_s"]
        assert 1.0 < up < 60, doc
        time.sleep(1.2)
        assert json.loads(run(CTL, "--json", "status").stdout)["uptime_s"] == up
        for args in (["status"], ["models"], ["sessions"]):
            r = run(CTL, *args)
            assert r.returncode == 3 and "shut down" in r.stderr, (args, r)
        r = run(TOP, "-b", "-n", 1, "-d", 0.1)
        assert r.returncode == 3 and "shut down" in r.stderr, r
        r = run(TOP, "--json", "-n", 1)
        assert r.returncode == 3, r
        assert json.loads(r.stdout.splitlines()[-1])["status"]["uptime_s"] == up
    finally:
        b.cleanup()


def test_checksum_of_a_model_published_faster_than_the_tick(broker):
    """The broker mirrors the checksum at every commit, not only once a
    second: a model published at 50 Hz shows its latest version's."""
    import numpy as np
    with wsync.connect(broker.sock, "fast") as c:
        pub = c.publisher("fast", LAYOUT)
        seen = 0
        for step in range(1, 41):
            pub.publish({"w": np.full(16, step, np.float32)}, step)
            m = [x for x in ctl_json("models")["models"] if x["name"] == "fast"][0]
            if m["version"] == step and m["checksum"]:
                seen += 1
            time.sleep(0.02)
        # every read right after a commit sees that version's checksum
        assert seen == 40, seen
        r = run(TOP, "-b", "-n", 1)
        assert r.returncode == 0, r
        row = [ln for ln in r.stdout.splitlines() if ln.startswith("fast ")][0]
        assert re.search(r" [0-9a-f]{16}$", row), row


def test_batch_top_prints_every_slot_map(broker):
    with wsync.connect(broker.sock, "trainer") as tc, wsync.connect(broker.sock, "c") as cc:
        pub = tc.publisher("pol", LAYOUT)
        publish(pub, 1)
        publish(pub, 2)
        held = cc.subscriber("pol").acquire()
        wait_tick(status()["stats_ns"])
        r = run(TOP, "-b", "-n", 1)
        held.release()
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    at = lines.index("SLOT STATE    VERSION  PINNED BY (pid, held for)  of pol")
    slots = lines[at + 1:at + 5]          # 4 slots by default
    assert any(re.match(r"\s+\d+ latest\s+2\s+c \(\d+, ", ln) for ln in slots), slots
    assert any(re.match(r"\s+\d+ old ", ln) for ln in slots), slots


def test_top_n_range():
    for bad in ("0", "-1", "x", "1e3", "99999999999999999999", "1000000001"):
        r = run(TOP, "-b", "-n", bad)
        assert r.returncode == 2 and "-n wants a count from 1 to 1000000000" in r.stderr, r


def test_a_publisher_killed_mid_write_counts_an_abort(broker):
    """The version a publisher had begun when it was killed is dropped by
    the broker, and counted in aborts like an abort() (wsync_model_aborts_total)."""
    import sys
    script = ("import sys, time, wsync\n"
              "c = wsync.connect(sys.argv[1], 'doomed')\n"
              "p = c.publisher('mid', [('w', 'f32', (16,))])\n"
              "p.publish({'w': [0.0] * 16}, 1)\n"
              "s = p.begin(timeout=10)\n"
              "print('begun', flush=True)\n"
              "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, broker.sock],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "begun"
        proc.kill()
        proc.wait(WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + WAIT_S
    while True:
        m = [x for x in ctl_json("models")["models"] if x["name"] == "mid"][0]
        if m["aborts"] or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert m["aborts"] == 1 and m["version"] == 1 and m["commits"] == 1, m
    assert 'wsync_model_aborts_total{broker="%s",model="mid"} 1' % broker.name \
        in run(CTL, "metrics").stdout
