"""The results-store key or the one-line refusal of about 300 training configs, to diff two trees.

    cd <tree A> && python <this file> /tmp/a.json
    cd <tree B> && python <this file> /tmp/b.json     # then compare the two files

Each config (every objective x method, small sizes, field overrides and bad values per objective,
schedules, every experiment file x method, a user's factory) is refused at compose time
(``experiments.compose_check``), refused by its checks, or resolved as ``experiments.train``
resolves it (nothing trained or stored) and keyed (``rpd.cli.train.run_config``, the code's
identity replaced by a constant). Run from the tree's root; the corpus must be fetched (the LM's
key holds its SHA-256). About 15 minutes on 2 loaded cores.
"""

import itertools
import json
import os
import sys
import tempfile
from unittest import mock

sys.path.insert(0, os.getcwd())
import experiments.schemas  # noqa
from experiments import compose_check
from hydra import compose, initialize_config_dir
from rpd.cli import train
from rpd.io import store, provenance
from pathlib import Path

provenance.code_identity = lambda: "CODE"  # the key's code part differs between two trees by design
CONFIGS = str(Path("configs").resolve())
NOWHERE = tempfile.mkdtemp()  # nothing is stored: the job stops where it is resolved


def resolved(cfg):
    with mock.patch.object(train, "_job", lambda ts, job: ts):
        return train.run(cfg)


objs = ["random_quadratic", "nesterov_quadratic", "logistic_regression", "mlp_chain", "nanochat"]
methods = ["pd", "rpd", "sgd", "localsgd", "pipeline"]
sets = []
for o, m in itertools.product(objs, methods):
    sets.append([f"objective={o}", f"method={m}"])
    sets.append([f"objective={o}", f"method={m}", "schedule.S=4", "schedule.N=40"])
for o in objs:
    for extra in (
        ["objective.seed=3"],
        ["objective.batch_size=8"],
        ["objective.grad_noise=0.1"],
        ["objective.n=64"],
        ["objective.d=16"],
        ["objective.width=8"],
        ["objective.seq_len=16"],
        ["objective.heads=8"],
        ["objective.mu=0.1"],
        ["objective.condition_number=100"],
        ["objective.lam=0.01"],
        ["objective.rotate=true"],
        ["objective.align=true"],
        ["objective.rotate=true", "objective.align=true"],
        ["objective.heldout_frac=0.2"],
        ["objective.heldout_batches=2"],
        ["objective.text_path=/nonexistent.txt"],
        ["objective.n=7"],
        ["objective.d=0"],
        ["objective.width=0"],
        ["objective.heads=3"],
        ["objective.mu=-1"],
        ["objective.condition_number=0.5"],
        ["objective.heldout_frac=1.5"],
        ["objective.seed=-1"],
        ["objective.batch_size=0"],
        ["schedule.S=2"],
        ["objective.mu=null"],
        ["optimizer=adam"],
        ["optimizer=muon"],
        ["objective.foo=1"],
        ["+objective.foo=1"],
        ["objective.name=bogus"],
    ):
        sets.append([f"objective={o}", *extra])
for sch in ["gpipe", "1f1b", "zb_h1", "interleaved", "pipemare", "dualpipe_v"]:
    for o in ["random_quadratic", "mlp_chain", "nanochat"]:
        sets.append([f"objective={o}", "method=pipeline", f"schedule={sch}"])
for e in sorted(p.stem for p in Path("configs/experiment").glob("*.yaml")):
    for m in ["pd", "rpd", "localsgd"]:
        sets.append([f"experiment={e}", f"method={m}"])
sets.append(["objective._target_=rpd.objectives.linear.random_quadratic", "objective.n=40", "objective.batch_size=5"])

out = []
for args in sets:
    msg = compose_check.check("train", args)
    if msg is not None:
        out.append({"args": args, "refused_compose": msg})
        continue
    try:
        with initialize_config_dir(config_dir=CONFIGS, version_base="1.3"):
            cfg = compose("train", overrides=args + [f"results_root={NOWHERE}"])
        ts = resolved(cfg)
        key = train.run_config(ts)
        out.append({"args": args, "hash": store.config_hash(key), "objective": key["objective"]})
    except (ValueError, TypeError, FileNotFoundError, SystemExit) as exc:
        out.append({"args": args, "refused": f"{type(exc).__name__}: {exc}"})
json.dump(out, open(sys.argv[1], "w"), indent=1, sort_keys=True, default=str)
print(len(out), "configs;", sum("hash" in r for r in out), "keyed")
