"""Every command the docs show names keys and options that exist: each ``python -m experiments.<name>``
line of a shell block in README.md and docs/ (continuations joined) is composed by hydra exactly as
the command would compose it (``experiments.compose_check.check``: every value of each sweep), and an
argparse command's flags are its parser's. A misspelt or moved key in the docs fails here, in the
default suite; running the commands themselves is the slow suite's."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest
from hydra_helpers import ROOT

from experiments import compose_check, schemas

schemas.register_studies()  # as experiments.figure does: study.<field>= typed at compose time

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
HISTORY = {"benchmarks-history.md"}  # what was run then, with the keys of its day
SHELL = ("", "bash", "sh", "console")
COMMAND = re.compile(r"(?:^|\s)\S*python3? -m (experiments\.\w+)((?:\s+\S+)*)")


def shell_lines(path: Path):
    """(line number, text) of each logical line of the file's shell blocks, continuations joined."""
    fenced, lang, start, text = False, "", None, ""
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced, lang = not fenced, line.strip()[3:]
            continue
        if not fenced or lang not in SHELL:
            continue
        start = start or i
        text += line.rstrip()
        if text.endswith("\\"):
            text = text[:-1] + " "
            continue
        yield start, text
        start, text = None, ""


def documented():
    for path in DOCS:
        if path.name in HISTORY:
            continue
        for line, text in shell_lines(path):
            code = text.split(" # ", 1)[0]
            for segment in code.split("&&"):
                if m := COMMAND.search(segment):
                    yield pytest.param(m.group(1), m.group(2), id=f"{path.name}:{line}")


def arguments(rest: str) -> list[str]:
    """The command's arguments: optional ``[key=value]`` as given, a ``<placeholder>`` as a word,
    ``--help`` left out (the composition is what is checked)."""
    words = [w[1:-1] if re.fullmatch(r"\[[^=\[\]]*(=[^\[\]]*)?\]", w) else w for w in shlex.split(rest)]
    return [re.sub(r"<[^>]*>", "x", w) for w in words if w and w not in ("--help", "-h")]


def config_name(module: str) -> str | None:
    tree = ast.parse((ROOT / Path(*module.split("."))).with_suffix(".py").read_text())
    names = [
        k.value.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        for k in n.keywords
        if k.arg == "config_name" and isinstance(k.value, ast.Constant)
    ]
    return next((v for v in names if isinstance(v, str) and (ROOT / "configs" / f"{v}.yaml").is_file()), None)


def argparse_flags(module: str) -> set[str]:
    tree = ast.parse((ROOT / Path(*module.split("."))).with_suffix(".py").read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "add_argument"]
    return {a.value for c in calls for a in c.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")}


def test_the_docs_show_commands():
    found = {p.values[0] for p in documented()}
    assert {"experiments.train", "experiments.figure", "experiments.plan", "experiments.schedule"} <= found


@pytest.mark.parametrize("module, rest", list(documented()))
def test_a_documented_command_composes(module, rest):
    args = arguments(rest)
    name = config_name(module)
    if name is None:  # an argparse command: every flag is one of its parser's
        unknown = [a for a in args if a.startswith("--") and a not in argparse_flags(module)]
        assert not unknown, f"{module}: no such option {unknown}"
        return
    assert compose_check.check(name, args) is None
