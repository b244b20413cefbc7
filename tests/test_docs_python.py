"""The docs' Python examples run as written: every ```python block of README.md and docs/*.md,
parsed by Sybil (its Markdown code-block parser), runs in the order of its file, all blocks of a
file in one namespace, in a temporary working directory. A block that is illustrative only is
marked in the Markdown with Sybil's own skip directive and a reason the reader sees,
``<!-- skip: next "illustrative: ..." -->``; those are listed here and nowhere else.

The examples register a schedule, an optimizer and an objective of their own: the registries are
put back as they were after each file, so nothing leaks into the tests that run after it."""

from __future__ import annotations

import re
from pathlib import Path
from unittest import SkipTest

import matplotlib.pyplot as plt
import pytest
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

from rpd import objectives, registry
from rpd.train import transforms

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
FENCE = re.compile(r"^```python[ \t]*$", flags=re.M)  # a block's opening fence, not a mention in prose
WITH_PYTHON = [p for p in FILES if FENCE.search(p.read_text(encoding="utf-8"))]
ILLUSTRATIVE = {  # file: how many of its blocks are marked illustrative (say why in the markdown)
    "docs/running.md": 1,  # load_sweep reads a multirun folder that the sweep commands above write
}
SYBIL = Sybil(parsers=[PythonCodeBlockParser(), SkipParser()])


def test_the_files_with_python_are_the_ones_run():
    """The set this module runs is every file with a python block (a new one joins by itself)."""
    assert {p.relative_to(ROOT).as_posix() for p in WITH_PYTHON} >= {"docs/api.md", "docs/architecture.md"}
    assert set(ILLUSTRATIVE) <= {p.relative_to(ROOT).as_posix() for p in WITH_PYTHON}


@pytest.fixture
def registries():
    """The registries as they were: the examples' own entries are removed after the file."""
    tables = (registry.SCHEDULES, registry.VARIANTS, objectives.OBJECTIVES, transforms.OPTIMIZERS)
    saved = [dict(t) for t in tables]
    yield
    for table, before in zip(tables, saved):
        table.clear()
        table.update(before)


@pytest.mark.slow
@pytest.mark.parametrize("path", WITH_PYTHON, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_python_blocks_run_as_written(path, tmp_path, monkeypatch, registries):
    monkeypatch.chdir(tmp_path)  # what an example writes lands here, not in the checkout
    ran, skipped = 0, 0
    try:
        for example in SYBIL.parse(path):  # in the file's order, one namespace
            directive = isinstance(example.parsed, tuple)  # a skip directive's (action, reason)
            try:
                example.evaluate()
            except SkipTest:
                skipped += 1
                continue
            ran += not directive
    finally:
        plt.close("all")  # a figure an example opened through pyplot (xarray's .plot())
    assert ran + skipped == len(FENCE.findall(path.read_text(encoding="utf-8")))  # Sybil saw every block
    assert skipped == ILLUSTRATIVE.get(path.relative_to(ROOT).as_posix(), 0)
