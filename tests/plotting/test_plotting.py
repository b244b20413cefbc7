"""rpd.plotting.style (schedule and delay-law figures) and the E2/E7 studies, on small sizes."""

import numpy as np
import pytest

from rpd import schedules
from rpd.plotting import style
from rpd.schedules.machinery import delays
from rpd.studies import delay_law

PNG = b"\x89PNG\r\n\x1a\n"


def test_schedule_chart_and_pictures(tmp_path):
    tl = schedules.local_sgd(3, 12, 3, 2)
    path = style.schedule_chart(tl.op, tl.mb, tmp_path / "ls.png", "LocalSGD", tl.sync_time)
    assert path.read_bytes()[:8] == PNG
    pd = schedules.pipedream(3, 5)
    panels = [
        {"title": "PD", "op": pd.op, "mb": pd.mb},
        {"title": "LS", "op": tl.op, "mb": tl.mb, "sync_time": tl.sync_time},
    ]
    assert style.schedule_pictures(panels, tmp_path / "sub" / "both.png").read_bytes()[:8] == PNG


def test_delay_law_figure(tmp_path):
    law = delays.delay_law(range(2, 12))
    path = style.delay_law_figure(law.S, law.mean, law.p10, law.max, law.max_fit, law.mean_fit, tmp_path / "e2.png")
    assert path.read_bytes()[:8] == PNG


@pytest.mark.slow  # ~15-20 s on 2 cores: the slow suite (CI's second step)
def test_e2_and_e7_studies_write_numbers_and_figures(tmp_path):
    """E2 and E7 follow the study protocol (run, then figure from the output)."""
    e2 = delay_law.run(delay_law.Config(S_max=12))
    assert e2.summary["closed_form_ok"] is True
    law = delays.delay_law(range(2, 13))
    np.testing.assert_array_equal(e2.arrays["max"], law.max)
    np.testing.assert_array_equal(e2.arrays["closed_max"], [delays.max_delay(S) for S in range(2, 13)])
    np.testing.assert_allclose(e2.arrays["p10"], law.p10, rtol=0, atol=0)
    delay_law.figure(e2, tmp_path / "e2_delay_law.png")
    e7 = delay_law.run_e7(delay_law.E7Config(S=2, pd_N=3, naive_N=2, local_sgd_H=(1, 2), local_sgd_rounds=1))
    table = {r["schedule"]: r for r in e7.table}
    assert set(table) == {"pd", "naive", "local_sgd_H1", "local_sgd_H2"}
    assert all(r["T"] == r["T_law"] for r in table.values())
    assert table["naive"]["T"] == 2 * 2 * 2
    delay_law.figure_e7(e7, tmp_path / "e7_schedules.png")
    for name in ("e2_delay_law.png", "e7_schedules.png", "e7_schedules_family.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG
