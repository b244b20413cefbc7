"""The n_workers search (rpd.model.search3d): the answer of timing every candidate, with fewer timed."""

from __future__ import annotations

from rpd import registry
from rpd.model import hardware, search3d
from rpd.model.layers import GPTConfig, Parallel, gpt_model

DGX = hardware.preset("a100_80g")
CFG = GPTConfig(n_layer=8, d_model=1024, n_head=16, seq=512, vocab=1000)
NAMES = registry.searched(("1f1b", "interleaved", "zb_h1", "pipedream"))


def _best(rows, sync):
    ok = [r for r in rows if r.fits and r.error is None and (r.synchronous or not sync)]
    return max(ok, key=lambda r: r.tokens_per_s)


def test_search_finds_what_the_straightforward_loop_finds():
    models = lambda t: gpt_model(CFG, par=Parallel(TP=t))  # noqa: E731
    kw = dict(shape=(16, 1024), margin=0.05)
    cap = 2.5 * 2**30
    found = search3d.search(models, DGX, registry.timeline, 16, 32, cap, NAMES, **kw)
    slow = search3d.brute_force(models, DGX, registry.timeline, 16, 32, cap, NAMES, **dict(kw))
    for sync in (True, False):
        a, b = _best(found.rows, sync), _best(slow, sync)
        assert (a.schedule, a.TP, a.S, a.D, a.M) == (b.schedule, b.TP, b.S, b.D, b.M)
    assert found.timed < len(slow) == found.candidates == found.timed + found.over_cap + found.bounded
