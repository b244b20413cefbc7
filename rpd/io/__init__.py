"""Results on disk and elsewhere: the store, sweeps as tables, Result files, provenance, tracking.

The public calls (docs/api.md): :func:`load_result` (a sweep table row's stored curves; the
table itself is ``rpd.io.sweeps.load_sweep``, a module run as ``python -m rpd.io.sweeps``), and the modules :mod:`~rpd.io.result_io` (``to_xarray``,
``to_pandas``, ``plot``, ``save``, ``load``), :mod:`~rpd.io.store`, :mod:`~rpd.io.tracking` and :mod:`~rpd.io.trace` (measured training traces, docs/replay.md) and :mod:`~rpd.io.trace_jitter`
(a trace's per-op-type jitter CVs, docs/science.md#stochastic-time).
"""

from rpd.io import result_io, store, trace, trace_jitter, tracking
from rpd.io.sweep_results import load_result

__all__ = ["load_result", "result_io", "store", "trace", "trace_jitter", "tracking"]
