"""Training through a schedule's semantics: update plans, the one stale block-SGD core, the methods.

The public calls (docs/api.md): :func:`train` (any timeline with its schedule's semantics),
:func:`pipedream`, :func:`rpd`, :func:`sgd`, :func:`local_sgd` and :func:`run_plan` (any
:class:`UpdatePlan`); the modules :mod:`~rpd.train.plans`, :mod:`~rpd.train.semantics`,
:mod:`~rpd.train.optimizers`, :mod:`~rpd.train.corrections` and :mod:`~rpd.train.diloco`.
"""

from rpd.train import corrections, diloco, optimizers, plans, semantics
from rpd.train.methods import local_sgd, pipedream, rpd, run_plan, sgd, train
from rpd.train.plans import UpdatePlan
from rpd.train.semantics import Semantics

__all__ = [
    "Semantics",
    "UpdatePlan",
    "corrections",
    "diloco",
    "local_sgd",
    "optimizers",
    "pipedream",
    "plans",
    "rpd",
    "run_plan",
    "semantics",
    "sgd",
    "train",
]
