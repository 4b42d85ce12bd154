"""The relay's rendezvous store: a key-value store that rank 0 serves on the
one address it is given, and that admits only peers that prove they hold the
job's secret.

torch.distributed's TCPStore (torch 1.13) listens on every interface and
admits anyone; gloo and NCCL need only *a* store (set, get, add, wait), so
the relay brings its own: StoreServer in rank 0, AuthStore (a
torch.distributed.Store) in every rank, rank 0 included.

Handshake, before anything else on a connection (HMAC-SHA256, the key
being the secret):
  server -> client  b"WSYNCRS1" + nonce_s (32 random bytes)
  client -> server  nonce_c (32) + HMAC(b"client" + nonce_s + nonce_c)
  server -> client  HMAC(b"server" + nonce_s + nonce_c)
A client that does not answer within HANDSHAKE_S, or answers wrong, is
logged ("refused", with its address) and disconnected; the client checks
the server's answer too (a rank 0 without the secret is refused by the
other ranks). Neither side ever sends the secret. Requests are then
length-prefixed binary messages, never unpickled; every field is bounded.
"""
import hashlib
import hmac
import os
import socket
import struct
import threading
import time
from datetime import timedelta

_MAGIC = b"WSYNCRS1"
_NONCE = 32
HANDSHAKE_S = 5.0
MAX_MSG = 1 << 20             # one request or reply
MAX_KEYS = 1 << 16            # keys held by the server
MAX_CONNS = 256

(_SET, _GET, _ADD, _WAIT, _CHECK, _DEL, _NUM, _CSET) = range(1, 9)
_OK, _TIMEOUT, _ERR = 0, 1, 2


class RefusedError(ConnectionError):
    """The other side does not know the job's secret."""


def _mac(secret, who, ns, nc):
    return hmac.new(secret, who + ns + nc, hashlib.sha256).digest()


def _recv_exact(s, n):
    out = bytearray()
    while len(out) < n:
        b = s.recv(n - len(out))
        if not b:
            raise ConnectionError("connection closed")
        out += b
    return bytes(out)


def _pack(code, args):
    body = bytes([code]) + b"".join(struct.pack("<I", len(a)) + a for a in args)
    return struct.pack("<I", len(body)) + body


def _recv_msg(s):
    n = struct.unpack("<I", _recv_exact(s, 4))[0]
    if not 1 <= n <= MAX_MSG:
        raise ConnectionError("message of %d bytes" % n)
    body = _recv_exact(s, n)
    code, args, pos = body[0], [], 1
    while pos < n:
        if pos + 4 > n:
            raise ConnectionError("truncated message")
        k = struct.unpack_from("<I", body, pos)[0]
        pos += 4
        if pos + k > n:
            raise ConnectionError("truncated message")
        args.append(body[pos:pos + k])
        pos += k
    return code, args


def _b(x):
    return x.encode() if isinstance(x, str) else bytes(x)


class StoreServer:
    """Rank 0's store, listening on (addr, port) only. log(event, **kw) is
    told of refused peers."""

    def __init__(self, addr, port, secret, log):
        self.secret, self.log = secret, log
        self.data = {}
        self.cv = threading.Condition()
        self.conns = 0
        self.refused = 0
        self.closed = False
        infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)
        family, _, _, _, sa = infos[0]
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind(sa)
            self.sock.listen(64)
        except OSError:
            self.sock.close()
            raise
        self.address = self.sock.getsockname()[:2]
        threading.Thread(target=self._accept, name="wsync-relay-store", daemon=True).start()

    def close(self):
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _accept(self):
        while not self.closed:
            try:
                c, peer = self.sock.accept()
            except OSError:
                if self.closed:
                    return
                time.sleep(0.05)
                continue
            with self.cv:
                if self.conns >= MAX_CONNS:
                    c.close()
                    continue
                self.conns += 1
            threading.Thread(target=self._serve, args=(c, peer), daemon=True).start()

    def _handshake(self, c, peer):
        c.settimeout(HANDSHAKE_S)
        ns = os.urandom(_NONCE)
        c.sendall(_MAGIC + ns)
        got = b""
        try:
            while len(got) < _NONCE + 32:
                b = c.recv(_NONCE + 32 - len(got))
                if not b:
                    break
                got += b
        except OSError as e:
            if not got:
                return ""          # connected and left (a probe): not worth a line
            return "no handshake within %g s (%s)" % (HANDSHAKE_S, e)
        if not got:
            return ""              # connected and left (a probe): not worth a line
        if len(got) < _NONCE + 32:
            return "a handshake cut short"
        nc, mac = got[:_NONCE], got[_NONCE:]
        if not hmac.compare_digest(mac, _mac(self.secret, b"client", ns, nc)):
            return "wrong secret"
        c.sendall(_mac(self.secret, b"server", ns, nc))
        c.settimeout(None)
        return None

    def _serve(self, c, peer):
        try:
            why = self._handshake(c, peer)
            if why == "":
                return
            if why is not None:
                self.refused += 1
                self.log("refused", important=True, peer="%s:%s" % tuple(peer[:2]),
                         reason=why)
                return
            while True:
                code, args = _recv_msg(c)
                status, out = self._do(code, args)
                c.sendall(_pack(status, out))
        except (OSError, ConnectionError, ValueError, struct.error, IndexError):
            pass
        finally:
            with self.cv:
                self.conns -= 1
            c.close()

    def _wait_keys(self, keys, timeout_ms):
        end = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1e3
        while not all(k in self.data for k in keys):
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return False
            self.cv.wait(left)
        return True

    def _do(self, code, args):
        with self.cv:
            if code == _SET and len(args) == 2:
                if args[0] not in self.data and len(self.data) >= MAX_KEYS:
                    return _ERR, [b"store full"]
                self.data[args[0]] = args[1]
                self.cv.notify_all()
                return _OK, []
            if code == _GET and len(args) == 2:
                if not self._wait_keys([args[0]], struct.unpack("<q", args[1])[0]):
                    return _TIMEOUT, []
                return _OK, [self.data[args[0]]]
            if code == _ADD and len(args) == 2:
                try:
                    v = int(self.data.get(args[0], b"0")) + struct.unpack("<q", args[1])[0]
                except ValueError:
                    return _ERR, [b"not a number"]
                if args[0] not in self.data and len(self.data) >= MAX_KEYS:
                    return _ERR, [b"store full"]
                self.data[args[0]] = str(v).encode()
                self.cv.notify_all()
                return _OK, [struct.pack("<q", v)]
            if code == _WAIT and len(args) >= 1:
                ok = self._wait_keys(args[1:], struct.unpack("<q", args[0])[0])
                return (_OK if ok else _TIMEOUT), []
            if code == _CHECK:
                return _OK, [b"1" if all(k in self.data for k in args) else b"0"]
            if code == _DEL and len(args) == 1:
                return _OK, [b"1" if self.data.pop(args[0], None) is not None else b"0"]
            if code == _NUM and not args:
                return _OK, [struct.pack("<q", len(self.data))]
            if code == _CSET and len(args) == 3:
                cur = self.data.get(args[0])
                if (cur is None and args[1] == b"") or cur == args[1]:
                    self.data[args[0]] = args[2]
                    self.cv.notify_all()
                    return _OK, [args[2]]
                return _OK, [cur if cur is not None else args[1]]
            return _ERR, [b"bad request"]


