"""docs/architecture.md#adding-a-schedule runs as written: its python block (imports, the order,
the constructor, the entry) and its yaml, extracted from the markdown, give a schedule that is
timed by hand's numbers and composes from hydra's search path into a run of it."""

from __future__ import annotations

import re
import sys
import types

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra_helpers import CONFIGS, ROOT, TINY_LINEAR

from experiments import schemas
from rpd import registry
from rpd.cli import checks, specs
from rpd.cli import config as C
from rpd.schedules.machinery import memory

DOC = ROOT / "docs" / "architecture.md"


def _blocks(lang: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### Adding a schedule") :]
    section = section[: section.index("\n## ")]
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.S)


@pytest.fixture
def split_gpipe():
    (code,) = _blocks("python")
    module = types.ModuleType("split_gpipe")  # the block as a module of the user's, split_gpipe.py
    sys.modules["split_gpipe"] = module
    try:
        exec(compile(code, f"{DOC}#adding-a-schedule", "exec"), module.__dict__)  # exactly as written
        yield module.__dict__
    finally:
        del sys.modules["split_gpipe"]
        registry.SCHEDULES.pop("split_gpipe", None)


def test_the_docs_schedule_is_timed_and_sized(split_gpipe):
    """S = 2, M = 2, unit costs, by hand: F at ticks 0, 1 (rank 0) and 1, 2 (rank 1); rank 1's
    backward starts at 3; the flush ends at tick 8 either way; M microbatches held by each rank."""
    for w_last, b_time in ((False, [[5, 4], [7, 6]]), (True, [[6, 5], [7, 6]])):
        tl = registry.build("split_gpipe", registry.ScheduleParams(S=2, N=2, M=2, params={"w_last": w_last}))
        assert tl.T == 8 and tl.synchronous and tl.split
        np.testing.assert_array_equal(tl.f_time, [[0, 1], [1, 2]])
        np.testing.assert_array_equal(tl.b_time, b_time)
        np.testing.assert_array_equal(memory.peak_activations(tl), [2, 2])
    with pytest.raises(ValueError, match="N must be a whole number of flushes"):
        split_gpipe["split_gpipe"](2, 3, 2)


def test_the_docs_yaml_composes_from_the_search_path_into_a_run(split_gpipe, tmp_path):
    (yaml,) = _blocks("yaml")
    first = yaml.splitlines()[0]
    assert first == "# configs/schedule/split_gpipe.yaml"
    (tmp_path / "schedule").mkdir()
    (tmp_path / "schedule" / "split_gpipe.yaml").write_text(yaml)
    tiny = [o for o in TINY_LINEAR if not o.startswith("schedule.")]
    overrides = [f"hydra.searchpath=[file://{tmp_path}]", "method=pipeline", "schedule=split_gpipe", *tiny]
    schemas.register()  # the schemas, split_gpipe's derived from its entry (as the docs say)
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = checks.typed(compose("train", overrides=[*overrides, "schedule.S=2", "schedule.N=4"]), C.TrainConfig)
        w_last = compose("train", overrides=[*overrides, "schedule.S=2", "schedule.N=4", "schedule.w_last=true"])
    checks.validate(cfg)
    pipeline = specs.run_spec(cfg).pipeline
    assert pipeline.name == "split_gpipe" and dict(pipeline.params.params) == {"w_last": False}
    assert pipeline.timeline(None).T == 16  # two flushes of M = S = 2 at 8 ticks each
    assert dict(specs.run_spec(checks.typed(w_last, C.TrainConfig)).pipeline.params.params) == {"w_last": True}
