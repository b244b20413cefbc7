"""The command line's library: what the entry points of ``experiments/`` (``python -m
experiments.<name>``) are made of: the typed config schemas hydra composes onto (``config``,
``optimizer_config``, ``schedule_config``, ``plan_config``), their value checks (``checks``,
``compose_check``), the library objects a config stands for (``specs``, ``objectives``), each
command's job (``train``, ``figure``, ``plan`` with ``plan_search`` and ``plan_train``), sweeps and
fan-out (``sweep``, ``fanout``), what a figure run writes and prints (``manifest``, ``tables``,
``report``) and the wandb glue (``wandb_log``). The one rpd subpackage that imports hydra
(docs/architecture.md#layers)."""
