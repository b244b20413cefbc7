"""E18 at fixed depth, wider (docs/results.md#e18-at-fixed-depth-wider): the pipelines' staleness
cost κ against model size with the pipeline depth S held fixed.

E18 (:mod:`rpd.studies.kappa_scale`) grew its LMs in width *and* depth (S = 3, 4, 5 across its
sizes), so its trend of κ in N is confounded with S: PipeDream's delay grows with S. Here the
char LM keeps S = 4 (two transformer blocks, the embedding and the head) and grows only its width
(24, 64, 128: 19k to 422k parameters, ×21.9), and a second depth S = 6 at width 24 measures κ's
S-dependence at equal width instead of assuming it (one width: a second S at width 64 cost more than
the budget left, measured below). The arms are the pipelines under
AdamW (PipeDream, PipeDream-2BW at M = 4, PipeMare), each against its 1F1B reference of the same
global batch; 2BW at S = 6 needs M ≥ 5 and is a row saying so. Everything else is E18's protocol
(its step-size sweeps, κ and censoring, :func:`rpd.studies.kappa_scale.run`), with the fits keyed
by S as well: κ − 1 = c·(N/10⁶)^γ per (method, optimizer, settings, S), ``S`` in each fit's and
row's ``settings``.

**Tokens.** D is E18's rule, the same at every size (``D_mb`` microbatches of ``lm_batch`` ×
``lm_seq`` tokens, 32768 tokens): D / N falls from 1.7 to 0.08 tokens per parameter across the
S = 4 sizes, so the trend is at a fixed token budget. A budget D ∝ N would make the cost grow as
N² (cost ∝ N·D): measured at width 64, a run of 1024 microbatches cost about 0.09 s per
microbatch per program (4 step sizes at once) on the two shared cores, so the largest size at even
one token per parameter (3300 microbatches, run to twice that) would take hours per program. Microbatches
of 8 sequences of 32 characters (E18: 4 × 16): attention over 32 characters instead of 16, and the
same tokens in a quarter of the updates, which is both closer to an LM's low-noise large-batch
regime and cheaper per token on a CPU (fewer sequential updates).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from rpd.results import StudyOutput
from rpd.studies import kappa_scale as ks
from rpd.studies.kappa_scale_fits import fits

ARMS = ("adamw/pipedream", "adamw/pipedream_2bw/M=4", "adamw/pipemare")


@dataclasses.dataclass(frozen=True)
class Config(ks.Config):
    widths: tuple[int, ...] = (24, 24, 64, 128)  # S = 4 at 24, 64, 128; S = 6 at 24
    stages: tuple[int, ...] = (4, 6, 4, 4)
    arms: tuple[str, ...] = ARMS
    D_mb: int = 128
    record_mb: int = 8
    lm_seq: int = 32
    lm_batch: int = 8
    lm_heldout_batches: int = 4
    gamma_exps: dict = dataclasses.field(default_factory=lambda: {"adamw": (-8, -5)})


# two widths at S = 4, PipeDream only: 2 programs (PD's per width; its 1F1B M = 1 reference shares it)
QUICK = dict(
    widths=(8, 16),
    stages=(4, 4),
    arms=("adamw/pipedream",),
    D_mb=32,
    record_mb=8,
    lm_seq=16,
    lm_batch=4,
    lm_heldout_batches=2,
    gamma_exps={"adamw": (-6, -5)},
    max_shifts=0,
)
TITLE = "E18 at fixed depth, wider: the pipelines' staleness cost κ against model size at fixed S (char LM)"


def with_S(rows: list[dict]) -> list[dict]:
    """Each row's ``settings`` with its depth ``S`` added, so that a fit is per S."""
    return [dict(r, settings={**r["settings"], "S": r["S"]}) for r in rows]


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    """E18's run on this config; the fits per (method, optimizer, settings, S)."""
    out = ks.run(cfg, progress)
    table = with_S(out.table)
    kap, gap = fits(table)
    summary = dict(out.summary, title=TITLE, fits=kap, gap_fits=gap, S_rule="S = blocks + 2 per size (settings' S)")
    return StudyOutput(arrays=out.arrays, summary=summary, table=table)


corpus_identity = ks.corpus_identity
numbers = ks.numbers
n_steps = ks.n_steps
figure = ks.figure
