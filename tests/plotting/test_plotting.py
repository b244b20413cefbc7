"""rpd.plotting.style (schedule and delay-law figures) and the E2/E7 entry point, on small sizes."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from experiments import delay_law
from rpd import schedules
from rpd.plotting import style
from rpd.schedules import delays

PNG = b"\x89PNG\r\n\x1a\n"


def test_schedule_chart_and_pictures(tmp_path):
    tl = schedules.local_sgd(3, 12, 3, 2)
    path = style.schedule_chart(tl.op, tl.mb, tmp_path / "ls.png", "LocalSGD", tl.sync_time)
    assert path.read_bytes()[:8] == PNG
    pd = schedules.pipedream(3, 5)
    panels = [{"title": "PD", "op": pd.op, "mb": pd.mb}, {"title": "LS", "op": tl.op, "mb": tl.mb,
                                                          "sync_time": tl.sync_time}]
    assert style.schedule_pictures(panels, tmp_path / "sub" / "both.png").read_bytes()[:8] == PNG


def test_delay_law_figure(tmp_path):
    law = delays.delay_law(range(2, 12))
    path = style.delay_law_figure(law.S, law.mean, law.p10, law.max, law.max_fit, law.mean_fit,
                                     tmp_path / "e2.png")
    assert path.read_bytes()[:8] == PNG


def _compose(overrides):
    configs = Path(__file__).resolve().parents[2] / "configs"
    with initialize_config_dir(config_dir=str(configs), version_base="1.3"):
        return compose(config_name="delay_law", overrides=overrides)


def test_entry_point_writes_numbers_and_figures(tmp_path):
    cfg = _compose([f"out_dir={tmp_path}", "e2.S_max=12", "e7.S=2", "e7.pd_N=3", "e7.naive_N=2",
                    "e7.local_sgd_H=[1,2]", "e7.local_sgd_rounds=1"])
    done = delay_law.run_all(cfg)
    assert done["e2_delay_law"]["summary"]["closed_form_ok"] is True
    record = json.loads((tmp_path / "e2_delay_law.json").read_text())
    law = delays.delay_law(range(2, 13))
    np.testing.assert_array_equal(record["arrays"]["max"], law.max)
    np.testing.assert_allclose(record["arrays"]["p10"], law.p10, rtol=0, atol=0)
    with open(tmp_path / "e2_delay_law.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["S"]) for r in rows] == list(range(2, 13))
    assert all(int(r["max"]) == delays.max_delay(int(r["S"])) for r in rows)
    table = {r["schedule"]: r for r in done["e7_schedules"]["table"]}
    assert set(table) == {"pd", "naive", "local_sgd_H1", "local_sgd_H2"}
    assert all(r["T"] == r["T_law"] for r in table.values())
    assert table["naive"]["T"] == 2 * 2 * 2
    for name in ("e2_delay_law.png", "e7_schedules.png", "e7_schedules_family.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG


def test_entry_point_config_is_locked():
    with pytest.raises(ConfigCompositionException):
        _compose(["e2.S_maximum=10"])
    cfg = _compose(["e7.enabled=false"])
    assert cfg.e2.S_max == 150 and cfg.e7.enabled is False
