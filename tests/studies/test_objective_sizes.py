"""The MLP chain and the LM at a study's mlp_* / lm_* sizes (rpd.studies.objective_sizes;
docs/architecture.md#subpackages-and-modules): each of E10's, E12's and E17's configs, at its own sizes."""

import pytest

from rpd.studies import frontier, objective_sizes, optimizers, staleness_2026

STUDIES = [frontier, optimizers, staleness_2026]


@pytest.mark.parametrize("study", STUDIES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_the_mlp_chain_has_the_configs_sizes_and_the_seed_given(study):
    cfg = study.Config(mlp_n=32, mlp_width=4, mlp_batch=2)
    obj = objective_sizes.mlp_chain(cfg, 4, 7)
    assert (obj.S, obj.meta["n"], obj.meta["width"], obj.meta["batch_size"], obj.meta["seed"]) == (4, 32, 4, 2, 7)
    assert obj.n_batches == 32 // 2


@pytest.mark.parametrize("study", STUDIES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_the_lm_is_asked_for_the_configs_sizes(study, monkeypatch):
    asked = {}
    monkeypatch.setattr(objective_sizes, "nanochat", lambda S, **kw: asked.update(S=S, **kw))
    cfg = study.Config(lm_width=16, lm_seq=8, lm_batch=4, lm_heldout_batches=3)
    objective_sizes.lm(cfg, 5, 2)
    assert asked == dict(S=5, batch_size=4, seq_len=8, width=16, seed=2, heldout_batches=3)
