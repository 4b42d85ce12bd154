"""Ranks 1.. of the relay: receive each version, whole or as a delta, and
publish it into the local broker, only if it is bit-exact.

A delta is applied to the base the destination already has: the newest
version of the model in its own broker (held as a view while the new slab
is built from it: no private copy). If that is not the version the source
encoded against (a restart, a local broker that lost it), the frames are
received and dropped, the version is acked ACK_FAILED and the source sends
it again, whole. A whole version is received straight into the slab. In
both cases the whole-version checksum of what is in the slab is compared
with the source's before the commit; a mismatch aborts the slab (nothing
half-applied is ever published) and acks ACK_FAILED.

Nothing from the wire is trusted with memory: a layout document is parsed
and checked (its size bounded, its fingerprint recomputed, every tensor's
offset and length within the version and equal to the local publisher's),
and a version's byte count must be exactly its layout's end and fit the
slab (and the base view) before a byte is received into either; a version
that does not is refused before the payload (GroupFailed, the generation
ends and the source sends again), never written past the slab.
"""
import ctypes
import json
import math
import time

import numpy as np

import wsync

from . import _dtypes
from ._relay_codec import Codec, CodecError
from ._relay_common import (FULL_TRAILER_MAGIC, ACK_DROPPED, ACK_FAILED, ACK_OK, H_BASE_PUBNS, H_BASE_VERSION,
                            H_CHUNK, H_FIRST_LEN, H_FRAME_CAP, H_HOPS, H_KIND,
                            H_LAYOUT_FP, H_LAYOUT_LEN, H_MAGIC, H_MODE, H_NBYTES, H_PUBNS,
                            H_SEQ, H_SKIPPED, H_STEP, H_VERSION, K_BEAT, MAGIC, MODE_DELTA,
                            ORIGIN_TENSOR, T_LAST, TRAILER_BYTES, GroupFailed, fingerprint,
                            to_u64, trailer_unpack)
from ._relay_policy import Counters

MAX_FRAME = 64 << 20
MAX_LAYOUT_DOC = 16 << 20   # bytes of a layout document (65,536 tensors fit)
WSYNC_ALIGN = 256           # wsync.h: every tensor offset is a multiple of this
WSYNC_MAX_DIMS = 8


def parse_layout(raw, fp):
    """The layout document the source sent (name, dtype, shape, offset,
    nbytes per tensor), checked against the canonical layout of those
    tensors (in order, each at the next multiple of WSYNC_ALIGN, as long as
    its dtype and shape make it): (doc, end), or GroupFailed saying why."""
    try:
        doc = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise GroupFailed("layout %x: not a layout document (%s)" % (fp, e)) from None
    if fingerprint(doc) != fp:
        raise GroupFailed("layout %x: the document's fingerprint is %x"
                          % (fp, fingerprint(doc)))
    if not isinstance(doc, list):
        raise GroupFailed("layout %x: not a list of tensors" % fp)
    names, end = set(), 0
    for i, t in enumerate(doc):
        ok = (isinstance(t, list) and len(t) == 5 and isinstance(t[0], str) and
              t[1] in _dtypes.CODE and isinstance(t[2], list) and
              len(t[2]) <= WSYNC_MAX_DIMS and
              all(type(x) is int and x >= 0 for x in t[2]) and
              all(type(x) is int and x >= 0 for x in t[3:5]))
        if not ok or t[0] in names or t[0] == ORIGIN_TENSOR:
            raise GroupFailed("layout %x: tensor %d is not (a new name, dtype, shape, "
                              "offset, bytes): %.120r" % (fp, i, t))
        at = (end + WSYNC_ALIGN - 1) // WSYNC_ALIGN * WSYNC_ALIGN
        nbytes = _dtypes.ITEMSIZE[_dtypes.CODE[t[1]]] * math.prod(t[2])
        if t[3] != at or t[4] != nbytes:
            raise GroupFailed("layout %x: tensor %d %.64r at offset %d with %d bytes; its "
                              "dtype and shape put it at %d with %d" % (fp, i, t[0], t[3],
                                                                        t[4], at, nbytes))
        names.add(t[0])
        end = at + nbytes
    return doc, end


def origin_of(view):
    from .relay import origin
    return origin(view)


