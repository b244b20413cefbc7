"""E18's arms (:mod:`rpd.studies.kappa_scale`, and E18 at fixed depth, :mod:`rpd.studies.kappa_width`):
the grammar "optimizer/method[/M=m][/H=h]", every arm the question knows (``FULL_ARMS``) and the
ones the paper size trains (``ARMS``)."""

from __future__ import annotations

OPTIMIZERS = ("sgd", "adamw", "muon")
PIPELINES = ("pipedream", "pipedream_2bw", "pipemare")


# every arm the study knows, "optimizer/method[/M=m][/H=h]": the full factorial of the question
FULL_ARMS = tuple(
    [f"{o}/{p}" + ("/M=4" if p == "pipedream_2bw" else "") for o in OPTIMIZERS for p in PIPELINES]
    + [
        f"{o}/{m}/M={M}/H={H}"
        for o in OPTIMIZERS
        for m in ("local_sgd", "diloco")
        for M in (1, 2, 4, 8)
        for H in (2, 8)
    ]
    + ["nesterov_async/pipedream"]
)
# What the paper size trains: on 2 shared CPU cores every arm costs 30-60 s of compiling (a program
# per method, optimizer, M and size), so the full factorial (61 arms and 20 references per size) is
# hours. Every pipeline under AdamW (DiLoCo's inner optimizer in the development rows), DiLoCo at
# M = 1 and 4 (H = 8) and M = 4 at H = 2, LocalSGD M = 4 at H = 8; PD under SGD, Muon and
# nesterov_async. ``study.overrides.arms`` runs any of FULL_ARMS.
ARMS = (
    "adamw/pipedream",
    "adamw/pipedream_2bw/M=4",
    "adamw/pipemare",
    "adamw/diloco/M=1/H=8",
    "adamw/diloco/M=4/H=8",
    "adamw/diloco/M=4/H=2",
    "adamw/local_sgd/M=4/H=8",
    "sgd/pipedream",
    "muon/pipedream",
    "nesterov_async/pipedream",
)


def parse_arm(arm: str) -> tuple[dict, int]:
    """ "adamw/diloco/M=4/H=8" -> ({method, optimizer, settings}, the reference's M)."""
    parts = arm.split("/")
    if len(parts) < 2 or parts[1] not in (*PIPELINES, "local_sgd", "diloco"):
        raise ValueError(
            f"arms: {arm!r} is not optimizer/method[/M=m][/H=h] with a method of {[*PIPELINES, 'local_sgd', 'diloco']}"
        )
    try:
        settings = {k: int(v) for k, v in (p.split("=") for p in parts[2:])}
    except ValueError:
        raise ValueError(f"arms: {arm!r}: settings must be M=<int> / H=<int>") from None
    need = {"pipedream_2bw": {"M"}, "local_sgd": {"M", "H"}, "diloco": {"M", "H"}}.get(parts[1], set())
    if set(settings) != need or any(v < 1 for v in settings.values()):
        raise ValueError(f"arms: {arm!r}: {parts[1]} takes exactly {sorted(need) or 'no settings'} (positive)")
    return dict(method=parts[1], optimizer=parts[0], settings=settings), settings.get("M", 1)
