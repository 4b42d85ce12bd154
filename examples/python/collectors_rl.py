#!/usr/bin/python3
"""examples/python/collectors.py written against wsync.rl, TorchRL's
weight-sync scheme interface: the trainer sends its policy after every
update and send() returns once every collector applied it; each collector
holds its own policy module, into which the scheme's background thread
swaps each new version (read-only tensors over the shared memory: nothing
copied) between the collector's rollout steps, and reports its lag.

    /usr/bin/python3 examples/python/collectors_rl.py [--short] [--endpoint SOCK]

A TorchRL collector does the scheme's calls itself when given
weight_sync_schemes={"policy": scheme}; this example makes them by hand.
"""
import time

import numpy as np
import torch

import common
import wsync.rl


def make_scheme(endpoint):
    # sync=True (TorchRL's default): send() returns when every live
    # collector has applied the weights; a killed one stops counting. Each
    # process builds its own scheme here, so they name the model (a scheme
    # pickled to its workers needs no name: they share its own)
    return wsync.rl.WsyncWeightSyncScheme("state_dict", name="policy", endpoint=endpoint,
                                          timeout=30.0)


def train(endpoint, next_rollout, on_update):
    torch.manual_seed(0)
    policy = common.make_policy()
    opt = torch.optim.Adam(policy.parameters(), lr=0.02)
    scheme = make_scheme(endpoint)
    scheme.init_on_sender(model_id="policy", model=policy)
    scheme.connect()                              # publishes the first weights
    rewards = []
    try:
        while True:
            obs, actions, rew = next_rollout()
            rewards.append(float(rew.mean()))
            common.reinforce_step(policy, opt, obs, actions, rew)
            scheme.send()                         # the policy's weights, applied everywhere
            if not on_update(scheme.step):
                break
    finally:
        scheme.shutdown()
    return rewards


def collector(endpoint, cid, conn):
    rng = np.random.default_rng(cid + int(time.time()))
    policy = common.make_policy()                 # this process's own module
    lag = common.Lag()
    scheme = make_scheme(endpoint)
    scheme.init_on_receiver(model_id="policy", model=policy, worker_idx=cid)
    scheme.connect()                              # waits for the first weights, applies them
    try:
        while not conn.poll():                    # until the trainer says stop
            behind = scheme.lag()
            lag.add(behind.versions_behind, behind.seconds_behind)
            with scheme.lock:                     # no update lands inside a rollout
                roll = common.rollout(policy, rng)
            conn.send(("rollout", roll))
        conn.recv()                               # "stop"
        conn.send(("report", dict(lag.summary(), loaded=scheme.received)))
    finally:
        scheme.shutdown()


if __name__ == "__main__":
    common.run(__doc__, train, collector)
