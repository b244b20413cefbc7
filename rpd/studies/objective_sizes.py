"""The MLP chain and the LM at a study's sizes: the ``mlp_*`` and ``lm_*`` fields of the configs
of E10 (:mod:`rpd.studies.frontier`), E12 (:mod:`rpd.studies.optimizers`) and E17
(:mod:`rpd.studies.staleness_2026`), each with its own defaults, read here by one call."""

from __future__ import annotations

from rpd import objectives
from rpd.objectives.nanochat import nanochat


def mlp_chain(cfg, S: int, seed: int):
    """E10's MLP chain (``mlp_n`` samples, ``mlp_width``, batches of ``mlp_batch``) in S blocks."""
    return objectives.mlp_chain(cfg.mlp_n, cfg.mlp_width, S, cfg.mlp_batch, seed=seed)


def lm(cfg, S: int, seed: int):
    """The char LM in S stages: ``lm_batch`` windows of ``lm_seq`` tokens, width ``lm_width``,
    ``lm_heldout_batches`` held-out batches."""
    return nanochat(
        S,
        batch_size=cfg.lm_batch,
        seq_len=cfg.lm_seq,
        width=cfg.lm_width,
        seed=seed,
        heldout_batches=cfg.lm_heldout_batches,
    )
