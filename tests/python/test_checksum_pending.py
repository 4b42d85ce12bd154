"""A version written without the copy helpers (slab.numpy()[...] = ...,
slab.torch(name).copy_(t)) is visible at once and hashed after its commit;
View.verify() waits for that checksum and never reports a false mismatch,
publish after publish."""
import numpy as np
import pytest

from conftest import WAIT_S

MIB = 1 << 20


def weights(step):
    return {"a": np.full((3 * MIB,), step, np.float32),
            "b": np.arange(MIB // 2, dtype=np.float32) + step}


def test_verify_waits_for_a_checksum_formed_after_the_commit(client):
    pub = client.publisher_like("written", weights(0), slots=2)
    sub = client.subscriber("written")
    for step in range(1, 9):
        w = weights(step)
        with pub.begin(timeout=WAIT_S) as slab:
            for k, a in w.items():
                slab.numpy(k)[...] = a             # no copy helper: hashed after
            slab.commit(step)
        with sub.acquire() as view:
            view.verify()
            assert view.step == step
            assert np.array_equal(view.numpy("a"), w["a"])


def test_torch_copy_then_verify(client):
    torch = pytest.importorskip("torch")
    w = {k: torch.from_numpy(a) for k, a in weights(5).items()}
    pub = client.publisher_like("copied", w)
    with pub.begin(timeout=WAIT_S) as slab:
        for k, t in w.items():
            slab.torch(k).copy_(t)
        slab.commit(5)
    with client.subscriber("copied").acquire() as view:
        view.verify()
        view.numpy("b")[0]                          # readable


def test_a_trainer_that_exits_without_closing_still_stores_its_checksum(broker, client):
    """The interpreter ends right after the commit, nothing closed: the
    library stores the pending checksum at exit, so verify passes (it
    would say the publisher died otherwise)."""
    import subprocess
    import sys
    script = ("import sys, numpy as np, wsync\n"
              "c = wsync.connect(sys.argv[1], 'short-lived')\n"
              "p = c.publisher('exiting', [('w', 'f32', (%d,))])\n"
              "s = p.begin(timeout=10)\n"
              "s.numpy('w')[...] = 3.0\n"
              "s.commit(3)\n" % (8 * MIB))
    r = subprocess.run([sys.executable, "-c", script, broker.sock], timeout=60,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with client.subscriber("exiting").acquire() as view:
        assert view.step == 3
        view.verify()
