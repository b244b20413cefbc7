"""Typed, locked config schemas for the entry points (hydra's ConfigStore) and their checks.

The YAML files under ``configs/`` are merged onto these dataclasses, so a misspelt key or a
value of the wrong type fails at compose time naming the field (``full_key: schedule.SS``), and
names with a fixed set of choices are enums (``objective.name=foo`` fails listing the choices).
Value checks that a type cannot express (S >= 1, a non-empty γ grid, n >= d for Nesterov's
quadratic, S >= 3 for the LM, ...) run in :func:`validate`, before any objective is built,
with the library's own checks (``rpd.validation``, ``rpd.tuning.pow2_grid``) and the dotted
config path as the argument name: ``schedule.S must be >= 1, got 0``.

Only ``experiments/`` imports hydra; the library gets plain values from these nodes.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from rpd import tuning
from rpd.validation import check_choice, check_int, check_real


class ObjectiveName(enum.Enum):
    random_quadratic = "random_quadratic"
    nesterov_quadratic = "nesterov_quadratic"
    logistic_regression = "logistic_regression"
    nanochat = "nanochat"


class MethodName(enum.Enum):
    pd = "pd"
    rpd = "rpd"
    sgd = "sgd"
    localsgd = "localsgd"


class Delays(enum.Enum):  # RPD's delay model; "pd" = PipeDream's exact delay table
    uniform = "uniform"
    max = "max"
    zero = "zero"
    pd = "pd"


class BlockOrder(enum.Enum):  # "pd" = the block order of PipeDream's timeline
    uniform = "uniform"
    cyclic = "cyclic"
    pd = "pd"


class BatchOrder(enum.Enum):  # "pd" = microbatch m uses batch m mod n_batches, in PD's order
    uniform = "uniform"
    cyclic = "cyclic"
    pd = "pd"


class Selector(enum.Enum):
    stable = "stable"
    best_final = "best_final"


class LoggerKind(enum.Enum):
    none = "none"
    wandb = "wandb"


class Size(enum.Enum):
    quick = "quick"
    full = "full"


@dataclasses.dataclass
class ObjectiveConfig:
    """``rpd.objectives``: the data and the loss. S comes from ``schedule.S``."""

    name: ObjectiveName = ObjectiveName.random_quadratic
    n: int = 2000  # examples (linear models); a multiple of batch_size
    d: int = 512  # dimension (linear models)
    batch_size: int = 100  # B
    mu: Optional[float] = 0.01  # Nesterov's quadratic: A = tridiag(-1, 2, -1) + mu I
    condition_number: Optional[float] = None  # Nesterov: overrides mu when set
    lam: float = 1e-4  # logistic regression: l2 weight
    grad_noise: float = 0.0  # sigma_g of i.i.d. Gaussian noise on every block gradient
    seed: int = 0  # data seed (numpy.random.default_rng)
    # small LM ("nanochat"); batch_size and seed above apply too
    text_path: Optional[str] = None  # any UTF-8 text; null: the cached corpus (python -m rpd.corpus fetch)
    seq_len: int = 32
    width: int = 64
    heads: int = 4
    heldout_frac: float = 0.1
    heldout_batches: int = 8


@dataclasses.dataclass
class MethodConfig:
    """``rpd.methods``: which method, its step-size grid 2^gamma_lo .. 2^gamma_hi (vmapped in one
    compile), seeds, RPD's options, and the step-size selector (``rpd.tuning``)."""

    name: MethodName = MethodName.pd
    gamma_lo: int = -8  # log2 of the smallest step size
    gamma_hi: int = 0  # log2 of the largest step size
    gammas: Optional[List[float]] = None  # explicit grid (overrides gamma_lo/hi); every value > 0
    seeds: List[int] = dataclasses.field(default_factory=lambda: [0])  # method seeds (RPD sampling, noise)
    delta: Optional[int] = None  # RPD's delay bound; null: PD's floor(S^2 - S/2)
    delays: Delays = Delays.uniform
    block_order: BlockOrder = BlockOrder.uniform
    batch_order: BatchOrder = BatchOrder.uniform
    selector: Selector = Selector.stable
    tail_frac: float = 0.2
    stride: int = 1  # record f every `stride` time steps (PD) or block updates (RPD, SGD)


