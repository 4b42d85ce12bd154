"""A link that costs something, for the relay's tests and bench: two network
namespaces joined by a veth pair, each end shaped by tc (a token bucket at
RATE, both directions), made and removed by the caller as root.

    with ShapedLink("1gbit") as link:          # or ShapedLink.unavailable()
        subprocess.Popen(link.run_in("a") + ["python3", ...])  # 10.x.y.1
        subprocess.Popen(link.run_in("b") + ["python3", ...])  # 10.x.y.2

Processes in the namespaces see only the veth and their own loopback;
Unix sockets and shared memory are not namespaced by a network namespace,
so brokers and their clients keep working across it.
"""
import os
import shutil
import subprocess

IP = shutil.which("ip") or "/usr/sbin/ip"
TC = shutil.which("tc") or "/usr/sbin/tc"


def _run(*args, check=True):
    p = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=30)
    if check and p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), p.stdout.strip()))
    return p


def _bits(rate):
    """"1gbit" -> 1e9 (tc's units, decimal)."""
    r = rate.lower()
    for suffix, mult in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1)):
        if r.endswith(suffix):
            return float(r[:-len(suffix)]) * mult
    return float(r)


class ShapedLink:
    def __init__(self, rate="1gbit"):
        self.rate = rate
        tag = "%x" % (os.getpid() & 0xfffff)
        self.ns = {"a": "wsr%sa" % tag, "b": "wsr%sb" % tag}
        self.dev = {"a": "wsr%sa0" % tag, "b": "wsr%sb0" % tag}
        # 10.200-249.x.y/30: private, and unlikely to be one this host routes.
        n = os.getpid()
        net = "10.%d.%d.%d" % (200 + n % 50, (n >> 6) % 256, 4 * ((n >> 3) % 64))
        base = net.rsplit(".", 1)
        self.addr = {"a": "%s.%d" % (base[0], int(base[1]) + 1),
                     "b": "%s.%d" % (base[0], int(base[1]) + 2)}
        self.made = False

    @staticmethod
    def unavailable():
        """Why no shaped link can be made here (None: it can)."""
        if os.geteuid() != 0:
            return "network namespaces and tc need root"
        for tool in (IP, TC):
            if not os.path.exists(tool):
                return "%s is missing (Debian package iproute2)" % tool
        probe = "wsrprobe%d" % os.getpid()
        p = _run(IP, "netns", "add", probe, check=False)
        if p.returncode != 0:
            return "cannot make a network namespace: %s" % p.stdout.strip()
        _run(IP, "netns", "del", probe, check=False)
        return None

    def run_in(self, side):
        """The command prefix that runs a program in namespace side."""
        return [IP, "netns", "exec", self.ns[side]]

    def up(self):
        self.made = True
        try:
            for side in "ab":
                _run(IP, "netns", "add", self.ns[side])
            _run(IP, "link", "add", self.dev["a"], "netns", self.ns["a"], "type", "veth",
                 "peer", "name", self.dev["b"], "netns", self.ns["b"])
            # A bucket of 4 ms at the rate (and at least 64 KiB): big enough
            # for the kernel's timer resolution, small next to the transfers.
            burst = max(64 << 10, int(_bits(self.rate) / 8 * 0.004))
            for side in "ab":
                ns = ["-n", self.ns[side]]
                _run(IP, *ns, "addr", "add", self.addr[side] + "/30", "dev", self.dev[side])
                _run(IP, *ns, "link", "set", self.dev[side], "up")
                _run(IP, *ns, "link", "set", "lo", "up")
                _run(TC, *ns, "qdisc", "add", "dev", self.dev[side], "root", "tbf",
                     "rate", self.rate, "burst", str(burst), "latency", "50ms")
        except BaseException:
            self.down()
            raise
        return self

    def down(self):
        if not self.made:
            return
        for side in "ab":
            _run(IP, "netns", "del", self.ns[side], check=False)
        self.made = False

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()
