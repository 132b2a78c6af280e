"""Heterogeneous Slurm jobs: components (servers, trainers) with their own shapes.

Owns: ``build_hetjob_script`` (a pure builder of the sbatch script: one
``#SBATCH`` block per component separated by ``#SBATCH hetjob``, one
``srun --het-group=i`` step per component, ``wait``), ``component_env`` (each
component learns the others' hosts, address and port from
``SLURM_JOB_NODELIST_HET_GROUP_<i>``) and the step entry point
``python -m dethpc.launch.hetjob --component NAME [--wait-for OTHER] -- argv``
which exports that env, waits until OTHER accepts TCP connections on its port
(bounded by ``--timeout``), then runs argv with rank-prefixed output.
Must not: submit anything (the backend does) or pick node counts (allocation does).
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dethpc.hostlist import expand_hostlist
from dethpc.launch._common import LaunchError, derive_port
from dethpc.launch._procs import launcher_main, run_one

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Component:
    """One part of a het job: its name, shape and what each of its tasks runs."""

    name: str
    argv: tuple[str, ...]
    nodes: int = 1
    ntasks_per_node: int = 1
    cpus_per_task: int = 1
    partition: str | None = None
    wait_for: str | None = None


def build_hetjob_script(
    components: Sequence[Component], job_name: str, python: str = sys.executable,
    timeout_s: int = 120,
) -> str:
    """The sbatch script of a het job; every value reaching the shell is quoted."""
    _validate(components)
    names = ",".join(c.name for c in components)
    lines = ["#!/bin/bash", f"#SBATCH --job-name={shlex.quote(job_name)}"]
    for index, comp in enumerate(components):
        if index:
            lines.append("#SBATCH hetjob")
        lines.append(f"#SBATCH --nodes={comp.nodes} --ntasks-per-node={comp.ntasks_per_node} "
                     f"--cpus-per-task={comp.cpus_per_task}")
        if comp.partition:
            lines.append(f"#SBATCH --partition={shlex.quote(comp.partition)}")
    lines.append(f"export DETHPC_HET_COMPONENTS={shlex.quote(names)}")
    for index, comp in enumerate(components):
        step = ["srun", f"--het-group={index}", "--kill-on-bad-exit=1", python, "-m",
                "dethpc.launch.hetjob", "--component", comp.name, "--timeout", str(timeout_s)]
        if comp.wait_for:
            step += ["--wait-for", comp.wait_for]
        lines.append(shlex.join([*step, "--", *comp.argv]) + " &")
    lines += ["wait -n", "code=$?", "wait", "exit $code"]
    return "\n".join(lines) + "\n"


def component_env(env: Mapping[str, str]) -> dict[str, str]:
    """``DETHPC_COMPONENT_<NAME>_HOSTS/_ADDR/_PORT`` for every component of the job."""
    names = [n for n in env.get("DETHPC_HET_COMPONENTS", "").split(",") if n]
    job = env.get("SLURM_HET_JOB_ID") or env.get("SLURM_JOB_ID") or "0"
    out: dict[str, str] = {}
    for index, name in enumerate(names):
        nodelist = env.get(f"SLURM_JOB_NODELIST_HET_GROUP_{index}", "")
        hosts = expand_hostlist(nodelist) if nodelist else []
        key = f"DETHPC_COMPONENT_{name.upper()}"
        out[f"{key}_HOSTS"] = ",".join(hosts)
        out[f"{key}_ADDR"] = hosts[0] if hosts else ""
        out[f"{key}_PORT"] = str(derive_port(int(job) if job.isdigit() else 0, offset=index + 1))
    return out


def wait_for_port(
    host: str, port: int, timeout_s: float,
    connect: Callable[[tuple[str, int]], object] = lambda a: socket.create_connection(a, 2),
) -> None:
    """Return once ``host:port`` accepts a TCP connection; ``LaunchError`` after the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = connect((host, port))
            close = getattr(conn, "close", None)
            if close:
                close()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise LaunchError(f"{host}:{port} did not accept connections within "
                                  f"{timeout_s:.0f}s ({exc}); is the server component up?") from exc
            time.sleep(0.2)


def _validate(components: Sequence[Component]) -> None:
    names = [c.name for c in components]
    if not components:
        raise LaunchError("a het job needs at least one component")
    for comp in components:
        if not _NAME.match(comp.name):
            raise LaunchError(f"component name {comp.name!r} must match {_NAME.pattern}")
        if comp.wait_for and comp.wait_for not in names:
            raise LaunchError(f"component {comp.name!r} waits for unknown {comp.wait_for!r}")
    if len(set(names)) != len(names):
        raise LaunchError(f"component names repeat: {names}")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        raise LaunchError("usage: -m dethpc.launch.hetjob --component N [--wait-for M] -- argv")
    cut = args.index("--")
    opts = dict(zip(args[:cut:2], args[1:cut:2], strict=False))
    env = {**os.environ, **component_env(os.environ), "PYTHONUNBUFFERED": "1"}
    other = opts.get("--wait-for")
    if other:
        key = f"DETHPC_COMPONENT_{other.upper()}"
        wait_for_port(env[f"{key}_ADDR"], int(env[f"{key}_PORT"]),
                      float(opts.get("--timeout", "120")))
    rank = int(env.get("SLURM_PROCID", "0"))
    return run_one(args[cut + 1 :], env, rank=rank)


if __name__ == "__main__":
    sys.exit(launcher_main(main))
