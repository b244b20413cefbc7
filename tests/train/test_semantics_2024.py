"""The schedules shipped since 2024 train with their entries' semantics as minibatch SGD with batch
M·B (docs/schedules.md#training-semantics): the same iterates as hand-written minibatch SGD on
the same microbatches, on their own simulated-time axes."""

import jax
import numpy as np
import pytest

from rpd import objectives, registry
from rpd.schedules.machinery.costs import CostModel
from rpd.train import methods

S, N, GAMMA = 4, 32, 0.05
NAMES = ["looped_bfs", "interleaved_zb", "dualpipe", "v_half", "v_min", "combined_1f1b", "bitpipe"]


def _minibatch_sgd(obj, M):
    vg = jax.jit(lambda x, b: obj.value_and_grad(obj.data, x, b)[1])
    x = np.asarray(obj.x0)
    for q in range(N // M):
        x = x - GAMMA * np.mean([np.asarray(vg(x, (q * M + j) % obj.n_batches)) for j in range(M)], axis=0)
    return x


@pytest.mark.parametrize("name", NAMES)
def test_trains_as_minibatch_sgd(name):
    entry = registry.SCHEDULES[name]
    M = 8
    c = CostModel(F=1, B=2, I=1, W=1, FB=2, p2p=1, allreduce=(2, 0.01))
    tl = entry.make(S, N, M, c, {"values": 50} if entry.allreduce else {})
    blocks = tl.n_stages  # one objective block per (chunk) stage
    obj = objectives.random_quadratic(n=240, d=24, S=blocks, batch_size=5, seed=0)
    res = methods.train(obj, tl, [GAMMA], semantics=entry.semantics)
    np.testing.assert_allclose(res.x_final[0], _minibatch_sgd(obj, M), rtol=0, atol=1e-13)
    assert res.axis[-1] == tl.T and tl.synchronous
