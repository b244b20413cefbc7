"""The schedule family: one module per schedule, each holding its constructor (and its order, or
the shared generator it reads: :mod:`.orders` for Megatron's and zero bubble's, :mod:`.v_shape`,
:mod:`.bidirectional`, :mod:`.frontier`, :mod:`.v_memory`, :mod:`.post_validation`), its own
parameters (``Params``, a frozen dataclass) and its ``ENTRY``
(:class:`rpd.schedules.machinery.entry.ScheduleEntry`); a module may add ``VARIANTS``. This
package collects them by name (:data:`ENTRIES`, :data:`VARIANTS`) for the registry
(:mod:`rpd.registry`) and for the semantics of a bare timeline (:func:`rpd.train.semantics.of`).
A new schedule is a new module here, listed in :data:`MODULES` (docs/architecture.md#adding-a-schedule).
"""

from __future__ import annotations

from types import ModuleType

from rpd.schedules.family import (
    ampnet,
    avgpipe,
    bitpipe,
    chimera,
    combined_1f1b,
    dualpipe,
    dualpipe_v,
    gems,
    gpipe,
    interleaved,
    interleaved_zb,
    local_sgd,
    looped_bfs,
    one_f_one_b,
    pipedream,
    pipedream_2bw,
    pipedream_rr,
    pipemare,
    searched,
    v_half,
    v_min,
    wpipe,
    zb_h1,
    zb_h2,
    zb_v,
)
from rpd.schedules.machinery.entry import ScheduleEntry, Variant

# The registration order (tables and legends list schedules in it).
MODULES: tuple[ModuleType, ...] = (
    pipedream,
    local_sgd,
    gpipe,
    one_f_one_b,
    interleaved,
    zb_h1,
    zb_h2,
    searched,
    zb_v,
    dualpipe_v,
    chimera,
    pipedream_2bw,
    pipemare,
    gems,
    ampnet,
    wpipe,
    avgpipe,
    pipedream_rr,
    looped_bfs,
    interleaved_zb,
    dualpipe,
    combined_1f1b,
    v_half,
    v_min,
    bitpipe,
)
ENTRIES: dict[str, ScheduleEntry] = {m.ENTRY.name: m.ENTRY for m in MODULES}
VARIANTS: dict[str, Variant] = {v.name: v for m in MODULES for v in getattr(m, "VARIANTS", ())}
