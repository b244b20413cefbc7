"""E15 (rpd.studies.workers): every configuration of n workers timed, three claims with verdicts."""

import dataclasses

from rpd.studies import load, make_config
from rpd.studies import workers as study


def test_e15_runs_and_states_its_verdicts(tmp_path):
    assert load("e15_workers") is study
    cfg = make_config(study.Config, "quick", study.QUICK, workers=(16,), stash_factor=2)
    out = study.run(cfg)
    configs = [r for r in out.table if r["claim"] == "configurations"]
    names = {r["name"] for r in configs}
    assert {"pure DP", "pure PP", "pipedream", "even S=2 x D=8", "even S=8 x D=2"} <= names
    dp = next(r for r in configs if r["name"] == "pure DP")
    assert dp["replicas"] == (16,) and dp["stash_versions"] == 1
    pp = next(r for r in configs if r["name"] == "pure PP")
    assert pp["stash_versions"] == 16 and pp["peak_bytes"] > 0  # weight stashing: S versions on stage 0
    assert all(sum(r["replicas"]) == r["workers"] <= 16 for r in configs)
    place = [r for r in out.table if r["claim"] == "placement"]
    assert len(place) == 1 and place[0]["n"] == 16 and len(place[0]["hierarchical_top"]) >= 1
    stash = [r for r in out.table if r["claim"] == "stashing"]
    assert [r["n"] for r in stash] == [32]
    claims = out.summary["claims"]
    assert [c["holds"] for c in claims][1] in (True, False) and all(c["verdict"] for c in claims)
    assert "of 1 multi-node cells" in claims[0]["verdict"] and "in 0 of 1 cells" in claims[1]["verdict"]
    assert out.summary["best"]["gpt2_medium n=16"]["tokens_per_s"] == max(
        r["tokens_per_s"] for r in configs if r["fits"]
    )
    study.figure(out, tmp_path / "e15.png")
    assert (tmp_path / "e15.png").stat().st_size > 10_000 and (tmp_path / "e15.pdf").exists()
    assert dataclasses.asdict(cfg)["workers"] == (16,)
