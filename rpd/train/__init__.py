"""Training through a schedule's semantics: update plans, the one stale block-SGD core, the methods.

The public calls (docs/api.md): :func:`train` (any timeline with its schedule's semantics),
:func:`pipedream`, :func:`rpd`, :func:`sgd`, :func:`local_sgd` and :func:`run_plan` (any
:class:`UpdatePlan`); the modules :mod:`~rpd.train.plans`, :mod:`~rpd.train.semantics`,
:mod:`~rpd.train.optimizers`, :mod:`~rpd.train.corrections` and :mod:`~rpd.train.diloco`; an
optimizer of one's own (docs/api.md#the-public-surface): :class:`OptimizerEntry`,
:func:`register_optimizer` (:func:`rpd.train.transforms.register`) and the table :data:`OPTIMIZERS`.
"""

from rpd.train import corrections, diloco, methods, optimizers, plans, semantics, transforms
from rpd.train.methods import local_sgd, pipedream, rpd, run_plan, sgd, train
from rpd.train.plans import UpdatePlan
from rpd.train.semantics import Semantics
from rpd.train.transforms import OPTIMIZERS, OptimizerEntry
from rpd.train.transforms import register as register_optimizer

__all__ = [
    "OPTIMIZERS",
    "OptimizerEntry",
    "Semantics",
    "UpdatePlan",
    "corrections",
    "diloco",
    "local_sgd",
    "methods",
    "optimizers",
    "pipedream",
    "plans",
    "register_optimizer",
    "rpd",
    "run_plan",
    "semantics",
    "sgd",
    "train",
    "transforms",
]
