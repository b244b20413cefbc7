"""Pipeline schedules as exact integer simulations (docs/science.md#schedules, docs/schedules.md).

Two folders. :mod:`rpd.schedules.machinery`: what every schedule shares, the op order per rank
(:mod:`~rpd.schedules.machinery.ir`, the IR of torch's ``pipeline_order``), the cost model, the
one timer, the :class:`~rpd.schedules.machinery.timeline.Timeline` it returns (makespan, bubbles;
activations and weight versions in :mod:`~rpd.schedules.machinery.memory`), the readiness rules,
the search and torch's action strings. :mod:`rpd.schedules.family`: one module per schedule, its
order (or the shared generator it reads), its constructor, its own parameters and its ``ENTRY``
(:class:`~rpd.schedules.machinery.entry.ScheduleEntry`), which :mod:`rpd.registry` collects by
name. This face re-exports each schedule's constructor and the names a notebook uses, and is the
public surface of a schedule of one's own (docs/api.md#the-public-surface): the entry and its parts
(:class:`ScheduleEntry`, :class:`Look`, :class:`Source`, :class:`Variant`), the op vocabulary and
order helpers, :func:`timed` (order + costs -> Timeline), :class:`CostModel` and :class:`Timeline`
(the names of :mod:`rpd.schedules.machinery`'s face; a module of :mod:`rpd.schedules.family`
imports them from there). A schedule's own parameters are a frozen dataclass (no base class),
and it is registered by :func:`rpd.registry.register_schedule` (the registry sits above).
"""

from rpd.schedules.family.ampnet import ampnet
from rpd.schedules.family.avgpipe import avgpipe
from rpd.schedules.family.chimera import chimera
from rpd.schedules.family.dualpipe_v import dualpipe_v
from rpd.schedules.family.gems import gems
from rpd.schedules.family.gpipe import gpipe
from rpd.schedules.family.interleaved import interleaved
from rpd.schedules.family.local_sgd import local_sgd
from rpd.schedules.family.one_f_one_b import one_f_one_b
from rpd.schedules.family.pipedream import pipedream
from rpd.schedules.family.pipedream_2bw import pipedream_2bw
from rpd.schedules.family.pipedream_rr import pipedream_rr
from rpd.schedules.family.pipemare import pipemare
from rpd.schedules.family.searched import searched
from rpd.schedules.family.wpipe import wpipe
from rpd.schedules.family.zb_h1 import zb_h1
from rpd.schedules.family.zb_h2 import zb_h2
from rpd.schedules.family.zb_v import zb_v
from rpd.schedules.machinery import (
    BWD,
    BWD_I,
    BWD_W,
    FWD,
    IDLE,
    Col,
    CostModel,
    Look,
    Op,
    OpTable,
    Order,
    ScheduleEntry,
    Source,
    Timeline,
    Variant,
    check_complete,
    concat,
    delays,
    memory,
    ops,
    order_of,
    render_ascii,
    shift_mb,
    timed,
)
from rpd.schedules.machinery.readiness import ScheduleSpec, local_sgd_many, pipedream_many, simulate_many, validate

__all__ = [
    "BWD",
    "BWD_I",
    "BWD_W",
    "FWD",
    "IDLE",
    "Col",
    "CostModel",
    "Look",
    "Op",
    "OpTable",
    "Order",
    "ScheduleEntry",
    "ScheduleSpec",
    "Source",
    "Timeline",
    "Variant",
    "ampnet",
    "avgpipe",
    "check_complete",
    "chimera",
    "concat",
    "delays",
    "dualpipe_v",
    "gems",
    "gpipe",
    "interleaved",
    "local_sgd",
    "local_sgd_many",
    "memory",
    "one_f_one_b",
    "ops",
    "order_of",
    "pipedream",
    "pipedream_2bw",
    "pipedream_many",
    "pipedream_rr",
    "pipemare",
    "render_ascii",
    "searched",
    "shift_mb",
    "simulate_many",
    "timed",
    "validate",
    "wpipe",
    "zb_h1",
    "zb_h2",
    "zb_v",
]
