"""``dethpc admin check --probe``: one tiny job per pool proves that a compute node
can write ``runs_root`` (and that this node sees what it wrote), run ``python``
with dethpc importable, and, with a container runtime, run it (``--version``) and read
the image cache (a token written into ``containers.sif_cache`` here).

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

from dethpc.backends.slurm_commands import cancel_named, run_sbatch
from dethpc.common.errors import CommandError
from dethpc.common.runner import CommandRunner
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.jobs.directives import placement_directives
from dethpc.surfaces.admin.checks import Finding, Severity

#: the folder under runs_root that holds the probes' directories while they run
PROBE_FOLDER = ".dethpc-admin-probe"
#: the pool's ``sbatch_args`` that choose nodes, which the probe keeps (the others
#: size the job, and the probe stays tiny)
PLACEMENT_OPTIONS = ("--exclude=", "--nodelist=", "--constraint=", "--reservation=",
                     "--clusters=", "--exclusive")
#: exit codes of the probe script
EXIT_NOT_WRITABLE = 3
EXIT_NO_PYTHON = 4
EXIT_NO_RUNTIME = 5
EXIT_NO_CACHE = 6

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
runtime=${{4:--}}; cache_mark=${{5:--}}
if [ "$runtime" != - ]; then
    if ! command -v "$runtime" >/dev/null 2>&1; then
        echo "$runtime: not found on PATH" > "$dir/runtime.out"
        exit {EXIT_NO_RUNTIME}
    fi
    USER=${{USER:-$(id -un)}} "$runtime" --version > "$dir/runtime.out" 2>&1 \
        || exit {EXIT_NO_RUNTIME}
    if [ "$cache_mark" != - ] && ! cat "$cache_mark" > "$dir/cache.out" 2>&1; then
        exit {EXIT_NO_CACHE}
    fi
fi
exit 0
"""


def probe_argv(pool: ResourcePool, script: Path, probe_dir: Path, python: str, token: str,
               time: str = "00:02:00", runtime: str = "-", cache_mark: str = "-") -> list[str]:
    """The words of ``sbatch --wait`` of one probe job in ``pool``'s partition/QoS/account,
    on a node with one of the pool's GPUs when it is a GPU pool and within the pool's node
    choice (``--exclude``, ``--constraint``, ...): the nodes its trials get."""
    argv = ["--parsable", "--wait", f"--job-name=dethpc-probe-{token}",
            "--nodes=1", "--ntasks=1", "--cpus-per-task=1", f"--time={time}",
            "--output=/dev/null", "--chdir=/"]
    argv += placement_directives(pool)
    if pool.gres is not None and pool.gres.split(":", 1)[0] == "gpu":
        argv.append(f"--gres=gpu:{pool.gpu_type}:1" if pool.gpu_type else "--gres=gpu:1")
    argv += [a for a in pool.sbatch_args if a.startswith(PLACEMENT_OPTIONS)]
    tail = [runtime, cache_mark] if runtime != "-" else []
    return [*argv, str(script), str(probe_dir), python, token, *tail]


