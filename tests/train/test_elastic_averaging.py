"""AvgPipe's elastic averaging (rpd.train.avgpipe, a reconstruction: EASGD's synchronous rule)
against a plain NumPy loop of the rule, and through methods.train."""

import jax
import numpy as np
import pytest

from rpd import objectives
from rpd.schedules.family.avgpipe import avgpipe
from rpd.train import methods
from rpd.train.avgpipe import train_avgpipe


@pytest.mark.parametrize("P, alpha", [(2, None), (3, 0.2)])
def test_elastic_averaging_is_easgd_on_each_pipelines_own_microbatches(P, alpha):
    S, m, Q, gamma = 4, 2, 5, 0.05
    obj = objectives.random_quadratic(64, 16, S, 4, seed=2)
    tl = avgpipe(S, Q * P * m, P * m, pipelines=P, advance=1, elastic=alpha)
    res = train_avgpipe(obj, tl, [gamma])
    a = 0.9 / P if alpha is None else alpha
    vg = jax.jit(lambda x, b: obj.value_and_grad(obj.data, x, b)[1])
    x0 = np.asarray(obj.x0)
    xs, c = [x0.copy() for _ in range(P)], x0.copy()
    curve = [float(obj.loss(obj.data, obj.x0)) - obj.f_star]
    for q in range(Q):
        new = []
        for i in range(P):
            g = np.mean([np.asarray(vg(xs[i], (q * P * m + i * m + j) % obj.n_batches)) for j in range(m)], axis=0)
            new.append(xs[i] - gamma * g - a * (xs[i] - c))
        c = c + a * sum(x - c for x in xs)
        xs = new
        curve.append(float(obj.loss(obj.data, c)) - obj.f_star)
    np.testing.assert_allclose(res.x_final[0], c, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res.curve[0], curve, rtol=1e-10)
    assert np.array_equal(res.axis[1:], tl.iteration_end() + 1)
    via_train = methods.train(obj, tl, [gamma])
    np.testing.assert_array_equal(via_train.curve, res.curve)
    assert len(via_train.traces["update_time"]) == Q * P * S
