"""``python -m experiments.train``: the hydra job's directory linked to the run it stored
(docs/architecture.md#where-hydra-stops)."""

import json

from experiments import train as entry
from rpd.cli.job import NONE, Job
from rpd.io import sweeps


def test_a_jobs_directory_is_linked_to_its_stored_run(tmp_path):
    """The entry point links its job's directory through ``rpd.io.sweeps.link_job`` (result.json
    naming the run, its status and whether it was reused, and a ``result`` symlink), which
    ``load_sweep`` reads; a failed job's link names its error; outside hydra nothing is written."""
    run_dir = tmp_path / "results" / "train" / "abc"
    run_dir.mkdir(parents=True)
    job = Job(output_dir=tmp_path / "job")
    entry._link(job, run_dir, status="ok", skipped=True, error=None, wandb_id="w1")
    link = json.loads((tmp_path / "job" / sweeps.JOB_LINK).read_text())
    assert link == {"result": str(run_dir.resolve()), "status": "ok", "skipped": True, "error": None, "wandb_id": "w1"}
    assert (tmp_path / "job" / "result").resolve() == run_dir.resolve()

    failed = Job(output_dir=tmp_path / "failed")
    entry._link(failed, None, status="failed", error="ValueError: schedule.S must be >= 1, got 0")
    link = json.loads((tmp_path / "failed" / sweeps.JOB_LINK).read_text())
    assert (link["result"], link["status"]) == (None, "failed") and link["error"].startswith("ValueError: schedule.S")
    assert not (tmp_path / "failed" / "result").exists()

    before = sorted(tmp_path.rglob("*"))
    entry._link(NONE, run_dir, status="ok")
    assert sorted(tmp_path.rglob("*")) == before
