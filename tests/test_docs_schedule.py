"""docs/architecture.md#adding-a-schedule runs as written: its python blocks (imports, the order,
the constructor, the entry; the registration outside rpd) and its yaml, extracted from the
markdown, give a schedule that is timed by hand's numbers and composes from hydra's search path
into a run of it. The first block is also rpd's own recipe: as a module of rpd's family it keeps
the layers (no circle, no climb, no back-arrow), and a copy of rpd with it imports afresh."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest
import test_layout as layout
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
    code, register = _blocks("python")  # the module, then the registration outside rpd
    module = types.ModuleType("split_gpipe")  # the block as a module of the user's, split_gpipe.py
    sys.modules["split_gpipe"] = module
    try:
        exec(compile(code, f"{DOC}#adding-a-schedule", "exec"), module.__dict__)  # exactly as written
        exec(compile(register, f"{DOC}#adding-a-schedule", "exec"), module.__dict__)
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


FAMILY = "rpd.schedules.family"
PUBLIC, IN_FAMILY = "from rpd.schedules import (", "from rpd.schedules.machinery import ("


def _as_family_module(code: str) -> str:
    """The block as the doc says it reads inside rpd's family: its one import line from the
    machinery's face (the doc's sentence names that line; the names are the same)."""
    said = "the same names from `rpd.schedules.machinery`, the machinery's face, instead of `rpd.schedules`"
    assert said in " ".join(DOC.read_text(encoding="utf-8").split())
    assert code.count(PUBLIC) == 1
    return code.replace(PUBLIC, IN_FAMILY)


def test_the_recipe_as_a_module_of_rpds_family_keeps_the_layers(tmp_path):
    """The block as ``rpd/schedules/family/split_gpipe.py``, listed by the family: its imports
    added to the house's import graph (tests/test_layout.py's reading) open no circle, climb no
    layer and point nothing of the machinery at the family. (The recipe that imported
    ``rpd.registry`` here opened the circle family -> registry -> family.)"""
    code = _as_family_module(_blocks("python")[0])
    path = tmp_path / "split_gpipe.py"
    path.write_text(code)
    graph = dict(layout._graph())
    name = f"{FAMILY}.split_gpipe"
    graph[name] = layout._imports(name, path, set(graph) | {name})
    graph[FAMILY] = graph[FAMILY] | {name}
    assert graph[name] and all(m.startswith("rpd.schedules.machinery") for m in graph[name])
    assert layout._circles(graph) == [] and layout._back_arrows(graph) == []


@pytest.mark.slow  # a fresh interpreter importing rpd: several seconds on 2 cores
def test_the_recipe_imports_afresh_in_a_copy_of_rpd(tmp_path):
    """rpd copied, the block written as ``rpd/schedules/family/split_gpipe.py`` and listed in
    MODULES exactly as the recipe says; a new interpreter imports the registry and builds it
    (S = 2, M = 2 at unit costs: T = 8, the hand count of the test above)."""
    code = _as_family_module(_blocks("python")[0])
    rpd = tmp_path / "rpd"
    shutil.copytree(ROOT / "rpd", rpd, ignore=shutil.ignore_patterns("__pycache__"))
    (rpd / "schedules" / "family" / "split_gpipe.py").write_text(code)
    init = rpd / "schedules" / "family" / "__init__.py"
    text = init.read_text()
    for before in ("    zb_v,\n)\nfrom rpd.schedules.machinery", "    bitpipe,\n)\nENTRIES"):
        assert before in text
        text = text.replace(before, before.replace(",\n)", ",\n    split_gpipe,\n)", 1), 1)
    init.write_text(text)
    script = (
        "import rpd; from rpd import registry; "
        "tl = registry.build('split_gpipe', registry.ScheduleParams(S=2, N=2, M=2)); print(rpd.__file__, tl.T)"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [str(rpd / "__init__.py"), "8"]
