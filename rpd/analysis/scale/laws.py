"""Loss laws L(N, D) for synchronous training and the tokens they need to reach a loss
(docs/scale.md#the-loss-law).

L(N, D) = E + A / N^α + B / D^β  (N parameters, D training tokens, loss in nats per token).
Inverse in D at a target loss L above the law's floor at N, E + A / N^α:

    D(N, L) = (B / (L − E − A / N^α))^(1/β).

Presets: Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models" (arXiv
2203.15556), approach 3 (the parametric fit); Besiroglu et al. 2024, "Chinchilla Scaling: A
replication attempt" (arXiv 2404.10102), their refit of the same form to the data read back from
Hoffmann et al.'s figure (docs/scale.md#the-loss-law).
"""

from __future__ import annotations

from dataclasses import dataclass

from rpd.validation import check_real, nearest


@dataclass(frozen=True)
class LossLaw:
    """L(N, D) = E + A / N^α + B / D^β, constants with their ``source`` (a citation).

    A user's own constants: ``LossLaw(E=..., A=..., B=..., alpha=..., beta=..., source="my fit")``.
    """

    E: float  # irreducible loss (nats / token)
    A: float  # parameter term's scale
    B: float  # data term's scale
    alpha: float  # parameter exponent α
    beta: float  # data exponent β
    source: str = "user"

    def __post_init__(self) -> None:
        check_real("E", self.E, allow_zero=True)
        for name in ("A", "B", "alpha", "beta"):
            check_real(name, getattr(self, name))

    def floor(self, N: float) -> float:
        """The loss at N parameters and infinite data: E + A / N^α."""
        return self.E + self.A / check_real("N", N) ** self.alpha

    def loss(self, N: float, D: float) -> float:
        """L(N, D) = E + A / N^α + B / D^β."""
        return self.floor(N) + self.B / check_real("D", D) ** self.beta

    def tokens(self, N: float, L: float) -> float:
        """Tokens D at which the law reaches loss ``L`` at N parameters:
        D = (B / (L − E − A / N^α))^(1/β); a one-line ValueError naming ``target_loss`` when L is
        at or below the floor E + A / N^α (no number of tokens reaches it)."""
        L = check_real("target_loss", L)
        room = L - self.floor(N)
        if room <= 0:
            raise ValueError(
                f"target_loss must be > {self.floor(N):.4g}, the floor of {self.source} at N={N:.3g} "
                f"(E + A/N^alpha), got {L}"
            )
        return (self.B / room) ** (1.0 / self.beta)


CHINCHILLA = LossLaw(
    E=1.69,
    A=406.4,
    B=410.7,
    alpha=0.34,
    beta=0.28,
    source="Hoffmann et al. 2022 (Chinchilla), approach 3",
)
BESIROGLU = LossLaw(
    E=1.8172,
    A=482.01,
    B=2085.43,
    alpha=0.3478,
    beta=0.3658,
    source="Besiroglu et al. 2024 (Chinchilla scaling: a replication attempt)",
)
LAWS: dict[str, LossLaw] = {"chinchilla": CHINCHILLA, "besiroglu": BESIROGLU}


def get_law(law: LossLaw | str) -> LossLaw:
    """A preset by name (:data:`LAWS`) or the user's own :class:`LossLaw`, as is."""
    if isinstance(law, LossLaw):
        return law
    if law not in LAWS:
        near = nearest(str(law), LAWS)
        raise ValueError(
            f"law must be one of {sorted(LAWS)} or a LossLaw, got {law!r}"
            + (f" (did you mean {near[0]}?)" if near else "")
        )
    return LAWS[law]


def kappa_from_gap(law: LossLaw, D: float, delta_L: float) -> float:
    """The effective-token multiplier κ of a loss gap ΔL at equal tokens D, through the law's D-term.

    The method at D tokens sits where the synchronous run sits at D/κ tokens:
    L(N, D/κ) = L(N, D) + ΔL ⇔ B κ^β / D^β = B / D^β + ΔL ⇔ κ = (1 + ΔL · D^β / B)^(1/β).
    N cancels. κ = 1 at ΔL = 0, κ < 1 when ΔL < 0. A gap below −B / D^β (the method under the
    synchronous run's infinite-data loss) has no κ: a one-line ValueError naming ``delta_L``.
    """
    D = check_real("D", D)
    delta_L = check_real("delta_L", delta_L, positive=False)
    base = 1.0 + delta_L * D**law.beta / law.B
    if base <= 0:
        raise ValueError(
            f"delta_L must be > {-law.B / D**law.beta:.4g} (-B/D^beta: the synchronous run's whole data term), got {delta_L}"
        )
    return base ** (1.0 / law.beta)


def gap_from_kappa(law: LossLaw, D: float, kappa: float) -> float:
    """ΔL = L(N, D/κ) − L(N, D) = (B / D^β)(κ^β − 1): the inverse of :func:`kappa_from_gap`."""
    return law.B / check_real("D", D) ** law.beta * (check_real("kappa", kappa) ** law.beta - 1.0)
