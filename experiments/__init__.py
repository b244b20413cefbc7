"""The command-line entry points (``python -m experiments.<name>``): thin hydra/argparse layers
over their jobs in ``rpd.cli``. Run as a program, Ctrl-C is clean from the first import on
(``rpd.runtime.interrupt``), and a bare ``--help`` answers at once (:func:`quick_help`: read from
the command's file and its primary config, before rpd, JAX or hydra's composition is imported)."""

import ast
import logging
import os
import re
import signal
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
_HELP = ("--help", "-h")


def _yaml_help(config: Path, doc: list[str]) -> list[str]:
    """A hydra command's help from its primary config: hydra.help's header (else ``doc``, the
    command's docstring), the config's own keys with their comments, each default group's options."""
    text = config.read_text()
    body, _, hydra_part = text.partition("\nhydra:")
    header = re.search(r"\n  help:\n(?:.*\n)*?    header: \|\n((?:      .*\n)+)", "\nhydra:" + hydra_part)
    lines = [line[6:] for line in header.group(1).splitlines()] if header else doc
    groups, keys, in_defaults = [], [], False
    for line in body.splitlines():
        if line.startswith("defaults:"):
            in_defaults = True
            continue
        if in_defaults and line.startswith("  - "):
            item = line[4:].split("#")[0].strip()
            name = item.removeprefix("optional ").split(":")[0].strip()
            if ":" in item and "$" not in name and (config.parent / name).is_dir():
                groups.append(name)
            continue
        in_defaults = False
        if not line.startswith("#"):  # the file's leading comments repeat the docstring's usage
            keys.append(line)
    keys = [k for k in keys if k.strip()] + _schema_fields(
        text.splitlines()[0], groups + [k.split(":")[0] for k in keys]
    )
    if keys:
        lines += ["", f"config (configs/{config.name}; any key=value overrides it):", *keys]
    lines += ["", "groups (group=option):"]
    for g in groups:
        if options := sorted(p.stem for p in (config.parent / g).glob("*.yaml")):
            lines.append(f"  {g}: {', '.join(options)}")
    return lines + ["", "with overrides, --help shows the config they compose (hydra); --hydra-help: hydra's flags"]


def _schema_fields(first_line: str, skip: list[str]) -> list[str]:
    """The top-level fields of the config's schema (named on its first line, ``(schema:
    rpd.cli.config.TrainConfig)``), its bases' too, as their source says them with the comments
    above; a field that is a config group (``skip``) or a nested node (``...Config``) is left out."""
    found = re.search(r"schema: (rpd(?:\.\w+)+)\.(\w+)\)", first_line)
    if not found:
        return []
    path = _ROOT.joinpath(*found.group(1).split(".")).with_suffix(".py")
    source = path.read_text().splitlines()
    classes = {n.name: n for n in ast.parse("\n".join(source)).body if isinstance(n, ast.ClassDef)}
    out: list[str] = []

    def walk(cls: ast.ClassDef) -> None:
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                walk(classes[base.id])
        previous = cls.body[0].end_lineno or cls.lineno
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                kind = ast.unparse(stmt.annotation)
                if stmt.target.id not in skip and not kind.endswith("Config"):
                    out.extend(line.strip() for line in source[previous : stmt.end_lineno])
            previous = stmt.end_lineno or previous

    walk(classes[found.group(2)])
    return [line for line in out if line]


def _argparse_help(source: Path) -> list[str]:
    """An argparse command's options read from its ``add_argument`` calls (names, choices, help)."""
    lines = ["", "options:"]
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags = [str(a.value) for a in node.args if isinstance(a, ast.Constant)]
            kw = {k.arg: k.value for k in node.keywords}
            choices, text_node = kw.get("choices"), kw.get("help")
            text = str(text_node.value) if isinstance(text_node, ast.Constant) else ""
            listed = (
                [str(c.value) for c in choices.elts if isinstance(c, ast.Constant)]
                if isinstance(choices, ast.List)
                else []
            )
            shown = f" {{{','.join(listed)}}}" if listed else ""
            lines.append(f"  {', '.join(flags)}{shown}  {text}".rstrip())
    return lines


def quick_help(argv: list[str]) -> str | None:
    """The help of ``python -m experiments.<name> --help`` (``argv``: ``sys.orig_argv``), or None
    where this is not a bare help request (with overrides, hydra composes and shows the config;
    ``--hydra-help`` is hydra's). Reads files only: it takes a fraction of a second."""
    if "-m" not in argv:
        return None
    i = argv.index("-m")
    module, args = (argv[i + 1] if i + 1 < len(argv) else ""), argv[i + 2 :]
    if not module.startswith("experiments.") or not args or any(a not in _HELP for a in args):
        return None
    name = module.split(".", 1)[1]
    source = _ROOT / "experiments" / f"{name}.py"
    if not source.is_file():
        return None
    tree = ast.parse(source.read_text())
    configs = [
        str(k.value.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for k in node.keywords
        if k.arg == "config_name" and isinstance(k.value, ast.Constant)
    ]
    doc = (ast.get_docstring(tree) or "").splitlines()
    if configs:
        return "\n".join(_yaml_help(_ROOT / "configs" / f"{configs[0]}.yaml", doc))
    return "\n".join([f"python -m {module}", *doc, *_argparse_help(source)])


def _exit_now(signum, frame):  # pragma: no cover - only until rpd.runtime.interrupt replaces it below
    os.write(2, b"\ninterrupted (Ctrl-C) while starting: nothing was run or stored\n")
    os._exit(130)


# runpy sets argv[0] to "-m" while it imports the package of `python -m experiments.<name>`
_PROGRAM = sys.argv[:1] == ["-m"] and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
if _PROGRAM:
    signal.signal(signal.SIGINT, _exit_now)  # from here on, Ctrl-C is one line and 130

if (_text := quick_help(list(getattr(sys, "orig_argv", [])))) is not None:
    print(_text)
    raise SystemExit(0)

# hydra's job logging sets the root logger to INFO; matplotlib's PDF backend then logs every glyph
# of its font subsetting through fontTools. Entry points print what they made themselves.
logging.getLogger("fontTools").setLevel(logging.WARNING)
logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # "Unable to initialize backend 'tpu'"

if _PROGRAM:  # rpd imports JAX (0.5 s); nothing is in flight yet
    from rpd.runtime import interrupt

    interrupt.install()
