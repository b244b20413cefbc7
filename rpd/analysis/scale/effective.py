"""The public face of κ: :func:`relative_loss_gap`, :func:`effective_tokens` and
:func:`tokens_to_loss` for every method rpd plans (docs/scale.md).

Each method's κ comes from its sources, in this order: (ii) published development rows
(:mod:`~rpd.analysis.scale.published`; DiLoCo, and Streaming DiLoCo by assumption) and (i) rpd's
own simulation (:mod:`~rpd.analysis.scale.simulated`, E18). The first that covers the method's
settings gives the number; the other, where it exists, is reported beside it with how far apart
they are. A published gap g at equal tokens becomes κ through the law's D-term
(:func:`~rpd.analysis.scale.laws.kappa_from_gap` with ΔL = g · L(N, D)); a simulated κ becomes a
gap the other way (:func:`~rpd.analysis.scale.laws.gap_from_kappa`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rpd.analysis.scale import published, simulated
from rpd.analysis.scale.laws import LossLaw, gap_from_kappa, get_law, kappa_from_gap
from rpd.validation import check_choice, check_int, check_real, nearest

SYNCHRONOUS = ("1f1b", "dp", "synchronous")
# Each method's settings by their config names (schedule fields; M, H for the LocalSGD family).
SETTINGS: dict[str, frozenset[str]] = {
    **{m: frozenset({"S", "M", "optimizer"}) for m in SYNCHRONOUS},
    "diloco": frozenset({"M", "H", "optimizer"}),
    "streaming_diloco": frozenset({"M", "H", "P", "tau", "optimizer"}),
    "localsgd": frozenset({"M", "H", "optimizer"}),
    "pipedream": frozenset({"S", "noam", "optimizer"}),
    "pipedream_2bw": frozenset({"S", "M", "optimizer"}),
    "pipemare": frozenset({"S", "optimizer"}),
    "nesterov_async": frozenset({"S", "schedule", "optimizer"}),  # its optimizer is itself
}
METHODS = tuple(SETTINGS)
REQUIRED: dict[str, tuple[str, ...]] = {m: ("M", "H") for m in ("diloco", "streaming_diloco", "localsgd")}
OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam", "adamw", "nadam", "muon", "adam_rotated")
DEFAULT_OPTIMIZER = "adamw"  # the published rows' inner optimizer, and every LM recipe's
STREAMING_ASSUMPTION = (
    "Streaming DiLoCo assumed to cost DiLoCo's gap at the same M, H (Douillard et al. 2025, arXiv 2501.18512, "
    "present it as DiLoCo's loss at less bandwidth; P and tau add nothing here, not fitted)"
)
SYNCHRONOUS_SOURCE = "synchronous: minibatch SGD at the same batch, kappa = 1 by definition"


@dataclass(frozen=True)
class EffectiveTokens:
    """κ of one method at N parameters and D tokens, with its source and, where it exists, the other
    source's κ at the same point (``apart`` = kappa − other_kappa)."""

    method: str
    N: float  # parameters
    D: float  # the method's tokens
    kappa: float  # tokens the method needs over the synchronous run's tokens to the same loss
    relative_gap: float  # (L_method − L_sync) / L_sync at D tokens each
    loss: float  # the method's predicted loss at D tokens: the law's L(N, D / kappa)
    tokens_sync: float  # D / kappa: the synchronous tokens to the method's loss at D
    source: str
    other_kappa: float | None = None
    other_source: str | None = None
    apart: float | None = None
    law: str = ""  # the loss law's source (it converts a gap into κ and back)
    # beyond 10× of the simulated fit's sizes (docs/scale.md#beyond-the-trained-sizes-the-range-rule):
    # ``kappa`` is held at the nearest trained size, ``kappa_trend`` the law read at N; else None
    kappa_trend: float | None = None
    loss_trend: float | None = None  # L(N, D / kappa_trend)

    @property
    def tokens_trend(self) -> float | None:
        """The tokens at ``kappa_trend`` to the same synchronous loss: kappa_trend · tokens_sync."""
        return None if self.kappa_trend is None else self.kappa_trend * self.tokens_sync


def _settings(method: str, settings: dict[str, object]) -> tuple[str, dict[str, int | str]]:
    """(optimizer, the other settings) of ``method``, checked: one-line errors naming the method or setting."""
    if method not in SETTINGS:
        near = nearest(str(method), METHODS)
        raise ValueError(
            f"method must be one of {list(METHODS)}, got {method!r}" + (f" (did you mean {near[0]}?)" if near else "")
        )
    for name in settings:
        if name not in SETTINGS[method]:
            raise ValueError(f"{method} has no setting {name!r} (its settings: {', '.join(sorted(SETTINGS[method]))})")
    for name in REQUIRED.get(method, ()):
        if name not in settings:
            raise ValueError(f"{method} needs the setting {name}")
    optimizer = str(settings.get("optimizer", "nesterov_async" if method == "nesterov_async" else DEFAULT_OPTIMIZER))
    check_choice("optimizer", optimizer, ("nesterov_async",) if method == "nesterov_async" else OPTIMIZERS)
    rest: dict[str, int | str] = {}
    for name, value in settings.items():
        if name == "schedule":
            rest[name] = check_choice("schedule", str(value), ("pipedream", "pipedream_2bw"))
        elif name != "optimizer":
            rest[name] = check_int(name, value, minimum=0 if name == "tau" else 1)
    return optimizer, rest


