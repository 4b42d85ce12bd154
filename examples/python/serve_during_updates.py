#!/usr/bin/python3
"""Rollout workers that never pause for an update: a trainer publishes a
small transformer policy every 50 ms while worker processes act through
wsync.LivePolicy, which runs each forward pass over the newest version in
place (no copy) and swaps versions only between two passes.

    /usr/bin/python3 examples/python/serve_during_updates.py [--short]
                     [--workers N] [--seconds S] [--endpoint SOCK]

Each worker prints its actions per second, the policy lag it recorded per
step (versions behind the trainer's newest, as an off-policy correction or a
staleness filter would use it) and its longest pause between two actions.
The trainer publishes with max_lead=4 (it waits rather than get more than 4
versions ahead of a worker) and the workers act with max_lag=(None, 5.0)
(they stop with a clear error if the trainer stops publishing for 5 s).
"""
import argparse
import multiprocessing as mp
import os
import queue
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
if os.path.isdir(os.path.join(ROOT, "libclient", "python", "wsync")):
    sys.path.insert(0, os.path.join(ROOT, "libclient", "python"))

import torch  # noqa: E402

import wsync  # noqa: E402
import wsync.broker  # noqa: E402

OBS, ACTIONS, D, TOKENS = 32, 6, 128, 8


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
        self.qkv, self.proj = torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)
        self.up, self.down = torch.nn.Linear(D, 4 * D), torch.nn.Linear(4 * D, D)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, -1)
        att = torch.softmax(q @ k.transpose(-1, -2) / D ** 0.5, -1)
        x = x + self.proj(att @ v)
        return x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))


class Policy(torch.nn.Module):
    """Observations of the last TOKENS steps -> logits over ACTIONS."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(OBS, D)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(D, ACTIONS)

    def forward(self, obs):
        x = self.embed(obs)
        for b in self.blocks:
            x = b(x)
        return self.head(x[:, -1])


def worker(endpoint, wid, seconds, results):
    torch.set_num_threads(1)
    torch.manual_seed(wid)
    with wsync.connect(endpoint, "worker-%d" % wid) as client:
        sub = client.subscriber("policy")
        sub.wait(after=0, timeout=30).release()          # the first version is there
        # the module gives the structure (and buffers the model lacks);
        # its own parameters are never read
        policy = wsync.LivePolicy(sub, Policy().eval(), max_lag=(None, 5.0))
        history = torch.zeros(1, TOKENS, OBS)
        steps, lags, versions, last, longest = 0, [], set(), None, 0.0
        end = time.monotonic() + seconds
        with torch.no_grad():
            while time.monotonic() < end:
                logits = policy(history)
                action = int(logits.argmax())
                now = time.monotonic()
                if last is not None:
                    longest = max(longest, now - last)
                last = now
                # what a rollout records per step: the behaviour policy's version
                lags.append(policy.lag.versions)
                versions.add(policy.version)
                steps += 1
                obs = torch.randn(1, 1, OBS) + action     # a stand-in environment
                history = torch.cat([history[:, 1:], obs], 1)
        policy.close()
    results.put((wid, steps, lags, len(versions), longest))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--short", action="store_true", help="a 3 s run, for tests")
    ap.add_argument("--endpoint", default=None, help="a running broker (default: start one)")
    args = ap.parse_args()
    seconds = 3.0 if args.short else args.seconds
    broker = None
    endpoint = args.endpoint
    if endpoint is None:
        broker = wsync.broker.start(name="serve%d" % os.getpid())
        endpoint = broker.endpoint
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    try:
        with wsync.connect(endpoint, "trainer") as client:
            torch.manual_seed(0)
            model = Policy()
            pub = client.publisher_like("policy", model, max_lead=4)
            pub.publish(model, 0)
            procs = [ctx.Process(target=worker, args=(endpoint, i, seconds, results),
                                 daemon=True) for i in range(args.workers)]
            for p in procs:
                p.start()
            step = 0
            published = 0
            t0 = time.monotonic()
            while any(p.is_alive() for p in procs) and results.qsize() < args.workers:
                with torch.no_grad():                      # a stand-in optimizer step
                    for p in model.parameters():
                        p.add_(torch.randn_like(p), alpha=1e-3)
                step += 1
                try:
                    pub.publish(model, step, timeout=1.0)
                    published += 1
                except wsync.WsyncTimeoutError as e:       # a worker more than 4 behind
                    print("trainer: held back: %s" % e.detail)
                time.sleep(0.05)
            elapsed = time.monotonic() - t0
            reports = []
            for _ in range(args.workers):
                try:
                    reports.append(results.get(timeout=30))
                except queue.Empty:
                    break
            for p in procs:
                p.join(30)
    finally:
        if broker is not None:
            broker.stop()
    print("trainer: published %d versions in %.1f s (workers starting included)"
          % (published, elapsed))
    ok = True
    for wid, steps, lags, nversions, longest in sorted(reports):
        print("worker %d: %d actions, %.0f actions/s, acted with %d versions, lag per step "
              "mean %.2f max %d versions, longest pause %.1f ms"
              % (wid, steps, steps / seconds, nversions, sum(lags) / max(1, len(lags)),
                 max(lags, default=0), longest * 1e3))
        ok = ok and steps > 0 and nversions >= 2
    if len(reports) < args.workers:
        print("%d of %d workers did not report" % (args.workers - len(reports), args.workers))
        ok = False
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
