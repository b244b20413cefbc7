"""Results on disk and elsewhere: the store, sweeps as tables, Result files, provenance, tracking.

The public calls (docs/api.md): :func:`load_sweep` (a sweep as a table), :func:`load_result`
(a table row's stored curves), and the modules :mod:`~rpd.io.result_io` (``to_xarray``,
``to_pandas``, ``plot``, ``save``, ``load``), :mod:`~rpd.io.store` and :mod:`~rpd.io.tracking`.
"""

from rpd.io import result_io, store, tracking
from rpd.io.sweep_results import load_result
from rpd.io.sweeps import load_sweep

__all__ = ["load_result", "load_sweep", "result_io", "store", "tracking"]
