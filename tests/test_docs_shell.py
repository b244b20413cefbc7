"""The docs' shell blocks run as written: every fenced shell block (```bash,
```sh, ```console or a bare ```) of README.md and docs/*.md that holds a ``python -m experiments.``
command runs, command by command, in the slow suite, in a temporary working directory of its own.

How a block is run:

- Each logical line (``\\`` continuations joined, a trailing ``# comment`` dropped) is one shell
  command; the interpreter it names (``.venv/bin/python``, ``python``, ``python3``) is this test's
  (``sys.executable``), and an optional word in brackets (``[force=true]``) is left out: the
  command runs in its shortest documented form.
- Skipped by rule, in any block: install lines (``pip install``, ``python3 -m venv``) and git
  lines; everything else in the block runs.
- The working directory is empty but for ``tests/`` (a link to the checkout's: the docs name
  ``tests/data/...`` files), so hydra's ``outputs/``, the results store (``results_root``
  defaults to ``results``) and any ``out=`` file land there; rpd's cache (``RPD_CACHE``) is one
  temporary directory for the session, as a user's cache is shared by their commands. The
  checkout holds no new file after each block (``git status``).
- ``<!-- with: NAME.py = the python block above -->`` right above a block: the nearest ```python
  block before it is saved as ``NAME.py`` in the working directory, which joins ``PYTHONPATH``
  (the doc tells the reader to save it so).
- ``<!-- illustrative: WHY -->`` right above a block: not run (a paper-size run, a cluster, a
  file of the reader's own); WHY must say so. Every block that cannot run as written (a
  ``<placeholder>``, ``size=full``, ``launcher=slurm``, a wandb login) must carry it: the default
  suite checks that, and that every marker says why.

docs/benchmarks-history.md is what was run then, with the keys of its day: not run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
HISTORY = {"benchmarks-history.md"}
SHELL = ("", "bash", "sh", "console")
COMMAND = re.compile(r"(?:^|\s)\S*python3? -m (experiments\.\w+)")
INTERPRETER = re.compile(r"^\S*python3?(?=\s)")
ILLUSTRATIVE = re.compile(r"^<!--\s*illustrative:\s*(.*?)\s*-->$")
WITH = re.compile(r"^<!--\s*with:\s*(\w+\.py)\s*=\s*the python block above\s*-->$")
SKIPPED = re.compile(r"pip install|python3? -m venv|^git\s")  # install and git lines, by rule
CANNOT_RUN = re.compile(r"<[^>]+>|size=full|launcher=slurm|wandb (login|sync)|--size full")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # the opening fence's line number
    commands: tuple[str, ...]  # logical lines, continuations joined, comments dropped
    marker: str  # the HTML comment right above the fence ("" if none)
    python_above: str  # the nearest ```python block before it

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"

    @property
    def reason(self) -> str | None:
        m = ILLUSTRATIVE.match(self.marker)
        return m.group(1) if m else None


def logical_lines(body: list[str]) -> list[str]:
    out, text = [], ""
    for raw in body:
        text += raw.rstrip()
        if text.endswith("\\"):
            text = text[:-1] + " "
            continue
        code = re.split(r"\s#\s|^#", text, maxsplit=1)[0].strip()
        if code:
            out.append(re.sub(r"\s+", " ", code))
        text = ""
    return out


def blocks(path: Path):
    """Every shell block of ``path`` with a ``python -m experiments.`` command."""
    lines = path.read_text(encoding="utf-8").splitlines()
    fenced, lang, start, body, last_python = False, "", 0, [], ""
    for i, line in enumerate(lines, 1):
        if not line.lstrip().startswith("```"):
            if fenced:
                body.append(line)
            continue
        if not fenced:
            fenced, lang, start, body = True, line.strip()[3:].strip(), i, []
            continue
        fenced = False
        if lang == "python":
            last_python = "\n".join(body) + "\n"
        if lang not in SHELL:
            continue
        commands = logical_lines(body)
        if any(COMMAND.search(c) for c in commands):
            above = next((x.strip() for x in reversed(lines[: start - 1]) if x.strip()), "")
            yield Block(path, start, tuple(commands), above if above.startswith("<!--") else "", last_python)


ALL = [b for p in DOCS if p.name not in HISTORY for b in blocks(p)]
RUN = [b for b in ALL if b.reason is None]


def test_the_docs_shell_blocks_are_found_and_most_run():
    names = {b.name.split(":")[0] for b in RUN}
    assert {"README.md", "docs/plan.md", "docs/replay.md", "docs/time_to_loss.md"} <= names
    assert len(RUN) >= 10 and len(ALL) > len(RUN)


@pytest.mark.parametrize("block", ALL, ids=lambda b: b.name)
def test_a_block_that_cannot_run_as_written_says_why(block):
    """A marker right above a block says why it is not run; a block that cannot run as written
    (a placeholder, the paper size, SLURM, a wandb login) carries one."""
    if block.marker:
        assert ILLUSTRATIVE.match(block.marker) or WITH.match(block.marker), f"unknown marker {block.marker}"
    if block.reason is not None:
        assert len(block.reason.split()) >= 3, f"{block.name}: say why the block is not run"
        return
    for command in block.commands:
        if not SKIPPED.search(command):
            assert not CANNOT_RUN.search(command), f"{block.name}: {command} cannot run as written: mark it"


def command_line(command: str) -> str:
    """The command as this test runs it: its interpreter this test's, optional ``[words]`` left out."""
    command = INTERPRETER.sub(sys.executable, command)
    return re.sub(r"\s\[[^\]]*\]", "", command)


def untracked() -> list[str]:
    """The checkout's new files that git does not ignore (an edit made while the suite runs is no
    command's doing, so tracked files are not compared)."""
    status = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [line for line in status.stdout.splitlines() if line.startswith("??")]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("rpd_cache")


@pytest.mark.slow
@pytest.mark.parametrize("block", RUN, ids=lambda b: b.name)
def test_a_documented_block_runs_as_written(block, tmp_path, cache_dir):
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    path = [str(ROOT)]
    if m := WITH.match(block.marker):
        assert block.python_above, f"{block.name}: no python block above to save as {m.group(1)}"
        (tmp_path / m.group(1)).write_text(block.python_above)
        path.insert(0, str(tmp_path))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "RPD_CACHE": str(cache_dir), "WANDB_MODE": "disabled"}
    env.pop("RPD_DEBUG", None)
    before = untracked()
    for command in block.commands:
        if SKIPPED.search(command):
            continue
        proc = subprocess.run(
            ["bash", "-c", command_line(command)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, f"{block.name}: {command}\n{proc.stderr[-3000:]}"
    assert untracked() == before, f"{block.name} wrote into the checkout"