class AuthStore:
    """Factory: AuthStore.connect(addr, port, secret, timeout) -> a
    torch.distributed.Store over a connection to StoreServer."""

    @staticmethod
    def connect(addr, port, secret, timeout, connect_timeout=None):
        import torch.distributed as dist

        class _Store(dist.Store):
            def __init__(self):
                super().__init__()
                self._lock = threading.Lock()
                self._timeout = timeout
                self._sock = _connect(addr, port, secret,
                                      timeout if connect_timeout is None else connect_timeout)

            def _rpc(self, code, args, wait_s=None):
                with self._lock:
                    s = self._sock
                    if s is None:
                        raise RuntimeError("wsync-relay store: connection closed")
                    s.settimeout(None if wait_s is None else wait_s + 30.0)
                    try:
                        s.sendall(_pack(code, [_b(a) for a in args]))
                        status, out = _recv_msg(s)
                    except (OSError, ConnectionError) as e:
                        self._sock = None
                        s.close()
                        raise RuntimeError("wsync-relay store: %s" % e) from None
                if status == _TIMEOUT:
                    raise RuntimeError("wsync-relay store: timed out after %.0f s"
                                       % (wait_s or 0))
                if status != _OK:
                    raise RuntimeError("wsync-relay store: %s" % (out[0].decode(errors="replace")
                                                                  if out else "error"))
                return out

            def _ms(self, t):
                t = self._timeout if t is None else t
                if isinstance(t, timedelta):
                    t = t.total_seconds()
                return int(t * 1e3), t

            def set(self, key, value):
                self._rpc(_SET, [key, value])

            def get(self, key):
                ms, s = self._ms(None)
                return self._rpc(_GET, [key, struct.pack("<q", ms)], s)[0]

            def add(self, key, value):
                return struct.unpack("<q", self._rpc(_ADD, [key, struct.pack("<q", int(value))])[0])[0]

            def wait(self, keys, timeout=None):
                ms, s = self._ms(timeout)
                self._rpc(_WAIT, [struct.pack("<q", ms)] + list(keys), s)

            def check(self, keys):
                return self._rpc(_CHECK, list(keys))[0] == b"1"

            def delete_key(self, key):
                return self._rpc(_DEL, [key])[0] == b"1"

            def num_keys(self):
                return struct.unpack("<q", self._rpc(_NUM, [])[0])[0]

            def compare_set(self, key, expected, desired):
                return self._rpc(_CSET, [key, expected, desired])[0]

            def set_timeout(self, t):
                self._timeout = t

            def close(self):
                with self._lock:
                    if self._sock is not None:
                        self._sock.close()
                        self._sock = None

        return _Store()


def _connect(addr, port, secret, timeout):
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    s = socket.create_connection((addr, port), timeout=timeout)
    try:
        s.settimeout(timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        hello = _recv_exact(s, len(_MAGIC) + _NONCE)
        if hello[:len(_MAGIC)] != _MAGIC:
            raise RefusedError("%s:%d is not a wsync-relay rank 0" % (addr, port))
        ns, nc = hello[len(_MAGIC):], os.urandom(_NONCE)
        s.sendall(nc + _mac(secret, b"client", ns, nc))
        try:
            theirs = _recv_exact(s, 32)
        except ConnectionError:
            raise RefusedError("rank 0 at %s:%d refused this relay: the job's secret differs"
                               % (addr, port)) from None
        if not hmac.compare_digest(theirs, _mac(secret, b"server", ns, nc)):
            raise RefusedError("rank 0 at %s:%d does not know the job's secret" % (addr, port))
        s.settimeout(None)
        return s
    except BaseException:
        s.close()
        raise
