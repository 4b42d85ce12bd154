"""Rank 0 of the relay: takes the newest version from the trainer's broker
and sends it to every destination, whole or as a delta against the base
every destination confirmed (docs/MULTINODE.md, "Deltas").

The base is one private copy of the last version sent, whatever the
number of destinations. It is confirmed when every destination acked that
version as published (ACK_OK); anything else (a destination that dropped
it, failed to apply it, a generation that ended) makes the next version
go whole. A version a destination failed to apply (ACK_FAILED) is sent
again at once, whole.
"""
import json
import time
import warnings

import numpy as np

import wsync

from ._relay_codec import Codec, CodecError
from ._relay_common import (FULL_TRAILER_MAGIC, ACK_DROPPED, ACK_FAILED, ACK_OK, H_BASE_PUBNS, H_BASE_VERSION,
                            H_CHUNK, H_FIRST_LEN, H_FRAME_CAP, H_HOPS, H_KIND,
                            H_LAYOUT_FP, H_LAYOUT_LEN, H_MAGIC, H_MODE, H_NBYTES, H_PUBNS,
                            H_SENT_NS, H_SEQ, H_SKIPPED, H_STEP, H_VERSION, K_BEAT, K_VERSION,
                            MAGIC, MODE_DELTA, MODE_FULL, ORIGIN_TENSOR, T_LAST,
                            TRAILER_BYTES, GroupFailed, fingerprint, layout_doc, to_i64,
                            trailer_pack)
from ._relay_policy import Counters, Policy


def origin_of(view):
    from .relay import origin
    return origin(view)


def as_uint8(torch, mv, n):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # read-only buffer: gloo only reads it on rank 0
        return torch.frombuffer(mv, dtype=torch.uint8, count=n) if n else \
            torch.zeros(0, dtype=torch.uint8)


OVERSIZE = 1 << 20          # --inject oversize:N: the bytes declared past the layout


