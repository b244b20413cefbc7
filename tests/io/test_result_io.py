import json
import os

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rpd import schedules
from rpd.io import result_io
from rpd.objectives.linear import random_quadratic
from rpd.results import Result
from rpd.schedules.machinery.costs import CostModel
from rpd.train import methods

NAN = float("nan")


def _result(**overrides) -> Result:
    """3 γ on 4 sim_time points; γ = 2⁰ leaves the finite numbers."""
    fields = dict(
        method="pd",
        gammas=np.array([0.25, 0.5, 1.0]),
        axis=np.array([0, 1, 2, 3]),
        axis_name="sim_time",
        curve=np.array([[8.0, 4.0, 2.0, 1.0], [8.0, 2.0, 0.5, 0.25], [8.0, 640.0, np.inf, NAN]]),
        traces={"loss_z": np.arange(6.0).reshape(3, 2), "loss_time": np.array([1, 3], np.int32)},
        x_final=np.zeros((3, 5)),
        meta={"S": 4, "N": 2, "objective": "random_quadratic"},
    )
    return Result(**{**fields, **overrides})


def test_gamma_label_powers_of_two_as_superscripts():
    assert [result_io.gamma_label(g) for g in (2.0**-6, 1.0, 4.0, 0.3)] == ["2⁻⁶", "2⁰", "2²", "0.3"]


def test_repr_is_one_summary_line():
    assert repr(_result()) == (
        "Result(pd: 3 γ in 2⁻²..2⁰, 4 points on sim_time 0..3, D=5, 1/3 diverged, best final 0.25 at γ = 2⁻¹)"
    )


def test_repr_without_a_best_when_every_gamma_diverged():
    r = _result(
        gammas=np.array([2.0]), axis=np.array([0, 1]), curve=np.array([[1.0, NAN]]), x_final=np.zeros((1, 5)), traces={}
    )
    assert repr(r) == "Result(pd: γ = 2¹, 2 points on sim_time 0..1, D=5, 1/1 diverged)"


def test_repr_of_a_reloaded_run_does_not_say_d_0():
    """A stored run keeps no final iterates (``x_final`` [G, 0]); its line said ``D=0``."""
    assert repr(_result(x_final=np.zeros((3, 0)))) == (
        "Result(pd: 3 γ in 2⁻²..2⁰, 4 points on sim_time 0..3, 1/3 diverged, best final 0.25 at γ = 2⁻¹)"
    )


def test_repr_of_a_real_run_stays_short():
    from rpd import objectives
    from rpd.train import methods

    obj = objectives.random_quadratic(n=40, d=8, S=2, batch_size=10, seed=0)
    r = methods.sgd(obj, 30, 2.0 ** np.arange(-4, 5))
    assert "\n" not in repr(r) and len(repr(r)) < 160
    assert f"{int(r.diverged.sum())}/9 diverged" in repr(r)


def test_to_xarray_dims_coords_traces_and_attrs():
    r = _result(meta={"S": np.int64(4), "objective": "q", "plan": np.arange(3), "tag": object()})
    ds = result_io.to_xarray(r)
    assert ds["curve"].dims == ("gamma", "sim_time")
    np.testing.assert_array_equal(ds["curve"].values, r.curve)
    np.testing.assert_array_equal(ds["gamma"].values, r.gammas)
    np.testing.assert_array_equal(ds["sim_time"].values, r.axis)
    np.testing.assert_array_equal(ds["diverged"].values, r.diverged)
    assert ds["diverged"].dims == ("gamma",) and ds["diverged"].values.tolist() == [False, False, True]
    assert ds["x_final"].dims == ("gamma", "d")
    # named dims: LocalSGD's per-microbatch losses beside their time steps share "microbatch"
    assert ds["loss_z"].dims == ("gamma", "microbatch")
    assert ds["loss_time"].dims == ("microbatch",) and ds["loss_time"].dtype == np.int32
    # JSON-able meta only (NumPy scalars as Python numbers), plus what names the data
    assert ds.attrs == {"S": 4, "objective": "q", "method": "pd", "axis_name": "sim_time"}
    json.dumps(ds.attrs)
    assert float(ds["curve"].sel(gamma=0.5, sim_time=2)) == 0.5


def test_to_xarray_refuses_a_trace_named_like_a_variable():
    with pytest.raises(ValueError, match="'curve'"):
        result_io.to_xarray(_result(traces={"curve": np.ones((3, 2))}))


def test_to_pandas_is_tidy_and_concatenates():
    import pandas as pd

    r = _result(axis_name="block_update")
    df = result_io.to_pandas(r)
    assert list(df.columns) == ["method", "gamma", "block_update", "value", "diverged"]
    assert len(df) == 3 * 4 and (df["method"] == "pd").all()
    wide = df.pivot(index="gamma", columns="block_update", values="value")
    np.testing.assert_array_equal(wide.to_numpy(), r.curve)
    assert df.groupby("gamma")["diverged"].all().tolist() == [False, False, True]
    both = pd.concat([df, result_io.to_pandas(_result(method="rpd", axis_name="block_update"))])
    assert both.groupby("method").size().to_dict() == {"pd": 12, "rpd": 12}


def test_plot_one_line_per_gamma_diverged_dashed_and_marked():
    ax = Figure().subplots()
    assert result_io.plot(_result(), ax) is ax
    lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert [ln.get_label() for ln in lines] == ["γ = 2⁻²", "γ = 2⁻¹", "γ = 2⁰ (diverged)"]
    assert [ln.get_linestyle() for ln in lines] == ["-", "-", "--"]
    (marker,) = [ln for ln in ax.get_lines() if ln.get_marker() == "x"]
    # γ = 2⁰ leaves the y range (top: 10 × the largest value of the others) at sim_time 1
    assert marker.get_xdata()[0] == 1 and marker.get_ydata()[0] == pytest.approx(80.0)
    assert ax.get_yscale() == "log" and ax.get_ylim() == pytest.approx((0.125, 80.0))
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [ln.get_label() for ln in lines]


