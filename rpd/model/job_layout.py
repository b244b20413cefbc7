"""A measured job's layout: the parallel sizes of a Megatron-LM job whose trace is replayed
(docs/replay.md). Read from the trace's meta file by :func:`rpd.io.trace.read_meta`."""

from __future__ import annotations

import dataclasses

from rpd.validation import check_int


@dataclasses.dataclass(frozen=True)
class JobLayout:
    """Sizes of one job (the meta file of Lin et al.'s traces, ``analyzer/metatypes.py`` JobMeta):
    data-parallel ``dp``, pipeline ``pp``, tensor ``tp``, context-parallel ``dsp``, model chunks
    per pipeline rank ``vpp``; ``world = dp * pp * tp * dsp`` GPUs. A trace holds one row per op
    of one GPU per (dp rank, stage): the tensor and context ranks run the same ops."""

    dp: int
    pp: int
    tp: int = 1
    dsp: int = 1
    vpp: int = 1
    world: int | None = None
    name: str = ""

    def __post_init__(self):
        for field in ("dp", "pp", "tp", "dsp", "vpp"):
            check_int(f"meta.{field}_size", getattr(self, field))
        world = self.dp * self.pp * self.tp * self.dsp
        if self.world is not None and self.world != world:
            raise ValueError(
                f"meta.world_size must be dp_size * pp_size * tp_size * dsp_size = {world}, got {self.world}"
            )

    @property
    def workers(self) -> int:
        """The (dp rank, stage) pairs a trace has ops for."""
        return self.dp * self.pp
