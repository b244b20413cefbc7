"""ZB-H2's optimizer post-validation in training (rpd.train.rollback, rpd.train.semantics.
validated_plan): Adam's rollback against optax's own step, and the post-validated run against
clipped minibatch SGD written as a plain loop."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rpd import objectives, schedules
from rpd.train import core, plans, semantics
from rpd.train.rollback import adam_rollback


def _tree(rng, like):
    return jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape)), like)


@pytest.mark.slow
@pytest.mark.parametrize("wd", [0.0, 1e-2])
def test_adam_rollback_returns_weights_and_both_moments(wd):
    lr = 3e-2
    opt = optax.adamw(lr, weight_decay=wd) if wd else optax.adam(lr)
    rng = np.random.default_rng(0)
    p = {"w": jnp.asarray(rng.normal(size=(3, 4))), "b": jnp.asarray(rng.normal(size=5))}
    s = opt.init(p)
    for _ in range(5):
        u, s = opt.update(_tree(rng, p), s, p)
        p = optax.apply_updates(p, u)
    g_eager = _tree(rng, p)  # the eager step's gradient, which post-validation will reject
    u, s_eager = opt.update(g_eager, s, p)
    p_eager = optax.apply_updates(p, u)
    moved = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(p_eager), jax.tree.leaves(p)))
    assert moved > 1e-3
    p_back, adam_back = adam_rollback(p_eager, s_eager[0], g_eager, lr=lr, weight_decay=wd)
    for got, want in ((p_back, p), (adam_back.mu, s[0].mu), (adam_back.nu, s[0].nu)):
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-15)
    assert int(adam_back.count) == int(s[0].count)
    # redone with the clipped gradient, the step equals the validated step taken directly
    clip = optax.clip_by_global_norm(0.1)
    g_clip, _ = clip.update(g_eager, clip.init(p))
    state_back = (adam_back, *s_eager[1:])
    u1, _ = opt.update(g_clip, state_back, p_back)
    u2, _ = opt.update(g_clip, s, p)
    for a, b in zip(jax.tree.leaves(optax.apply_updates(p_back, u1)), jax.tree.leaves(optax.apply_updates(p, u2))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("clip", [None, 0.05])
def test_post_validated_run_is_clipped_minibatch_sgd(clip):
    S, M, Q, gamma = 4, 4, 5, 0.05
    obj = objectives.random_quadratic(64, 16, S, 4, seed=1)
    tl = schedules.zb_h2(S, Q * M, M, post_validation=True, rollback_trace=[1, 3], clip=clip)
    plan, _ = semantics.of(tl).plan(tl, S, obj.n_batches)
    assert plan.clip == clip and np.all(np.diff(plan.time) >= 0)
    record = np.full(len(plan.block), 1, np.int32)
    _, _, _, x_final = core.execute(obj, plan, record, 1, np.array([gamma]), 0, ring_size=plans.ring_size(plan, S))
    x = np.asarray(obj.x0)
    vg = jax.jit(lambda x, b: obj.value_and_grad(obj.data, x, b)[1])
    norms = []
    for q in range(Q):
        g = np.mean([np.asarray(vg(x, (q * M + j) % obj.n_batches)) for j in range(M)], axis=0)
        norms.append(np.linalg.norm(g))
        if clip is not None:
            g = g * min(1.0, clip / np.linalg.norm(g))
        x = x - gamma * g
    if clip is not None:
        assert max(norms) > clip  # clipping acts in this run
    np.testing.assert_allclose(x_final[0], x, rtol=1e-12, atol=1e-12)