def test_plot_when_every_gamma_diverged_marks_the_last_finite_points():
    r = _result(curve=np.array([[8.0, 9.0, NAN, NAN], [8.0, 7.0, np.inf, 1.0], [NAN] * 4]))
    ax = result_io.plot(r, Figure().subplots())
    crosses = [(ln.get_xdata()[0], ln.get_ydata()[0]) for ln in ax.get_lines() if ln.get_marker() == "x"]
    assert crosses == [(1, 9.0), (3, 1.0)]  # the all-NaN γ has no point to mark
    assert all(ln.get_linestyle() == "--" for ln in ax.get_lines() if ln.get_marker() != "x")


def test_plot_defaults_to_the_current_pyplot_axes():
    import matplotlib.pyplot as plt

    fig = plt.figure()
    try:
        assert result_io.plot(_result(), color="k") is fig.gca()
        assert {ln.get_color() for ln in fig.gca().get_lines() if ln.get_marker() != "x"} == {"k"}
    finally:
        plt.close(fig)


def test_save_load_round_trips_exactly(tmp_path):
    meta = {
        "S": 4,
        "objective": "q",
        "gamma_f": 0.1,
        "nan": NAN,
        "none": None,
        "flag": True,
        "shape": (3, (4, 5)),
        "nested": {"a": [1, 2.5, "x"]},
        "k": np.int64(7),
        "plan": np.arange(6, dtype=np.int16).reshape(2, 3),
    }
    r = _result(meta=meta, traces={"b/grad": np.ones((3, 2), np.float32), "a": np.zeros(2)})
    path = result_io.save(r, tmp_path / "r.npz")
    back = result_io.load(path)
    for name in ("gammas", "axis", "curve", "x_final"):
        a, b = getattr(r, name), getattr(back, name)
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert (back.method, back.axis_name) == (r.method, r.axis_name)
    assert list(back.traces) == ["b/grad", "a"] and back.traces["b/grad"].dtype == np.float32
    assert list(back.meta) == list(meta)
    assert back.meta["shape"] == (3, (4, 5)) and back.meta["nested"] == {"a": [1, 2.5, "x"]}
    assert np.isnan(back.meta["nan"]) and back.meta["none"] is None and back.meta["flag"] is True
    assert type(back.meta["k"]) is np.int64 and back.meta["k"] == 7
    assert back.meta["plan"].dtype == np.int16
    np.testing.assert_array_equal(back.meta["plan"], meta["plan"])
    np.testing.assert_array_equal(back.diverged, r.diverged)
    assert repr(back) == repr(r)
    with np.load(path, allow_pickle=False) as npz:  # a plain npz any NumPy reads
        assert {"curve", "traces/b/grad", "meta/plan", "header"} <= set(npz.files)


def test_save_replaces_atomically(tmp_path, monkeypatch):
    path = result_io.save(_result(), tmp_path / "r.npz")
    before = path.read_bytes()

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        result_io.save(_result(method="rpd"), path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["r.npz"]


def test_save_refuses_what_it_cannot_restore(tmp_path):
    with pytest.raises(TypeError, match=r"meta\.plan"):
        result_io.save(_result(meta={"plan": object()}), tmp_path / "r.npz")
    with pytest.raises(TypeError, match="str keys"):
        result_io.save(_result(meta={"d": {1: 2}}), tmp_path / "r.npz")
    assert not (tmp_path / "r.npz").exists()


def test_load_rejects_other_npz_files(tmp_path):
    np.savez(tmp_path / "other.npz", curve=np.ones(3))
    with pytest.raises(ValueError, match="not a saved Result"):
        result_io.load(tmp_path / "other.npz")


@pytest.mark.parametrize("kind", ["pipedream", "1f1b", "local_sgd"])
def test_a_result_trained_on_costs_in_us_carries_the_unit_to_its_plot(kind):
    """``CostModel(unit="us")``: ``meta["time_unit"]`` is "us", and the plot's x axis says
    "simulated time (us)" with whole microseconds on its ticks (no "1e7" beside them)."""
    us = CostModel(F=10**6, B=2 * 10**6, unit="us")
    obj = random_quadratic(d=12, n=32, S=3, batch_size=4, seed=0)
    tl = {
        "pipedream": lambda: schedules.pipedream(3, 12, costs=us),
        "1f1b": lambda: schedules.one_f_one_b(3, 12, 3, costs=us),
        "local_sgd": lambda: schedules.local_sgd(3, 12, 3, 2, costs=us),
    }[kind]()
    r = methods.local_sgd(obj, tl, [0.01]) if kind == "local_sgd" else methods.train(obj, tl, [0.01])
    assert r.meta["time_unit"] == "us" and r.meta["T"] == tl.T == r.axis[-1] > 10**7
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = result_io.plot(r, fig.subplots())
    fig.canvas.draw()
    assert ax.get_xlabel() == "simulated time (us)"
    assert ax.xaxis.offsetText.get_text() == ""
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert "10,000,000" in ticks or "20,000,000" in ticks, ticks
    unit = methods.train(obj, schedules.pipedream(3, 12), [0.01])
    assert unit.meta["time_unit"] == "tick" and result_io.plot(unit, Figure().subplots()).get_xlabel() == (
        "simulated time (ticks)"
    )
