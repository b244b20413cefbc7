"""``rpd.io.result_io.to_xarray``: a real run's traces have named dimensions (no
``block_grad_norm_dim_1``), shared where they mean the same index."""

import numpy as np

from rpd import objectives, schedules
from rpd.io import result_io
from rpd.results import Result
from rpd.train import methods


def test_a_pipedream_runs_traces_are_per_update():
    obj = objectives.random_quadratic(n=32, d=12, S=3, batch_size=4, seed=0)
    tl = schedules.pipedream(3, 8)
    r = methods.pipedream(obj, tl, [2.0**-5, 2.0**-4], axis="block_update", diag_stride=2)
    ds = result_io.to_xarray(r)
    K = r.traces["block_grad_norm"].shape[1]
    assert ds["block_grad_norm"].dims == ("gamma", "update") and ds.sizes["update"] == K
    assert ds["loss_z"].dims == ("gamma", "update")
    assert ds["diag"].dims == ("gamma", "update", "diag_quantity") and ds.sizes["diag_quantity"] == 3
    if "update_time" in r.traces:
        assert ds["update_time"].dims == ("update",)
    assert not [d for d in ds.dims if "_dim_" in str(d)]
    # the named dims select like any other: the trace of γ = 2⁻⁴ at update 3
    np.testing.assert_array_equal(
        ds["block_grad_norm"].sel(gamma=2.0**-4).isel(update=3), r.traces["block_grad_norm"][1, 3]
    )


def test_an_unknown_trace_keeps_numbered_dims_and_a_clash_gets_its_own_name():
    r = Result(
        method="x",
        gammas=np.array([0.5, 1.0]),
        axis=np.arange(3),
        axis_name="sim_time",
        curve=np.ones((2, 3)),
        traces={"mine": np.zeros((2, 4)), "loss_z": np.zeros((2, 5)), "update_time": np.arange(6)},
        x_final=np.zeros((2, 2)),
        meta={},
    )
    ds = result_io.to_xarray(r)
    assert ds["mine"].dims == ("gamma", "mine_dim_1")
    assert ds["loss_z"].dims == ("gamma", "update") and ds["update_time"].dims == ("update_time_update",)
