"""Delta or full, per version, from what the last versions cost; and the
relay's counters, for the log, --metrics (Prometheus text) and --json.

The source predicts both ways for the version at hand from moving averages
(weight 1/2) of what it measured:
  full:  nbytes / link
  delta: max(nbytes / encode rate, ratio * nbytes / link)
(link: bytes per second of the payload broadcasts of at least 1 MiB,
whichever way; encode rate: bytes per second of the encoder, wall clock,
while it streams; ratio: delta bytes on the wire / version bytes). The
encoder and the send overlap, hence the max. Delta wins when its estimate
is lower. With nothing measured yet it tries delta; while full wins, it
tries delta again every PROBE_EVERY versions, so a model that stopped
changing much is noticed.
"""
import os
import time

PROBE_EVERY = 8
_W = 0.5
_MIN_LINK_SAMPLE = 1 << 20


def _avg(old, new):
    return new if old is None else (1 - _W) * old + _W * new


class Policy:
    def __init__(self, mode="auto", probe_every=PROBE_EVERY):
        self.mode = mode                  # auto | on | off
        self.probe_every = probe_every
        self.link = None                  # bytes/s
        self.enc = None                   # bytes/s
        self.ratio = None
        self.fulls_in_a_row = 0

    def choose(self, nbytes):
        """("delta" | "full", why)."""
        if self.mode == "off":
            return "full", "--delta off"
        if self.mode == "on":
            return "delta", "--delta on"
        if self.ratio is None or self.link is None or self.enc is None:
            return "delta", "nothing measured yet"
        t_full = nbytes / self.link
        t_delta = max(nbytes / self.enc, self.ratio * nbytes / self.link)
        why = "predicted %.1f ms delta, %.1f ms full" % (t_delta * 1e3, t_full * 1e3)
        if t_delta < t_full:
            return "delta", why
        if self.fulls_in_a_row + 1 >= self.probe_every:
            return "delta", why + "; measuring delta again"
        return "full", why

    def observe_full(self, nbytes, send_s):
        self.fulls_in_a_row += 1
        if nbytes >= _MIN_LINK_SAMPLE and send_s > 0:
            self.link = _avg(self.link, nbytes / send_s)

    def observe_delta(self, nbytes, wire, encode_s, send_s):
        self.fulls_in_a_row = 0
        if nbytes:
            self.ratio = _avg(self.ratio, wire / nbytes)
        if encode_s > 0:
            self.enc = _avg(self.enc, nbytes / encode_s)
        if wire >= _MIN_LINK_SAMPLE and send_s > 0:
            self.link = _avg(self.link, wire / send_s)

    def state(self):
        return {"link_MBps": None if self.link is None else round(self.link / 1e6, 1),
                "encode_MBps": None if self.enc is None else round(self.enc / 1e6, 1),
                "ratio": None if self.ratio is None else round(self.ratio, 4)}


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
