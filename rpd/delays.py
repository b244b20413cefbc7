"""Exact delays read off a timeline (SPEC §3).

With weight stashing, the backward of microbatch m on stage a (iteration k) computes the
gradient at the mixed point z^k whose block r is the version block r had when F(m, r) ran.
"""

from __future__ import annotations

import numpy as np

from rpd.schedules import Timeline


def read_versions(tl: Timeline) -> np.ndarray:
    """int32 [K, S]: v[k, r] = number of updates block r had received when F(m_k, r) ran,
    i.e. the version of block r that update k reads."""
    # B ops of one stage run in microbatch order, so the count of B(., r) strictly before
    # F(m, r) is a binary search in that stage's (sorted) backward times.
    v_NxS = np.empty((tl.N, tl.S), np.int32)
    for r in range(tl.S):
        v_NxS[:, r] = np.searchsorted(tl.b_time[:, r], tl.f_time[:, r], side="left")
    return v_NxS[tl.update_mb]
