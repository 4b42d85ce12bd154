"""Delta or full, per version, from what the last versions cost; and the
relay's counters, for the log, --metrics (Prometheus text) and --json.

For each way the source keeps the (low) median of the last 5 costs per byte of
the version (a median: one odd version, a fresh model, a version that met
a busy core, does not flip the choice): the time from the start of its send
(the encode included, for a delta) to the ack of every destination (their
decode or checksum and commit included). The prediction for the version at
hand is that cost times its bytes; the cheaper way wins. So the choice
follows the link, the cores and how much the model changes, as measured,
with no constant to tune: on loopback or a fast link full versions win, on
a slow one deltas do, and a step that changed everything makes deltas
cost more and lose.

Each way is measured again now and then: while full wins, delta is tried
every PROBE_EVERY versions (a model that stopped changing much is
noticed); while delta wins, full is tried every PROBE_EVERY versions if
delta's lead is under 2x, every 4 * PROBE_EVERY otherwise (a link that got
faster, a model that changes more, are noticed). The first version of a
group is not measured: it pays for the group's first touches.
"""
import os
import statistics
import time
from collections import deque

PROBE_EVERY = 8
HISTORY = 5


class Policy:
    def __init__(self, mode="auto", probe_every=PROBE_EVERY):
        self.mode = mode                  # auto | on | off
        self.probe_every = probe_every
        self.hist = {"full": deque(maxlen=HISTORY), "delta": deque(maxlen=HISTORY)}
        self.since = {"full": 0, "delta": 0}        # versions since each was used

    @property
    def cost(self):
        """Seconds per version byte, each way (None: not measured)."""
        return {m: statistics.median_low(h) if h else None for m, h in self.hist.items()}

    def choose(self, nbytes):
        """("delta" | "full", why)."""
        if self.mode == "off":
            return "full", "--delta off"
        if self.mode == "on":
            return "delta", "--delta on"
        if self.mode == "alternate":      # the bench: both ways under the same load
            return ("full", "alternate") if self.since["full"] else ("delta", "alternate")
        cost = self.cost
        if cost["delta"] is None:
            return "delta", "delta not measured yet"
        if cost["full"] is None:
            return "full", "full not measured yet"
        t_full, t_delta = cost["full"] * nbytes, cost["delta"] * nbytes
        why = "predicted %.1f ms delta, %.1f ms full" % (t_delta * 1e3, t_full * 1e3)
        if t_delta < t_full:
            every = self.probe_every if 2 * t_delta > t_full else 4 * self.probe_every
            if self.since["full"] + 1 >= every:
                return "full", why + "; measuring full again"
            return "delta", why
        if self.since["delta"] + 1 >= self.probe_every:
            return "delta", why + "; measuring delta again"
        return "full", why

    def observe(self, mode, nbytes, seconds):
        """What sending a version of nbytes the way mode cost, in seconds."""
        for m in self.since:
            self.since[m] = 0 if m == mode else self.since[m] + 1
        if nbytes > 0 and seconds > 0:
            self.hist[mode].append(seconds / nbytes)

    def state(self):
        return {m: None if c is None else round(c * 1e9, 3) for m, c in self.cost.items()}


class Counters:
    """Totals of one relay, by mode; written to --metrics after every version."""

    def __init__(self, model, role, path):
        self.model, self.role, self.path = model, role, path
        self.versions = {"delta": 0, "full": 0}
        self.wire = {"delta": 0, "full": 0}
        self.version_bytes = {"delta": 0, "full": 0}
        self.failed = 0                   # deltas not applied (destination) / resends (source)
        self.skipped = 0
        self.dropped = 0
        self.refused = 0
        self.last = {}

    def count(self, mode, nbytes, wire, **last):
        self.versions[mode] += 1
        self.wire[mode] += wire
        self.version_bytes[mode] += nbytes
        self.last = dict(last, mode=mode, nbytes=nbytes, wire_bytes=wire,
                         ratio=round(wire / nbytes, 5) if nbytes else None, t=time.time())
        self.write()

    def summary(self):
        return {"versions": dict(self.versions), "wire_bytes": dict(self.wire),
                "version_bytes": dict(self.version_bytes), "failed": self.failed,
                "skipped": self.skipped, "dropped": self.dropped, "refused": self.refused,
                "last": self.last}

    def write(self):
        if not self.path:
            return
        m = self.model.replace("\\", "\\\\").replace('"', '\\"')
        lab = 'model="%s",role="%s"' % (m, self.role)
        out = []

        def metric(name, kind, help_, rows):
            out.append("# HELP wsync_relay_%s %s" % (name, help_))
            out.append("# TYPE wsync_relay_%s %s" % (name, kind))
            for extra, v in rows:
                out.append("wsync_relay_%s{%s%s} %s" % (name, lab, extra, v))

        metric("versions_total", "counter", "Versions carried, by how they travelled.",
               [(',mode="%s"' % k, v) for k, v in sorted(self.versions.items())])
        metric("wire_bytes_total", "counter", "Payload bytes on the wire, by mode.",
               [(',mode="%s"' % k, v) for k, v in sorted(self.wire.items())])
        metric("version_bytes_total", "counter", "Bytes of the versions carried, by mode.",
               [(',mode="%s"' % k, v) for k, v in sorted(self.version_bytes.items())])
        metric("delta_failed_total", "counter",
               "Deltas not applied (a destination without the base, a damaged delta).",
               [("", self.failed)])
        metric("skipped_total", "counter", "Versions of the source never sent (newest wins).",
               [("", self.skipped)])
        metric("refused_peers_total", "counter", "Store connections without the job's secret.",
               [("", self.refused)])
        if self.last:
            metric("last_ratio", "gauge", "Wire bytes / version bytes of the last version.",
                   [("", self.last["ratio"] if self.last["ratio"] is not None else "NaN")])
            metric("last_version", "gauge", "Source version of the last version carried.",
                   [("", self.last.get("version", 0))])
            metric("last_delta", "gauge", "1 if the last version travelled as a delta.",
                   [("", int(self.last["mode"] == "delta"))])
        tmp = "%s.tmp%d" % (self.path, os.getpid())
        try:
            with open(tmp, "w") as f:
                f.write("\n".join(out) + "\n")
            os.replace(tmp, self.path)
        except OSError:
            pass
