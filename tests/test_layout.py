"""The house keeps its shape (docs/architecture.md#layers), read from the AST, nothing imported: no module of rpd
or experiments imports one that imports it back, directly or around a circle (imports inside
functions and under ``if TYPE_CHECKING`` count: a lazy import does not open a circle); rpd's
subpackages import each other in one direction only, in the order of :data:`LAYERS`; no module
forwards names with a module-level ``__getattr__``; at most two modules besides ``__init__``
stay at rpd's top level; inside a subpackage with layers of its own (:data:`SUBLAYERS`: rpd.schedules'
machinery under its family) no module imports a later folder or the package's face; experiments/ holds the commands and the hydra glue only, and no module of rpd
imports hydra (or experiments)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Each layer may import those before it (docs/architecture.md); runtime and the two top-level
# modules sit under everything; cli, the command line's library, sits on top.
LAYERS = (
    "validation",
    "runtime",
    "results",
    "schedules",
    "objectives",
    "model",
    "train",
    "analysis",
    "registry",
    "io",
    "plotting",
    "studies",
    "cli",
)

# Subpackages layered inside (docs/architecture.md#layers): each folder may import those before
# it, never a later one nor the package's face (which imports them all). rpd.schedules.machinery is
# what every schedule shares; rpd.schedules.family, one module per schedule, sits on it.
SUBLAYERS = {"rpd.schedules": ("machinery", "family")}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    files = [*ROOT.joinpath("rpd").rglob("*.py"), *ROOT.joinpath("experiments").rglob("*.py")]
    return {_module_name(p): p for p in files}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` imports anywhere: ``from a.b import c`` is a.b.c
    when that is a module, else a.b (the package's face runs and hands c on)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
            for a in node.names:
                full = f"{base}.{a.name}"
                out.add(full if full in known else base)
    return (out & known) - {name}


@functools.cache  # the sources do not change while the tests run; callers copy before adding to it
def _graph() -> dict[str, set[str]]:
    src = _sources()
    return {name: _imports(name, path, set(src)) for name, path in src.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if parts[0] == "rpd" and len(parts) > 1 else parts[0]


def test_no_module_circle():
    assert _circles(_graph()) == []


def test_subpackages_import_down_the_layers_only():
    climbs = []
    for a, targets in _graph().items():
        if not a.startswith("rpd.") or _room(a) not in LAYERS:
            continue
        for b in targets:
            if b.startswith("rpd.") and _room(b) in LAYERS and LAYERS.index(_room(b)) > LAYERS.index(_room(a)):
                climbs.append(f"{a} -> {b}")
    assert climbs == []


def _back_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Imports against :data:`SUBLAYERS`: a folder's module importing a later folder's, or the face."""
    out = []
    for package, folders in SUBLAYERS.items():
        for a, targets in graph.items():
            if not a.startswith(package + "."):
                continue
            folder = a[len(package) + 1 :].split(".")[0]
            if folder not in folders:
                continue
            for b in targets:
                if b == package:
                    out.append(f"{a} -> {b} (the face)")
                elif b.startswith(package + "."):
                    other = b[len(package) + 1 :].split(".")[0]
                    if other in folders and folders.index(other) > folders.index(folder):
                        out.append(f"{a} -> {b}")
    return sorted(out)


def test_machinery_never_imports_the_family_it_serves():
    assert SUBLAYERS["rpd.schedules"] == ("machinery", "family")
    assert _back_arrows(_graph()) == []


def test_the_check_finds_a_back_arrow():
    graph = {
        "rpd.schedules.machinery.search": {"rpd.schedules.family.orders", "rpd.schedules.machinery.ir"},
        "rpd.schedules.machinery.ir": {"rpd.schedules"},
        "rpd.schedules.family.gpipe": {"rpd.schedules.machinery.ir", "rpd.schedules.family.orders"},
    }
    assert _back_arrows(graph) == [
        "rpd.schedules.machinery.ir -> rpd.schedules (the face)",
        "rpd.schedules.machinery.search -> rpd.schedules.family.orders",
    ]


