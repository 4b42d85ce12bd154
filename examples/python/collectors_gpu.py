#!/usr/bin/python3
"""The collectors example with the policy kept on the GPUs: the trainer
trains on cuda:0 and publishes each update into device memory with
Publisher.publish_gpu; the library copies it to every GPU of the machine
(up to 8: peer to peer where the GPUs allow it) before the version is
visible; collector i, on GPU i modulo their number, loads it into its own
CUDA module straight from device memory (Subscriber.wait_gpu and
DeviceView.load_into), with no trip through host memory.

    /usr/bin/python3 examples/python/collectors_gpu.py [--short] [--endpoint SOCK]

As in collectors.py, collector 0 is killed with SIGKILL halfway and started
again, and the run checks that the policy learned. It needs PyTorch with
CUDA and a GPU; without them it says so and exits 3.
"""
import sys

import numpy as np
import torch

import common
import wsync


class OnDevice(torch.nn.Module):
    """A CUDA module that takes and gives host tensors, so the bandit of
    common.py (numpy on the host) drives it unchanged."""

    def __init__(self, module, device):
        super().__init__()
        self.module, self.device = module, device

    def forward(self, x):
        return self.module(x.to(self.device)).cpu()


def gpus():
    """This process's GPUs, as torch names them (at most 8 per model)."""
    return ["cuda:%d" % i for i in range(min(torch.cuda.device_count(), 8))]


def train(endpoint, next_rollout, on_update):
    torch.manual_seed(0)
    torch.cuda.set_device(0)
    policy = common.make_policy().to("cuda:0")
    opt = torch.optim.Adam(policy.parameters(), lr=0.02)
    on_host = OnDevice(policy, "cuda:0")
    rewards = []
    with wsync.connect(endpoint, "trainer") as client:
        pub = client.publisher_like("policy", policy, devices=gpus())
        pub.publish_gpu(policy, 0)
        update = 0
        while True:
            obs, actions, rew = next_rollout()
            rewards.append(float(rew.mean()))
            common.reinforce_step(on_host, opt, obs, actions, rew)
            update += 1
            pub.publish_gpu(policy, update, timeout=5.0)   # device to device
            if not on_update(update):
                break
    return rewards


def collector(endpoint, cid, conn):
    devices = gpus()
    device = devices[cid % len(devices)]
    torch.cuda.set_device(device)                  # the context wsync's calls use
    rng = np.random.default_rng(cid)
    policy = common.make_policy().to(device)       # this process's own module
    on_host = OnDevice(policy, device)
    lag = common.Lag()
    loaded = 0
    with wsync.connect(endpoint, "collector-%d" % cid) as client:
        sub = client.subscriber("policy")
        seen, published_ns = 0, 0
        while not conn.poll():             # until the trainer says stop
            try:
                with sub.wait_gpu(device, after=seen, timeout=0.05 if seen else 1.0) as dv:
                    dv.load_into(policy)   # device to device, on this GPU
                    seen, published_ns = dv.version, dv.published_ns
                    loaded += 1
            except TimeoutError:
                if not seen:
                    continue
            latest = sub.latest()
            lag.add(latest.version - seen, max(0, latest.published_ns - published_ns) / 1e9)
            conn.send(("rollout", common.rollout(on_host, rng)))
    conn.recv()                          # "stop"
    conn.send(("report", dict(lag.summary(), loaded=loaded)))


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("collectors_gpu.py needs PyTorch with CUDA and a GPU (this is torch %s, "
              "without CUDA here); examples/python/collectors.py is the same loop on "
              "the CPU" % torch.__version__)
        sys.exit(3)
    common.run(__doc__, train, collector)
