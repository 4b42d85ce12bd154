#!/usr/bin/python3
"""examples/python/collectors.py written against the wsync.rl adapter: the
trainer holds a WeightSender, each collector a WeightReceiver that updates
its own policy module in place and reports the policy lag.

    /usr/bin/python3 examples/python/collectors_rl.py [--short] [--endpoint SOCK]
"""
import time

import numpy as np
import torch

import common
import wsync.rl


def train(endpoint, next_rollout, on_update):
    torch.manual_seed(0)
    policy = common.make_policy()
    opt = torch.optim.Adam(policy.parameters(), lr=0.02)
    scheme = wsync.rl.WsyncWeightSyncScheme("policy", endpoint)
    rewards = []
    with scheme.create_sender(policy) as sender:
        sender.send_weights(step=0)
        while True:
            obs, actions, rew = next_rollout()
            rewards.append(float(rew.mean()))
            common.reinforce_step(policy, opt, obs, actions, rew)
            sender.send_weights_async()           # the policy, step + 1
            if not on_update(sender.step):
                break
        sender.wait_ack(timeout=5.0)
    return rewards


def collector(endpoint, cid, conn):
    rng = np.random.default_rng(cid + int(time.time()))
    policy = common.make_policy()
    lag = common.Lag()
    scheme = wsync.rl.WsyncWeightSyncScheme("policy", endpoint)
    with scheme.create_receiver(policy, name="collector-%d" % cid) as receiver:
        while not conn.poll():             # until the trainer says stop
            # the first weights: wait for them; later: at most 50 ms
            if not receiver.receive(timeout=0.05 if receiver.version else 1.0) \
                    and not receiver.version:
                continue
            behind = receiver.lag()
            lag.add(behind.versions_behind, behind.seconds_behind)
            conn.send(("rollout", common.rollout(policy, rng)))
        conn.recv()                      # "stop"
        conn.send(("report", dict(lag.summary(), loaded=receiver.received)))


if __name__ == "__main__":
    common.run(__doc__, train, collector)