def test_every_subpackage_has_a_layer_and_the_top_level_holds_two_modules():
    rooms = {_room(m) for m in _sources() if m.startswith("rpd.")}
    assert rooms <= set(LAYERS), rooms - set(LAYERS)
    top = sorted(p.stem for p in ROOT.joinpath("rpd").glob("*.py") if p.stem != "__init__")
    assert len(top) <= 2, top


def test_no_module_forwards_names_with_getattr():
    forwards = [
        m
        for m, p in _sources().items()
        if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in ast.parse(p.read_text()).body)
    ]
    assert forwards == []


def _is_hydra(name: str) -> bool:
    return name == "hydra" or name.startswith("hydra.")


def _imports_hydra(path: Path) -> bool:
    """Whether ``path`` imports hydra anywhere (at the top, in a function, under ``if``): ``import
    hydra``, ``import hydra.x``, ``from hydra(.x) import y``, ``importlib.import_module("hydra...")``
    or ``__import__("hydra...")``."""
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = ast.unparse(node.func)
            if func in ("__import__", "importlib.import_module", "import_module"):
                names = [str(node.args[0].value)]
        if any(_is_hydra(n) for n in names):
            return True
    return False


def _commands() -> dict[str, bool]:
    """experiments/'s modules but its ``__init__``: whether each is a command (``python -m
    experiments.<name>``: it runs under ``if __name__ == "__main__"``)."""

    def runs(path: Path) -> bool:
        return any(
            isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in ast.parse(path.read_text()).body
        )

    return {p.stem: runs(p) for p in sorted(ROOT.joinpath("experiments").glob("*.py")) if p.stem != "__init__"}


def test_experiments_holds_entry_points_and_hydra_glue_only():
    """Every module of experiments/ but its ``__init__`` is a command or hydra glue (it imports
    hydra: the sweep callbacks, the schemas' registration, the compose check, the job's facts);
    what they are made of is rpd.cli (docs/architecture.md#where-hydra-stops)."""
    library = [
        m for m, command in _commands().items() if not command and not _imports_hydra(_sources()[f"experiments.{m}"])
    ]
    assert library == []


def test_hydra_stops_at_experiments():
    """No module of rpd imports hydra, in any form, anywhere in the module (a function's import
    too), nor experiments/: the library takes plain typed arguments, the entry points pass
    hydra's run-time facts down (docs/architecture.md#where-hydra-stops)."""
    sources = _sources()
    hydra = sorted(m for m, p in sources.items() if m.split(".")[0] == "rpd" and _imports_hydra(p))
    assert hydra == []
    graph = _graph()
    upward = sorted(
        m for m in graph if m.split(".")[0] == "rpd" and any(i.split(".")[0] == "experiments" for i in graph[m])
    )
    assert upward == []
    assert any(_imports_hydra(p) for m, p in sources.items() if m.startswith("experiments."))  # the check sees hydra


def test_the_hydra_check_finds_every_import_form(tmp_path):
    """The checker itself: hydra imported at the top, in a function, by name, by a submodule or
    through importlib is found; a name that only starts with hydra is not."""
    found = {
        "import hydra\n": True,
        "import os, hydra.utils\n": True,
        "from hydra.core.hydra_config import HydraConfig\n": True,
        "def f():\n    from hydra import compose\n": True,
        "if True:\n    import hydra.utils as hu\n": True,
        "import importlib\nm = importlib.import_module('hydra.utils')\n": True,
        "m = __import__('hydra')\n": True,
        "import hydrant\nfrom omegaconf import OmegaConf\n": False,
        "from . import hydra_like\n": False,
    }
    for i, (text, hydra) in enumerate(found.items()):
        src = tmp_path / f"m{i}.py"
        src.write_text(text)
        assert _imports_hydra(src) is hydra, text


def test_the_check_finds_a_circle_and_a_lazy_import(tmp_path):
    """The checker itself: a circle held open by a function-local import is found."""
    graph = {"rpd.a": {"rpd.b"}, "rpd.b": {"rpd.a"}, "rpd.c": {"rpd.a"}}
    assert _circles(graph) == [["rpd.a", "rpd.b"]]
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from rpd.b import g\n")
    assert _imports("rpd.m", src, {"rpd.b", "rpd.m"}) == {"rpd.b"}
