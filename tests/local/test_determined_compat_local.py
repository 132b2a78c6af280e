"""examples/determined_compat on the local backend, through the CLI and the daemon: code
written for Determined 0.38.1's Core API (only the import changed) gets what Determined
gives for every name it calls.

- ``invalid_hp.yaml``: the trial that raised ``det.InvalidHP`` ends COMPLETED with
  reason ``invalid_hp`` and the random search draws a replacement: 4 trials, 3 counted;
- ``early_stop.yaml``: ``report_early_exit(USER_REQUESTED_STOP)`` ends the trial before
  its length, COMPLETED with its reason;
- ``served.yaml`` on two slots (Determined's torch launcher): its metadata round-trips
  into ``trial describe``, the deleted checkpoint is DELETED and gone, the alert is an
  event, ``get_tensorboard_path()`` is what ``dethpc tensorboard`` serves, the node-local
  collectives return one node's list, ``DET_EXPERIMENT_CONFIG`` is byte-exact with quotes
  in ``data:``. The script checks Determined's answers itself and fails the trial if one
  differs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from dethpc.config import parse_stored
from dethpc.launch.detenv import config_json
from dethpc.surfaces.tasks.derive import Deriver, Source
from tests.local.conftest import REPO, cli

COMPAT = REPO / "examples" / "determined_compat"
LAUNCH = "entrypoint=python3 -m determined.launch.torch_distributed python3 served.py"


def submit(config: str, *overrides: str) -> int:
    args: list[Any] = ["submit", COMPAT / config, COMPAT, "--json"]
    for o in overrides:
        args += ["--config", o]
    return int(json.loads(cli(*args).stdout)["id"])


def wait(exp: int) -> dict[str, Any]:
    cli("experiment", "wait", exp, "--timeout", "300", timeout=320, check=False)
    return json.loads(cli("experiment", "describe", exp, "--json").stdout)


def logs(desc: dict[str, Any]) -> str:
    return "".join(p.read_text() for p in sorted(Path(desc["run_dir"]).rglob("slurm-*.out")))


def test_determined_compat_programs_on_the_local_backend(home: Path) -> None:
    exps = {"invalid": submit("invalid_hp.yaml"), "early": submit("early_stop.yaml"),
            "served": submit("served.yaml", LAUNCH, "resources.slots_per_trial=2")}
    desc = {name: wait(exp) for name, exp in exps.items()}
    for name, d in desc.items():
        assert d["state"] == "COMPLETED", (name, d["state"], logs(d)[-4000:])

    # InvalidHP: the ragged trial completed with its reason, the searcher dropped it and
    # drew a replacement; the three dense ones are the search's three trials
    trials = desc["invalid"]["trials"]
    ragged = [t for t in trials if t["hparams"]["layout"] == "ragged"]
    dense = [t for t in trials if t["hparams"]["layout"] == "dense"]
    assert len(trials) == 4 and len(ragged) == 1 and len(dense) == 3, trials
    assert (ragged[0]["state"], ragged[0]["exit_reason"], ragged[0]["early_exit"],
            ragged[0]["searcher_status"]) == ("COMPLETED", "invalid_hp", "invalid_hp",
                                              "invalid")
    assert ragged[0]["steps_completed"] == 1           # it trained one step, then raised
    assert all(t["exit_reason"] == "completed" and t["steps_completed"] == 5 for t in dense)

    # report_early_exit: completed early, with its reason
    (early,) = desc["early"]["trials"]
    assert (early["state"], early["exit_reason"]) == ("COMPLETED", "user_requested_stop")
    assert early["steps_completed"] < 20

    # served.py: what it saw, as its metadata in trial describe
    (trial,) = desc["served"]["trials"]
    detail = json.loads(cli("trial", "describe", trial["id"], "--json").stdout)
    report = detail["metadata"]["compat"]
    text = cli("trial", "describe", trial["id"]).stdout
    deleted = report["checkpoints"]["deleted"]
    assert "metadata:" in text and f"compat.checkpoints.deleted={deleted}" in text, text
    # node-local collectives: one node, its two ranks in local order
    assert report["nodes"] == [[{"rank": 0, "local_rank": 0, "node": 0},
                                {"rank": 1, "local_rank": 1, "node": 0}]], report["nodes"]
    (node,) = report["cluster"]
    assert node["slot_ids"] == [0, 1] == node["det_slot_ids"], node
    assert node["task_id"] == f"{exps['served']}.{trial['id']}", node
    # the config, byte for byte as dethpc promises it, quotes in data: intact
    config_yaml = cli("experiment", "config", exps["served"]).stdout
    expected = config_json(parse_stored(config_yaml).raw)
    data = yaml.safe_load((COMPAT / "served.yaml").read_text())["data"]
    assert report["config"]["data"] == data
    assert report["config"]["sha256"] == hashlib.sha256(expected.encode()).hexdigest()
    # the deleted checkpoint: DELETED in the list, its files gone; the others kept
    ckpts = {c["uuid"]: c for c in json.loads(
        cli("checkpoint", "list", exps["served"], "--json").stdout)}
    stored, deleted = report["checkpoints"]["stored"], report["checkpoints"]["deleted"]
    assert set(ckpts) == set(stored)
    assert {u: c["state"] for u, c in ckpts.items()} == {
        u: "DELETED" if u == deleted else "COMPLETED" for u in stored}
    assert not list(Path(desc["served"]["run_dir"]).rglob(f"*{deleted}*"))
    assert trial["latest_checkpoint"] == stored[2]
    refused = cli("checkpoint", "download", deleted, "-o", home / "dl", check=False)
    assert refused.returncode != 0 and "DELETED" in refused.stdout + refused.stderr
    # the alert: an experiment event with its level, title and description
    events = json.loads(cli("experiment", "events", exps["served"], "--json").stdout)
    (alert,) = [e for e in events if e["kind"] == "alert"]
    assert alert["data"] == {"level": "warn", "title": "compat",
                             "description": 'an alert from served.py, with "quotes"'}
    assert alert["trial_id"] == trial["id"]
    # get_tensorboard_path() is where dethpc tensorboard reads the trial's own files
    assert Path(report["tensorboard_path"]) == \
        Path(desc["served"]["run_dir"]) / "trials" / str(trial["id"]) / "tensorboard"
    deriver = Deriver(home / "tb", [Source(exps["served"], Path(desc["served"]["run_dir"]),
                                           "batches")])
    try:
        deriver.refresh()
    finally:
        deriver.close()
    served = home / "tb" / f"exp{exps['served']}" / f"trial{trial['id']}" / "tensorboard"
    assert (served / "compat-marker.txt").read_text() == "written by served.py\n"


def test_extras_program_in_a_job_on_the_local_backend(home: Path) -> None:
    """``extras.py`` (callbacks, custom reducers, ``evaluate_full_dataset``, ``use_amp``,
    samplers, ``load_trial_from_checkpoint_path``) in a trial's job: each of its checks
    passed, so the trial completed with the result it reports after them."""
    d = wait(submit("extras.yaml"))
    assert d["state"] == "COMPLETED", (d["state"], logs(d)[-4000:])
    (trial,) = d["trials"]
    assert trial["exit_reason"] == "completed", trial
