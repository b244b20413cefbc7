"""DiLoCo's and Streaming DiLoCo's outer exchange on the plan's links (docs/time_to_loss.md).

DiLoCo (Douillard et al. 2023, arXiv 2311.08105): M replicas, each a data-parallel job of its
own on n / M workers, run H inner steps without any traffic between replicas; then the replicas
all-reduce the pseudo-gradient Δ = θ − x_r of every parameter, ``value_bytes`` bytes per value
(its dtype: 4 fp32, 2 bf16, 0.5 a 4-bit float), and take the outer step. The exchange is a ring
over the M replicas, the model's N values split evenly over a replica's n / M ranks (each rank
reduces its share with the ranks holding the same share in the other replicas, on its own
inter-node port, :meth:`~rpd.model.hardware.Hardware.allreduce_seconds`). With the replicas
spread over ``hardware.sites`` sites (M a multiple of the sites, M / sites per site, in a row on
the ring) every one of those n / M rings crosses each site link once, so each site's link carries
what one replica sends:

    bytes over each site link per exchange = 2 (M − 1) / M · N · value_bytes,
    t_exchange = max(in-site ring, 2 (M − 1) · site_latency + that / (site_bandwidth / 8)).

DiLoCo blocks on it: a step takes t_inner + t_exchange / H on average.

Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512, §2): the parameters cut into P
fragments, fragment p exchanged once every H steps, the fragments in turn H / P steps apart, and
each exchange overlapped with the next τ inner steps (its outer update lands τ steps late). A
fragment's exchange takes e = t_exchange(N / P values); it hides under the τ steps when e <= τ ·
t_inner, else the remainder e − τ · t_inner is charged; and the link carries at most one step
of compute's worth of exchange per step, so over H steps at least P · e − H · t_inner is
exposed. Per step on average:

    exposed = max(P · max(0, e − τ · t_inner), P · e − H · t_inner, 0) / H.

The bytes over each site link per step are those of the whole model every H steps in both
methods (2 (M − 1) / M · N · value_bytes / H): the fragments spread them, the overlap hides
them, the dtype shrinks them. The outer optimizer's own compute is not counted (a few vector
operations on the values, against H steps of the model).
"""

from __future__ import annotations

import dataclasses

from rpd.model.hardware import Hardware
from rpd.validation import check_int, check_real


@dataclasses.dataclass(frozen=True)
class Exchange:
    """One outer all-reduce: seconds, and bytes each site sends over its site link."""

    seconds: float
    site_bytes: float


def exchange(hw: Hardware, values: float, M: int, ranks: int, value_bytes: float = 4.0) -> Exchange:
    """The all-reduce of ``values`` pseudo-gradient values at ``value_bytes`` each over ``M``
    replicas of ``ranks`` ranks each (module docstring): each rank's ring of values / ranks over
    the M replicas on its inter-node port, and, with ``hardware.sites`` > 1, every ring crossing
    each site link once,

        t = max(latency + 2(M−1)/M · values · value_bytes / (ranks · allreduce_bandwidth),
                2(M−1) · site_latency + 2(M−1)/M · values · value_bytes / (site_bandwidth / 8))."""
    M, ranks = check_int("diloco.M", M), check_int("ranks", ranks)
    value_bytes = check_real("diloco.value_bytes", value_bytes)
    check_real("values", values)
    if M == 1:
        return Exchange(0.0, 0.0)
    share = values * value_bytes / ranks  # one rank's part of its replica's pseudo-gradient
    rings = ranks if hw.sites > 1 else 0
    seconds = hw.allreduce_seconds(share, M, 1, rings)
    site = ranks * hw.ring_bytes(share, M) if rings else 0.0
    return Exchange(seconds, site)


def replica_hardware(hw: Hardware, M: int) -> Hardware:
    """The hardware one of M replicas sees: one site when M is a multiple of the sites; all of
    them for M = 1 (the one replica spans the sites, its own DP groups cross them)."""
    M = check_int("diloco.M", M)
    if hw.sites == 1:
        return hw
    if M == 1:
        return hw
    if M % hw.sites:
        raise ValueError(
            f"diloco.M={M} with hardware.sites={hw.sites}: M must be 1 or a multiple of the sites "
            "(each replica inside one site)"
        )
    return dataclasses.replace(hw, sites=1, site_bandwidth=None, site_latency=0.0)


def exposed_seconds(fragment_s: float, P: int, H: int, tau: int, step_s: float) -> float:
    """Seconds per step Streaming DiLoCo's exchanges add on average (module docstring):
    max(P · max(0, e − τ · t), P · e − H · t, 0) / H, e = ``fragment_s``, t = ``step_s``. P = 1,
    τ = 0 is DiLoCo: e / H."""
    P, H = check_int("diloco.P", P), check_int("diloco.H", H)
    tau = check_int("diloco.tau", tau, minimum=0)
    if H % P:
        raise ValueError(f"diloco.P={P} must divide diloco.H={H} (the fragments in turn, H / P steps apart)")
    each = P * max(0.0, fragment_s - tau * step_s)
    return max(each, P * fragment_s - H * step_s, 0.0) / H


@dataclasses.dataclass(frozen=True)
class OuterStep:
    """A DiLoCo-style method timed: seconds per step, of which exposed exchange, and bytes each
    site sends over its site link per step."""

    step_s: float
    exposed_s: float
    site_bytes_per_step: float
    exchange_s: float  # one fragment's (the whole model's at P = 1) exchange


def outer_step(
    hw: Hardware,
    inner_step_s: float,
    values: float,
    M: int,
    ranks: int,
    H: int,
    value_bytes: float = 4.0,
    P: int = 1,
    tau: int = 0,
) -> OuterStep:
    """DiLoCo (P = 1, τ = 0) or Streaming DiLoCo on top of one replica's inner step of
    ``inner_step_s`` seconds on ``ranks`` ranks: t = t_inner + :func:`exposed_seconds` of one
    fragment's :func:`exchange` of values / P."""
    check_real("inner_step_s", inner_step_s)
    P = check_int("diloco.P", P)
    one = exchange(hw, values / P, M, ranks, value_bytes)
    exposed = exposed_seconds(one.seconds, P, H, tau, inner_step_s)
    return OuterStep(inner_step_s + exposed, exposed, P * one.site_bytes / H, one.seconds)
