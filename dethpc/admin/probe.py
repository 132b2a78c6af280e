"""``dethpc admin check --probe``: one tiny job per pool proves that a compute node
can write ``runs_root`` (and that this node sees what it wrote) and run ``python``
with dethpc importable.

Owns: the probe script, the probe's ``sbatch`` argv (``probe_argv``, pure), the
reading of a probe's outcome into findings (``judge_probe``, pure) and
``run_probes`` (the side effects: a probe directory under ``runs_root``, one
``sbatch --wait`` per pool through the ``CommandRunner``, clean-up).
Must not: submit anything else, or leave files behind but what a compute node
wrote where this node cannot see (and so cannot remove).
"""

from __future__ import annotations

import secrets
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dethpc.admin.checks import Finding, Severity
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.errors import CommandError
from dethpc.runner import CommandRunner

#: the folder under runs_root that holds the probes' directories while they run
PROBE_FOLDER = ".dethpc-admin-probe"
#: the pool's ``sbatch_args`` that choose nodes, which the probe keeps (the others
#: size the job, and the probe stays tiny)
PLACEMENT_OPTIONS = ("--exclude=", "--nodelist=", "--constraint=", "--reservation=",
                     "--clusters=", "--exclusive")
#: exit codes of the probe script
EXIT_NOT_WRITABLE = 3
EXIT_NO_PYTHON = 4

PROBE_SCRIPT = f"""#!/bin/bash
# dethpc admin check --probe: can this compute node write runs_root and run python?
dir=$1; python=$2; token=$3
host=$(hostname)
if ! mkdir -p "$dir" 2>/dev/null || ! echo "$token $host" > "$dir/node-wrote" 2>/dev/null; then
    echo "cannot write $dir on $host" >&2
    exit {EXIT_NOT_WRITABLE}
fi
if ! "$python" -c 'import sys, dethpc; print(sys.version.split()[0], dethpc.__version__)' \\
        > "$dir/python.out" 2>&1; then
    exit {EXIT_NO_PYTHON}
fi
exit 0
"""


def probe_argv(pool: ResourcePool, script: Path, probe_dir: Path, python: str, token: str,
               time: str = "00:02:00") -> list[str]:
    """``sbatch --wait`` of one probe job in ``pool``'s partition/QoS/account, on a node
    with one of the pool's GPUs when it is a GPU pool and within the pool's node choice
    (``--exclude``, ``--constraint``, ...): the nodes its trials get."""
    argv = ["sbatch", "--parsable", "--wait", f"--job-name=dethpc-probe-{token}",
            "--nodes=1", "--ntasks=1", "--cpus-per-task=1", f"--time={time}",
            "--output=/dev/null", "--chdir=/"]
    for flag, value in (("--partition", pool.partition), ("--qos", pool.qos),
                        ("--account", pool.account)):
        if value:
            argv.append(f"{flag}={value}")
    if pool.gres is not None and pool.gres.split(":", 1)[0] == "gpu":
        argv.append(f"--gres=gpu:{pool.gpu_type}:1" if pool.gpu_type else "--gres=gpu:1")
    argv += [a for a in pool.sbatch_args if a.startswith(PLACEMENT_OPTIONS)]
    return [*argv, str(script), str(probe_dir), python, token]


@dataclass(frozen=True)
class ProbeOutcome:
    """What one probe left: sbatch's exit code and output, and the files this node
    sees in the probe directory afterwards (None = absent)."""

    returncode: int
    stdout: str
    stderr: str
    node_wrote: str | None
    python_out: str | None


