"""Determined's HPC behaviours on the real dev cluster (issue 31, item 3).

Determined 0.38.1's Slurm end-to-end tests (``e2e_tests/tests/cluster/test_slurm.py``)
expect five things of a Slurm launch; each test here is one of them, driven through
the ``dethpc`` CLI as a user would (its own process, exit code and words):

1. an sbatch option Slurm does not know (``slurm.sbatch_args``) ends in sbatch's own
   words, ``sbatch: unrecognized option ...``: at ``dethpc submit`` (exit 1, the item
   named, nothing recorded), and for an experiment already recorded when a pool's
   ``sbatch_args`` gain one, in the experiment's state and events;
2. an option dethpc controls is refused at submit, naming it (Determined's fixture asks
   for ``-G7`` and ``--error``: dethpc takes ``-G7``, which replaces the pool's GPU
   request, and refuses ``--error``);
3. a request no node can satisfy is refused with Slurm's reason, or dethpc's own that
   names the most the partition holds (Determined's fixture: 100 slots per trial);
4. an interactive shell's ``$HOME`` is the user's home (checked as the non-root test
   user), not a work directory;
5. an image that cannot be pulled fails the experiment, its trial and the trial's log
   with the runtime's message. The runtime is the stand-in ``apptainer`` of
   tests/unit/jobs/test_containers.py (Apptainer cannot be installed here): this proves
   dethpc's handling around a failed pull on real Slurm, not Apptainer's pull.

docs/config.md ("Determined's HPC behaviours") compares each with Determined.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dethpc.devcluster.users import ClusterUser
from tests.slurm.conftest import SlurmCluster
from tests.slurm.test_interactive_slurm import _pty_run
from tests.unit.jobs.test_containers import STANDIN

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "tests" / "fixtures" / "toy"
#: Determined's unknown option, spaces around '=' as its fixture writes it
UNKNOWN = "--thisisnotavalidslurmoption = willfail"


def cluster_yaml(home: Path, **extra: Any) -> Path:
    """Two pools on the dev cluster's 16-CPU nodes: ``cpu8`` (8 slots a node, partition
    debug) and ``gpu`` (gpu:a100:2 on two nodes, partition low)."""
    path = home / "cluster.yaml"
    path.write_text(yaml.safe_dump({
        "backend": "slurm", "runs_root": str(home / "runs"), "python": sys.executable,
        "default_pool": "cpu8", "tick_min_s": 0.2, "tick_max_s": 1.0,
        "pools": {
            "cpu8": {"partition": "debug", "slots_per_node": 8, "cpus_per_slot": 1},
            "gpu": {"partition": "low", "slots_per_node": 2, "gres": "gpu",
                    "gpu_type": "a100", "cpus_per_slot": 1},
        }, **extra}))
    path.chmod(0o644)
    return path


@pytest.fixture
def env(tmp_path: Path, slurm_cluster: SlurmCluster) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {**os.environ, "DETHPC_HOME": str(home), "COLUMNS": "200",
            "DETHPC_CLUSTER_CONFIG": str(cluster_yaml(home))}


def cli(env: dict[str, str], *args: object,
        timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def experiment(tmp: Path, **extra: Any) -> Path:
    """Determined's failure fixtures' shape: one trial, no restarts."""
    path = tmp / f"exp-{len(list(tmp.glob('exp-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump({
        "name": "determined-hpc", "entrypoint": "python3 train.py",
        "hyperparameters": {"step_time": 0.05},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 4}},
        "max_restarts": 0, **extra}))
    return path


def recorded(env: dict[str, str]) -> list[Any]:
    runs = Path(env["DETHPC_HOME"]) / "runs"
    listed = json.loads(cli(env, "experiment", "list", "--json").stdout or "[]")
    return [*listed, *(runs.iterdir() if runs.is_dir() else [])]


def refused(res: subprocess.CompletedProcess[str], code: int) -> str:
    out = res.stdout + res.stderr
    assert res.returncode == code, out
    assert "Traceback" not in out, out
    return out


# ------------------------------------------------------------------ 1. unknown option
def test_an_sbatch_option_slurm_does_not_know_ends_in_sbatchs_words(
        env: dict[str, str], tmp_path: Path) -> None:
    res = cli(env, "submit", experiment(tmp_path, slurm={"sbatch_args": ["--exclusive",
                                                                          UNKNOWN]}), TOY)
    out = refused(res, 1)
    assert "sbatch: unrecognized option '--thisisnotavalidslurmoption'" in out, out
    assert f"slurm.sbatch_args[1] = '{UNKNOWN}'" in out, out
    assert "sbatch --help" in out                      # the fix: an option sbatch knows
    assert recorded(env) == []

    # recorded before a pool's sbatch_args gained the option (an admin's edit): the
    # daemon's sbatch is refused, and the experiment ends ERROR in sbatch's words
    exp = json.loads(cli(env, "submit", experiment(tmp_path), TOY, "--no-daemon",
                         "--json").stdout)["id"]
    home = Path(env["DETHPC_HOME"])
    raw = yaml.safe_load((home / "cluster.yaml").read_text())
    raw["pools"]["cpu8"]["sbatch_args"] = ["--thisisnotavalidslurmoption"]
    (home / "cluster.yaml").write_text(yaml.safe_dump(raw))
    assert cli(env, "daemon", "tick").returncode == 0
    waited = cli(env, "experiment", "wait", exp, "--timeout", "60")
    assert waited.returncode != 0, waited.stdout + waited.stderr
    d = json.loads(cli(env, "experiment", "describe", exp, "--json").stdout)
    assert d["state"] == "ERROR", d
    assert "sbatch: unrecognized option '--thisisnotavalidslurmoption'" in d["message"], d
    events = cli(env, "experiment", "events", exp, "--wide").stdout
    assert "sbatch: unrecognized option '--thisisnotavalidslurmoption'" in events, events


# -------------------------------------------------------------- 2. dethpc's own options
MANAGED = {
    # Determined's fixture: -G7 is a GPU request dethpc layers over the pool's, --error not
    "Determined's -G7 and --error": (["-G7", "--error=xxx"], 1, "--error"),
    "--output": (["--output=/tmp/x.out"], 0, "--output"),
    "an abbreviation of --output": (["--out=x"], 0, "--output"),
    "--array": (["--array=0-3"], 0, "--array"),
    "--signal": (["--signal=B:USR1@60"], 0, "--signal"),
    "--requeue": (["--requeue"], 0, "--requeue"),
    "--no-requeue": (["--no-requeue"], 0, "--no-requeue"),
    "--job-name, short and glued": (["-Jmine"], 0, "--job-name"),
    "--wrap": (["--wrap=hostname"], 0, "--wrap"),
}


@pytest.mark.parametrize(("args", "index", "option"), MANAGED.values(), ids=MANAGED.keys())
def test_an_option_dethpc_controls_is_refused_naming_it(
        env: dict[str, str], tmp_path: Path, args: list[str], index: int, option: str) -> None:
    out = refused(cli(env, "submit", experiment(tmp_path, slurm={"sbatch_args": args}), TOY),
                  2)
    assert f"slurm.sbatch_args[{index}]" in out and f"{args[index]!r} is not allowed" in out
    assert f"{option} is managed by dethpc" in out, out
    assert recorded(env) == []


# ----------------------------------------------------------------- 3. no node fits
UNSATISFIABLE = {
    # Determined's fixture: 100 slots on 8-slot nodes (not whole nodes, and too many)
    "100 slots on 8-slot nodes": (
        "cpu8", {"resources": {"slots_per_trial": 100}},
        ["resources.slots_per_trial=100 cannot be satisfied: it needs 13 node(s) of 8 slot(s)",
         "partition 'debug' cannot fit 13 node(s)", "at most 32 slots per trial"]),
    "96 slots: whole nodes, more than the partition has": (
        "cpu8", {"resources": {"slots_per_trial": 96}},
        ["Slurm refuses the trials' job (sbatch --test-only): More processors requested "
         "than permitted", "resources.slots_per_trial = 96",
         "fix: ask for at most the partition's CPUs in all", "at most 32 slots per trial"]),
    "more GPUs per node than any node has": (
        "gpu", {"resources": {"slots_per_trial": 4, "resource_pool": "gpu"},
                "slurm": {"slots_per_node": 4}},
        ["Slurm refuses the trials' job (sbatch --test-only): Requested node configuration "
         "is not available", "slurm.slots_per_node = 4", "fix: fit one node"]),
}


@pytest.mark.parametrize(("pool", "extra", "words"), UNSATISFIABLE.values(),
                         ids=UNSATISFIABLE.keys())
def test_a_request_no_node_can_satisfy_is_refused_with_the_fix(
        env: dict[str, str], tmp_path: Path, pool: str, extra: dict[str, Any],
        words: list[str]) -> None:
    out = refused(cli(env, "submit", experiment(tmp_path, **extra), TOY), 1)
    for w in words:
        assert w in out, out
    assert recorded(env) == []


# -------------------------------------------------------------- 4. a shell's $HOME
def test_a_shells_home_is_the_users_home(slurm_cluster: SlurmCluster, cluster_user: ClusterUser,
                                         user_tmp: Path, user_python: list[str]) -> None:
    home = user_tmp / "dethpc"
    home.mkdir()
    config = cluster_yaml(home)
    subprocess.run(["chown", "-R", cluster_user.name, str(home)], check=True)
    argv = cluster_user.as_user(["env", f"DETHPC_HOME={home}",
                                 f"DETHPC_CLUSTER_CONFIG={config}", *user_python, "-m",
                                 "dethpc.surfaces.cli.main", "shell", "start"])
    rc, out = _pty_run(argv, {**os.environ, "COLUMNS": "200"},
                       b'echo "USER=$(whoami) HOME=$HOME PWD=$PWD"; exit\n',
                       f" on {slurm_cluster.layout.node_prefix}".encode())
    assert rc == 0, out
    line = next(x for x in out.splitlines() if x.startswith("USER=") and "$(" not in x)
    fields = dict(w.split("=", 1) for w in line.split())
    expected = pwd.getpwnam(cluster_user.name).pw_dir
    assert fields["USER"] == cluster_user.name, line
    assert fields["HOME"] == expected, line              # the user's, not root's
    assert fields["HOME"] != fields["PWD"] and not fields["HOME"].startswith(str(home)), line


# ------------------------------------------------------------- 5. an image pull fails
BAD_IMAGE = "docker.io/badhost/missing.image"


def test_a_failed_image_pull_fails_the_experiment_with_the_runtimes_words(
        env: dict[str, str], tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    (bin_dir / "log").mkdir(parents=True)
    (bin_dir / "apptainer").write_text(STANDIN)
    (bin_dir / "apptainer").chmod(0o755)
    home = Path(env["DETHPC_HOME"])
    cluster_yaml(home, containers={"runtime": "apptainer", "sif_cache": str(tmp_path / "sif"),
                                   "pull": "login"})
    env = {**env, "PATH": f"{bin_dir}:{env['PATH']}", "STANDIN_DIR": str(bin_dir / "log"),
           "STANDIN_FAIL": "1"}
    exp = json.loads(cli(env, "submit", experiment(tmp_path, environment={"image": BAD_IMAGE}),
                         TOY, "--json").stdout)["id"]
    try:
        waited = cli(env, "experiment", "wait", exp, "--timeout", "120", timeout=180)
    finally:
        cli(env, "daemon", "stop")
    assert waited.returncode != 0, waited.stdout + waited.stderr
    runtime_words = "FATAL: While making image from oci registry: manifest unknown"
    d = json.loads(cli(env, "experiment", "describe", exp, "--json").stdout)
    assert d["state"] == "ERROR" and runtime_words in d["message"], d
    assert BAD_IMAGE in d["message"], d
    [trial] = d["trials"]
    assert trial["state"] == "ERROR" and runtime_words in trial["exit_reason"], trial
    logs = cli(env, "trial", "logs", trial["id"])
    assert logs.returncode == 0 and runtime_words in logs.stderr, logs.stderr
