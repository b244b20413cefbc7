"""The plan's peak per GPU against the zero-bubble paper's measured runs (rpd.studies.zb_memory_check,
docs/plan.md#the-zero-bubble-papers-runs-which-bytes-they-held): one row worked by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rpd.model.stages import partition
from rpd.studies import zb_memory_check as z


def test_the_papers_code_takes_the_padding_from_the_last_and_the_first_stage():
    """sail-sg's get_offset at 22 layers on p = 8: padded to 24 = 8·3, rank_sizes[-1] and
    rank_sizes[0] lose one, so blocks per stage 2, 3, 3, 3, 3, 3, 3, 2; at 62 on 32, 1 on the
    ends and 2 between. The plan's model has the embedding before the blocks and the head after.
    Where p divides the blocks (24 on 8) ``padded`` is ``even``."""
    b = z.paper_bounds(z.RUNS[0])
    blocks = [hi - lo for lo, hi in b]
    blocks[0] -= 1  # the embedding
    blocks[-1] -= 1  # the head
    assert blocks == [2, 3, 3, 3, 3, 3, 3, 2]
    assert b[0][0] == 0 and b[-1][1] == 22 + 2
    assert [hi - lo for lo, hi in z.paper_bounds(z.RUNS[3])] == [2] * 32  # 1 + embedding, 2, ..., 1 + head
    m = z.model_of(dataclasses.replace(z.RUNS[0], n_layer=24))
    assert partition(m, 8, "padded") == partition(m, 8, "even")
    # 19 blocks: padded to 24, 5 off stages -1, 0, 1, 2, 3 (blocks 2 2 2 2 3 3 3 2), the ends + 1
    padded19 = partition(z.model_of(dataclasses.replace(z.RUNS[0], n_layer=19)), 8, "padded")
    assert [hi - lo for lo, hi in padded19] == [3, 2, 2, 2, 3, 3, 3, 3]


@pytest.mark.parametrize("run", z.RUNS, ids=lambda r: r.name)
def test_a_32000_row_vocabulary_gives_every_models_name(run):
    """Table 3's names are parameter counts to 0.1B: 12h² + 13h per layer, the tied V·h
    embedding with V = 32,000, s·h learned positions and the final norm's 2h."""
    h, L = run.d_model, run.n_layer
    by_hand = L * (12 * h * h + 13 * h) + 32_000 * h + 1024 * h + 2 * h  # blocks, embedding, positions, final norm
    assert z.model_of(run).params == by_hand
    assert f"{by_hand / 1e9:.1f}B" == run.name


def test_one_row_by_hand_1f1b_at_1p5b():
    """1.5B (h 2304, a 24, s 1024, b 6), p = 8, 1F1B, the paper's cut. Rank 1 holds 3 blocks and
    p - 1 = 7 microbatches of them (rank 0 has 8 of only 2 blocks and the embedding):

    * static: 3·(12h² + 13h) = 191,192,832 values at 2 + 4 + 8 + 2 = 16 B: 3,059,085,312 B;
    * activations: sbh·34 + 5as²b = 481,296,384 + 754,974,720 = 1,236,271,104 B per block and
      microbatch, × 3 × 7 = 25,961,693,184 B;
    * buffers: a receive and a send buffer of 2sbh = 28,311,552 B each: 56,623,104 B;

    29,077,401,600 B = 29.08 GB against the paper's 30 GB (0.969)."""
    h, a, s, b = 2304, 24, 1024, 6
    sbh = s * b * h
    static = 3 * (12 * h * h + 13 * h) * 16
    act = 7 * 3 * (34 * sbh + 5 * a * s * s * b)
    buffers = 2 * 2 * sbh
    assert (static, act, buffers) == (3_059_085_312, 25_961_693_184, 56_623_104)
    mem = z.plan_memory(z.RUNS[0], "1F1B", "paper")
    assert int(np.argmax(mem.peak)) == 1
    assert mem.peak[1] == pytest.approx(static + act + buffers, rel=1e-12)
    (row,) = z.table("paper", z.RUNS[:1], ("1F1B",))
    assert row["plan_gb"] == pytest.approx(29.0774016)
    assert row["ratio_gb"] == pytest.approx(29.0774016 / 30)


def test_the_even_cut_puts_p_microbatches_of_a_full_stage_on_rank_0():
    """The plan's default cut gives rank 0 three blocks and the embedding; under 1F1B it holds
    p = 8 microbatches of them: 24 block-microbatches against the paper cut's 21 on rank 1."""
    h, a, s, b = 2304, 24, 1024, 6
    block = 34 * s * b * h + 5 * a * s * s * b
    even = z.plan_memory(z.RUNS[0], "1F1B", "even")
    paper = z.plan_memory(z.RUNS[0], "1F1B", "paper")
    assert int(np.argmax(even.peak)) == 0
    assert even.activations[0] - paper.activations[1] == pytest.approx((24 - 21) * block + 8 * s * b * h)
