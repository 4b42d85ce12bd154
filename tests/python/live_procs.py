"""Child processes of test_live.py (spawned: functions importable by name)."""
import os
import time

import torch

import wsync


def mlp(n):
    return torch.nn.Sequential(torch.nn.Linear(n, n, bias=False),
                               torch.nn.Linear(n, 1, bias=False))


def live_holder(sock, model, n, ready, stop):
    """A collector acting through a LivePolicy that then stops with its view
    held; reports its pid through ready, then sleeps until killed."""
    c = wsync.connect(sock, "live-holder")
    sub = c.subscriber(model)
    policy = wsync.LivePolicy(sub, mlp(n).double())
    with torch.no_grad():
        policy(torch.ones(n, dtype=torch.float64))
    assert policy.held_versions == [policy.version]
    ready.set()
    stop.wait(60)
    time.sleep(60)
    return os.getpid()
