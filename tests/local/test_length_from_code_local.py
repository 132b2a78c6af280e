"""Determined 0.38 length semantics end to end on the local backend: a searcher
without ``max_length`` runs each trial until its training code ends (the toy trial
stops at its own 10 steps when there is no target.json)."""

import json
from pathlib import Path

from tests.local.conftest import TOY, cli, write_config


def test_random_without_max_length_runs_until_the_code_ends(home, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", searcher={
        "name": "random", "metric": "validation_loss", "max_trials": 2,
        "max_concurrent_trials": 2})
    exp = json.loads(cli("submit", cfg, TOY, "--json").stdout)["id"]
    cli("experiment", "wait", exp, "--timeout", "180", timeout=200)
    d = json.loads(cli("experiment", "describe", exp, "--json").stdout)
    assert d["state"] == "COMPLETED", d
    assert len(d["trials"]) == 2
    for t in d["trials"]:
        assert t["state"] == "COMPLETED", t
        assert t["steps_completed"] == 10          # the code's own length
        assert t["best_validation"] is not None
    for trial_dir in Path(d["run_dir"], "trials").iterdir():
        assert not (trial_dir / "target.json").exists()


def test_valid_but_unsupported_validates_with_a_warning_and_submit_refuses(home, tmp_path):
    cfg = write_config(tmp_path / "c.yaml",
                       checkpoint_storage={"type": "s3", "bucket": "b"})
    ok = cli("config", "validate", cfg)
    assert "checkpoint_storage.type" in ok.stdout + ok.stderr
    refused = cli("submit", cfg, TOY, check=False)
    assert refused.returncode == 2, refused
    out = refused.stdout + refused.stderr
    assert "checkpoint_storage.type: not supported on dethpc" in out
    assert "Traceback" not in out
    assert not list((home / "runs").glob("[0-9]*")) if (home / "runs").exists() else True
