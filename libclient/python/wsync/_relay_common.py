"""What the relay's modules share: the header and frame formats, the log,
the exceptions (see relay.py and docs/MULTINODE.md)."""
import hashlib
import json
import struct
import sys
import time
import zlib

ORIGIN_TENSOR = "__wsync_origin__"

# Header: int64[HDR_LEN], broadcast from rank 0 before anything else.
MAGIC = 0x77737932          # "wsy2"
HDR_LEN = 20
(H_MAGIC, H_KIND, H_SEQ, H_VERSION, H_STEP, H_PUBNS, H_HOPS, H_NBYTES, H_LAYOUT_FP,
 H_LAYOUT_LEN, H_SKIPPED, H_SENT_NS, H_MODE, H_CHUNK, H_SPARE, H_BASE_VERSION,
 H_BASE_PUBNS, H_FIRST_LEN, H_FRAME_CAP, H_RESERVED) = range(HDR_LEN)
K_BEAT, K_VERSION = 0, 1
MODE_FULL, MODE_DELTA = 0, 1
MODE_NAMES = {MODE_FULL: "full", MODE_DELTA: "delta"}

# Each delta frame ends with a trailer: magic, flags, the next frame's length
# (0 after the last), the whole-version checksum (last frame), and a CRC of
# those and the sequence number (a damaged trailer cannot be followed: the
# generation ends, and the version is sent again, whole).
TRAILER = struct.Struct("<IIQQQ")
TRAILER_BYTES = TRAILER.size
TRAILER_MAGIC = 0x31544457  # "WDT1"
T_LAST = 1

# A whole version ends with int64[2]: this magic and its whole-version
# checksum, computed while the payload travelled (by the pass that also
# copies it into the source's base).
FULL_TRAILER_MAGIC = 0x31544657  # "WFT1"

# Ack of a version: every rank contributes one of these, the MIN wins.
ACK_FAILED = 0              # not published: no base, a damaged delta, a bad checksum
ACK_DROPPED = 1             # not published, but the base is intact (every slab busy)
ACK_OK = 2                  # published (or held already)

EXIT_USAGE = 2


def to_i64(u):
    u &= 2**64 - 1
    return u - 2**64 if u >= 2**63 else u


def to_u64(i):
    return int(i) & (2**64 - 1)


def trailer_pack(seq, flags, next_len, checksum):
    head = struct.pack("<IIQQ", TRAILER_MAGIC, flags, next_len, to_u64(checksum))
    return head + struct.pack("<Q", zlib.crc32(head + struct.pack("<q", seq)))


def trailer_unpack(seq, raw):
    """(flags, next_len, checksum), or None if the trailer is damaged."""
    magic, flags, next_len, checksum, crc = TRAILER.unpack(bytes(raw))
    head = bytes(raw[:24])
    if magic != TRAILER_MAGIC or crc != zlib.crc32(head + struct.pack("<q", seq)):
        return None
    return flags, next_len, checksum


def layout_doc(layout):
    return [[s.name, s.dtype, list(s.shape), s.offset, s.nbytes] for s in layout]


def fingerprint(doc):
    h = hashlib.sha256(json.dumps(doc).encode()).digest()
    return int.from_bytes(h[:8], "little") & (2**63 - 1)


class UsageError(Exception):
    pass


class Stop(BaseException):
    """SIGTERM or SIGINT."""


class GroupFailed(Exception):
    pass


def short(e):
    s = str(e)
    return s.splitlines()[0][:300] if s else repr(e)


class Log:
    """One JSON object per line: t, rank, event, and the event's fields."""

    def __init__(self, path, rank, quiet):
        try:
            self.f = open(path, "a", buffering=1) if path else sys.stderr
        except OSError as e:
            raise UsageError("cannot open the log %s: %s" % (path, e.strerror)) from None
        self.rank = rank
        self.quiet = quiet

    def __call__(self, event, important=False, **kw):
        if self.quiet and not important:
            return
        kw = dict(t=round(time.time(), 3), rank=self.rank, event=event, **kw)
        try:
            self.f.write(json.dumps(kw) + "\n")
            self.f.flush()
        except (OSError, ValueError):
            pass
