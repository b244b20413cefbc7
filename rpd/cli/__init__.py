"""The command line's library: what the entry points of ``experiments/`` (``python -m
experiments.<name>``) are made of: the typed config schemas hydra composes onto, as plain
dataclasses (``config``, ``optimizer_config``, ``schedule_config``, ``plan_config``), their value
checks (``checks``), the hydra job's facts as a plain value (``job``), the library objects a
config stands for (``specs``, ``objectives``), each command's job (``train``, ``figure``, ``plan``
with ``plan_search`` and ``plan_train``), sweeps, fan-out and SLURM (``sweep``, ``fanout``, ``slurm``), what a
figure run writes and prints (``manifest``, ``tables``, ``report``) and the wandb glue
(``wandb_log``). It imports no hydra: the entry points store its schemas in hydra's ConfigStore,
hold the sweep callbacks and the compose check, and pass hydra's run-time facts down as plain
arguments (docs/architecture.md#where-hydra-stops)."""
