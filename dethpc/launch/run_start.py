"""How a job's run starts: the first python every job script runs (``run_start`` in
sbatch_templates/_run_end.j2), kept light because every trial waits for it::

    eval "$(python -m dethpc.launch.run_start [--trial-dir "$TRIAL_DIR"] [--det-env])"

prints ``JOB_REF=… done_already=0|1``: the ref this run names its job by
(``dethpc.common.jobref.ref_from_env``) and, with ``--trial-dir`` (Slurm, where a job
requeues in place), whether the job's last recorded run already completed (Slurm 25.11
starts a completed job once more after a preemption whose grace ran out;
docs/dev-cluster.md): that run is recorded as completed too, and the shell ends it.
With ``--det-env`` (a trial's script, which runs this after its environment's exports),
it then prints the run's Determined ``DET_*`` variables as ``export`` lines, the very
lines ``python -m dethpc.launch.detenv`` prints: one interpreter start for both, not two
(0.05 s of CPU each; issue 47 item 3). A failure there costs the variables, never the
answer above (as ``detenv``'s own ``main``).

Owns: ``start`` (the answer), ``run_number`` (the run's number, ``run_end``'s too),
``main``. ``python -m dethpc.launch.run_end start`` (in scripts rendered before this
module) answers the same through ``start``.
Must not: import argparse, logging, the run's end (``dethpc.launch.run_end``) or anything
beyond ``dethpc.common``'s job reference, exit vocabulary (0.4 ms) and paths, except to
write the rare record of a completed job's extra start and, with ``--det-env``,
``dethpc.launch.detenv`` (which owns the values): 0.04 s of CPU, not run_end's 0.06 s
(issue 47 item 3, bench/trial_start; tests/unit/launch/test_job_side_imports.py holds
the line).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from dethpc.common.exitcodes import ExitReason
from dethpc.common.jobref import ref_from_env

USAGE = "usage: python -m dethpc.launch.run_start [--trial-dir DIR] [--det-env]"


def parse(argv: Sequence[str]) -> tuple[Path | None, bool]:
    """The ``--trial-dir`` of ``argv`` (None without one) and whether ``--det-env`` is
    given; ValueError for anything else."""
    args = list(argv)
    trial_dir: Path | None = None
    det_env = False
    while args:
        word = args.pop(0)
        if word == "--trial-dir" and args:
            trial_dir = Path(args.pop(0))
        elif word.startswith("--trial-dir="):
            trial_dir = Path(word.partition("=")[2])
        elif word == "--det-env":
            det_env = True
        else:
            raise ValueError(f"unrecognized argument: {word}")
    return trial_dir, det_env


def run_number(env: Mapping[str, str]) -> int:
    """This run's number: Slurm's ``SLURM_RESTART_COUNT`` (0 for the first run)."""
    try:
        return int(env.get("SLURM_RESTART_COUNT") or 0)
    except ValueError:
        return 0


def _last_record(trial_dir: Path) -> dict[str, object] | None:
    import json

    from dethpc.common.paths import TrialPaths

    try:
        data = TrialPaths(trial_dir).exit_log.read_bytes()
    except FileNotFoundError:
        return None
    # complete lines only, the last JSON object among them (as jsonlines.read_new_lines)
    for raw in reversed(data[: data.rfind(b"\n") + 1].splitlines()):
        try:
            rec = json.loads(raw) if raw.strip() else None
        except ValueError:
            continue
        if isinstance(rec, dict):
            return rec
    return None


def start(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """``JOB_REF`` and ``done_already`` (1: the job's last recorded run completed: this
    run is Slurm's extra start, recorded as completed too); with ``--det-env``, then the
    run's ``DET_*`` variables as ``export`` lines (none for a run that ends at once)."""
    trial_dir, det_env = parse(argv)
    ref, done = ref_from_env(env), 0
    if trial_dir is not None:
        last = _last_record(trial_dir)
        if last is not None and last.get("reason") == ExitReason.COMPLETED \
                and last.get("job") == ref:
            import time

            from dethpc.common.exitcodes import exit_record
            from dethpc.common.jsonlines import append_record
            from dethpc.common.paths import TrialPaths

            done = 1
            append_record(TrialPaths(trial_dir).exit_log, exit_record(
                ExitReason.COMPLETED, 0, run_number(env), ref, "", time.time()))
    import shlex

    answer = f"JOB_REF={shlex.quote(ref)} done_already={done}"
    if det_env and not done:
        # detenv's lines (a problem costs the variables, with a note on stderr)
        from dethpc.launch.detenv import exports

        lines = exports(env)    # export lines, each ending in "\n" (print adds the last)
        if lines:
            answer += "\n" + lines.removesuffix("\n")
    return answer


def main(argv: Sequence[str] | None = None) -> int:
    try:
        print(start(sys.argv[1:] if argv is None else argv, os.environ))
    except ValueError as exc:
        print(f"{USAGE}\npython -m dethpc.launch.run_start: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
