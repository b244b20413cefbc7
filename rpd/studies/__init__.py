"""Paper experiments as studies: one module per figure (docs/science.md#the-papers-experiments).

A study is a module with

- ``Config``: a frozen dataclass of every parameter, defaulting to the paper's setting
  (``full``); ``QUICK``: a dict of overrides that make it laptop-sized (``quick``);
- ``run(cfg: Config, progress=None) -> StudyOutput``: all computation, no plotting, no I/O;
- ``figure(out: StudyOutput, path) -> None``: draws the paper's figure from saved numbers only.

Entry points (``experiments/``) compose a ``Config`` with hydra, call ``run``, save the output
with ``rpd.io.store`` and call ``figure`` on what was saved. The library never imports hydra.
"""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np

from rpd.analysis import tuning

# name -> module path; each module follows the protocol above.
REGISTRY = {
    "e1_pd_vs_rpd": "rpd.studies.pd_vs_rpd",
    "e2_delay_law": "rpd.studies.delay_law",
    "e3_nesterov": "rpd.studies.pd_vs_localsgd",
    "e4_logistic": "rpd.studies.pd_vs_localsgd",
    "e5_nanochat": "rpd.studies.nanochat",
    "e6_scaling": "rpd.studies.scaling",
    "e7_schedules": "rpd.studies.delay_law",
    "e8_delta": "rpd.studies.delta",
    "e9_frontier": "rpd.studies.schedule_table",
    "e10_frontier": "rpd.studies.frontier",
    "e11_costs": "rpd.studies.costs_crossover",
    "e12_optimizers": "rpd.studies.optimizers",
    "e13_optim_staleness": "rpd.studies.optim_staleness",
    "e14_search": "rpd.studies.search",
    "e15_workers": "rpd.studies.workers",
    "e16_survey": "rpd.studies.survey",
    "e17_staleness_2026": "rpd.studies.staleness_2026",
    "e18_scale": "rpd.studies.kappa_scale",
    "e18_width": "rpd.studies.kappa_width",
    "e19_stragglers": "rpd.studies.stochastic_time",
    "plan_claims": "rpd.studies.plan_claims",
    "plan_accuracy": "rpd.studies.plan_accuracy",
    "staleness_scaling": "rpd.studies.staleness",
}


def trend(x, y) -> tuple[float, float]:
    """(Spearman ρ of y against x, y at the largest x / y at the smallest x): a trend as the
    paper states one ("improves with S", "worsens as δ grows"), not strict monotonicity. NaN
    points are left out; ρ is NaN with fewer than 2 points left."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < 2:
        return float("nan"), float("nan")
    rho = float(spearmanr(x, y).statistic) if np.ptp(y) > 0 else 0.0
    return rho, float(y[np.argmax(x)] / y[np.argmin(x)])


def claim_rows(checks: list[dict], **label) -> list[dict]:
    """A table row per paper claim of ``checks``: the identifying columns ``label`` first (a
    study's own, e.g. ``method="paper claim"``), then the claim's statement, verdict and measure."""
    return [dict(label, paper=c["statement"], holds=c["holds"], measured=c["measured"]) for c in checks]


def summary_head(study: str, title: str, setting, cfg) -> dict:
    """The keys a paper study's summary opens with: its name, the figure's title and setting
    lines, and the config it ran."""
    return dict(study=study, title=title, setting=setting, config=dataclasses.asdict(cfg))


def selection_keys(selector: str, rules) -> dict:
    """How a summary's γ were chosen (docs/science.md#step-sizes): the selector, every rule run,
    the selector's text and why the authors' published γ are the reference rule's."""
    return dict(
        selector=selector,
        selectors=list(rules),
        selector_text=tuning.RULE_TEXT[selector],
        authors_override=tuning.AUTHORS_OVERRIDE,
    )


def picks(sels: dict, **values) -> dict:
    """Each rule's pick of ``sels`` (rule -> selection): its rule, its γ as a power of 2 and each
    of ``values`` (a function of the picked γ's index) there; None where the rule picked none."""
    return {
        u: dict(
            rule=x.rule,
            gamma_exp=None if x.index is None else tuning.log2_exponent(x.gamma),
            **{k: None if x.index is None else f(x.index) for k, f in values.items()},
        )
        for u, x in sels.items()
    }


def load(name: str):
    """The study module registered under ``name`` (error lists the valid names)."""
    if name not in REGISTRY:
        raise ValueError(f"study must be one of {sorted(REGISTRY)}, got {name!r}")
    return importlib.import_module(REGISTRY[name])


def make_config(config_cls, size: str = "quick", quick: dict | None = None, **overrides):
    """``config_cls`` at paper size (``full``) or with the study's ``QUICK`` overrides, then
    ``overrides``; unknown fields raise a TypeError naming them."""
    if size not in ("quick", "full"):
        raise ValueError(f"size must be 'quick' or 'full', got {size!r}")
    fields = {f.name for f in dataclasses.fields(config_cls)}
    unknown = set(overrides) - fields
    if unknown:
        raise TypeError(f"unknown {config_cls.__module__}.Config field(s): {sorted(unknown)}")
    base = dict(quick or {}) if size == "quick" else {}
    return config_cls(**{**base, **overrides})
