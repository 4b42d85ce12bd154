#!/usr/bin/python3
"""A trainer and collector processes sharing a policy through wsync, with
the package's own calls: Publisher.publish in the trainer, Subscriber.wait
and View.load_into in each collector (examples/python/collectors_rl.py is
the same loop on the wsync.rl adapter).

    /usr/bin/python3 examples/python/collectors.py [--short] [--endpoint SOCK]

The trainer trains a small policy with PyTorch on the CPU from the
collectors' rollouts and publishes it after every update. Each of the 4
collectors holds its own nn.Module, takes the newest weights between
rollouts (waiting at most 50 ms for newer ones) and reports how far behind
the trainer its policy was. Collector 0 is killed with SIGKILL halfway and
started again: the trainer never waits for it.
"""
import time

import numpy as np
import torch

import common
import wsync


def train(endpoint, next_rollout, on_update):
    torch.manual_seed(0)
    policy = common.make_policy()
    opt = torch.optim.Adam(policy.parameters(), lr=0.02)
    rewards = []
    with wsync.connect(endpoint, "trainer") as client:
        pub = client.publisher_like("policy", policy)
        pub.publish(policy, 0)
        update = 0
        while True:
            obs, actions, rew = next_rollout()
            rewards.append(float(rew.mean()))
            common.reinforce_step(policy, opt, obs, actions, rew)
            update += 1
            pub.publish(policy, update, timeout=5.0)   # BusyError only if readers hang on
            if not on_update(update):
                break
    return rewards


def collector(endpoint, cid, conn):
    rng = np.random.default_rng(cid + int(time.time()))
    policy = common.make_policy()                 # this process's own module
    lag = common.Lag()
    loaded = 0
    # the client follows a broker that restarts (reconnect=True, the default)
    with wsync.connect(endpoint, "collector-%d" % cid) as client:
        sub = client.subscriber("policy")
        seen, published_ns = 0, 0
        while not conn.poll():             # until the trainer says stop
            try:
                # the first weights: wait for them; later: at most 50 ms
                with sub.wait(after=seen, timeout=0.05 if seen else 1.0) as view:
                    view.load_into(policy)    # in place, names/shapes/dtypes checked
                    seen, published_ns = view.version, view.published_ns
                    loaded += 1
            except TimeoutError:
                if not seen:
                    continue
            latest = sub.latest()
            lag.add(latest.version - seen, max(0, latest.published_ns - published_ns) / 1e9)
            conn.send(("rollout", common.rollout(policy, rng)))
    conn.recv()                          # "stop"
    conn.send(("report", dict(lag.summary(), loaded=loaded)))


if __name__ == "__main__":
    common.run(__doc__, train, collector)
