"""rpd's own objectives as :class:`~rpd.objectives.entry.ObjectiveEntry` s (collected by
:mod:`rpd.objectives`): each one's build and checks from its config node (``objective.*``, errors
naming the dotted field), its parameters (``params_type``, the dataclass beside its builder: the
config's fields and defaults, and the fields its store key keeps), its metric, cadence and γ grid."""

from __future__ import annotations

from pathlib import Path

import jax

from rpd.objectives import corpus
from rpd.objectives.base import Objective
from rpd.objectives.entry import HELDOUT, Memory, ObjectiveEntry, Shapes
from rpd.objectives.linear import (
    LogisticRegressionParams,
    NesterovQuadraticParams,
    RandomQuadraticParams,
    logistic_regression,
    nesterov_quadratic,
    random_quadratic,
)
from rpd.objectives.mlp import MLPChainParams, mlp_chain
from rpd.objectives.nanochat import NanochatParams, init_params, nanochat, stage_sizes
from rpd.runtime.budget import Term
from rpd.validation import check_int, check_real

# The LM's vocabulary is only known once its text is read; the estimate assumes this many
# characters (the Shakespeare corpus has 84).
LM_VOCAB_ESTIMATE = 128


def _multiple(n: int, B: int) -> None:
    if n % B:
        raise ValueError(f"objective.n must be a multiple of objective.batch_size, got n={n}, batch_size={B}")


def _check_linear(o, S: int) -> None:
    check_int("objective.seed", o.seed, 0)
    check_real("objective.grad_noise", o.grad_noise, allow_zero=True)
    n, d = check_int("objective.n", o.n), check_int("objective.d", o.d)
    _multiple(n, int(o.batch_size))
    if S > d:
        raise ValueError(f"schedule.S must be <= objective.d (one coordinate per block at least), got S={S}, d={d}")


def _check_nesterov(o, S: int) -> None:
    _check_linear(o, S)
    n, d = int(o.n), int(o.d)
    if n < d:
        raise ValueError(
            f"objective.n must be >= objective.d for Nesterov's quadratic "
            f"(X^T X / n = A needs a reduced QR of an n x d matrix), got n={n}, d={d}"
        )
    if o.condition_number is not None:
        if check_real("objective.condition_number", o.condition_number) <= 1:
            raise ValueError(f"objective.condition_number must be > 1, got {o.condition_number}")
    elif o.mu is None:
        raise ValueError("objective.mu must be set (or objective.condition_number) for Nesterov's quadratic")
    else:
        check_real("objective.mu", o.mu, allow_zero=True)


def _check_logistic(o, S: int) -> None:
    _check_linear(o, S)
    check_real("objective.lam", o.lam, allow_zero=True)


def _check_mlp(o, S: int) -> None:
    n = check_int("objective.n", o.n)
    check_int("objective.width", o.width)
    _multiple(n, int(o.batch_size))


def _check_lm(o, S: int) -> None:
    if o.text_path is not None and not Path(str(o.text_path)).expanduser().is_file():
        raise ValueError(f"objective.text_path: no file at {o.text_path} (any UTF-8 text; null: the fetched corpus)")
    check_int("objective.seed", o.seed, 0)
    check_real("objective.grad_noise", o.grad_noise, allow_zero=True)
    if S < 3:
        raise ValueError(
            f"schedule.S must be >= 3 for the nanochat LM (embedding, at least one transformer block, head), got {S}"
        )
    check_int("objective.seq_len", o.seq_len)
    W = check_int("objective.width", o.width)
    heads = check_int("objective.heads", o.heads)
    if W % heads:
        raise ValueError(f"objective.width ({W}) must be divisible by objective.heads ({heads})")
    check_int("objective.heldout_batches", o.heldout_batches)
    if not 0 < check_real("objective.heldout_frac", o.heldout_frac) < 1:
        raise ValueError(f"objective.heldout_frac must be in (0, 1), got {o.heldout_frac}")


