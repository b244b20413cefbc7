"""Pipeline schedules as exact integer simulations (SPEC §2, §10).

A schedule is an op order per rank (:mod:`~rpd.schedules.ir`, the IR of torch's
``pipeline_order``), produced by a readiness rule (PipeDream, LocalSGD:
:mod:`~rpd.schedules.readiness`) or a generator (:mod:`~rpd.schedules.orders`,
:mod:`~rpd.schedules.v_shape`, :mod:`~rpd.schedules.bidirectional`), and timed under a
:class:`rpd.schedules.costs.CostModel` by one timer (:mod:`~rpd.schedules.timer`). The result is a
:class:`~rpd.schedules.timeline.Timeline`, which reports makespan, bubbles, activations and
weight versions; :mod:`~rpd.schedules.torch_format` round-trips orders through
torch.distributed.pipelining's action strings.
"""

from rpd.schedules.family import (
    SCHEDULES,
    chimera,
    dualpipe_v,
    gpipe,
    interleaved,
    local_sgd,
    one_f_one_b,
    pipedream,
    pipedream_2bw,
    pipemare,
    zb_h1,
    zb_h2,
    zb_v,
)
from rpd.schedules.ir import BWD, BWD_I, BWD_W, FWD, IDLE
from rpd.schedules.readiness import ScheduleSpec, local_sgd_many, pipedream_many, simulate_many, validate
from rpd.schedules.timeline import OpTable, Timeline, render_ascii

__all__ = [
    "BWD",
    "BWD_I",
    "BWD_W",
    "FWD",
    "IDLE",
    "SCHEDULES",
    "OpTable",
    "ScheduleSpec",
    "Timeline",
    "chimera",
    "dualpipe_v",
    "gpipe",
    "interleaved",
    "local_sgd",
    "local_sgd_many",
    "one_f_one_b",
    "pipedream",
    "pipedream_2bw",
    "pipedream_many",
    "pipemare",
    "render_ascii",
    "simulate_many",
    "validate",
    "zb_h1",
    "zb_h2",
    "zb_v",
]
