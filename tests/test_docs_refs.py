"""The docs stand alone: code, configs and tests cite sections of rpd's own docs/, never documents
the repository does not ship or issue numbers, and every ``docs/<file>.md#anchor`` they cite is a
heading of that file (GitHub's anchor for it)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("rpd", "experiments", "configs", "tests", "benchmarks")
SUFFIXES = {".py", ".yaml", ".yml", ".md", ".txt", ".toml"}
FORBIDDEN = re.compile(r"SPEC\x20§|Z[O]O|issue\x20[0-9]+")  # escaped: this file does not match itself
# text a program prints (drawn into a committed figure), left as it is so its output does not change
PRINTED: set[tuple[str, str]] = set()  # printed strings allowed to cite (none left)
REF = re.compile(r"docs/([\w.-]+\.md)#([\w-]+)")
LINK = re.compile(r"\]\(([\w.-]+\.md)#([\w-]+)\)")


def _files():
    me = Path(__file__).resolve()
    for top in SCANNED:
        for p in sorted((ROOT / top).rglob("*")):
            if p.is_file() and p.suffix in SUFFIXES and p.resolve() != me and "__pycache__" not in p.parts:
                yield p


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (letters, digits, ``_``,
    ``-`` and spaces kept), spaces to hyphens."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    """Every heading anchor of a markdown file, repeated headings numbered as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            a = slug(m.group(1))
            n = seen.get(a, 0)
            seen[a] = n + 1
            out.add(a if n == 0 else f"{a}-{n}")
    return out


def test_slug_known_answers():
    assert slug("ZB-H1") == "zb-h1"
    assert slug("The model (`rpd.model.layers`)") == "the-model-rpdmodellayers"
    assert slug("Which rule chose γ") == "which-rule-chose-γ"
    assert slug("The seeds' claims") == "the-seeds-claims"


def test_no_references_to_unshipped_documents_or_issue_numbers():
    bad = []
    for p in _files():
        rel = p.relative_to(ROOT).as_posix()
        for i, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if FORBIDDEN.search(line) and not any(rel == f and s in line for f, s in PRINTED):
                bad.append(f"{rel}:{i}: {line.strip()}")
    assert not bad, "cite a section of docs/ instead:\n" + "\n".join(bad)


def test_every_cited_docs_anchor_exists():
    cache: dict[str, set[str] | None] = {}
    bad = []
    for p in _files():
        rel = p.relative_to(ROOT).as_posix()
        for i, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for name, anchor in REF.findall(line):
                if name not in cache:
                    doc = ROOT / "docs" / name
                    cache[name] = anchors(doc) if doc.is_file() else None
                if cache[name] is None:
                    bad.append(f"{rel}:{i}: docs/{name} does not exist")
                elif anchor not in cache[name]:
                    bad.append(f"{rel}:{i}: docs/{name} has no heading #{anchor}")
    assert not bad, "\n".join(bad)


def test_links_between_the_docs_resolve():
    """Links with an anchor inside docs/ (``[text](other.md#anchor)``) reach a heading."""
    bad = []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        for i, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for name, anchor in LINK.findall(line):
                target = ROOT / "docs" / name
                if not target.is_file() or anchor not in anchors(target):
                    bad.append(f"docs/{doc.name}:{i}: {name}#{anchor}")
    assert not bad, "\n".join(bad)


def test_the_type_check_ci_runs_is_the_one_the_docs_show():
    """docs/architecture.md#types shows the mypy command .ci/run runs, and it checks all of rpd and
    the entry points."""
    ci = [line.split("#")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines() if " mypy " in line]
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split("## Types", 1)[1]
    shown = re.search(r"```\n(.*mypy.*)\n```", doc).group(1).strip()
    assert ci == [shown]
    assert shown.split(" mypy ", 1)[1].split() == ["rpd", "experiments"]