class Destination:
    def __init__(self, a, group, log, stop):
        self.a, self.g, self.log, self.stop = a, group, log, stop
        self.client = wsync.connect(a.endpoint, a.client_name or "wsync-relay-dst")
        self.sub = self.client.subscriber(a.model)
        self.codec = Codec(a.threads)
        self.pub = None
        self.pub_fp = None
        self.layouts = {}           # fingerprint -> layout doc
        self.layout_end = {}        # fingerprint -> bytes its tensors span
        self.committed = 0
        self.dropped = 0
        self.staging = None
        self.frames = None
        self.counters = Counters(a.model, "destination", a.metrics)
        self.deltas_seen = 0        # for --inject
        self.wholes_seen = 0
        self.inject = self._parse_inject(a.inject)
        self.have = self._local_origin()   # (version, published_ns) of the newest here

    @staticmethod
    def _parse_inject(spec):
        """Tests only, comma-separated, after the wire and before the
        checks: "flip:N" flips a byte of the first frame of the N-th delta
        received, "truncate:N" feeds its first frame short, "wholeflip:N"
        flips a byte of the N-th whole version received into a slab."""
        out = set()
        for fault in (spec.split(",") if spec else ()):
            kind, _, n = fault.partition(":")
            out.add((kind, int(n)))
        return out

    def _local_origin(self):
        try:
            with self.sub.acquire() as v:
                o = origin_of(v)
                return (o.version, o.published_ns)
        except wsync.NoDataError:
            return None

    def run_generation(self):
        g = self.g
        while True:
            self.stop()
            h = g.bcast_header(g.header())
            if h[H_MAGIC] != MAGIC:
                raise GroupFailed("bad header magic %#x (a relay of another version?)"
                                  % h[H_MAGIC])
            if h[H_KIND] == K_BEAT:
                continue
            if h[H_LAYOUT_LEN]:
                if not 0 < h[H_LAYOUT_LEN] <= MAX_LAYOUT_DOC:
                    raise GroupFailed("a layout document of %d bytes (at most %d)"
                                      % (h[H_LAYOUT_LEN], MAX_LAYOUT_DOC))
                lt = g.header().new_zeros(h[H_LAYOUT_LEN], dtype=g.torch.uint8)
                g.bcast(lt)
                fp = h[H_LAYOUT_FP]
                self.layouts[fp], self.layout_end[fp] = parse_layout(
                    bytes(lt.cpu().numpy()), fp)
            self._check_nbytes(h)
            if h[H_MODE] == MODE_DELTA:
                code = self._receive_delta(h)
            else:
                code = self._receive_full(h)
            if self.a.throttle:
                time.sleep(self.a.throttle)
            g.ack(code)

    # -- where versions go --

    def _check_nbytes(self, h):
        """A version's byte count is its layout's end, or nothing of it is
        received (GroupFailed): what is received is sized by it."""
        fp, n = h[H_LAYOUT_FP], h[H_NBYTES]
        if fp not in self.layout_end:
            raise GroupFailed("source version %d: an unknown layout %x" % (h[H_VERSION], fp))
        if n != self.layout_end[fp]:
            raise GroupFailed("source version %d declares %d bytes; its layout %x spans %d: "
                              "refused before a byte of it was written"
                              % (h[H_VERSION], n, fp, self.layout_end[fp]))

    def _unfit(self, slab, h):
        """Why the version of header h does not fit slab, or None: every
        tensor of its layout is one of the slab's, as long, and the bytes
        fit the slab."""
        n, doc = h[H_NBYTES], self.layouts[h[H_LAYOUT_FP]]
        if n > slab.nbytes:
            return ("source version %d declares %d bytes; the slab holds %d"
                    % (h[H_VERSION], n, slab.nbytes))
        mine = {s.name: s for s in slab.layout}
        for name, _, _, _, nbytes in doc:
            if name not in mine or mine[name].nbytes != nbytes:
                return ("source version %d: tensor %.64r is %d bytes, here %s"
                        % (h[H_VERSION], name, nbytes,
                           "absent" if name not in mine else "%d" % mine[name].nbytes))
        return None

    def _publisher(self, fp):
        if self.pub is not None and self.pub_fp == fp:
            return self.pub
        doc = self.layouts.get(fp)
        if doc is None:
            raise GroupFailed("version with an unknown layout %x" % fp)
        if self.pub is not None:
            self.pub.close()
            self.pub = None
        tensors = [(n, d, tuple(shape)) for n, d, shape, _, _ in doc]
        if not any(n == ORIGIN_TENSOR for n, _, _ in tensors):
            tensors.append((ORIGIN_TENSOR, "i64", (4,)))
        try:
            self.pub = self.client.publisher(self.a.model, tensors, self.a.slots)
        except wsync.LayoutError as e:
            self.log("layout_error", important=True, error=str(e)[:300])
            self.pub_fp = None
            return None
        self.pub_fp = fp
        return self.pub

    def _begin(self, h):
        """A begun slab for the version of header h, or None (logged)."""
        pub = self._publisher(h[H_LAYOUT_FP])
        if pub is None:
            return None
        try:
            return pub.begin(timeout=self.a.timeout / 4)
        except wsync.BusyError as e:
            self.log("busy", important=True, error=str(e)[:300])
            return None

    def _staging(self, n):
        torch = self.g.torch
        if self.staging is None or self.staging.numel() < n:
            self.staging = torch.empty(n, dtype=torch.uint8, device=self.g.device or "cpu")
        return self.staging[:n]

    def _commit(self, slab, h, mode, wire, t0, **extra):
        slab.numpy(ORIGIN_TENSOR)[:] = (h[H_VERSION], h[H_STEP], h[H_PUBNS], h[H_HOPS])
        version = slab.commit(h[H_STEP])
        self.have = (h[H_VERSION], h[H_PUBNS])
        self.committed += 1
        self.counters.count(mode, h[H_NBYTES], wire, version=h[H_VERSION])
        self.log("committed", seq=h[H_SEQ], version=version, origin_version=h[H_VERSION],
                 step=h[H_STEP], mode=mode, nbytes=h[H_NBYTES], wire_bytes=wire,
                 skipped_at_source=h[H_SKIPPED], ms=round((time.monotonic() - t0) * 1e3, 2),
                 lag_ms=round((time.time_ns() - h[H_PUBNS]) / 1e6, 2), **extra)
        return ACK_OK

    def _not_published(self, slab, h, mode, why):
        if slab is not None and slab.active:
            slab.abort()
        self.counters.failed += 1
        self.counters.write()
        self.log("not_published", important=True, seq=h[H_SEQ], origin_version=h[H_VERSION],
                 mode=mode, why=why)
        return ACK_FAILED

    # -- a whole version --

    def _receive_full(self, h):
        g = self.g
        n = h[H_NBYTES]
        ident = (h[H_VERSION], h[H_PUBNS])
        t0 = time.monotonic()
        slab = self._begin(h) if ident != self.have else None
        if slab is None:                 # nowhere to put it, or held already: drop it
            g.bcast(self._staging(n))
            self._full_trailer(h)
            if ident == self.have:
                return ACK_OK
            self.dropped += 1
            self.counters.dropped = self.dropped
            return ACK_DROPPED
        try:
            unfit = self._unfit(slab, h)
            if unfit:                    # before a byte of the payload
                raise GroupFailed(unfit)
            direct = self._direct(slab, h[H_LAYOUT_FP], n) \
                if g.device is None and not self.a.staging else None
            if direct is not None:
                g.bcast(direct)          # straight into the slab's memory
                del direct
            else:
                buf = self._staging(n)
                g.bcast(buf)
                self._copy_in(slab, h[H_LAYOUT_FP], buf.cpu() if g.device is not None else buf)
            want = self._full_trailer(h)
            self.wholes_seen += 1
            if ("wholeflip", self.wholes_seen) in self.inject and n:
                self.log("injected", important=True, fault="wholeflip", whole=self.wholes_seen)
                ctypes.c_uint8.from_address(slab._c.base + n // 2).value ^= 0x10
            got = self.codec.checksum(slab._c.base, n, h[H_CHUNK])
            if got != want:
                return self._not_published(slab, h, "full", "whole-version checksum %016x, "
                                           "the source's is %016x" % (got, want))
            return self._commit(slab, h, "full", n, t0)
        except BaseException:
            if slab.active:
                slab.abort()
            raise

    def _full_trailer(self, h):
        """The whole-version checksum that follows a whole version."""
        tr = self.g.header()[:2]
        self.g.bcast(tr)
        magic, checksum = (int(x) for x in tr.cpu())
        if magic != FULL_TRAILER_MAGIC:
            raise GroupFailed("whole version %d: no checksum after it" % h[H_VERSION])
        return to_u64(checksum)

    def _direct(self, slab, fp, n):
        """A writable uint8 tensor over the slab's first n bytes, if the
        local layout puts every tensor where the source's does (it does
        when the layouts match: the origin tensor comes last)."""
        doc = self.layouts[fp]
        mine = {s.name: s for s in slab.layout}
        if any(mine[name].offset != off for name, _, _, off, _ in doc):
            return None
        if n == 0:
            return None
        raw = (ctypes.c_char * n).from_address(slab._c.base)
        t = self.g.torch.frombuffer(raw, dtype=self.g.torch.uint8)
        t._wsync_keep = (slab, raw)      # the slab stays mapped while t lives
        return t

    def _copy_in(self, slab, fp, buf):
        arr = buf.numpy()
        src = {}
        for name, dtype, shape, off, nbytes in self.layouts[fp]:
            if name == ORIGIN_TENSOR:
                continue
            spec = next(s for s in slab.layout if s.name == name)
            dt = slab.numpy(name).dtype
            src[name] = np.frombuffer(arr, dtype=dt, count=nbytes // dt.itemsize,
                                      offset=off).reshape(spec.shape)
        src[ORIGIN_TENSOR] = np.zeros(4, dtype=np.int64)
        slab.copy_from(src)

    # -- a delta --

    def _frames(self, cap):
        torch = self.g.torch
        if self.frames is None or self.frames[0].numel() < cap + TRAILER_BYTES:
            self.frames = [torch.empty(cap + TRAILER_BYTES, dtype=torch.uint8) for _ in range(2)]
        return self.frames

    def _base_view(self, h):
        """(view of the base, None) or (None, why there is none)."""
        want = (h[H_BASE_VERSION], h[H_BASE_PUBNS])
        if self.have != want:
            return None, ("the base is source version %d; this node has %s"
                          % (want[0], "none" if self.have is None else
                             "version %d" % self.have[0]))
        if self.pub_fp != h[H_LAYOUT_FP]:
            return None, "the layout changed"
        try:
            view = self.sub.acquire()
        except wsync.NoDataError:
            return None, "the local broker has no version"
        o = origin_of(view)
        if (o.version, o.published_ns) != want or view.nbytes < h[H_NBYTES]:
            view.release()
            return None, "the local broker's newest version is not the base"
        return view, None

    def _receive_delta(self, h):
        g, codec = self.g, self.codec
        n, cap, first = h[H_NBYTES], h[H_FRAME_CAP], h[H_FIRST_LEN]
        if not 0 < cap <= MAX_FRAME or not 0 <= first <= cap:
            raise GroupFailed("delta header with frames of %d bytes (first %d)" % (cap, first))
        frames = self._frames(cap)
        t0 = time.monotonic()
        view, why = self._base_view(h)
        slab = None
        if view is not None:
            slab = self._begin(h)
            if slab is None:
                view.release()
                view = None
                why = "busy"
        decoding = False
        completed = False
        tickets = [None, None]
        wire = 0
        try:
            if slab is not None:
                # nothing is decoded into a slab the version does not fit
                why = self._unfit(slab, h)
                if why is None and view.nbytes < n:
                    why = "the base holds %d bytes, the version %d" % (view.nbytes, n)
                try:
                    if why is None:
                        codec.dec_begin(view._c.base, slab._c.base, n, h[H_CHUNK])
                        decoding = True
                except CodecError as e:
                    why = str(e)
            self.deltas_seen += 1
            length, i, checksum = first, 0, 0
            while True:
                k = i % 2
                if tickets[k] is not None:
                    self._codec_call(codec.dec_wait, tickets[k], self.a.timeout)
                    tickets[k] = None
                buf = frames[k][:length + TRAILER_BYTES]
                g.bcast(buf)
                wire += length + TRAILER_BYTES
                tr = trailer_unpack(h[H_SEQ], frames[k][length:length + TRAILER_BYTES].numpy())
                if tr is None:
                    raise GroupFailed("delta frame %d of source version %d: its trailer is "
                                      "damaged" % (i, h[H_VERSION]))
                if decoding and why is None:
                    feed = self._injected(buf, i, length)
                    tickets[k], bad = codec.dec_feed(buf.data_ptr(), feed)
                    if bad:
                        why = bad
                flags, nxt, checksum = tr
                if flags & T_LAST:
                    break
                if not 0 <= nxt <= cap:
                    raise GroupFailed("delta frame %d announces %d bytes (frames are %d)"
                                      % (i, nxt, cap))
                length, i = nxt, i + 1
            if decoding:
                decoding = False
                bad = codec.dec_end(checksum, self.a.timeout)
                why = why or bad
            completed = True
        finally:
            if decoding:                 # an error on the way: wait for the workers
                codec.dec_end(0, self.a.timeout)
            if view is not None:
                view.release()
            if not completed and slab is not None and slab.active:
                slab.abort()
        if slab is None:
            if why == "busy":
                self.dropped += 1
                self.counters.dropped = self.dropped
                return ACK_DROPPED
            return self._not_published(None, h, "delta", why)
        if why is not None:
            return self._not_published(slab, h, "delta", why)
        try:
            return self._commit(slab, h, "delta", wire, t0, frames=i + 1)
        except BaseException:
            if slab.active:
                slab.abort()
            raise

    @staticmethod
    def _codec_call(fn, *args):
        try:
            return fn(*args)
        except CodecError as e:          # the workers are stuck: this generation is over
            raise GroupFailed("decoder: %s" % e) from None

    def _injected(self, buf, i, length):
        """The length to feed; damages the frame first if --inject says so."""
        kind = next((k for k in ("flip", "truncate")
                     if (k, self.deltas_seen) in self.inject), None) if i == 0 else None
        if kind is None:
            return length
        self.log("injected", important=True, fault=kind, delta=self.deltas_seen)
        if kind == "flip" and length:
            pos = length // 2
            buf[pos] = int(buf[pos]) ^ 0x10
            return length
        if kind == "truncate":
            return length // 2
        return length

    def close(self):
        self.codec.close()
        self.client.close()
