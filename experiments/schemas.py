"""The typed config schemas in hydra's ConfigStore (docs/architecture.md#where-hydra-stops):
rpd.cli defines them as plain dataclasses (:func:`rpd.cli.config.schemas`,
:func:`rpd.cli.plan_config.schemas`, :func:`rpd.cli.figure.study_schemas`), this module stores
them under the names and groups the configs read. Importing it stores ``train_schema``,
``figure_schema``, ``chart_schema``, ``plan_schema``, ``replay_schema`` and the groups ``schedule_schema/<name>`` and
``optimizer_schema/<name>`` (:func:`register`, run again after a late registration: a schedule
or optimizer registered from a user's file); the figure commands add each study's
``study/<name>/fields`` (:func:`register_studies`, which imports every study)."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from rpd.cli import config, plan_config, replay
from rpd.cli.figure import study_schemas


def _store(schemas) -> None:
    cs = ConfigStore.instance()
    for group, name, node, package in schemas:
        cs.store(name=name, node=node, group=group, package=package)


def register() -> None:
    """The entry points' schemas and the schedule and optimizer groups in hydra's ConfigStore."""
    _store([*config.schemas(), *plan_config.schemas(), *replay.schemas()])


def register_studies() -> None:
    """Every study's schema in hydra's ConfigStore, group ``study/<name>`` (configs/figure.yaml picks
    ``study: ${experiment}/fields``): ``study.<field>=`` is then checked at compose time."""
    _store(study_schemas())


register()
