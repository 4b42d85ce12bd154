"""What the two examples share: the toy task, the policy, a private broker,
and the launcher that runs a trainer (this process) and collector processes,
kills one collector with SIGKILL midway and starts it again.

The task is a contextual bandit: an observation of 4 numbers, 2 actions,
reward 1 for the action a fixed hidden rule picks, else 0 (a random policy
earns 0.5). The trainer learns from the collectors' rollouts with
REINFORCE; the collectors act with their own copy of the policy and take
new weights between rollouts.
"""
import argparse
import importlib.util
import multiprocessing as mp
import os
import signal
import sys
import time
from multiprocessing.connection import wait as wait_conns

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
# The wsync this interpreter has (a wheel in a venv, make install,
# PYTHONPATH) is the one the examples run on; only where it has none, the
# source tree's package around this file.
if importlib.util.find_spec("wsync") is None and \
        os.path.isdir(os.path.join(ROOT, "libclient", "python", "wsync")):
    sys.path.append(os.path.join(ROOT, "libclient", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import wsync  # noqa: E402

OBS = 4
ACTIONS = 2
ROLLOUT = 64
ENV_S = 0.02
_RULE = np.array([[1.0, -2.0, 0.5, 1.0], [-1.0, 1.0, 1.5, -0.5]], dtype=np.float32)


def make_policy():
    return torch.nn.Sequential(torch.nn.Linear(OBS, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, ACTIONS))


def rollout(policy, rng):
    """ROLLOUT steps of the bandit with policy: (obs, actions, rewards).
    Takes ENV_S at least, like a real environment (and leaves the CPU to
    the trainer meanwhile)."""
    time.sleep(ENV_S)
    obs = rng.standard_normal((ROLLOUT, OBS)).astype(np.float32)
    with torch.no_grad():
        probs = torch.softmax(policy(torch.from_numpy(obs)), dim=1).numpy()
    actions = (rng.random(ROLLOUT) < probs[:, 1]).astype(np.int64)
    rewards = (actions == np.argmax(obs @ _RULE.T, axis=1)).astype(np.float32)
    return obs, actions, rewards


def reinforce_step(policy, opt, obs, actions, rewards):
    logp = torch.log_softmax(policy(torch.from_numpy(obs)), dim=1)
    taken = logp.gather(1, torch.from_numpy(actions).unsqueeze(1)).squeeze(1)
    adv = torch.from_numpy(rewards - rewards.mean())
    loss = -(taken * adv).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


class Lag:
    """The worst and the mean policy lag a collector saw at its rollouts."""

    def __init__(self):
        self.n = 0
        self.versions = 0
        self.worst_versions = 0
        self.worst_s = 0.0

    def add(self, versions, seconds):
        self.n += 1
        self.versions += versions
        self.worst_versions = max(self.worst_versions, versions)
        self.worst_s = max(self.worst_s, seconds)

    def summary(self):
        return {"rollouts": self.n, "mean_versions_behind": self.versions / max(1, self.n),
                "worst_versions_behind": self.worst_versions, "worst_seconds_behind": self.worst_s}


def parse_args(doc):
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--updates", type=int, default=300, help="trainer updates (default 300)")
    ap.add_argument("--collectors", type=int, default=4)
    ap.add_argument("--short", action="store_true", help="a short run (60 updates), for tests")
    ap.add_argument("--endpoint", default=None,
                    help="a running broker (default: start a private wsyncd)")
    ap.add_argument("--wsyncd", default=None,
                    help="the broker binary for the private broker (default: the one "
                    "wsync.broker finds: bundled with the package, the source tree's, "
                    "or wsyncd on PATH)")
    args = ap.parse_args()
    if args.short:
        args.updates = 60
    return args


def private_broker(wsyncd):
    """Starts wsyncd with its own name and directory (wsync.broker.start);
    returns the running broker."""
    import wsync.broker
    try:
        return wsync.broker.start(name="example%d" % os.getpid(), wsyncd=wsyncd)
    except (RuntimeError, FileNotFoundError) as e:
        raise SystemExit(str(e))


def run(doc, train, collector):
    """Runs train(endpoint, next_rollout, on_update) in this process and
    collector(endpoint, id, conn) in --collectors processes, kills
    collector 0 with SIGKILL when half the updates are done, starts it
    again, and prints a summary. train trains on next_rollout()'s rollouts
    and calls on_update(update) after publishing each update, until it
    returns False. Exits 0 if every collector (the restarted one
    included) reported, loaded weights, and the policy learned."""
    args = parse_args(doc)
    broker = None
    endpoint = args.endpoint
    if endpoint is None:
        broker = private_broker(args.wsyncd)
        endpoint = broker.endpoint
    print("wsync %s from %s, libwsync %s" % (wsync.__version__, os.path.dirname(wsync.__file__),
                                            wsync.library_path()))
    # forkserver: each collector is forked from a server that imported
    # torch once (a fresh interpreter, never a fork of this one, which holds
    # a wsync client); collectors, the restarted one too, start in ~0.1 s
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["numpy", "torch", "wsync", "common"])
    procs, conns = {}, {}

    def start(i):
        # one pipe per collector: rollouts and the report come back on it,
        # "stop" goes out on it (nothing shared that a SIGKILL could leave
        # locked)
        mine, theirs = ctx.Pipe()
        p = ctx.Process(target=collector, args=(endpoint, i, theirs), daemon=True)
        p.start()
        theirs.close()
        procs[i], conns[i] = p, mine

    def stop():
        for c in conns.values():
            try:
                c.send("stop")
            except OSError:
                pass

    reports, killed, restarted_delivered = {}, [], []

    def next_rollout():
        while True:
            ready = wait_conns(list(conns.values()), timeout=30)
            if not ready:
                raise SystemExit("no rollout from any collector within 30 s")
            for c in ready:
                i = next(k for k, v in conns.items() if v is c)
                try:
                    msg = c.recv()
                except (EOFError, OSError):            # the killed one
                    del conns[i]
                    continue
                if msg[0] == "rollout":
                    if i == 0 and killed:
                        restarted_delivered.append(True)
                    return msg[1]
                reports[i] = msg[1]

    def on_update(update):
        """False once the updates are done and the restarted collector sent
        a rollout (the run goes on until it did; 120 s without one means it
        hangs)."""
        if update >= args.updates and (restarted_delivered or
                                       time.monotonic() - killed[0][1] > 120):
            return False
        if update == args.updates // 2 and not killed:
            victim = procs[0]
            os.kill(victim.pid, signal.SIGKILL)
            victim.join()
            killed.append((victim.pid, time.monotonic()))
            print("update %d: killed collector 0 (pid %d) with SIGKILL; starting it again"
                  % (update, victim.pid))
            start(0)
        return True

    rewards = []
    t0 = time.monotonic()
    try:
        for i in range(args.collectors):
            start(i)
        rewards = train(endpoint, next_rollout, on_update)
        stop()
        deadline = time.monotonic() + 30
        while len(reports) < args.collectors and conns and time.monotonic() < deadline:
            for c in wait_conns(list(conns.values()), timeout=1):
                i = next(k for k, v in conns.items() if v is c)
                try:
                    msg = c.recv()
                except (EOFError, OSError):
                    del conns[i]
                    continue
                if msg[0] == "report":
                    reports[i] = msg[1]
        for p in procs.values():
            p.join(10)
    finally:
        for p in procs.values():
            if p.is_alive():
                p.kill()
        if broker is not None:
            broker.stop()
    first = float(np.mean(rewards[:10]))
    last = float(np.mean(rewards[-10:]))
    print("%d updates in %.1f s; reward of the collectors' rollouts: %.2f at the start, "
          "%.2f at the end (random: 0.50)" % (len(rewards), time.monotonic() - t0, first, last))
    ok = True
    for i in range(args.collectors):
        r = reports.get(i)
        if r is None:
            print("collector %d: no report" % i)
            ok = False
            continue
        print("collector %d: %d versions loaded, %d rollouts, versions behind: mean %.2f, "
              "worst %d; worst seconds behind %.3f"
              % (i, r["loaded"], r["rollouts"], r["mean_versions_behind"],
                 r["worst_versions_behind"], r["worst_seconds_behind"]))
        ok = ok and r["loaded"] > 0
    if last < 0.65:
        print("the policy did not learn (final reward %.2f)" % last)
        ok = False
    print("OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)
