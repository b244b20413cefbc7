"""Pipeline schedules as exact integer simulations (docs/science.md#schedules, docs/schedules.md).

Two folders. :mod:`rpd.schedules.machinery`: what every schedule shares, the op order per rank
(:mod:`~rpd.schedules.machinery.ir`, the IR of torch's ``pipeline_order``), the cost model, the
one timer, the :class:`~rpd.schedules.machinery.timeline.Timeline` it returns (makespan, bubbles;
activations and weight versions in :mod:`~rpd.schedules.machinery.memory`), the readiness rules,
the search and torch's action strings. :mod:`rpd.schedules.family`: one module per schedule, its
order (or the shared generator it reads), its constructor, its own parameters and its ``ENTRY``
(:class:`~rpd.schedules.machinery.entry.ScheduleEntry`), which :mod:`rpd.registry` collects by
name. This face re-exports each schedule's constructor and the names a notebook uses.
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
from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD, IDLE, Col, Op
from rpd.schedules.machinery.readiness import ScheduleSpec, local_sgd_many, pipedream_many, simulate_many, validate
from rpd.schedules.machinery.timeline import OpTable, Timeline, render_ascii

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
