"""A Slurm stand-in for the tick-scale bench: the real ``SlurmBackend`` over a runner
that answers ``squeue``/``sacct``/``sbatch``/``scancel`` from a job table kept in a
JSON file, in the dev cluster's own output format (``squeue -O SQUEUE_FIELDS`` lines
as slurm 22.05.8 prints them), so the daemon parses what it would parse on the cluster.

Owns: the job table (``Model``) and ``ReplayRunner``. Must not: be used outside bench/.
Discovery commands (``scontrol show config``, ``sinfo``, ``sbatch --test-only``,
``sacctmgr``) go to the real dev cluster: they run once per process, not per tick.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dethpc.common.runner import CommandResult, CommandRunner

SYNTHETIC = ("squeue", "sacct", "sbatch", "scancel", "sdiag")


@dataclass
class Model:
    """ref -> [state, name, comment]; jobs squeue no longer lists are gone from it."""

    next_job: int = 100000
    jobs: dict[str, list[str]] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"next_job": self.next_job, "jobs": self.jobs}))

    @classmethod
    def load(cls, path: Path) -> Model:
        raw = json.loads(path.read_text())
        return cls(next_job=int(raw["next_job"]), jobs=dict(raw["jobs"]))

    def squeue_text(self) -> str:
        lines = []
        for ref, (state, name, comment) in self.jobs.items():
            running = state == "RUNNING"
            reason = "None" if running or state == "COMPLETED" else "Resources"
            node = "n1" if running or state == "COMPLETED" else ""
            lines.append(f"{ref}|{state}|0|0|{reason}|{node}|normal|dethpc|{name}|{comment}")
        return "\n".join(lines) + "\n"


@dataclass
class ReplayRunner(CommandRunner):
    model: Model = field(default_factory=Model)
    #: every command, synthetic or passed through, in order
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float | None = None,
            input: str | None = None, retry: bool = True) -> CommandResult:
        args = tuple(str(a) for a in argv)
        self.calls.append(args)
        prog = Path(args[0]).name
        if prog not in SYNTHETIC or (prog == "sbatch" and "--test-only" in args):
            return super().run(args, check=check, timeout=timeout, input=input, retry=retry)
        if prog == "squeue":
            return CommandResult(args, 0, self.model.squeue_text(), "")
        if prog == "sbatch":
            return CommandResult(args, 0, self.submit(args), "")
        return CommandResult(args, 0, "", "")  # sacct (nothing left the queue), scancel

    def submit(self, args: tuple[str, ...]) -> str:
        job = self.model.next_job
        self.model.next_job += 1
        name = next((a.split("=", 1)[1] for a in args if a.startswith("--job-name=")), "x")
        comment = next((a.split("=", 1)[1] for a in args if a.startswith("--comment=")), "")
        spec = next((a.split("=", 1)[1] for a in args if a.startswith("--array=")), "")
        if spec:
            lo, hi = spec.split("%", 1)[0].split("-") if "-" in spec else (spec, spec)
            for i in range(int(lo), int(hi) + 1):
                self.model.jobs[f"{job}_{i}"] = ["PENDING", name, comment]
        else:
            self.model.jobs[str(job)] = ["PENDING", name, comment]
        return f"{job}\n"

    def count(self, program: str) -> int:
        return sum(1 for c in self.calls if Path(c[0]).name == program)
