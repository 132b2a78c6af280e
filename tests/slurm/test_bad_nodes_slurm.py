"""Issue 35 item 2, bad nodes, on the dev cluster: a node on which every trial fails.

The experiment's context has a ``startup-hook.sh`` that exits 1 on one node only (a
node with a broken driver or a missing mount looks like this to dethpc: the trial's
runs there fail before training, elsewhere they succeed). The other three nodes are
held by a filler job, so the trial's first jobs can only run on the bad node; after
``slurm.bad_nodes.failures`` (2) failed runs in a row there, the daemon submits the
next job with ``--exclude`` of it, ``describe`` says why, the filler is let go, and the
trial completes on another node. ``dethpc admin check``'s finding (the site's
``report_bad_nodes``) names the node with the failed runs.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dethpc.config.model import ClusterConfig
from dethpc.surfaces import views
from dethpc.surfaces.admin.bad_nodes import bad_node_findings
from tests.slurm.fixtures.harness import TRIAL_DIR, DaemonHarness, experiment_yaml, read_jsonl

pytestmark = pytest.mark.slurm

HOOK = """\
if [ "$SLURMD_NODENAME" = {bad} ]; then
  echo "startup hook: $SLURMD_NODENAME is broken" >&2
  exit 1
fi
"""


@pytest.fixture
def harness(tmp_path: Path, slurm_cluster: Any) -> Iterator[DaemonHarness]:
    h = DaemonHarness.create(tmp_path / "dethpc")
    yield h
    h.cancel_all_experiments()


def test_a_node_where_every_run_fails_is_excluded_and_the_trial_completes_elsewhere(
        harness: DaemonHarness, slurm_cluster: Any, tmp_path: Path) -> None:
    h = harness
    bad, *others = slurm_cluster.nodes
    ctx = tmp_path / "context"
    shutil.copytree(TRIAL_DIR, ctx, ignore=shutil.ignore_patterns("__pycache__"))
    (ctx / "startup-hook.sh").write_text(HOOK.format(bad=bad))
    filler = slurm_cluster.sbatch("-p", "debug", "-N", str(len(others)), "-w", ",".join(others),
                                  "--exclusive", "--time=15", "-J", "filler",
                                  "--wrap", "sleep 900")
    try:
        slurm_cluster.wait_for("the filler to hold the other nodes", lambda: slurm_cluster
                               .squeue_field(filler, "%T") == "RUNNING", timeout=120)
        raw = experiment_yaml(batches=20, max_restarts=3)
        raw["slurm"] = {"bad_nodes": {"failures": 2, "window_s": 3600}}
        exp = h.submit(raw, context=ctx)
        excluded = h.wait("the bad node to be excluded", lambda: views.describe_experiment(
            h.store, exp)["excluded_nodes"], timeout=300, story_of=exp)
    finally:
        slurm_cluster.cancel(filler)
    assert [n["node"] for n in excluded] == [bad], excluded
    assert excluded[0]["failures"] == 2 and len(excluded[0]["evidence"]) == 2, excluded
    done = h.wait_done(exp, timeout=300)
    trial = h.trial(exp)
    assert done.state == "COMPLETED" and trial.restarts == 2, h.story(exp)
    exits = read_jsonl(h.trial_dir(exp) / "exits.jsonl")
    assert [(e["reason"], e["nodes"]) for e in exits[:2]] == [("error", [bad])] * 2, exits
    assert exits[-1]["reason"] == "completed" and bad not in exits[-1]["nodes"], exits
    # the third job went out with --exclude, and the event says why
    submitted = [m for kind, m in h.events(exp) if kind == "submitted"]
    assert len(submitted) == 3 and f"--exclude={bad}" in submitted[-1], submitted
    assert "2 failed runs in a row" in submitted[-1], submitted
    assert not any("--exclude" in m for m in submitted[:2]), submitted
    # describe still shows it (the evidence is in the window), and the admin's check
    # reports it where the site asks for it, never otherwise
    assert [n["node"] for n in views.describe_experiment(h.store, exp)["excluded_nodes"]] \
        == [bad]
    cfg = h.cluster
    assert bad_node_findings(h.store, cfg) == []
    (finding,) = bad_node_findings(h.store, ClusterConfig(**{**vars(cfg),
                                                             "report_bad_nodes": True}))
    assert finding.check == "bad_node" and finding.pool == "debug", finding
    assert f"node {bad} is excluded by experiment {exp}" in finding.message, finding
    assert f"NodeName={bad} State=DRAIN" in finding.fix, finding
