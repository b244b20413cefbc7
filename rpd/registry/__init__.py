"""Registries of pipeline schedules and training methods: the entry points' one dispatch.

A run is (method, schedule, costs). The schedule registry turns plain values
(:class:`ScheduleParams`) and a :class:`~rpd.schedules.costs.CostModel` into a timed
:class:`~rpd.schedules.Timeline`; the method registry trains an objective on it for a whole
step-size grid and one seed and returns a :class:`MethodRun` (the Result, both time axes and the
run's summary numbers). A schedule is one :class:`ScheduleEntry` (:mod:`rpd.registry.entry`;
the built-in ones in :mod:`rpd.registry.catalog`): adding one is its module, one
:func:`register_schedule` call and its config file ``configs/schedule/<name>.yaml``; adding a
method is one :func:`register_method` call.

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

from rpd.registry import (
    catalog,  # noqa: F401  (registers the built-in schedules)
    catalog_2024,  # noqa: F401  (registers the schedules shipped since 2024)
)
from rpd.registry.entry import (
    DEFAULTS,  # noqa: F401  (re-exported)
    SCHEDULES,
    VARIANTS,
    ScheduleEntry,
    ScheduleParams,
    Source,
    Variant,
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

__all__ = [
    "METHODS",
    "SCHEDULES",
    "VARIANTS",
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
