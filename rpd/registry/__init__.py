"""Registries of pipeline schedules and training methods: the entry points' one dispatch.

A run is (method, schedule, costs). The schedule registry turns plain values
(:class:`ScheduleParams`) and a :class:`~rpd.schedules.machinery.costs.CostModel` into a timed
:class:`~rpd.schedules.Timeline`; the method registry trains an objective on it for a whole
step-size grid and one seed and returns a :class:`MethodRun` (the Result, both time axes and the
run's summary numbers). A schedule is one :class:`ScheduleEntry`, defined in its own module
(``rpd/schedules/family/<name>.py``, its ``ENTRY``) and collected here by name
(:data:`SCHEDULES`, :mod:`rpd.registry.entry`): adding one is its module and its config file
``configs/schedule/<name>.yaml`` (a schedule outside rpd: one :func:`register_schedule` call);
adding a method is one :func:`register_method` call.

:func:`prepare` checks a (method, schedule, options, costs) choice before any work and returns
it resolved (defaults filled in, fields the run does not read set to None, which is what a
results-store key wants). Errors name the config field through ``prefix`` (``schedule.M``)
and reuse the library's own ValueErrors: the schedule's smallest instance (one flush) is built
under the run's costs, and the parameter names in whatever its constructor raised are qualified.

The schedules live in :mod:`rpd.registry.schedules`, the methods and a whole run in
:mod:`rpd.registry.methods`; this module is their one public face (importing it registers every
schedule and method). Only plain values cross these modules; nothing here imports hydra.
"""

from __future__ import annotations

from rpd.registry.entry import (
    SCHEDULES,
    VARIANTS,
    ScheduleParams,
    entry_of,
    label_of,
    owners_of,
    register_schedule,
    register_variant,
    style,
)
from rpd.registry.methods import (
    METHODS,
    MethodEntry,
    MethodOptions,
    MethodRun,
    Pipeline,
    RunSpec,
    prepare,
    register_method,
    run,
    schedule_of,
    timeline_summary,
)
from rpd.registry.schedules import (
    build,
    check_schedule,
    make,
    objective_blocks,
    resolve,
    searched,
    timeline,
    variant,
)
from rpd.schedules import family
from rpd.schedules.machinery.entry import DEFAULTS, Look, ScheduleEntry, Source, Variant  # noqa: F401  (re-exported)

__all__ = [
    "METHODS",
    "SCHEDULES",
    "VARIANTS",
    "Look",
    "MethodEntry",
    "MethodOptions",
    "MethodRun",
    "Pipeline",
    "RunSpec",
    "ScheduleEntry",
    "ScheduleParams",
    "Source",
    "Variant",
    "build",
    "check_schedule",
    "entry_of",
    "label_of",
    "make",
    "objective_blocks",
    "owners_of",
    "prepare",
    "register_method",
    "register_schedule",
    "register_variant",
    "resolve",
    "run",
    "schedule_of",
    "searched",
    "style",
    "timeline",
    "timeline_summary",
    "variant",
]

for _entry in family.ENTRIES.values():  # the family's entries, each defined in its own module
    register_schedule(_entry)
for _variant in family.VARIANTS.values():
    register_variant(_variant)