def frame_cap_for(codec, end, chunk):
    """Frames of 1/16 of the version, 1 to 8 MiB, and at least one record."""
    return max(codec.frame_min(chunk), min(8 << 20, max(1 << 20, end // 16)))


class Source:
    def __init__(self, a, group, log, stop):
        self.a, self.g, self.log, self.stop = a, group, log, stop
        self.client = wsync.connect(a.endpoint, a.client_name or "wsync-relay-src")
        self.sub = self.client.subscriber(a.model)
        self.seq = 0
        self.last = 0               # source version last sent
        self.skipped = 0
        self.sent = 0
        self.staging = None
        self.codec = Codec(a.threads)      # checksums always; deltas unless --delta off
        # Deltas travel as CPU frames: gloo only (NCCL carries whole versions).
        self.use_delta = a.delta != "off" and group.backend == "gloo"
        self.policy = Policy("alternate" if getattr(a, "alternate", False) else a.delta)
        self.counters = Counters(a.model, "source", a.metrics)
        self.base = None            # np.uint8 array: the last version sent
        self.base_ident = None      # (version, published_ns, layout fp, nbytes) in base
        self.confirmed = False      # every destination holds base_ident
        self.why_full = "first version"
        self.frames = None
        self.wholes_sent = 0        # for --inject oversize:N
        self.inject = set()
        for fault in (a.inject.split(",") if getattr(a, "inject", None) else ()):
            kind, _, n = fault.partition(":")
            self.inject.add((kind, int(n)))

    def run_generation(self):
        g = self.g
        layout_sent = None
        resend = True               # a new group: the newest version again
        self.confirmed = False
        self.why_full = "new group"
        last_beat = time.monotonic()
        while True:
            self.stop()
            view = None
            try:
                if resend:
                    try:
                        view = self.sub.acquire()
                    except wsync.NoDataError:
                        view = None
                    resend = False
                else:
                    left = max(0.0, self.a.heartbeat - (time.monotonic() - last_beat))
                    view = self.sub.wait(after=self.last, timeout=left)
            except TimeoutError:
                view = None
            h = g.header()
            if view is None:
                if time.monotonic() - last_beat >= self.a.heartbeat:
                    h[H_MAGIC], h[H_KIND] = MAGIC, K_BEAT
                    g.bcast(h)
                    last_beat = time.monotonic()
                continue
            with view:
                resend = self._send(view, h, layout_sent)
                layout_sent = self._layout_fp
            last_beat = time.monotonic()

    # -- one version --

    def _send(self, view, h, layout_sent):
        """Sends view; True if it must be sent again (whole) at once."""
        g = self.g
        layout = [s for s in view.layout if s.name != ORIGIN_TENSOR]
        doc = layout_doc(layout)
        fp = fingerprint(doc)
        self._layout_fp = fp
        end = max((s.offset + s.nbytes for s in layout), default=0)
        o = origin_of(view)
        if self.last and view.version > self.last:
            self.skipped += view.version - self.last - 1
        self.counters.skipped = self.skipped
        self.seq += 1
        lay = json.dumps(doc).encode() if fp != layout_sent else b""

        mode, why = "full", "--delta off" if self.a.delta == "off" else "deltas need gloo"
        if self.use_delta:
            if not self.confirmed:
                why = self.why_full
            elif self.base_ident[2:] != (fp, end):
                why = "layout changed"
            else:
                mode, why = self.policy.choose(end)
        chunk = self.codec.chunk_for(end)
        vals = {H_MAGIC: MAGIC, H_KIND: K_VERSION, H_SEQ: self.seq,
                H_VERSION: o.version, H_STEP: o.step, H_PUBNS: o.published_ns,
                H_HOPS: o.hops + 1, H_NBYTES: end, H_LAYOUT_FP: fp,
                H_LAYOUT_LEN: len(lay), H_SKIPPED: self.skipped, H_CHUNK: chunk}
        t0 = time.monotonic()
        try:
            if mode == "delta":
                stats = self._send_delta(view, h, vals, lay, end, chunk)
            else:
                stats = self._send_full(view, h, vals, lay, end, chunk)
        except BaseException:
            self.confirmed = False
            self.why_full = "the last send failed"
            self.base_ident = None
            raise
        t2 = time.monotonic()
        self.last = view.version
        acked = g.ack(ACK_OK)
        t3 = time.monotonic()
        self.sent += 1
        if acked == ACK_OK:
            self.confirmed = self.base_ident is not None
        else:
            self.confirmed = False
            self.why_full = ("a destination could not apply version %d" % view.version
                             if acked == ACK_FAILED else
                             "a destination dropped version %d (busy)" % view.version)
        if acked != ACK_FAILED and why != "new group":
            self.policy.observe(mode, end, t3 - t0)
        if acked == ACK_FAILED:
            self.counters.failed += 1
        self.counters.count(mode, end, stats["wire_bytes"], version=view.version)
        self.log("sent", seq=self.seq, version=view.version, step=view.step, mode=mode,
                 why=why, nbytes=end, wire_bytes=stats["wire_bytes"],
                 ratio=round(stats["wire_bytes"] / end, 5) if end else None,
                 cost_ns_per_byte=self.policy.state(), skipped=self.skipped, ack={ACK_OK: "ok", ACK_DROPPED: "dropped",
                                            ACK_FAILED: "failed"}.get(acked, acked),
                 committed_everywhere=acked == ACK_OK,
                 ms=round((t3 - t0) * 1e3, 2), send_ms=round(stats["send_s"] * 1e3, 2),
                 ack_ms=round((t3 - t2) * 1e3, 2),
                 **{k: v for k, v in stats.items()
                    if k not in ("wire_bytes", "send_s", "encode_s")})
        return acked == ACK_FAILED

    def _base_for(self, end):
        if self.base is None or self.base.size < end:
            self.base = np.empty(max(end, 1), dtype=np.uint8)
        return self.base.ctypes.data

    def _send_full(self, view, h, vals, lay, end, chunk):
        torch, g = self.g.torch, self.g
        codec = self.codec
        addr = view._c.base
        vals.update({H_MODE: MODE_FULL, H_SENT_NS: time.time_ns()})
        self.wholes_sent += 1
        # Tests: a hostile source whose whole version declares (and sends)
        # more bytes than its layout spans.
        over = OVERSIZE if ("oversize", self.wholes_sent) in self.inject else 0
        if over:
            self.log("injected", important=True, fault="oversize", whole=self.wholes_sent,
                     declared=end + over)
            vals[H_NBYTES] = end + over
        for k, v in vals.items():
            h[k] = v
        g.bcast(h)
        if lay:
            lt = torch.frombuffer(bytearray(lay), dtype=torch.uint8)
            g.bcast(lt.to(g.device) if g.device is not None else lt)
        payload = as_uint8(torch, view.buffer(), end)
        if over:
            payload = torch.cat([payload, torch.full((over,), 0xee, dtype=torch.uint8)])
        if g.device is not None:
            payload = payload.to(g.device)
        elif self.a.staging:
            if self.staging is None or self.staging.numel() < end:
                self.staging = torch.empty(end, dtype=torch.uint8)
            self.staging[:end].copy_(payload)
            payload = self.staging[:end]
        # The checksum, and the next base, are made while the payload travels.
        self.base_ident = None
        codec.hash_start(addr, end, chunk, self._base_for(end) if self.use_delta else None)
        t1 = time.monotonic()
        try:
            g.bcast(payload)
        finally:
            send_s = time.monotonic() - t1
            del payload
            checksum = codec.hash_wait()
        tr = g.header()[:2]
        tr[0], tr[1] = FULL_TRAILER_MAGIC, to_i64(checksum)
        g.bcast(tr)
        if self.use_delta:
            self.base_ident = (view.version, view.published_ns, vals[H_LAYOUT_FP], end)
        return {"wire_bytes": end, "send_s": send_s}

    def _frames(self, cap):
        torch = self.g.torch
        if self.frames is None or self.frames[0].numel() < cap + TRAILER_BYTES:
            self.frames = [torch.empty(cap + TRAILER_BYTES, dtype=torch.uint8) for _ in range(2)]
        return self.frames

    def _send_delta(self, view, h, vals, lay, end, chunk):
        torch, g = self.g.torch, self.g
        codec = self.codec
        cap = frame_cap_for(codec, end, chunk)
        frames = self._frames(cap)
        base_ident = self.base_ident
        self.base_ident = None         # the encoder rewrites the base as it goes
        t_enc = time.monotonic()
        codec.enc_begin(view._c.base, self._base_for(end), end, chunk, self.a.level)
        ended = False
        send_s, wire, n_frames = 0.0, 0, 0
        try:
            cur_len, cur_last = codec.enc_read(frames[0].data_ptr(), cap, self.a.timeout)
            vals.update({H_MODE: MODE_DELTA, H_BASE_VERSION: base_ident[0],
                         H_BASE_PUBNS: base_ident[1], H_FIRST_LEN: cur_len,
                         H_FRAME_CAP: cap, H_SENT_NS: time.time_ns()})
            for k, v in vals.items():
                h[k] = v
            g.bcast(h)
            if lay:
                lt = torch.frombuffer(bytearray(lay), dtype=torch.uint8)
                g.bcast(lt)
            i = 0
            while True:
                buf = frames[i % 2]
                if cur_last:
                    checksum, st = codec.enc_end()
                    ended = True
                    encode_s = time.monotonic() - t_enc
                    nxt_len, flags = 0, T_LAST
                else:
                    nxt_len, nxt_last = codec.enc_read(frames[(i + 1) % 2].data_ptr(), cap,
                                                       self.a.timeout)
                    checksum, flags = 0, 0
                tr = trailer_pack(self.seq, flags, nxt_len, checksum)
                buf[cur_len:cur_len + TRAILER_BYTES] = torch.frombuffer(bytearray(tr),
                                                                         dtype=torch.uint8)
                t1 = time.monotonic()
                g.bcast(buf[:cur_len + TRAILER_BYTES])
                send_s += time.monotonic() - t1
                wire += cur_len + TRAILER_BYTES
                n_frames += 1
                if flags & T_LAST:
                    break
                cur_len, cur_last = nxt_len, nxt_last
                i += 1
        except CodecError as e:
            raise GroupFailed("encoder: %s" % e) from None
        finally:
            if not ended:
                codec.enc_abort()
        self.base_ident = (view.version, view.published_ns, vals[H_LAYOUT_FP], end)
        return {"wire_bytes": wire, "send_s": send_s, "encode_s": encode_s,
                "encode_ms": round(encode_s * 1e3, 2),
                "encode_cpu_ms": round(st["busy_ns"] / 1e6, 2), "frames": n_frames,
                "chunks": st["chunks"], "same": st["same"], "xsparse": st["xsparse"],
                "xzstd": st["xzstd"], "raw": st["raw"]}

    def close(self):
        self.codec.close()
        self.client.close()