def _published(method: str, N: float, D: float, optimizer: str, rest: dict[str, int | str]) -> tuple[float, str] | None:
    if method not in ("diloco", "streaming_diloco") or optimizer != "adamw":
        return None
    found = published.diloco_gap(N, D, int(rest["M"]), int(rest["H"]))
    if found is None or method == "diloco":
        return found
    return found[0], f"{STREAMING_ASSUMPTION}; {found[1]}"


def effective_tokens(
    method: str, N: float, D: float, *, law: LossLaw | str = "chinchilla", **settings
) -> EffectiveTokens:
    """κ_m at N parameters and D tokens of method m, with its source.

    κ is the multiplier on tokens: the method at D tokens reaches the loss the synchronous run
    reaches at D / κ, L_sync(N, D/κ) = L_m(N, D). From a relative gap g = (L_m − L_sync) / L_sync
    at equal D, ΔL = g · L(N, D) and κ = (1 + ΔL · D^β / B)^(1/β) (docs/scale.md#kappa). Settings
    by their config names (``M``, ``H``, ``S``, ``noam``, ``P``, ``tau``, ``schedule``,
    ``optimizer``); a method or setting it does not know, or a method no source covers at these
    settings: a one-line ValueError naming it.

    References: Hoffmann et al. 2022 (the law's form); Charles et al. 2025, Douillard et al.
    2023 and 2025 (published DiLoCo rows, docs/scale.md#published-source-diloco); rpd's E18 (simulated κ).
    """
    N, D = check_real("N", N), check_real("D", D)
    law = get_law(law)
    optimizer, rest = _settings(method, settings)
    if method in SYNCHRONOUS:
        return EffectiveTokens(method, N, D, 1.0, 0.0, law.loss(N, D), D, SYNCHRONOUS_SOURCE, law=law.source)
    L = law.loss(N, D)
    found = []
    pub = _published(method, N, D, optimizer, rest)
    if pub is not None:
        found.append((kappa_from_gap(law, D, pub[0] * L), pub[0], pub[1]))
    sim = simulated.simulated_kappa(method, N, optimizer, rest)
    if sim is None and method == "streaming_diloco":  # E18's DiLoCo at the same M, H, by the same assumption
        sim = simulated.simulated_kappa("diloco", N, optimizer, {k: rest[k] for k in ("M", "H")})
        sim = None if sim is None else sim._replace(source=f"{STREAMING_ASSUMPTION}; {sim.source}")
    if sim is not None:
        found.append((sim.kappa, gap_from_kappa(law, D, sim.kappa) / L, sim.source))
    if not found:
        fitted = simulated.available(method)
        raise ValueError(
            f"no source of kappa for method {method!r} with optimizer {optimizer} at {rest}: no published row covers it "
            f"and rpd's E18 has {'fits only at ' + '; '.join(fitted) if fitted else 'no fit for it'}"
        )
    kappa, gap, source = found[0]
    other = found[1] if len(found) > 1 else None
    trend = sim.kappa_trend if sim is not None and pub is None else None  # the range: E18 is the first source
    return EffectiveTokens(
        method,
        N,
        D,
        kappa,
        gap,
        law.loss(N, D / kappa),
        D / kappa,
        source,
        other_kappa=None if other is None else other[0],
        other_source=None if other is None else other[2],
        apart=None if other is None else kappa - other[0],
        law=law.source,
        kappa_trend=trend,
        loss_trend=None if trend is None else law.loss(N, D / trend),
    )


def relative_loss_gap(method: str, N: float, D: float, *, law: LossLaw | str = "chinchilla", **settings) -> float:
    """The predicted relative loss gap (L_m − L_sync) / L_sync of method m at N parameters and D
    tokens each (the primary source of :func:`effective_tokens`; the law only converts a
    simulated κ, ΔL = (B / D^β)(κ^β − 1)). 0 for a synchronous method.

    >>> round(100 * relative_loss_gap("diloco", 550e6, 20 * 550e6, M=8, H=30), 2)  # row: 1.70
    1.67
    """
    return effective_tokens(method, N, D, law=law, **settings).relative_gap


def tokens_to_loss(
    method: str, N: float, target_loss: float, *, law: LossLaw | str = "chinchilla", **settings
) -> EffectiveTokens:
    """The tokens method m needs to reach ``target_loss`` at N parameters, as the
    :class:`EffectiveTokens` at those tokens (``D``; ``tokens_sync`` the synchronous run's tokens to the
    same loss, ``kappa`` = D / tokens_sync). A published gap g independent of D is solved exactly,
    L(N, D)(1 + g) = L ⇒ D = tokens(N, L / (1 + g)); a simulated κ independent of D gives
    D = κ · tokens(N, L). A loss below the law's floor (or the method's): one-line ValueError
    naming ``target_loss``.
    """
    law = get_law(law)
    tokens_sync = law.tokens(N, target_loss)
    if method in SYNCHRONOUS:
        return effective_tokens(method, N, tokens_sync, law=law, **settings)
    optimizer, rest = _settings(method, settings)
    pub = _published(method, N, tokens_sync, optimizer, rest)
    if pub is None:  # κ from E18, independent of D
        D = effective_tokens(method, N, tokens_sync, law=law, **settings).kappa * tokens_sync
    else:
        floor = law.floor(N) * (1.0 + pub[0])
        if target_loss <= floor:
            raise ValueError(
                f"target_loss must be > {floor:.4g} for {method} at N={N:.3g} (the law's floor times 1 + gap), "
                f"got {target_loss}"
            )
        D = law.tokens(N, target_loss / (1.0 + pub[0]))
    return effective_tokens(method, N, D, law=law, **settings)
