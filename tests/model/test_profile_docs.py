"""docs/plan.md's profile format: its table documents exactly the format's fields, its JSON
example loads and plans, and a profile without ``flops_fwd`` prints MFU as n/a (not 0.000)."""

import json
import re

from hydra_helpers import ROOT, compose

from rpd.cli import plan as entry
from rpd.model import profile

SECTION = (ROOT / "docs" / "plan.md").read_text().split("## A measured model: profile files", 1)[1].split("\n## ", 1)[0]


def _example() -> dict:
    (block,) = re.findall(r"```json\n(.*?)```", SECTION, re.S)
    return json.loads(block)


def test_the_docs_table_is_the_formats_fields_and_the_example_uses_them():
    fields = {f for row in re.findall(r"^\| `(\w+)`(?:, `(\w+)`)? \|", SECTION, re.M) for f in row if f}
    assert fields == set(profile._FIELDS)
    assert {k for layer in _example()["layers"] for k in layer} <= fields


def test_the_docs_example_plans_and_mfu_is_na_without_flops(tmp_path, capsys):
    data = _example()
    path = tmp_path / "my_layers.json"
    path.write_text(json.dumps(data))
    m = profile.load_profile(path)
    assert (m.name, m.tokens_per_microbatch, len(m.layers)) == ("my_model", 2048, 4)
    assert m.params == sum(layer["params"] for layer in data["layers"])
    overrides = ["model=profile", "pipeline.S=2", "pipeline.M=[4]", "schedules=[1f1b]", "out=null"]
    out = entry.run(compose([*overrides, f"model.profile={path}"], "plan"))
    assert out["rows"][0]["mfu"] > 0
    for layer in data["layers"]:
        layer.pop("flops_fwd", None)
    path.write_text(json.dumps(data))
    capsys.readouterr()
    out = entry.run(compose([*overrides, f"model.profile={path}"], "plan"))
    text = capsys.readouterr().out
    assert out["rows"][0]["mfu"] is None
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("schedule") and "MFU" in line)
    row = next(line for line in lines if line.startswith("1f1b "))
    end = header.index("MFU") + len("MFU")  # the columns are right-aligned to their headers
    assert row[:end].split()[-1] == "n/a"
    assert "MFU n/a" in text and "0.000" not in row