def judge_probe(pool: str, probe_dir: Path, python: str, token: str,
                outcome: ProbeOutcome) -> list[Finding]:
    """The findings of one probe (pure)."""
    def finding(severity: Severity, check: str, message: str, fix: str = "") -> Finding:
        return Finding(severity, pool, check, message, fix)

    job = outcome.stdout.strip().split(";")[0]
    if not job.isdigit():
        return [finding(Severity.ERROR, "probe", f"sbatch refused the probe job (exit "
                        f"{outcome.returncode}): {outcome.stderr.strip()[:300]}",
                        "fix what the check findings above say about this pool")]
    seen = outcome.node_wrote is not None and outcome.node_wrote.split(" ")[0] == token
    host = outcome.node_wrote.split(" ", 1)[1].strip() if seen and outcome.node_wrote else "?"
    if outcome.returncode == EXIT_NOT_WRITABLE:
        return [finding(Severity.ERROR, "probe.runs_root",
                        f"probe job {job}: the compute node cannot write {probe_dir}",
                        "put runs_root on a filesystem that compute nodes mount read-write "
                        "for this user")]
    if outcome.returncode in (0, EXIT_NO_PYTHON) and not seen:
        return [finding(Severity.ERROR, "probe.runs_root",
                        f"probe job {job} wrote {probe_dir} on its compute node, but this "
                        "node does not see it: runs_root is not on a filesystem shared by "
                        "this node and the compute nodes",
                        "set runs_root to a path on the shared filesystem (same path "
                        "everywhere)")]
    if outcome.returncode == EXIT_NO_PYTHON:
        detail = (outcome.python_out or "").strip().splitlines()[-1:] or ["no output"]
        return [finding(Severity.OK, "probe.runs_root",
                        f"runs_root is writable on {host} and visible here"),
                finding(Severity.ERROR, "probe.python",
                        f"probe job {job}: {python} cannot run dethpc on {host}: {detail[0]}",
                        "set `python` in the cluster config to an interpreter that exists on "
                        "the compute nodes and has dethpc installed (a venv on the shared "
                        "filesystem)")]
    if outcome.returncode != 0:
        return [finding(Severity.ERROR, "probe", f"probe job {job} ended with exit code "
                        f"{outcome.returncode}: {outcome.stderr.strip()[:300]}",
                        f"look at `sacct -j {job}` for why")]
    words = (outcome.python_out or "").split()
    versions = f"Python {words[0]}, dethpc {words[1]}" if len(words) == 2 else "?"
    return [finding(Severity.OK, "probe.runs_root",
                    f"runs_root is writable on {host} and visible here"),
            finding(Severity.OK, "probe.python", f"{python} runs on {host} ({versions})")]


def run_probes(cfg: ClusterConfig, runner: CommandRunner, pools: list[str],
               timeout_s: float = 300.0) -> list[Finding]:
    """One probe job per pool named, one after the other (each waits for its job)."""
    python = cfg.python or sys.executable
    out: list[Finding] = []
    with tempfile.TemporaryDirectory(prefix="dethpc-probe-") as tmp:
        script = Path(tmp) / "probe.sh"
        script.write_text(PROBE_SCRIPT, encoding="utf-8")
        for name in pools:
            out += _probe_one(cfg, cfg.pools[name], runner, script, python, timeout_s)
    return out


def _probe_one(cfg: ClusterConfig, pool: ResourcePool, runner: CommandRunner, script: Path,
               python: str, timeout_s: float) -> list[Finding]:
    token = secrets.token_hex(6)
    probe_dir = cfg.runs_root / PROBE_FOLDER / f"{pool.name}-{token}"
    try:
        probe_dir.mkdir(parents=True)
    except OSError as exc:
        return [Finding(Severity.ERROR, pool.name, "probe.runs_root",
                        f"cannot create {probe_dir} on this node: {exc.strerror or exc}",
                        "make runs_root writable for this user, or set runs_root to a "
                        "directory that is")]
    argv = probe_argv(pool, script, probe_dir, python, token)
    try:
        try:
            res = runner.run(argv, check=False, retry=False, timeout=timeout_s)
        except CommandError as exc:  # timed out: the job may still be queued
            runner.run(["scancel", f"--name=dethpc-probe-{token}"], check=False)
            return [Finding(Severity.ERROR, pool.name, "probe",
                            f"the probe job did not finish within {timeout_s:.0f} s "
                            f"({exc.reason or 'timeout'}); it was cancelled",
                            "retry when the partition has a free node, or use "
                            "--probe-timeout")]
        outcome = ProbeOutcome(res.returncode, res.stdout, res.stderr,
                               _read(probe_dir / "node-wrote"), _read(probe_dir / "python.out"))
        return judge_probe(pool.name, probe_dir, python, token, outcome)
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)
        try:
            probe_dir.parent.rmdir()  # only when no other probe is using it
        except OSError:
            pass


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
