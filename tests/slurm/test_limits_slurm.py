"""The daemon within a site's per-user limits, on the dev cluster's limited QoS
(``MaxSubmitJobsPerUser=2``, ``MaxJobsPerUser=1``, the default QoS of the test user's
account ``ml-team``).

The daemon runs AS the non-root test user (root may be exempt from limits): a driver
script (tests/slurm/scripts/limits_daemon.py) under ``runuser``, its store and runs in a
directory that user owns. An experiment of 3x the submit limit must complete with every
trial COMPLETED and nothing failed:

- knowing the limits, the daemon never asks for more than the headroom (every sbatch is
  accepted; at no tick does the user have more than 2 jobs pending + running) and
  ``describe`` shows why trials wait (Slurm's ``QOSMaxJobsPerUserLimit``, or "not
  submitted yet");
- blind to them (as for a limit dethpc cannot read), Slurm's refusals are waited out.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dethpc.common.runner import CommandRunner
from dethpc.devcluster.site import SiteSpec
from dethpc.devcluster.users import ClusterUser

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "tests" / "fixtures" / "toy"
DRIVER = REPO / "tests" / "slurm" / "scripts" / "limits_daemon.py"
SITE = SiteSpec()
LIMIT = SITE.limited_qos.max_submit_jobs_per_user
#: a Python the test user can run: the venv's interpreter may live under root's home;
#: the venv's packages and the checkout are readable, so the system 3.11 imports them
SYSTEM_PYTHON = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")


def user_python_env() -> dict[str, str]:
    site = next(p for p in sys.path if p.endswith("site-packages"))
    return {"PYTHONPATH": f"{REPO}:{site}"}


def run_daemon(cluster_user: ClusterUser, user_tmp: Path, *, blind: bool,
               timeout_s: float = 480, release: Path | None = None,
               **extra: Any) -> dict[str, Any]:
    """Run tests/slurm/scripts/limits_daemon.py as the test user; ``release``: a file
    the driver creates after its first tick's sample (jobs may wait on it); ``extra``:
    more of the driver's arguments (``sample_queue``)."""
    if not SYSTEM_PYTHON.exists():
        pytest.skip(f"{SYSTEM_PYTHON} (a Python the test user can run) is missing")
    trials = 3 * LIMIT
    config = user_tmp / "exp.yaml"
    config.write_text(yaml.safe_dump({
        "name": "limits", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 6},
                            "step_time": 0.05},
        "searcher": {"name": "random", "metric": "validation_loss", "max_trials": trials,
                     "max_concurrent_trials": trials, "max_length": {"batches": 5}},
        "max_restarts": 0, "reproducibility": {"experiment_seed": 5}}))
    out = user_tmp / "result.json"
    args = user_tmp / "args.json"
    args.write_text(json.dumps({
        "db": f"sqlite:///{user_tmp}/dethpc.db", "runs_root": str(user_tmp / "runs"),
        "config": str(config), "model_dir": str(TOY), "python": str(SYSTEM_PYTHON),
        "timeout_s": timeout_s, "out": str(out), "blind": blind,
        "release": str(release) if release else None, **extra}))
    for path in (config, args):
        os.chown(path, cluster_user.uid, cluster_user.gid)
    runner = CommandRunner(timeout=timeout_s + 120, retries=0)
    try:
        res = runner.run(cluster_user.as_user(
            ["env", f"PYTHONPATH={user_python_env()['PYTHONPATH']}", f"HOME={user_tmp}",
             str(SYSTEM_PYTHON), str(DRIVER), str(args)]), check=False)
        assert res.returncode == 0, f"driver failed:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}"
    finally:
        CommandRunner(timeout=30).run(["scancel", "-u", cluster_user.name], check=False)
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["user"] == cluster_user.name
    return result


def sbatch_calls(result: dict[str, Any]) -> list[list[str]]:
    """The submissions (not ``sbatch --test-only`` checks)."""
    return [c for c in result["calls"] if c[0] == "sbatch" and "--test-only" not in c]


def array_size(argv: list[str]) -> int:
    """Tasks one sbatch argv asks for (1 without ``--array``)."""
    spec = next((a for a in argv if a.startswith("--array=")), "--array=0")[len("--array="):]
    return sum(int(p.split("-")[1]) - int(p.split("-")[0]) + 1 if "-" in p else 1
               for p in spec.split("%")[0].split(","))


