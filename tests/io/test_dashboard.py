import json

import pytest

pytest.importorskip("wandb_workspaces", reason="optional extra not installed: pip install -e '.[wandb-workspaces]'")

from rpd.io import dashboard  # noqa: E402


def _spec(view) -> dict:
    """The view as wandb would upload it (built locally, never sent)."""
    return json.loads(json.dumps(view._to_model().model_dump(by_alias=True), default=str))


def test_views_build_offline_with_the_standard_panels():
    views = dashboard.build_views("someone", "rpd", S_values=[4, 16])
    assert [v.name for v in views] == ["rpd overview", "rpd 4 stages", "rpd 16 stages"]
    for v in views:
        assert [s.name for s in v.sections] == ["Objective", "Delays", "Step size"]
        f_vs_time = v.sections[0].panels[0]
        assert (f_vs_time.x, f_vs_time.y, f_vs_time.log_y) == ("sim_time", ["loss/f_minus_fstar"], True)
        assert v.sections[0].panels[1].x == "block_update"
        assert [p.metrics for p in v.sections[1].panels] == [["delay/mean"], ["delay/p10"], ["delay/max"]]
        assert v.sections[2].panels[1].metric == "tuning/gamma_log2"
    text = json.dumps(_spec(views[2]))
    assert '"value": ["S16"]' in text and '"name": "tags"' in text  # facet: runs tagged S16
    assert '"name": "meta.value.method"' in text  # grouped by method (nested config key)
    overview = json.dumps(_spec(views[0]))
    # every swept variable is a group key: LocalSGD at H = 2, 5, 30 are three groups, not one
    for key in ("method", "schedule", "S", "H", "delta", "N", "T"):
        assert f'"name": "meta.value.{key}"' in overview
    assert '"name": "meta.value.H"' in text and '"name": "meta.value.S"' not in text


def test_cli_builds_without_saving(monkeypatch, capsys):
    def no_upload(self):
        raise AssertionError("must not save without --save")

    monkeypatch.setattr("wandb_workspaces.workspaces.Workspace.save", no_upload)
    views = dashboard.main(["--project", "rpd", "--S", "8", "--f-gap", "loss/train"])
    out = capsys.readouterr().out
    assert len(views) == 2 and views[1].sections[0].panels[0].y == ["loss/train"]
    assert "built only" in out and "rpd 8 stages" in out


def test_cli_refuses_to_save_offline(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    with pytest.raises(SystemExit):
        dashboard.main(["--project", "rpd", "--entity", "me", "--save"])


def test_the_objective_panels_keep_their_titles_and_axes():
    objective = dashboard.build_views("someone", "rpd")[0].sections[0]
    got = [(p.title, p.x, p.y, p.log_y, p.title_x, p.title_y) for p in objective.panels]
    assert got == [
        (
            "f - f* vs simulated time",
            "sim_time",
            ["loss/f_minus_fstar"],
            True,
            "time step (simulated wall-clock time)",
            "f(x) - f*",
        ),
        ("f - f* vs block updates", "block_update", ["loss/f_minus_fstar"], True, "block update k", "f(x) - f*"),
    ]