@dataclasses.dataclass
class ScheduleConfig:
    """``rpd.schedules``: the pipeline. PD uses S, N, noam; LocalSGD S, N, R, H; RPD gets PD's K."""

    S: int = 8  # stages = blocks
    N: int = 400  # microbatches (protocol (i)); K = N S block updates
    noam: Optional[int] = None  # PD: max microbatches in flight; null: S; 1: naive model parallelism
    R: Optional[int] = None  # LocalSGD replicas; null: S (the paper)
    H: int = 1  # LocalSGD local steps per round
    T: Optional[int] = None  # protocol (ii): take the smallest N whose timeline reaches T (N ignored)


@dataclasses.dataclass
class LoggerConfig:
    """``rpd.tracking.make_logger``; see configs/logger/*.yaml."""

    kind: LoggerKind = LoggerKind.none
    project: str = "rpd"
    entity: Optional[str] = None
    mode: Optional[str] = None  # offline | online | disabled; null: $WANDB_MODE, else offline
    dir: Optional[str] = None
    tags: List[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class StudyConfig:
    """Which ``rpd.studies`` entry feeds the figure, and overrides of its ``Config`` fields."""

    name: str = MISSING  # a name in rpd.studies.REGISTRY (or e2_delay_law / e7_schedules)
    overrides: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Config:
    """Shared by both entry points: one experiment file describes a paper figure's study (for
    ``experiments.figure``) and a representative cell of its sweep (for ``experiments.train``)."""

    objective: ObjectiveConfig = dataclasses.field(default_factory=ObjectiveConfig)
    method: MethodConfig = dataclasses.field(default_factory=MethodConfig)
    schedule: ScheduleConfig = dataclasses.field(default_factory=ScheduleConfig)
    logger: LoggerConfig = dataclasses.field(default_factory=LoggerConfig)
    study: StudyConfig = dataclasses.field(default_factory=StudyConfig)
    experiment_name: str = "default"  # wandb group (set by configs/experiment/*); results are keyed by content
    results_root: str = "results"  # train runs: <root>/train/<hash>; studies: <root>/figures/<name>/<hash>
    force: bool = False  # recompute even when a complete result exists


@dataclasses.dataclass
class TrainConfig(Config):
    """``python -m experiments.train``: one (objective, method, schedule) job."""


@dataclasses.dataclass
class FigureConfig(Config):
    """``python -m experiments.figure``: one study, saved, then drawn from the saved output."""

    size: Size = Size.quick
    out_dir: Optional[str] = None  # None: paper_figures/ for full, paper_figures/quick/ for quick


def register() -> None:
    """Put the schemas in hydra's ConfigStore (primary configs list ``train_schema`` /
    ``figure_schema`` first in their defaults; group files merge onto the typed nodes)."""
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="figure_schema", node=FigureConfig)


register()


# ------------------------------------------------------------------ value checks

def _grid_exponents(m) -> None:
    lo = check_int("method.gamma_lo", m.gamma_lo, -1074)
    hi = check_int("method.gamma_hi", m.gamma_hi, -1074)
    if hi < lo:
        raise ValueError(f"method.gamma_hi must be >= method.gamma_lo (the gamma grid "
                         f"2^gamma_lo..2^gamma_hi is empty), got gamma_lo={lo}, gamma_hi={hi}")


def gammas(m) -> list[float]:
    """The step-size grid of a method config (checked): explicit ``gammas`` or 2^lo..2^hi."""
    if m.gammas is not None:
        if len(m.gammas) == 0:
            raise ValueError("method.gammas must not be empty (or null for the 2^lo..2^hi grid)")
        return [check_real(f"method.gammas[{i}]", float(g)) for i, g in enumerate(m.gammas)]
    _grid_exponents(m)
    return [float(g) for g in tuning.pow2_grid(int(m.gamma_lo), int(m.gamma_hi))]


def _value(x):
    return x.value if isinstance(x, enum.Enum) else x