def assert_completed_within_limit(result: dict[str, Any]) -> None:
    assert result["state"] == "COMPLETED", (result["message"], result["events"][-10:])
    assert len(result["trials"]) == 3 * LIMIT
    assert all(t["state"] == "COMPLETED" for t in result["trials"]), result["trials"]
    assert not [e for e in result["events"] if e["kind"] == "error"], result["events"]
    assert not [s for s in result["samples"] if s["errors"]]
    # Slurm's own listing of the user's jobs (tasks) after every tick
    most = max(len(s["jobs"]) for s in result["samples"])
    assert most <= LIMIT, [s["jobs"] for s in result["samples"] if len(s["jobs"]) > LIMIT]
    assert most == LIMIT, "the daemon never used the whole headroom"


@pytest.mark.spanning
def test_experiment_of_three_times_the_submit_limit_completes_within_it(
        slurm_cluster: Any, cluster_user: ClusterUser, user_tmp: Path) -> None:
    result = run_daemon(cluster_user, user_tmp, blind=False)
    assert_completed_within_limit(result)
    sbatches = sbatch_calls(result)
    # never more than the headroom asked for: no refusal, arrays of at most 2 tasks
    assert not [e for e in result["events"] if "refused" in e["message"]], result["events"]
    assert len(sbatches) >= 3 and all(array_size(a) <= LIMIT for a in sbatches), sbatches
    assert [e for e in result["events"] if e["kind"] == "limit"], "no wait was recorded"
    # limits discovered once (two sacctmgr), the user's jobs counted from the one squeue
    assert sum(c[0] == "sacctmgr" for c in result["calls"]) == 2
    assert all(sum(c[0] == "squeue" for c in s["commands"]) <= 1 for s in result["samples"])
    assert all(any(a == f"--user={cluster_user.name}" for a in c)
               for c in result["calls"] if c[0] == "squeue")
    # describe said why trials waited: Slurm's running limit, and dethpc's submit limit
    reasons = {r for s in result["samples"] for r in s["waiting"].values() if r}
    assert "QOSMaxJobsPerUserLimit" in reasons, reasons
    assert "not submitted yet" in reasons, reasons


def test_refusals_over_a_limit_dethpc_cannot_see_are_waited_out(
        slurm_cluster: Any, cluster_user: ClusterUser, user_tmp: Path) -> None:
    result = run_daemon(cluster_user, user_tmp, blind=True)
    assert_completed_within_limit(result)
    refused = [e for e in result["events"]
               if e["kind"] == "limit" and "QOSMaxSubmitJobPerUserLimit" in e["message"]]
    assert refused, result["events"]
    # the first sbatch asked for every trial at once and was refused; smaller ones followed
    sizes = [array_size(a) for a in sbatch_calls(result)]
    assert sizes[0] == 3 * LIMIT and min(sizes) < sizes[0], sizes


def test_the_users_own_jobs_count_and_submit_at_the_limit_is_not_refused(
        slurm_cluster: Any, cluster_user: ClusterUser, user_tmp: Path) -> None:
    # the user already has the whole submit limit queued, outside dethpc; the jobs hold
    # it until the daemon's first tick has been sampled (they ended after a fixed 4 s
    # before, and on a loaded machine the daemon's first tick came later: it saw its
    # own job at the first sample)
    release = user_tmp / "release"
    hold = (f"for i in $(seq 900); do [ -e {shlex.quote(str(release))} ] && exit 0; "
            "sleep 0.2; done")
    res = slurm_cluster.sbatch_as(cluster_user, f"--chdir={user_tmp}", "-o", "/dev/null",
                                  f"--array=0-{LIMIT - 1}", "--wrap", hold)
    assert res.returncode == 0, res.stderr
    theirs = res.stdout.strip().split(";")[0]
    # creating the experiment asks Slurm with sbatch --test-only, which answers
    # QOSMaxSubmitJobPerUserLimit now: not a verdict on the job, so it is accepted
    result = run_daemon(cluster_user, user_tmp, blind=False, release=release)
    assert_completed_within_limit(result)
    first = result["samples"][0]["jobs"]
    assert first and all(j.startswith(f"{theirs}_") for j in first), first  # nothing of ours
    assert [e for e in result["events"] if e["kind"] == "limit"
            and f"{3 * LIMIT} trial(s) wait" in e["message"]], result["events"]
    assert not [e for e in result["events"] if "refused" in e["message"]], result["events"]