@dataclass(frozen=True)
class ProbeOutcome:
    """What one probe left: sbatch's exit code and output, and the files this node
    sees in the probe directory afterwards (None = absent)."""

    returncode: int
    stdout: str
    stderr: str
    node_wrote: str | None
    python_out: str | None
    #: the container runtime's ``--version`` (or why it failed) and what the node read
    #: of the token written into the image cache, when the site has a runtime
    runtime_out: str | None = None
    cache_out: str | None = None
    runtime: str = "-"
    cache: str = "-"


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
    base = [finding(Severity.OK, "probe.runs_root",
                    f"runs_root is writable on {host} and visible here"),
            finding(Severity.OK, "probe.python", f"{python} runs on {host}")]
    said = ((outcome.runtime_out or "").strip().splitlines() or ["no output"])[-1]
    if outcome.returncode == EXIT_NO_RUNTIME:
        return [*base, finding(Severity.ERROR, "probe.container",
                               f"probe job {job}: the container runtime {outcome.runtime} "
                               f"does not run on {host}: {said}",
                               "install the runtime on the compute nodes (same path as "
                               "here), or set containers.runtime to one they have")]
    if outcome.returncode == EXIT_NO_CACHE:
        return [*base, finding(Severity.OK, "probe.container", f"{said} on {host}"),
                finding(Severity.ERROR, "probe.image_cache",
                        f"probe job {job}: {host} cannot read the image cache "
                        f"{outcome.cache} (written here)",
                        "put containers.sif_cache on a filesystem shared by this node and "
                        "the compute nodes (same path everywhere)")]
    if outcome.returncode != 0:
        return [finding(Severity.ERROR, "probe", f"probe job {job} ended with exit code "
                        f"{outcome.returncode}: {outcome.stderr.strip()[:300]}",
                        f"look at `sacct -j {job}` for why")]
    words = (outcome.python_out or "").split()
    versions = f"Python {words[0]}, dethpc {words[1]}" if len(words) == 2 else "?"
    out = [finding(Severity.OK, "probe.runs_root",
                   f"runs_root is writable on {host} and visible here"),
           finding(Severity.OK, "probe.python", f"{python} runs on {host} ({versions})")]
    if outcome.runtime != "-":
        out.append(finding(Severity.OK, "probe.container", f"{said} on {host}"))
    if outcome.cache != "-":
        cache_seen = (outcome.cache_out or "").strip() == token
        out.append(finding(Severity.OK, "probe.image_cache",
                           f"{host} reads the image cache {outcome.cache}") if cache_seen
                   else finding(Severity.ERROR, "probe.image_cache",
                                f"probe job {job}: {host} sees another {outcome.cache} than "
                                "this node (the token written here is not there)",
                                "put containers.sif_cache on a filesystem shared by this node "
                                "and the compute nodes (same path everywhere)"))
    return out


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
    runtime, cache, cache_mark = "-", "-", "-"
    if cfg.containers.runtime != "none":
        from dethpc.jobs.containers import sif_cache, traits_of

        traits = traits_of(cfg.containers)
        runtime = traits.program
        if traits.pulls:
            cache_dir = sif_cache(cfg.containers)
            try:
                cache_dir.mkdir(parents=True, exist_ok=True)
                (cache_dir / f".dethpc-probe-{token}").write_text(token + "\n")
                cache, cache_mark = str(cache_dir), str(cache_dir / f".dethpc-probe-{token}")
            except OSError as exc:
                return [Finding(Severity.ERROR, pool.name, "probe.image_cache",
                                f"cannot write the SIF cache {cache_dir} on this node: "
                                f"{exc.strerror or exc}",
                                "set containers.sif_cache to a shared directory this user "
                                "can write")]
    argv = probe_argv(pool, script, probe_dir, python, token, runtime=runtime,
                      cache_mark=cache_mark)
    try:
        try:
            res = run_sbatch(runner, argv, timeout=timeout_s)
        except CommandError as exc:  # timed out: the job may still be queued
            cancel_named(runner, f"dethpc-probe-{token}")
            return [Finding(Severity.ERROR, pool.name, "probe",
                            f"the probe job did not finish within {timeout_s:.0f} s "
                            f"({exc.reason or 'timeout'}); it was cancelled",
                            "retry when the partition has a free node, or use "
                            "--probe-timeout")]
        outcome = ProbeOutcome(res.returncode, res.stdout, res.stderr,
                               _read(probe_dir / "node-wrote"), _read(probe_dir / "python.out"),
                               _read(probe_dir / "runtime.out"), _read(probe_dir / "cache.out"),
                               runtime, cache)
        return judge_probe(pool.name, probe_dir, python, token, outcome)
    finally:
        if cache_mark != "-":
            Path(cache_mark).unlink(missing_ok=True)
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
