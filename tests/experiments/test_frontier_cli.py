"""The survey's remaining systems from the CLI: WPipe's 2S-block objective built for
it, ZB-H2 with optimizer post-validation."""

from __future__ import annotations

from hydra_helpers import TINY_LINEAR
from hydra_helpers import compose as _compose

from rpd import schedules
from rpd.cli import specs, train


def test_wpipe_runs_from_the_cli_on_an_objective_of_2S_blocks(tmp_path):
    cfg = _compose([f"results_root={tmp_path}", *TINY_LINEAR, "method=pipeline", "schedule=wpipe", "schedule.M=4"])
    assert specs.objective_blocks(specs.run_spec(cfg)) == 6
    assert (
        specs.objective_blocks(
            specs.run_spec(_compose([*TINY_LINEAR, "method=pipeline", "schedule=1f1b", "schedule.M=4"]))
        )
        == 3
    )
    out = train.run(cfg)
    assert out.status == "ok", out.error
    assert out.summary["K"] == 8 * 6  # every microbatch updates all 2S blocks


def test_zb_h2_post_validation_runs_from_the_cli(tmp_path):
    over = ["schedule=zb_h2", "schedule.M=4", "schedule.post_validation=true", "schedule.rollback_trace=[0]"]
    out = train.run(_compose([f"results_root={tmp_path}", *TINY_LINEAR, "method=pipeline", *over, "schedule.clip=0.5"]))
    assert out.status == "ok", out.error
    assert out.summary["T"] == schedules.zb_h2(3, 8, 4, post_validation=True, rollback_trace=[0]).T
