"""Pipeline schedules as exact integer simulations (docs/science.md#schedules, docs/schedules.md).

A schedule is an op order per rank (:mod:`~rpd.schedules.ir`, the IR of torch's
``pipeline_order``), produced by a readiness rule (PipeDream, LocalSGD:
:mod:`~rpd.schedules.readiness`) or a generator (:mod:`~rpd.schedules.orders`,
:mod:`~rpd.schedules.v_shape`, :mod:`~rpd.schedules.bidirectional`), and timed under a
:class:`rpd.schedules.costs.CostModel` by one timer (:mod:`~rpd.schedules.timer`). The result is a
:class:`~rpd.schedules.timeline.Timeline`, which reports makespan, bubbles, activations and
weight versions; :mod:`~rpd.schedules.torch_format` round-trips orders through
torch.distributed.pipelining's action strings. Which schedules exist, by name, is the
registry's (:mod:`rpd.registry`, one entry per schedule); this package builds and measures them.
"""

from rpd.schedules.avgpipe import avgpipe
from rpd.schedules.family import (
    ampnet,
    chimera,
    dualpipe_v,
    gems,
    gpipe,
    interleaved,
    local_sgd,
    one_f_one_b,
    pipedream,
    pipedream_2bw,
    pipemare,
    wpipe,
    zb_h1,
    zb_h2,
    zb_v,
)
from rpd.schedules.ir import BWD, BWD_I, BWD_W, FWD, IDLE, Col, Op
from rpd.schedules.readiness import ScheduleSpec, local_sgd_many, pipedream_many, simulate_many, validate
from rpd.schedules.round_robin import pipedream_rr
from rpd.schedules.search import searched
from rpd.schedules.timeline import OpTable, Timeline, render_ascii

__all__ = [
    "BWD",
    "BWD_I",
    "BWD_W",
    "FWD",
    "IDLE",
    "Col",
    "Op",
    "OpTable",
    "ScheduleSpec",
    "Timeline",
    "ampnet",
    "avgpipe",
    "chimera",
    "dualpipe_v",
    "gems",
    "gpipe",
    "interleaved",
    "local_sgd",
    "local_sgd_many",
    "one_f_one_b",
    "pipedream",
    "pipedream_2bw",
    "pipedream_many",
    "pipedream_rr",
    "pipemare",
    "render_ascii",
    "searched",
    "simulate_many",
    "validate",
    "wpipe",
    "zb_h1",
    "zb_h2",
    "zb_v",
]