def linear_memory(o, S: int) -> Memory:
    """The data X (n x d) and A = XᵀX / n (d x d), float64."""
    D, n = int(o.d), int(o.n)
    data = (Term("data", ("objective.n", "objective.d"), n * D * 8), Term("A = XᵀX / n", ("objective.d",), D * D * 8))
    return Memory(D, ("objective.d",), 8, data)


def _mlp_memory(o, S: int) -> Memory:
    w = int(o.width)
    return Memory(
        S * (w * w + w),
        ("objective.width",),
        8,
        (Term("data", ("objective.n", "objective.width"), int(o.n) * w * 2 * 8),),
    )


def _lm_memory(o, S: int) -> Memory:
    return Memory(sum(stage_sizes(S, LM_VOCAB_ESTIMATE, o.seq_len, o.width)), ("objective.width",), 4)


def _mlp_shapes(obj: Objective) -> Shapes | None:
    """The MLP chain's block is (W [w, w], b [w])."""
    if "width" not in obj.meta:
        return None
    w = int(obj.meta["width"])
    return tuple(((w, w), (w,)) for _ in range(obj.S))


def _lm_shapes(obj: Objective) -> Shapes | None:
    """The char LM's stage s: its parameter dict ravelled by ``jax.flatten_util.ravel_pytree``."""
    m = obj.meta
    if "vocab_size" not in m:
        return None
    params = init_params(0, obj.S, m["vocab_size"], m["seq_len"], m["width"])
    return tuple(tuple(tuple(leaf.shape) for leaf in jax.tree.leaves(p)) for p in params)


def _text_identity(o) -> dict:
    """Another text is another run: the SHA-256 of the LM's text (null when there is none: the
    run fails on loading it, recorded)."""
    try:
        return {"text_sha256": corpus.identity(o["text_path"])}
    except FileNotFoundError:
        return {"text_sha256": None}


ENTRIES = (
    ObjectiveEntry(
        "random_quadratic",
        lambda o, S: random_quadratic(
            o.n, o.d, S, o.batch_size, seed=o.seed, rotate=bool(o.rotate), align=bool(o.align)
        ),
        params_type=RandomQuadraticParams,
        check=_check_linear,
        memory=linear_memory,
    ),
    ObjectiveEntry(
        "nesterov_quadratic",
        lambda o, S: nesterov_quadratic(
            o.n,
            o.d,
            S,
            o.batch_size,
            mu=o.mu,
            condition_number=o.condition_number,
            seed=o.seed,
            rotate=bool(o.rotate),
            align=bool(o.align),
        ),
        params_type=NesterovQuadraticParams,
        check=_check_nesterov,
        memory=linear_memory,
    ),
    ObjectiveEntry(
        "logistic_regression",
        lambda o, S: logistic_regression(o.n, o.d, S, o.batch_size, lam=o.lam, grad_noise=o.grad_noise, seed=o.seed),
        params_type=LogisticRegressionParams,
        gamma_exps=(-8, 2),
        check=_check_logistic,
        memory=linear_memory,
    ),
    ObjectiveEntry(
        "mlp_chain",
        lambda o, S: mlp_chain(o.n, o.width, S, o.batch_size, seed=o.seed),
        params_type=MLPChainParams,
        gamma_exps=(-6, 3),
        check=_check_mlp,
        block_shapes=_mlp_shapes,
        memory=_mlp_memory,
    ),
    ObjectiveEntry(
        "nanochat",
        lambda o, S: nanochat(
            S,
            path=o.text_path,
            batch_size=o.batch_size,
            seq_len=o.seq_len,
            width=o.width,
            heads=o.heads,
            seed=o.seed,
            heldout_frac=o.heldout_frac,
            heldout_batches=o.heldout_batches,
        ),
        params_type=NanochatParams,
        is_lm=True,
        metric=HELDOUT,
        identity=_text_identity,
        evaluated="round_ends",
        gamma_exps=(-4, 1),
        check=_check_lm,
        block_shapes=_lm_shapes,
        memory=_lm_memory,
    ),
)
