"""The machinery every schedule shares: the op vocabulary and orders (:mod:`.ir`), the cost model
(:mod:`.costs`; its stochastic time, per-op jitter and persistent stragglers, :mod:`.jitter`), the one timer (:mod:`.timer`, :mod:`.build`), the timed record (:mod:`.timeline`),
what a timeline reports (:mod:`.memory`, :mod:`.delays`, :mod:`.offload`), the readiness rules
(:mod:`.readiness`), data-parallel pipelines around a schedule (:mod:`.data_parallel`), the search
(:mod:`.search`, :mod:`.search_heuristic`, :mod:`.search_exact`), torch's action strings
(:mod:`.torch_format`) and :class:`~.entry.ScheduleEntry`, the shape of one schedule. No schedule
lives here: each is a module of :mod:`rpd.schedules.family`."""

from rpd.schedules.machinery import delays, memory
from rpd.schedules.machinery.build import order_of, timed
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, ScheduleEntry, Source, Variant
from rpd.schedules.machinery.ir import (
    BWD,
    BWD_I,
    BWD_W,
    FWD,
    IDLE,
    Col,
    Op,
    Order,
    check_complete,
    concat,
    ops,
    shift_mb,
)
from rpd.schedules.machinery.timeline import OpTable, Timeline, render_ascii

# What a schedule's module needs (docs/api.md#the-public-surface; re-exported by rpd.schedules, the
# face a user's code imports; a module of rpd.schedules.family imports them from here, below the
# face that imports the family).
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
    "Source",
    "Timeline",
    "Variant",
    "check_complete",
    "concat",
    "delays",
    "memory",
    "ops",
    "order_of",
    "render_ascii",
    "shift_mb",
    "timed",
]