def validate(cfg) -> None:
    """Every value check that does not need data; raises ValueError/TypeError naming the field.

    Runs before anything expensive (no objective, timeline or compile yet)."""
    o, m, s = cfg.objective, cfg.method, cfg.schedule
    S = check_int("schedule.S", s.S)
    if s.T is None:
        check_int("schedule.N", s.N)
    else:
        check_int("schedule.T", s.T)
    if s.noam is not None:
        check_int("schedule.noam", s.noam)
    if s.R is not None:
        check_int("schedule.R", s.R)
    check_int("schedule.H", s.H)

    check_choice("method.name", _value(m.name), [x.value for x in MethodName])
    gammas(m)
    if not len(m.seeds):
        raise ValueError("method.seeds must list at least one seed")
    for i, seed in enumerate(m.seeds):
        check_int(f"method.seeds[{i}]", seed, 0)
    if m.delta is not None:
        check_int("method.delta", m.delta, 0)
    check_choice("method.delays", _value(m.delays), [x.value for x in Delays])
    check_choice("method.block_order", _value(m.block_order), [x.value for x in BlockOrder])
    check_choice("method.batch_order", _value(m.batch_order), [x.value for x in BatchOrder])
    check_choice("method.selector", _value(m.selector), [x.value for x in Selector])
    if check_real("method.tail_frac", m.tail_frac) > 1:
        raise ValueError(f"method.tail_frac must be <= 1, got {m.tail_frac}")
    check_int("method.stride", m.stride)

    name = check_choice("objective.name", _value(o.name), [x.value for x in ObjectiveName])
    B = check_int("objective.batch_size", o.batch_size)
    check_int("objective.seed", o.seed, 0)
    check_real("objective.grad_noise", o.grad_noise, allow_zero=True)
    if name == "nanochat":
        if S < 3:
            raise ValueError(f"schedule.S must be >= 3 for the nanochat LM (embedding, at least one "
                             f"transformer block, head), got {S}")
        check_int("objective.seq_len", o.seq_len)
        W = check_int("objective.width", o.width)
        heads = check_int("objective.heads", o.heads)
        if W % heads:
            raise ValueError(f"objective.width ({W}) must be divisible by objective.heads ({heads})")
        check_int("objective.heldout_batches", o.heldout_batches)
        if not 0 < check_real("objective.heldout_frac", o.heldout_frac) < 1:
            raise ValueError(f"objective.heldout_frac must be in (0, 1), got {o.heldout_frac}")
        return
    n, d = check_int("objective.n", o.n), check_int("objective.d", o.d)
    if n % B:
        raise ValueError(f"objective.n must be a multiple of objective.batch_size, got n={n}, batch_size={B}")
    if S > d:
        raise ValueError(f"schedule.S must be <= objective.d (one coordinate per block at least), "
                         f"got S={S}, d={d}")
    if name == "nesterov_quadratic":
        if n < d:
            raise ValueError(f"objective.n must be >= objective.d for Nesterov's quadratic "
                             f"(X^T X / n = A needs a reduced QR of an n x d matrix), got n={n}, d={d}")
        if o.condition_number is not None:
            if check_real("objective.condition_number", o.condition_number) <= 1:
                raise ValueError(f"objective.condition_number must be > 1, got {o.condition_number}")
        elif o.mu is None:
            raise ValueError("objective.mu must be set (or objective.condition_number) for Nesterov's quadratic")
        else:
            check_real("objective.mu", o.mu, allow_zero=True)
    if name == "logistic_regression":
        check_real("objective.lam", o.lam, allow_zero=True)


def to_container(cfg) -> dict:
    """A plain, resolved dict (enums as their names) of a config node."""
    if dataclasses.is_dataclass(cfg):
        cfg = OmegaConf.structured(cfg)
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    return dict(cfg)


def typed(cfg, schema=TrainConfig) -> DictConfig:
    """``cfg`` (a dict, a dataclass or a DictConfig) merged onto ``schema``: typed and locked."""
    base = OmegaConf.structured(schema)
    merged = OmegaConf.merge(base, cfg if not dataclasses.is_dataclass(cfg) else OmegaConf.structured(cfg))
    OmegaConf.set_struct(merged, True)
    return merged
